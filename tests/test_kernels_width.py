"""Direct sums at a model's width (issue 41, items 2 and 3): tiles of GEMMs, float32.

Tolerances.

* **Tiles vs the fused kernel (float64).** Both sum the same ``N`` positive weights
  ``m_j k(s_ij)`` with the same exponential (:func:`wflow.kernels._numba.fexp`, 4e-15),
  in another order; the scores differ by the rounding of a dot product of width ``w``
  (absolute ``≤ w ε |qx||ky|``, i.e. relative ``≤ w ε B`` in ``e^s`` with ``B`` the
  score bound). Each sum is then within ``(N + w B + 8) ε`` relative of the other
  (``Y`` relative to ``Z max|y|``, the sum of its absolute terms); asserted with a factor
  2 for the two sides.
* **float32 vs float64.** Each weight carries ``~(|s| + 2) ε₃₂`` (scores and exponential
  in float32), and the values a rounding to float32 plus the SGEMM's accumulation over a
  tile (``√TN ε₃₂`` typical): :func:`wflow.kernels.sums.err_float32` bounds the error of
  ``Z`` and ``Y`` relative to ``Z`` (``Z max|y|``), and is asserted. The velocity
  ``v = Σ_h W_O Y_h / Z_h`` is a ratio of such sums: its error relative to ``max|v|`` is
  what the issue asks to state (target ≤ 1e-6 at ``β‖A‖ ≤ 10``); the measured value is
  printed and asserted below 1e-6.
"""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from wflow.attention.heads import Heads
from wflow.kernels import _numba as kn
from wflow.kernels import _tiled as kt
from wflow.kernels import kernel_sums
from wflow.kernels.direct import WIDE, tiled

from .conftest import EPS, KINDS, needs_compiled

EPS32 = float(np.finfo(np.float32).eps)


@pytest.fixture(autouse=True)
def _parallel_even_if_busy(monkeypatch):
    """Exercise the threaded tiles even when the shared test machine is oversubscribed."""
    from wflow.kernels import direct as kmod

    monkeypatch.setattr(kmod, "_busy", lambda: False)


def sphere(rng, n, d):
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1)[:, None]


def heads_at(rng, H, k, d, beta_norm):
    """``Q, K`` (H, k, d) with ``‖A_h‖₂ = β‖A‖`` (``β = 1``) for every head."""
    Q = rng.standard_normal((H, k, d))
    K = rng.standard_normal((H, k, d))
    for h in range(H):
        a = np.linalg.norm(Q[h].T @ K[h], 2)
        Q[h] *= math.sqrt(beta_norm / a)
        K[h] *= math.sqrt(beta_norm / a)
    return Q, K


def fused_sums(x, y, m, Q, K, beta, kind, scores):
    """The fused numba kernel for any width (the tiles' reference: ``direct_generic``)."""
    from wflow.attention.kinds import get_kind
    from wflow.kernels.direct import _score_factors

    H, _, d = Q.shape
    M = x.shape[0]
    qx, ky = _score_factors(x, y, Q, K, beta)
    Z, P, S = (np.empty((H, M)) for _ in range(3))
    Y = np.empty((H, M, d))
    kn.direct_generic(np.ascontiguousarray(qx), np.ascontiguousarray(np.swapaxes(ky, 1, 2)),
                      np.ascontiguousarray(y.T), m, get_kind(kind).kernel.code, scores,
                      Z, Y, P, S)
    return Z, Y, P, S


# ---------------------------------------------------------------- tiles, float64
@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("H,k,d", [(3, 16, 16), (2, 8, 20), (4, 64, 64)])
def test_tiles_equal_fused_kernel(rng, kind, H, k, d, monkeypatch):
    needs_compiled(kind)
    monkeypatch.setattr(kt, "TN", 97)  # several source tiles and a ragged last one
    monkeypatch.setattr(kt, "TM", 29)
    assert tiled(k, d, d)
    M, N = 150, 400
    x, y = sphere(rng, M, d), sphere(rng, N, d)
    m = rng.uniform(0.1, 1.0, N) / N
    Q, K = heads_at(rng, H, k, d, 3.0)
    r = kernel_sums(x, y, m, Q, K, beta=1.0, kind=kind, potential=True, scores=True,
                    backend="direct")
    assert "tiles" in r.info.reason
    Z, Y, P, S = fused_sums(x, y, m, Q, K, 1.0, kind, True)
    B = 3.0  # |s| ≤ ‖A‖ on the unit sphere
    tol = 2 * (N + min(k, d) * B + 8) * EPS  # see the module docstring
    Zabs = np.abs(Z) + 1e-300
    assert np.max(np.abs(r.Z - Z) / Zabs) <= tol
    assert np.max(np.abs(r.Y - Y) / Zabs[..., None]) <= tol
    assert np.max(np.abs(r.S - S)) <= tol * np.max(np.abs(S))
    if r.Phi is not r.Z:
        assert np.max(np.abs(r.Phi - P)) <= tol * np.max(np.abs(P))


