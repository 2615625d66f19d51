"""The fast summation at its floor: wflow's harmonic sums against ducc0's NUFFT SHTs (issue 31).

``python bench/bench_ducc0.py [--quick]`` writes ``bench/results/ducc0_fastsum.json``.
Each row runs in its own clean process (one thread, :func:`_common.call_peer`).

The sums ``G_c(x_i) = Σ_j q_{cj} e^{β x_i·u_j}`` (``Z`` and the three components of ``Y``,
charges ``m_j`` and ``m_j y_j``) by the expansion of :mod:`wflow.kernels._fastsum`:
``C_lm = 4π Σ_j q_j i_l(β r_j) Y*_lm(û_j)`` (source side), ``G(x) = Σ_lm C_lm Y_lm(x)``
(target side). ducc0 (``ducc0.sht``, NUFFT-based transforms at arbitrary points):

* target side, any heads: ``synthesis_general`` of the coefficients at the targets;
* source side, only where ``i_l(β r_j)`` does not depend on ``j`` — every ``|u_j − c|``
  equal, as for isotropic heads ``A = λ I`` about the centre ``c = 0``: then ``C_lm`` is
  ``4π i_l(βλ)`` times ``adjoint_synthesis_general`` of the charges. For general heads
  the radial factor differs from source to source and there is no transform of that
  form (wflow's own recurrence stays).

Rows: ``n`` targets = sources uniform on S², ``A = I``, ``β ∈ {1, 2, 4}``, the degree
``L`` of wflow's rule for ``tol = 1e-10``; wflow's two halves (``_coefficients``,
``_evaluate``) and ducc0's (``adjoint_synthesis_general``, ``synthesis_general`` with
``epsilon = 1e-12``) timed (best of 3 after a warm-up), and the error of each against a
direct sum on 2000 targets, relative to ``Z``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from _common import RESULTS, call_peer, parent_machine  # noqa: E402


def _best(fn, repeat: int = 3) -> tuple[float, object]:
    out = fn()
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t0)
    return best, out


def peer(n: int, beta: float, tol: float = 1e-10, eps_ducc: float = 1e-12, seed: int = 0) -> dict:
    """In the peer: wflow's and ducc0's source and target halves, times and errors."""
    import math

    import numpy as np

    from wflow.geometry.sphere import sample_uniform
    from wflow.kernels import _fastsum as fs

    rng = np.random.default_rng(seed)
    x = sample_uniform(n, 3, rng)
    m = np.full(n, 1.0 / n)
    q = np.ascontiguousarray(np.vstack([m[None, :], (m[:, None] * x).T]))  # (4, n)
    L = fs.choose_degree(beta * 1.0, tol)
    off, a, b, dmm, d1 = tabs = fs._tables(L)
    Pn = int(off[L + 1])
    xT = np.ascontiguousarray(x.T)
    zj = np.full(n, beta)
    Cr = np.empty((fs._NBLK, 4, Pn))
    Ci = np.empty((fs._NBLK, 4, Pn))

    def wf_coeff():
        fs._coefficients(xT, zj, q, L, *tabs, fs._NBLK, Cr, Ci)
        eps_m = np.full(Pn, 2.0)
        eps_m[: L + 1] = 1.0
        return (4 * math.pi * eps_m * Cr.sum(0), 4 * math.pi * eps_m * Ci.sum(0))

    t_wc, (cr, ci) = _best(wf_coeff)
    out = np.empty((4, n))

    def wf_eval():
        fs._evaluate(xT, L, *tabs, np.ascontiguousarray(cr), np.ascontiguousarray(ci), out)
        return out.copy()

    t_we, g_wf = _best(wf_eval)
    # direct reference on 2000 targets
    idx = np.linspace(0, n - 1, 2000).astype(np.int64)
    ref = np.empty((4, idx.size))
    for i0 in range(0, idx.size, 200):
        e = np.exp(beta * (x[idx[i0:i0 + 200]] @ x.T))
        ref[:, i0:i0 + 200] = q @ e.T
    rec = {"n": n, "beta": beta, "L": int(L), "tol": tol,
           "wflow_coeff_s": t_wc, "wflow_eval_s": t_we,
           "wflow_err": float(np.max(np.abs(g_wf[:, idx] - ref)) / np.min(ref[0]))}
    try:
        import ducc0
    except ImportError:
        rec["ducc0"] = None
        return rec
    rec["ducc0"] = ducc0.__version__
    theta = np.arccos(np.clip(x[:, 2], -1.0, 1.0))
    phi = np.mod(np.arctan2(x[:, 1], x[:, 0]), 2 * math.pi)
    loc = np.ascontiguousarray(np.stack([theta, phi], axis=1))
    il = fs.sph_bessel_i(beta, L)  # (L + 1,)
    ls = np.concatenate([np.arange(mm, L + 1) for mm in range(L + 1)])  # healpy order
    fac = 4 * math.pi * il[ls]

    def du_coeff():  # spin 0: one charge set per transform
        alm = np.stack([ducc0.sht.adjoint_synthesis_general(
            map=q[c:c + 1], spin=0, lmax=L, loc=loc, epsilon=eps_ducc, nthreads=1)[0]
            for c in range(4)])
        return alm * fac

    t_dc, alm = _best(du_coeff)

    def du_eval():
        return np.stack([ducc0.sht.synthesis_general(
            alm=alm[c:c + 1], spin=0, lmax=L, loc=loc, epsilon=eps_ducc, nthreads=1)[0]
            for c in range(4)])

    t_de, g_du = _best(du_eval)
    rec.update(ducc0_coeff_s=t_dc, ducc0_eval_s=t_de, epsilon=eps_ducc,
               ducc0_err=float(np.max(np.abs(g_du[:, idx] - ref)) / np.min(ref[0])))
    rec["ratio_total"] = (t_wc + t_we) / (t_dc + t_de)
    rec["ratio_coeff"] = t_wc / t_dc
    rec["ratio_eval"] = t_we / t_de
    return rec


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="n = 1e5 only")
    ap.add_argument("--out", default=str(RESULTS / "ducc0_fastsum.json"))
    args = ap.parse_args(argv)
    rows = []
    for n in ((100_000,) if args.quick else (100_000, 400_000)):
        for beta in (1.0, 2.0, 4.0):
            rec = call_peer("bench_ducc0:peer", threads=1, timeout=1800, n=n, beta=beta)
            rows.append(rec)
            msg = (f"n={n:>7d} beta={beta:3.1f} L={rec['L']:3d} wflow {rec['wflow_coeff_s']:.3f}"
                   f"+{rec['wflow_eval_s']:.3f} s (err {rec['wflow_err']:.1e})")
            if rec.get("ducc0"):
                msg += (f"  ducc0 {rec['ducc0_coeff_s']:.3f}+{rec['ducc0_eval_s']:.3f} s "
                        f"(err {rec['ducc0_err']:.1e})  ratio {rec['ratio_total']:.2f} "
                        f"(coeff {rec['ratio_coeff']:.2f}, eval {rec['ratio_eval']:.2f})")
            print(msg + f"  load {rec['load_before']}", flush=True)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"machine": parent_machine(), "rows": rows}
    out.write_text(json.dumps(record, indent=1, default=float) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
