"""Cases of tests/test_particles_mpi.py: each run serially and split over the ranks of COMM_WORLD.

Run under ``mpirun -n P python -m tests._particles_mpi_cases OUT.npz``: rank 0 writes the
split results (``par_<case>_<key>``) and the serial ones (``ser_<case>_<key>``).
"""

from __future__ import annotations

import sys

import numpy as np


def _cases():
    from wflow.attention.heads import Attention, Heads
    from wflow.attention.schedules import OrnsteinUhlenbeck, Oscillating, Parametrisation
    from wflow.geometry.sphere import sample_uniform

    rng = np.random.default_rng(7)
    h2 = Heads.random_symmetric(2, 3, rng, scale=0.8)
    param, theta0 = Parametrisation.from_heads(Heads.random_symmetric(2, 3, rng, scale=0.7,
                                                                      value_sign=-1.0),
                                               kind="bilinear")
    ou = OrnsteinUhlenbeck(param, theta0, np.broadcast_to(np.eye(3), theta0.shape), kappa=1.0,
                           sigma0=0.8, symmetric_noise=True)
    osc = Oscillating(param, theta0, amplitude=0.3, omega=2.0)
    Q = rng.normal(size=(2, 4, 5)) * 0.5
    K = rng.normal(size=(2, 4, 5)) * 0.5
    V = rng.normal(size=(2, 5, 5)) * 0.5
    h5 = Heads(Q, K, V, np.array([0.6, 0.4]))
    x3 = sample_uniform(301, 3, rng)
    x5 = sample_uniform(157, 5, rng)
    x3b = sample_uniform(4000, 3, rng)
    sm = Attention("softmax", 1.0)
    # the default rtol judges ring3 and ring5 (its verdict over the ranks); the other cases
    # test the split alone (rtol = None: a third of the work)
    base = {"T": 0.3, "dt": 0.05}
    return {
        # direct sums, sources around the ring; static symmetric heads, RK4
        "ring3": (x3, h2, sm, dict(base, kernel_backend="direct")),
        # d > 3, non-symmetric heads (swapped sums), Euler, surrogate flow
        "ring5": (x5, h5, Attention("usa", 0.8), dict(base, integrator="euler",
                                                      flow="surrogate")),
        # the fast summation: one ordered sum of the coefficients per evaluation
        "fast": (x3b, h2, sm, dict(base, T=0.2, kernel_backend="fastsum", rtol=None)),
        # moving weights (∂E/∂A summed over ranks)
        "osc": (x3, osc, sm, dict(base, kernel_backend="direct", rtol=None)),
        # one noisy path, tokens split (Itô sum around the ring, martingale summed)
        "ou1": (x3, ou, sm, dict(base, integrator="euler", dt=0.02, seed=4)),
        # noisy paths over ranks: the serial paths bit for bit
        "ou3": (x3, ou, sm, dict(base, integrator="euler", dt=0.02, n_paths=3, seed=5,
                                 engine="python")),
        # a saved trajectory of a fixed token subset
        "traj": (x3, h2, sm, dict(base, save_trajectory=True, trajectory_tokens=17,
                                  engine="python", rtol=None)),
    }


def _perturbed(x: np.ndarray) -> np.ndarray:
    """``x`` with its last token (held by the last rank) moved by 1e-7."""
    y = x.copy()
    y[-1] += 1e-7 * np.array([1.0, -1.0, 0.5])[: y.shape[1]]
    y[-1] /= np.linalg.norm(y[-1])
    return y


def _clusters(comm) -> dict[str, np.ndarray]:
    """Cluster counts split over the ranks and serial, on configurations that span ranks."""
    from wflow.diagnostics import count_clusters
    from wflow.infra.parallel import split_range

    rng = np.random.default_rng(11)
    ser, par = [], []
    for trial in range(12):
        d = (3, 3, 5)[trial % 3]
        n = int(rng.integers(2, 600))
        k = int(rng.integers(1, 9))
        c = rng.normal(size=(k, d))
        c /= np.linalg.norm(c, axis=1, keepdims=True)
        x = c[rng.integers(0, k, n)] + 10 ** rng.uniform(-3, -0.7) * rng.normal(size=(n, d))
        x /= np.linalg.norm(x, axis=1, keepdims=True)
        if trial % 4 == 0:  # a chain of tokens along a great circle crosses the ranks
            t = np.linspace(0, 2.0, n)
            x = np.stack([np.cos(t), np.sin(t)] + [np.zeros(n)] * (d - 2), axis=1)
        a, b = split_range(n, comm.Get_size(), comm.Get_rank())
        ser.append(count_clusters(x, cos_threshold=0.99))
        par.append(count_clusters(x[a:b], cos_threshold=0.99, comm=comm))
    return {"clu_ser": np.array(ser), "clu_par": np.array(par)}


def _collective(comm) -> dict[str, np.ndarray]:
    """An error on the last rank only is raised on every rank; ordered sums agree bitwise."""
    from wflow.infra.parallel import collective_check, ordered_sum

    def boom() -> int:
        if comm.Get_rank() == comm.Get_size() - 1:
            raise FloatingPointError("only on the last rank")
        return 1

    try:
        collective_check(comm, boom)
        raised = 0
    except FloatingPointError:
        raised = 1
    rng = np.random.default_rng(comm.Get_rank())
    s = ordered_sum(comm, rng.normal(size=1001) * 10.0 ** rng.uniform(-8, 8, size=1001))
    same = all(np.array_equal(s, o) for o in comm.allgather(s))
    return {"coll_raised": np.array(comm.allreduce(raised)), "coll_same": np.array(same)}


def run(comm) -> dict[str, np.ndarray]:
    from wflow.particles import simulate

    out: dict[str, np.ndarray] = {}
    cases = _cases()
    x, sch, attn, kw = cases["ring3"]
    # negative control: the split run gets moved tokens (the run alone, rtol = None)
    cases["bad"] = (x, sch, attn, {**kw, "rtol": None})
    for name, (x, sch, attn, kw) in cases.items():
        for tag, c in (("ser", None), ("par", comm)):
            res = simulate(_perturbed(x) if (name, tag) == ("bad", "par") else x, sch, attn,
                           comm=c, **kw)
            out[f"{tag}_{name}_status"] = np.array(res.status)
            out[f"{tag}_{name}_x"] = res.x
            for k, v in res.history.items():
                out[f"{tag}_{name}_h_{k}"] = v
            for k, v in res.steps.items():
                out[f"{tag}_{name}_s_{k}"] = v
            for k, v in res.balance.items():
                out[f"{tag}_{name}_b_{k}"] = v
            if res.trajectory is not None:
                out[f"{tag}_{name}_traj"] = res.trajectory
            out[f"{tag}_{name}_ranks"] = np.array(res.extra.get("mpi", {}).get("ranks", 1))
            out[f"{tag}_{name}_mode"] = np.array(res.extra.get("mpi", {}).get("mode", ""))
    out.update(_clusters(comm))
    out.update(_collective(comm))
    return out


if __name__ == "__main__":
    from mpi4py import MPI

    result = run(MPI.COMM_WORLD)
    if MPI.COMM_WORLD.rank == 0:
        np.savez(sys.argv[1], **result)