def test_tiles_catch_a_fault(rng):
    """Negative control: a relative 1e-12 change of one mass is seen at the tolerance above."""
    H, d, M, N = 2, 32, 60, 300
    x, y = sphere(rng, M, d), sphere(rng, N, d)
    m = np.full(N, 1.0 / N)
    Q, K = heads_at(rng, H, d, d, 3.0)
    Z, Y, _, _ = fused_sums(x, y, m, Q, K, 1.0, "softmax", False)
    bad = m.copy()
    bad[7] *= 1.0 + 1e-10
    r = kernel_sums(x, y, bad, Q, K, beta=1.0, kind="softmax", backend="direct")
    tol = 2 * (N + d * 3.0 + 8) * EPS
    assert np.max(np.abs(r.Z - Z) / Z) > tol


def tile_runner(rng, monkeypatch, M: int, N: int, d: int):
    """``run(threads, serial)``: the sorted shapes of the tiles of scores of one head's
    float64 tiled sums (``M`` targets, ``N`` sources, width ``d``), seen by a spy on the
    exponential pass."""
    from wflow.attention.kinds import CODE_EXP
    from wflow.kernels.direct import _score_factors

    seen = []
    exp64 = kt.exp_tile64

    def spy(sc, *a):
        seen.append(sc.shape)
        return exp64(sc, *a)

    monkeypatch.setattr(kt, "exp_tile64", spy)
    x, y = sphere(rng, M, d), sphere(rng, N, d)
    Q, K = heads_at(rng, 1, d, d, 2.0)
    qx, ky = _score_factors(x, y, Q, K, 1.0)
    out = (np.empty((1, M)), np.empty((1, M, d)), np.empty((1, M)))

    def run(threads: int = 1, serial: bool = True) -> list:
        seen.clear()
        kt.tiled_sums(qx, ky, y, np.full(N, 1.0 / N), CODE_EXP, "float64", *out, None,
                      threads=threads, serial=serial)
        return sorted(set(seen))

    return run


def test_tile_sizes_are_read_at_the_call(rng, monkeypatch):
    """:data:`~wflow.kernels._tiled.TM` and ``TN`` (``TN // 2`` sources in float64) set at
    run time shape the tiles (the tests above rely on it); control: the defaults hold this
    small problem in one tile."""
    run = tile_runner(rng, monkeypatch, 150, 400, 20)
    assert run() == [(150, 400)]
    monkeypatch.setattr(kt, "TM", 64)
    monkeypatch.setattr(kt, "TN", 300)
    assert run() == [(22, 100), (22, 150), (64, 100), (64, 150)]


def test_threads_get_a_job_each(rng, monkeypatch):
    """With more threads than heads the target tiles shorten until every thread has a job
    (``⌈M / threads⌉`` rows here); control: in sequence the default tiles are kept."""
    run = tile_runner(rng, monkeypatch, 300, 200, 16)
    assert run(4, serial=False) == [(75, 200)]
    assert run(4, serial=True) == [(300 - kt.TM, 200), (kt.TM, 200)]


