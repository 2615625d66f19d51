"""The floor of the small multi-head step: cost of one fused ``exp`` and of one pair-once pair.

Measures on ONE core (the script re-executes itself in the clean one-thread environment of
``_common.peer_env``: no inherited ``OMP_*``/``NUMBA_*``/``OPENBLAS_*``/``MKL_*`` variables,
every thread count 1, recorded in the JSON; process CPU time):

* ``fexp``: the vectorised ``e^s`` of :mod:`wflow.kernels._numba` over 10⁵ values;
* ``pair-once``: the symmetric-head kernel of ``particle_terms`` (every pair once, the
  row sums and the column sums, ``Z`` and ``Y``) at n = 200 and n = 1000, per pair.

These two numbers bound the per-step time of ``wflow.particles.euler_path`` for the published
multi-head experiments (``H n²/2`` pairs per step), see ``bench/README.md`` §6.

Usage: ``python bench/bench_pair_once.py``; prints, writes ``results/bench_pair_once.json``.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import machine, use_cpu_time, write_json  # noqa: E402


def main() -> int:
    use_cpu_time(sys.argv[1:])  # one thread, process CPU time
    from numba import njit

    from wflow.kernels._numba import _FM, CHUNK, _head_sums_pair_once, fexp

    @njit(fastmath=_FM)
    def exps(s, out, reps):
        for _ in range(reps):
            for j in range(s.size):
                out[j] = fexp(s[j])

    @njit(fastmath=_FM)
    def pair_once(H, xT, A, m, Z, Y, P, eb, reps):
        for _ in range(reps):
            for h in range(H):
                _head_sums_pair_once(h, xT, A, m, 1.0, 0, Z, Y, P, eb)

    def best(fn, reps):
        fn(1)
        t = float("inf")
        for _ in range(5):
            t0 = time.process_time()
            fn(reps)
            t = min(t, (time.process_time() - t0) / reps)
        return t

    rng = np.random.default_rng(0)
    s = rng.uniform(-5.0, 5.0, 100_000)
    out = np.empty_like(s)
    res = {"fexp_ns": 1e9 * best(lambda r: exps(s, out, r), 50) / s.size}
    print(f"fexp: {res['fexp_ns']:.2f} ns per exponential")
    for n, H in ((200, 100), (200, 1), (1000, 4)):
        x = rng.standard_normal((n, 3))
        xT = np.ascontiguousarray((x / np.linalg.norm(x, axis=1, keepdims=True)).T)
        Zr = rng.standard_normal((H, 3, 3))
        A = Zr + np.swapaxes(Zr, 1, 2)
        m = np.full(n, 1.0 / n)
        Z, Y, P, eb = np.empty((H, n)), np.empty((H, 3, n)), np.empty((H, n)), np.empty(CHUNK)
        pairs = H * n * (n + 1) / 2
        reps = max(1, int(2e7 / pairs))
        t = best(lambda r, H=H, xT=xT, A=A, m=m, Z=Z, Y=Y, P=P, eb=eb:
                 pair_once(H, xT, A, m, Z, Y, P, eb, r), reps)
        res[f"pair_once_ns_n{n}_H{H}"] = 1e9 * t / pairs
        res[f"pass_ms_n{n}_H{H}"] = 1e3 * t
        print(f"pair-once n = {n}, H = {H}: {1e9 * t / pairs:.2f} ns per pair, "
              f"{1e3 * t:.3f} ms per pass")
    path = write_json("bench_pair_once", {"machine": machine(), **res,
                                          "command": "python bench/bench_pair_once.py"})
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
