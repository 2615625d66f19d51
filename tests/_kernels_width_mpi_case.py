"""Run under ``mpirun -n 2 python -m tests._kernels_width_mpi_case OUT.npz``: the split ring
of :func:`wflow.kernels.split.split_sums` at a model's width (tiles, values of rank k,
float64 and float32); rank 0 writes every rank's sums and the serial ones to ``OUT.npz``.
"""

from __future__ import annotations

import sys

import numpy as np
from mpi4py import MPI

from wflow.attention.heads import Heads
from wflow.infra.parallel import split_range
from wflow.kernels import kernel_sums
from wflow.kernels.split import split_sums


def main(out: str) -> None:  # noqa: D103
    comm = MPI.COMM_WORLD
    rng = np.random.default_rng(41)
    n, d, H, k = 900, 32, 3, 8
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1)[:, None]
    m = rng.uniform(0.5, 1.0, n) / n
    heads = Heads.random_rank(H, d, k, rng, scale=2.0)
    WV = heads.value_factors()[0]
    lo, hi = split_range(n, comm.Get_size(), comm.Get_rank())
    res = {}
    for dtype in ("float64", "float32"):
        kw = {"beta": 1.0, "kind": "softmax", "scores": True, "values": WV, "dtype": dtype}
        par = split_sums(x[lo:hi], m[lo:hi], heads.Q, heads.K, comm=comm, **kw)
        parts = comm.gather((par.Z, par.Y, par.S), root=0)
        if comm.Get_rank() == 0:
            ser = kernel_sums(x, x, m, heads.Q, heads.K, **kw)
            res[f"ser_{dtype}_Z"], res[f"ser_{dtype}_Y"], res[f"ser_{dtype}_S"] = (
                ser.Z, ser.Y, ser.S)
            res[f"par_{dtype}_Z"] = np.concatenate([p[0] for p in parts], axis=1)
            res[f"par_{dtype}_Y"] = np.concatenate([p[1] for p in parts], axis=1)
            res[f"par_{dtype}_S"] = np.concatenate([p[2] for p in parts], axis=1)
            res[f"{dtype}_err_est"] = ser.info.err_est
            res[f"par_{dtype}_reason"] = par.info.reason
    # negative control: rank 1's masses moved by a relative 1e-9
    mf = m[lo:hi] * (1.0 + 1e-9 * (comm.Get_rank() == 1))
    fault = split_sums(x[lo:hi], mf, heads.Q, heads.K, comm=comm, beta=1.0, kind="softmax",
                       values=WV)
    fparts = comm.gather(fault.Z, root=0)
    if comm.Get_rank() == 0:
        res["par_fault_Z"] = np.concatenate(fparts, axis=1)
        res["ranks"] = comm.Get_size()
        res["vmax"] = float(np.max(np.abs(x @ np.swapaxes(WV, 1, 2))))
        np.savez(out, **res)


if __name__ == "__main__":
    main(sys.argv[1])