def test_stage_clock_keeps_the_sums(rng):
    """``stages=``: the same sums bit for bit (the jobs in sequence) and every stage timed;
    control: one mass moved by 2^-20 (relative) changes the bits, so the comparison can fail
    (one ulp of one mass among 700 can round away in the sums: it did under another CPU
    profile)."""
    from wflow.attention.kinds import CODE_EXP
    from wflow.kernels.direct import _score_factors

    H, d, M, N = 2, 32, 300, 700
    x, y = sphere(rng, M, d), sphere(rng, N, d)
    m = np.full(N, 1.0 / N)
    Q, K = heads_at(rng, H, d, d, 3.0)
    qx, ky = _score_factors(x, y, Q, K, 1.0)

    def sums(mm, stages=None):
        Z, Y, P = np.empty((H, M)), np.empty((H, M, d)), np.empty((H, M))
        kt.tiled_sums(qx, ky, y, mm, CODE_EXP, "float64", Z, Y, P, None, threads=1,
                      serial=True, tm=128, tn=256, stages=stages)
        return Z, Y

    st: dict[str, float] = {}
    (Z0, Y0), (Z1, Y1) = sums(m), sums(m, st)
    assert np.array_equal(Z0, Z1) and np.array_equal(Y0, Y1)
    assert set(st) == {"prep", "score", "exp", "value", "rest"}
    assert min(st.values()) >= 0.0 and st["score"] + st["exp"] + st["value"] > 0.0
    bad = m.copy()
    bad[3] *= 1.0 + 2.0**-20
    assert not np.array_equal(sums(bad)[0], Z0)


@pytest.mark.parametrize("f32", [False, True])
def test_shifter_exponentials_at_rounding_ties(f32):
    """``k = rint(s log₂e)`` by the shifter ``1.5 · 2^52`` (``2^23``): inputs within a few
    ulps of ``(k + ½) ln 2``, where the rounding of ``k`` turns, over the whole range, keep
    the accuracy of :func:`test_fexp32_accuracy` and ``tests/test_kernels.py``; control:
    a result off by 2 tolerances is caught."""
    dt, lo, hi, tol = ((np.float32, -125, 126, 3 * EPS32) if f32 else
                       (np.float64, -1020, 1022, 4e-15))
    mid = ((np.arange(lo, hi) + 0.5) * math.log(2.0)).astype(dt)
    s = np.concatenate([mid + i * np.spacing(mid) for i in range(-4, 5)])
    out = np.empty_like(s)
    (kt.fexp32_array if f32 else kn.fexp_array)(s, out)
    ref = np.exp(s.astype(np.float64))

    def rel(o):
        return float(np.max(np.abs(o.astype(np.float64) / ref - 1.0)))

    assert rel(out) <= tol, f"max relative error {rel(out):.2e}"
    assert rel(out.astype(np.float64) * (1.0 + 2.0 * tol)) > tol


def test_width_threshold_and_threads_restored(rng):
    from threadpoolctl import threadpool_info

    # d = 3 stays fused; from d = 4 a head of width w + r >= WIDE (8) runs by tiles
    assert not tiled(3, 3, 3) and not tiled(4, 3, 4) and tiled(4, 4, 4) and WIDE == 8
    assert tiled(3, 3, 3, "float32") and WIDE <= 32
    before = [(i["internal_api"], i["num_threads"]) for i in threadpool_info()]
    x = sphere(rng, 2000, 32)
    Q, K = heads_at(rng, 2, 32, 32, 2.0)
    kernel_sums(x, x, np.full(2000, 5e-4), Q, K, beta=1.0, kind="softmax", backend="direct")
    assert [(i["internal_api"], i["num_threads"]) for i in threadpool_info()] == before


def test_tile_memory_is_o_tile(rng):
    """Peak traced NumPy memory of a wide call: tiles and O((M + N)(w + r)) arrays only."""
    import tracemalloc

    M = N = 3000
    d = 32
    x = sphere(rng, M, d)
    m = np.full(N, 1.0 / N)
    Q, K = heads_at(rng, 1, d, d, 2.0)
    kw = {"beta": 1.0, "kind": "softmax", "backend": "direct"}
    kernel_sums(x, x, m, Q, K, **kw)
    tracemalloc.start()
    kernel_sums(x, x, m, Q, K, **kw)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    full = M * N * 8
    assert peak < full / 4, f"peak {peak / 2**20:.1f} MiB vs (M, N) {full / 2**20:.0f} MiB"
    # negative control of the measurement: the NumPy back-end with one block of all targets
    tracemalloc.start()
    kernel_sums(x, x, m, Q, K, beta=1.0, kind="softmax", backend="numpy", block=M)
    peak_full = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak_full > full


