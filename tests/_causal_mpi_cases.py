"""Cases of tests/test_causal_kernels.py: causal sums serial and split over COMM_WORLD.

Run under ``mpirun -n P python -m tests._causal_mpi_cases OUT.npz``: rank 0 writes, per
case, the serial sums (``ser_<case>_Z``, ``_Y``) and the split ones gathered in token order
(``par_<case>_Z``, ``_Y``), and the back-end that ran (``par_<case>_backend``).
"""

from __future__ import annotations

import sys

import numpy as np


def _tokens(n: int, d: int, seed: int) -> np.ndarray:
    x = np.random.default_rng(seed).normal(size=(n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def _heads(H: int, d: int, seed: int):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(H, d, d)) / np.sqrt(d), rng.normal(size=(H, d, d)) / np.sqrt(d)


def cases() -> dict:
    """``name -> (x, Q, K, keyword arguments of causal_sums, serial overrides)``."""
    from wflow import ALiBi, Bias, Causal

    fn = Bias(lambda i, j: 0.4 * np.sin(0.1 * (i - j)))
    x3 = _tokens(1501, 3, 1)  # 751 + 750 tokens: a block of 64 straddles the ranks
    Q2, K2 = _heads(2, 3, 2)
    x8 = _tokens(401, 8, 3)
    Q8, K8 = _heads(2, 8, 4)
    x40 = _tokens(300, 40, 5)
    Q40, K40 = _heads(1, 40, 6)
    return {
        "fast": (x3, Q2, K2, dict(beta=3.0, kind="softmax", bias=ALiBi(0.004),
                                  backend="fastsum"), {}),
        "fast_strict": (x3, Q2, K2, dict(beta=2.0, kind="usa", mask=Causal(strict=True),
                                         backend="fastsum"), {}),
        "fast_steep": (x3, Q2[:1], K2[:1], dict(beta=2.0, kind="softmax", bias=ALiBi(0.9),
                                                backend="fastsum"), {}),
        "direct3": (x3, Q2, K2, dict(beta=2.0, kind="softmax", bias=fn, backend="direct"), {}),
        "generic": (x8, Q8, K8, dict(beta=1.5, kind="usa", mask="causal_strict",
                                     bias=ALiBi(0.01), backend="direct"), {}),
        "wide": (x40, Q40, K40, dict(beta=1.0, kind="softmax", backend="direct"), {}),
        "numpy": (x8, Q8, K8, dict(beta=1.0, kind="relu", bias=ALiBi(0.02),
                                   backend="numpy"), {}),
        "nomask": (x3, Q2, K2, dict(beta=2.0, kind="softmax", mask=None, backend="direct"), {}),
        # negative controls: the split run with the mask shifted by one / the slope +2 %
        "bad_mask": (x3, Q2, K2, dict(beta=3.0, kind="softmax", backend="fastsum",
                                      mask="causal_strict"), {"mask": "causal"}),
        "bad_slope": (x8, Q8, K8, dict(beta=1.5, kind="usa", bias=ALiBi(0.0102),
                                       backend="direct"), {"bias": ALiBi(0.01)}),
    }


def main(out: str) -> None:
    from mpi4py import MPI

    from wflow import causal_sums
    from wflow.infra.parallel import split_range

    comm = MPI.COMM_WORLD
    P, rank = comm.Get_size(), comm.Get_rank()
    res = {}
    for name, (x, Q, K, kw, ser_kw) in cases().items():
        n = x.shape[0]
        m = np.full(n, 1.0 / n)
        a, b = split_range(n, P, rank)
        par = causal_sums(x[a:b], m[a:b], Q, K, comm=comm, **kw)
        Zs = comm.gather(par.Z, root=0)
        Ys = comm.gather(par.Y, root=0)
        if rank == 0:
            ser = causal_sums(x, m, Q, K, **{**kw, **ser_kw})
            res[f"ser_{name}_Z"], res[f"ser_{name}_Y"] = ser.Z, ser.Y
            res[f"par_{name}_Z"] = np.concatenate(Zs, axis=1)
            res[f"par_{name}_Y"] = np.concatenate(Ys, axis=1)
            res[f"par_{name}_backend"] = np.array(par.info.backend)
            res[f"ser_{name}_backend"] = np.array(ser.info.backend)
    res.update(_kept_or_recomputed(comm))
    if rank == 0:
        res["ranks"] = np.array(P)
        np.savez(out, **res)


def _kept_or_recomputed(comm) -> dict:
    """The fast cases with each rank's block coefficients kept between its two passes (the
    default), computed twice (``KEEP_BYTES = 0``) and, as a fault, kept with the halo's
    block 0 reused from the coefficients-only pass (``keep_from = 0``): ``<mode>_<case>_Z``,
    ``_Y`` gathered on rank 0, and ``<mode>_modes`` the keep modes the full passes ran."""
    import wflow.kernels._causal_fast as cf
    import wflow.kernels._causal_numba as cn
    from wflow import causal_sums
    from wflow.infra.parallel import split_range

    real_head, real_keep = cn.causal_fast_head, cf.KEEP_BYTES
    res = {}
    for mode in ("kept", "recomputed", "fault"):
        seen = []

        def head(*args, fault=mode == "fault", seen=seen):
            seen.append(int(args[-2]))
            if fault and args[-2] == 2:
                args = (*args[:-1], 0)
            return real_head(*args)

        cn.causal_fast_head = head
        cf.KEEP_BYTES = 0 if mode == "recomputed" else real_keep
        try:
            for name, (x, Q, K, kw, _) in cases().items():
                if kw.get("backend") != "fastsum" or name.startswith("bad"):
                    continue
                n = x.shape[0]
                a, b = split_range(n, comm.Get_size(), comm.Get_rank())
                par = causal_sums(x[a:b], np.full(b - a, 1.0 / n), Q, K, comm=comm, **kw)
                Zs, Ys = comm.gather(par.Z, root=0), comm.gather(par.Y, root=0)
                if comm.Get_rank() == 0:
                    res[f"{mode}_{name}_Z"] = np.concatenate(Zs, axis=1)
                    res[f"{mode}_{name}_Y"] = np.concatenate(Ys, axis=1)
        finally:
            cn.causal_fast_head, cf.KEEP_BYTES = real_head, real_keep
        modes = comm.gather(sorted(set(seen)), root=0)
        if comm.Get_rank() == 0:
            res[f"{mode}_modes"] = np.array(sorted({v for r in modes for v in r}))
    return res


if __name__ == "__main__":
    main(sys.argv[1])
