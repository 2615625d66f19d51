"""Cases of tests/test_field_features_mpi.py: a causal run and a run of rank heads, serial
and with the tokens split over the ranks of COMM_WORLD.

Run under ``mpirun -n P python -m tests._field_features_mpi_cases OUT.npz``: rank 0 writes
``ser_<case>_<key>`` and ``par_<case>_<key>``.
"""

from __future__ import annotations

import sys

import numpy as np


def _cases():
    from wflow.attention.heads import Attention, Heads
    from wflow.attention.mask import ALiBi
    from wflow.geometry.sphere import sample_uniform

    rng = np.random.default_rng(3)
    h2 = Heads.random_symmetric(2, 3, rng, scale=0.8)
    x3 = sample_uniform(151, 3, rng)
    hr = Heads.random_rank(2, 16, 4, rng, scale=1.5)
    x16 = sample_uniform(61, 16, rng)
    base = {"T": 0.2, "dt": 0.05}
    masked = Attention("softmax", 1.0, mask="causal", bias=ALiBi(0.05))
    return {
        # the causal pipeline of source runs; the positions run in rank order
        "causal": (x3, h2, masked, dict(base, kernel_backend="direct")),
        "strict": (x3, h2, Attention("softmax", 1.0, mask="causal_strict"),
                   dict(base, kernel_backend="direct")),
        # heads of value rank 4 at d = 16 (kept by Static.of): the ring's sums at width 8
        "rank": (x16, hr, Attention("softmax", 1.0), dict(T=0.1, dt=0.02)),
    }


def run(comm) -> dict[str, np.ndarray]:
    from wflow.particles import simulate

    out: dict[str, np.ndarray] = {}
    for name, (x, sch, attn, kw) in _cases().items():
        for tag, c in (("ser", None), ("par", comm)):
            res = simulate(x, sch, attn, comm=c, **kw)
            out[f"{tag}_{name}_status"] = np.array(str(res.status))
            out[f"{tag}_{name}_x"] = res.x
            for k, v in res.history.items():
                out[f"{tag}_{name}_h_{k}"] = v
            out[f"{tag}_{name}_ranks"] = np.array(res.extra.get("mpi", {}).get("ranks", 1))
    return out


if __name__ == "__main__":
    from mpi4py import MPI

    result = run(MPI.COMM_WORLD)
    if MPI.COMM_WORLD.rank == 0:
        np.savez(sys.argv[1], **result)