# ------------------------------------------------------------------- float32
def test_fexp32_accuracy():
    s = np.concatenate([np.linspace(-87, 88, 200_001), np.linspace(-3, 3, 10_001)])
    s32 = s.astype(np.float32)
    out = np.empty_like(s32)
    kt.fexp32_array(s32, out)
    rel = np.max(np.abs(out.astype(np.float64) / np.exp(s32.astype(np.float64)) - 1.0))
    # range reduction in float32 (|k| ≤ 127 ulps of the low part of ln 2) and 7 Horner
    # steps: a few ε₃₂ (measured 1.5 ε₃₂)
    assert rel <= 3 * EPS32, f"fexp32 max relative error {rel:.2e} = {rel / EPS32:.2f} ε32"


@pytest.mark.parametrize("beta_norm", [1.0, 10.0])
@pytest.mark.parametrize("H,d,k", [(1, 16, 16), (4, 64, 16), (4, 64, 64)])
def test_float32_velocity_error(rng, beta_norm, H, d, k):
    """float32 against float64 at ``β‖A‖ ≤ 10``: sums within ``err_est``, velocity ≤ 1e-6."""
    n = 1500
    x = sphere(rng, n, d)
    m = np.full(n, 1.0 / n)
    Q, K = heads_at(rng, H, k, d, beta_norm)
    heads = Heads.random_rank(H, d, k, rng)
    WV = heads.value_factors()[0]
    kw = {"beta": 1.0, "kind": "softmax", "values": WV}
    a = kernel_sums(x, x, m, Q, K, **kw)
    b = kernel_sums(x, x, m, Q, K, dtype="float32", **kw)
    assert b.info.dtype == "float32" and a.info.dtype == "float64"
    est = b.info.err_est
    vmax = np.max(np.abs(x @ np.swapaxes(WV, 1, 2)))
    ez = float(np.max(np.abs(b.Z - a.Z) / a.Z))
    ey = float(np.max(np.abs(b.Y - a.Y) / (a.Z[..., None] * vmax)))
    assert ez <= est and ey <= est, f"Z {ez:.2e}, Y {ey:.2e} above the estimate {est:.2e}"
    va = np.einsum("hmd->md", heads.apply_outputs(a.Y / a.Z[..., None]))
    vb = np.einsum("hmd->md", heads.apply_outputs(b.Y / b.Z[..., None]))
    ev = float(np.max(np.abs(vb - va)) / np.max(np.abs(va)))
    print(f"float32 velocity error at β‖A‖ = {beta_norm}, H={H}, d={d}, k={k}: {ev:.2e}")
    assert ev <= 1e-6
    # it really ran in float32 (a float64 computation would agree to ~1e-15)
    assert ez > 100 * EPS or ey > 100 * EPS


@pytest.mark.parametrize("kind", KINDS)
def test_float32_every_kind_and_flags(rng, kind):
    needs_compiled(kind)
    n, d = 400, 24
    x = sphere(rng, n, d)
    m = rng.uniform(0.5, 1.0, n) / n
    Q, K = heads_at(rng, 2, d, d, 4.0)
    kw = {"beta": 1.0, "kind": kind, "potential": True, "scores": True}
    a = kernel_sums(x, x, m, Q, K, **kw)
    b = kernel_sums(x, x, m, Q, K, dtype="float32", **kw)
    est = b.info.err_est
    for name in ("Z", "Phi", "S"):
        ref = getattr(a, name)
        assert np.max(np.abs(getattr(b, name) - ref)) <= est * np.max(np.abs(ref)), name


def test_float32_large_scores_use_the_running_maximum(rng, monkeypatch):
    """Scores up to 300: e^s overflows float32 (> 88) unshifted; the running maximum keeps
    every row; the error grows with |s| as the estimate says."""
    n, d = 600, 16
    x = sphere(rng, n, d)
    m = np.full(n, 1.0 / n)
    Q, K = heads_at(rng, 2, d, d, 1.0)
    beta = 300.0
    assert beta > kt.SHIFT_BOUND
    a = kernel_sums(x, x, m, Q, K, beta=beta, kind="softmax")
    b = kernel_sums(x, x, m, Q, K, beta=beta, kind="softmax", dtype="float32")
    assert np.all(np.isfinite(b.Z)) and np.all(b.Z > 0)
    ez = float(np.max(np.abs(b.Z - a.Z) / a.Z))
    assert ez <= b.info.err_est, f"{ez:.2e} > {b.info.err_est:.2e}"
    # negative control: forcing the fixed-bound shift here loses the rows whose largest score
    # lies more than 87 below the bound, and the comparison sees it
    monkeypatch.setattr(kt, "SHIFT_BOUND", 1e9)
    bad = kernel_sums(x, x, m, Q, K, beta=beta, kind="softmax", dtype="float32")
    assert float(np.max(np.abs(bad.Z - a.Z) / a.Z)) > b.info.err_est


def test_bad_dtype_and_backend(rng):
    x = sphere(rng, 10, 4)
    m = np.full(10, 0.1)
    Q = np.eye(4)[None]
    with pytest.raises(ValueError, match="dtype"):
        kernel_sums(x, x, m, Q, Q, beta=1.0, kind="softmax", dtype="float16")
    with pytest.raises(ValueError, match="dtype"):
        kernel_sums(x, x, m, Q, Q, beta=1.0, kind="softmax", dtype="float32", backend="numpy")
    with pytest.raises(FloatingPointError, match="overflow"):
        kernel_sums(x, x, m, Q, Q, beta=800.0, kind="softmax", dtype="float32")


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_split_ring_carries_rank_and_dtype(rng, dtype):
    """The ring of :func:`wflow.kernels.split.split_sums` passes ``values`` and ``dtype`` to
    every block: on one rank it is the serial call, bit for bit."""
    MPI = pytest.importorskip("mpi4py.MPI")
    from wflow.kernels.split import split_sums

    n, d, H, k = 500, 32, 2, 8
    x = sphere(rng, n, d)
    m = np.full(n, 1.0 / n)
    Q, K = heads_at(rng, H, k, d, 3.0)
    WV = Heads.random_rank(H, d, k, rng).value_factors()[0]
    kw = {"beta": 1.0, "kind": "softmax", "scores": True, "values": WV, "dtype": dtype}
    a = split_sums(x, m, Q, K, comm=MPI.COMM_SELF, **kw)
    b = kernel_sums(x, x, m, Q, K, **kw)
    assert a.Y.shape == (H, n, k) and a.info.dtype == dtype
    assert np.array_equal(a.Z, b.Z) and np.array_equal(a.Y, b.Y) and np.array_equal(a.S, b.S)


MPIRUN = Path(sys.executable).parent / "mpirun"


@pytest.mark.mpi
@pytest.mark.skipif(not MPIRUN.exists() and shutil.which("mpirun") is None,
                    reason="mpirun not available")
def test_mpi_ring_of_tiles_equals_serial(tmp_path):
    """Two ranks (``mpirun -n 2``): the ring of tiles with values of rank 8, float64 and
    float32, equals the serial sums. Tolerance: the same positive terms in ``P = 2`` partial
    sums per target, ``2 N ε`` relative (float64); float32 each block with its own shift and
    SGEMM tiles: within the a-priori estimate ``err_est`` (twice, for the two sides)."""
    out = tmp_path / "ring.npz"
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")
    r = subprocess.run([str(MPIRUN), "-n", "2", sys.executable, "-m",
                        "tests._kernels_width_mpi_case", str(out)], capture_output=True,
                       text=True, timeout=600, cwd=Path(__file__).resolve().parents[1], env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    with np.load(out) as c:
        assert int(c["ranks"]) == 2 and "ring" in str(c["par_float32_reason"])
        n = c["ser_float64_Z"].shape[1]
        for dtype, tol in (("float64", 2 * n * EPS), ("float32", 2 * float(c["float32_err_est"]))):
            Z = c[f"ser_{dtype}_Z"]
            assert np.max(np.abs(c[f"par_{dtype}_Z"] - Z) / Z) <= tol, dtype
            dy = np.abs(c[f"par_{dtype}_Y"] - c[f"ser_{dtype}_Y"])
            assert np.max(dy / (Z[..., None] * float(c["vmax"]))) <= tol, dtype
        # negative control: rank 1's masses moved by 1e-9 are caught at the float64 tolerance
        z = c["ser_float64_Z"]
        assert np.max(np.abs(c["par_fault_Z"] - z) / z) > 2 * n * EPS
        # the float32 ring really ran in float32 (float64 would agree to ~1e-15)
        z64 = c["ser_float64_Z"]
        assert np.max(np.abs(c["par_float32_Z"] - z64) / z64) > 1e-12
