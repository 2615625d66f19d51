"""The causal sums (wflow.kernels.causal_sums) against the masked dense direct sum.

The reference below is written from the definition (THEORY §9), independently of the
package: the full ``(n, n)`` logit matrix ``ℓ = β x Aᵀ xᵀ + b``, the mask ``j ≤ i``
(``j < i``) as a boolean matrix, the kind's own kernel ``k`` (``kind.dphi``). Every back-end
(blocked NumPy, compiled direct at d = 3 / generic / wide BLAS, the causal fast sum on S²)
must equal it; ``mask=None`` must be today's :func:`wflow.kernels.kernel_sums` bit for bit.

Error measure: ``max_i max(|ΔZ_i|, |ΔY_i|_∞) / Z_i`` (tokens on the unit sphere, so
``|Y_i| ≤ Z_i``: ``Z_i`` is the natural scale of both; rows with ``Z_i = 0`` — token 0 under
the strict mask, ReLU rows with no positive logit — must be exactly 0). For ReLU a logit
near 0 is a difference of larger numbers, its rounding absolute (``ε |ℓ|``): the scale is
then ``Z_i + Σ_j m_j |ℓ_ij|`` (:func:`dense` returns it).
"""

from __future__ import annotations

import numpy as np
import pytest

import wflow
from wflow import ALiBi, Bias, Causal, causal_sums, kernel_sums
from wflow.attention.kinds import get_kind
from wflow.attention.mask import MASKS, check_mask_bias, get_bias, get_mask
from wflow.infra.schema import ScenarioError

EPS = float(np.finfo(np.float64).eps)
#: The issue's criterion: every path equal to the masked direct sum to 1e-10 relative. The
#: fast sum is asked for ``tol = 1e-10`` and its a-posteriori estimate guarantees it
#: (truncation ``≤ tol/4``, round-off ``κ ε Σ|q| e^{βr}/Z``, both per target).
TOL = 1e-10


def tol_exact(n: int) -> float:
    """Exact back-ends: each term carries ``≤ 16 ε`` (the compiled exponential is accurate
    to 3e-15 ≈ 14 ε, the logit to a few ε of ``|ℓ| ≤ 10`` here) and a sum of ``≤ n``
    positive terms in another order ``n ε``: ``(n + 16) ε`` relative of ``Z_i``, doubled."""
    return 2 * (n + 16) * EPS


def tokens(n: int, d: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    return x, np.full(n, 1.0 / n)


def heads(H: int, d: int, k: int | None = None, seed: int = 1):
    rng = np.random.default_rng(seed)
    k = d if k is None else k
    return (rng.normal(size=(H, k, d)) / np.sqrt(d), rng.normal(size=(H, k, d)) / np.sqrt(d))


def dense(x, m, Q, K, *, beta, kind, strict=False, bias=None):
    """The masked dense sum ``(Z, Y, S, scale)`` from the definition (``O(n²)`` memory).

    ``scale``: the rounding scale of each row (module docstring).
    """
    spec = get_kind(kind)
    n = x.shape[0]
    i = np.arange(n)[:, None]
    j = np.arange(n)[None, :]
    allowed = (j < i) if strict else (j <= i)
    b = 0.0 if bias is None else np.asarray(bias(i, j), dtype=float)
    Z, Y, S, A = [], [], [], []
    for h in range(Q.shape[0]):
        ell = beta * (x @ Q[h].T) @ (x @ K[h].T).T + b
        ell = np.where(allowed, ell, 0.0)
        kk = np.where(allowed, spec.dphi(ell), 0.0) * m[None, :]
        Z.append(kk.sum(axis=1))
        Y.append(kk @ x)
        S.append((kk * ell).sum(axis=1))
        A.append(np.zeros(n) if spec.exponential else (np.abs(ell) * allowed) @ m)
    Z = np.array(Z)
    return Z, np.array(Y), np.array(S), Z + np.array(A)


def rel_err(got, Z, Y, scale=None) -> float:
    """``max_i max(|ΔZ_i|, |ΔY_i|_∞) / scale_i`` (default ``Z_i``); zero rows must be exact."""
    dZ = np.abs(got.Z - Z)
    dY = np.abs(got.Y - Y).max(axis=2)
    zero = Z == 0
    if np.any(zero & ((dZ > 0) | (dY > 0))):
        return np.inf
    den = np.where(zero, 1.0, Z if scale is None else scale)
    return float(np.max(np.maximum(dZ, dY) / den))


BIASES = {
    "none": None,
    "alibi": ALiBi(0.02),
    "callable": Bias(lambda i, j: 0.5 * np.cos(0.3 * (i - j)) - 0.01 * (i - j)),
}


# --------------------------------------------------------------- exact back-ends
@pytest.mark.parametrize("d,k", [(3, 3), (8, 8), (40, 40)])  # unrolled, generic, BLAS
@pytest.mark.parametrize("backend", ["numpy", "direct"])
@pytest.mark.parametrize("kind", ["softmax", "usa", "relu"])
@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("bname", list(BIASES))
def test_exact_backends_equal_the_masked_dense_sum(d, k, backend, kind, H, strict, bname):
    n = 301  # not a multiple of any block
    x, m = tokens(n, d)
    Q, K = heads(H, d, k)
    bias = BIASES[bname]
    Z, Y, S, scale = dense(x, m, Q, K, beta=2.0, kind=kind, strict=strict, bias=bias)
    got = causal_sums(x, m, Q, K, beta=2.0, kind=kind, mask=Causal(strict=strict), bias=bias,
                      backend=backend, scores=True, potential=True, block=37)
    assert got.info.backend == backend
    err = rel_err(got, Z, Y, scale)
    assert err <= tol_exact(n), f"{backend}: {err:.2e}"
    assert err <= TOL
    # the score moment with the logit, and the potential (Z for e^s, ½ Σ m k ℓ for ReLU)
    np.testing.assert_allclose(got.S, S, rtol=0, atol=tol_exact(n) * 20 * np.max(scale))
    if get_kind(kind).exponential:
        assert got.Phi is got.Z
    else:
        np.testing.assert_allclose(got.Phi, 0.5 * S, rtol=0,
                                   atol=tol_exact(n) * 20 * np.max(scale))
    if strict:
        assert np.all(got.Z[:, 0] == 0) and np.all(got.Y[:, 0] == 0)


# ------------------------------------------------------------------- fast sum
@pytest.mark.parametrize("kind", ["softmax", "usa"])
@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("strict", [False, True])
@pytest.mark.parametrize("slope", [0.0, 0.003, 0.7])  # none, ALiBi over ~1 block, steep
def test_fast_sum_equals_the_masked_dense_sum(kind, H, strict, slope):
    n = 1100  # seventeen blocks of 64 and a partial one
    x, m = tokens(n, 3, seed=2)
    Q, K = heads(H, 3, seed=3)
    bias = ALiBi(slope) if slope else None
    Z, Y, S, _ = dense(x, m, Q, K, beta=3.0, kind=kind, strict=strict, bias=bias)
    got = causal_sums(x, m, Q, K, beta=3.0, kind=kind, mask=Causal(strict=strict), bias=bias,
                      backend="fastsum", tol=TOL, scores=not slope)
    assert got.info.backend == "fastsum", got.info.reason
    assert min(got.info.degree) > 0
    err = rel_err(got, Z, Y)
    assert err <= TOL, err
    assert err <= max(10 * got.info.err_est, tol_exact(n))  # the estimate bounds the error
    if not slope:  # S = β xᵀ A Y: its error is at most β |A| |ΔY| ≤ β |A| TOL Z
        normA = max(np.linalg.norm(Q[h].T @ K[h], 2) for h in range(H))
        assert np.all(np.abs(got.S - S) <= 3.0 * normA * TOL * Z + tol_exact(n) * Z)


def test_fast_sum_is_prefix_sums_not_a_dense_pass():
    """O(n K): the time of the fast sum grows linearly in n (ratio at 4x the tokens).

    The fastest of three CPU times per size: a single 7 ms measurement at n = 4 000 once
    came out 9x its 16 000-token partner's quarter inside a loaded full suite."""
    import time

    import numba

    Q, K = heads(1, 3, seed=4)
    times = []
    old = numba.get_num_threads()
    numba.set_num_threads(1)  # CPU time of one thread: no spinning workers on a busy machine
    try:
        for n in (4000, 16000):
            x, m = tokens(n, 3, seed=5)
            causal_sums(x, m, Q, K, beta=2.0, kind="softmax", backend="fastsum")  # warm
            best = float("inf")
            for _ in range(3):
                t = time.process_time()
                causal_sums(x, m, Q, K, beta=2.0, kind="softmax", backend="fastsum")
                best = min(best, time.process_time() - t)
            times.append(best)
    finally:
        numba.set_num_threads(old)
    # linear: 4x; the quadratic direct sum would be 16x. CPU time (shared machine).
    assert times[1] < 9 * times[0], times


def test_fast_sum_refuses_a_callable_bias_and_auto_sums_it_directly():
    x, m = tokens(600, 3)
    Q, K = heads(1, 3)
    with pytest.raises(ValueError, match="callable bias"):
        causal_sums(x, m, Q, K, beta=1.0, kind="softmax", bias=BIASES["callable"],
                    backend="fastsum")
    got = causal_sums(x, m, Q, K, beta=1.0, kind="softmax", bias=BIASES["callable"])
    assert got.info.backend == "direct"
    with pytest.raises(ValueError, match="exponential kernel"):
        causal_sums(x, m, Q, K, beta=1.0, kind="relu", backend="fastsum")


def test_fast_sum_falls_back_where_its_estimate_exceeds_tol():
    """A tolerance the expansion cannot certify sends the head to the direct sums, said so."""
    x, m = tokens(700, 3, seed=6)
    Q, K = heads(2, 3, seed=7)
    got = causal_sums(x, m, Q, K, beta=4.0, kind="softmax", backend="fastsum", tol=1e-17)
    assert got.info.backend == "direct" and "summed directly" in got.info.reason
    Z, Y, *_ = dense(x, m, Q, K, beta=4.0, kind="softmax")
    assert rel_err(got, Z, Y) <= tol_exact(700)


def test_auto_takes_the_fast_sum_at_scale_and_direct_when_small():
    Q, K = heads(1, 3, seed=8)
    x, m = tokens(300, 3)
    assert causal_sums(x, m, Q, K, beta=2.0, kind="softmax").info.backend == "direct"
    x, m = tokens(6000, 3)
    assert causal_sums(x, m, Q, K, beta=2.0, kind="softmax").info.backend == "fastsum"


# ---------------------------------------------------- the non-causal model, bit for bit
@pytest.mark.parametrize("backend", ["numpy", "direct", "auto"])
@pytest.mark.parametrize("kind", ["softmax", "relu"])
@pytest.mark.parametrize("mask", [None, "none"])
def test_no_mask_is_todays_kernel_sums_bit_for_bit(backend, kind, mask):
    x, m = tokens(500, 3)
    Q, K = heads(2, 3)
    a = causal_sums(x, m, Q, K, beta=2.0, kind=kind, mask=mask, backend=backend, scores=True)
    b = kernel_sums(x, x, m, Q, K, beta=2.0, kind=kind, backend=backend, scores=True)
    assert np.array_equal(a.Z, b.Z) and np.array_equal(a.Y, b.Y) and np.array_equal(a.S, b.S)
    assert a.info == b.info


# ----------------------------------------------------------- negative controls
@pytest.mark.parametrize("backend", ["numpy", "direct", "fastsum"])
def test_negative_control_mask_shifted_by_one_is_caught(backend):
    """``j < i`` where ``j ≤ i`` was meant (and the reverse): the comparison fails loudly."""
    n = 700
    x, m = tokens(n, 3, seed=9)
    Q, K = heads(1, 3, seed=10)
    Z, Y, *_ = dense(x, m, Q, K, beta=2.0, kind="softmax", strict=False)
    ok = causal_sums(x, m, Q, K, beta=2.0, kind="softmax", mask="causal", backend=backend)
    bad = causal_sums(x, m, Q, K, beta=2.0, kind="softmax", mask="causal_strict",
                      backend=backend)
    assert rel_err(ok, Z, Y) <= TOL
    assert rel_err(bad, Z, Y) > 1e4 * TOL  # the diagonal term: ≥ 1/n of Z_i at the last row
    Zs, Ys, *_ = dense(x, m, Q, K, beta=2.0, kind="softmax", strict=True)
    assert rel_err(ok, Zs, Ys) > 1e4 * TOL


@pytest.mark.parametrize("backend", ["numpy", "direct", "fastsum"])
def test_negative_control_bias_slope_off_by_two_percent_is_caught(backend):
    n = 700
    x, m = tokens(n, 3, seed=11)
    Q, K = heads(1, 3, seed=12)
    slope = 0.01
    Z, Y, *_ = dense(x, m, Q, K, beta=2.0, kind="usa", bias=ALiBi(slope))
    ok = causal_sums(x, m, Q, K, beta=2.0, kind="usa", bias=ALiBi(slope), backend=backend)
    bad = causal_sums(x, m, Q, K, beta=2.0, kind="usa", bias=ALiBi(1.02 * slope),
                      backend=backend)
    assert rel_err(ok, Z, Y) <= TOL
    assert rel_err(bad, Z, Y) > 1e4 * TOL


def test_negative_control_a_callable_bias_off_by_two_percent_is_caught():
    n = 400
    x, m = tokens(n, 8)
    Q, K = heads(2, 8)
    fn = BIASES["callable"]
    Z, Y, *_ = dense(x, m, Q, K, beta=1.0, kind="softmax", bias=fn)
    bad = causal_sums(x, m, Q, K, beta=1.0, kind="softmax", backend="direct",
                      bias=Bias(lambda i, j: 1.02 * fn(i, j)))
    assert rel_err(bad, Z, Y) > 1e4 * TOL


# ------------------------------------------------------------------- the model
def test_alibi_convention_and_dgr_slope():
    b = ALiBi(0.5)
    assert b(np.array([[3]]), np.array([[1]]))[0, 0] == -1.0  # −slope (i − j)
    assert ALiBi.from_dgr(1.0, 64).slope == 1.0 / 64  # [DGR]'s λ/n
    assert get_bias({"type": "alibi", "lam": 1.0, "n": 64}) == ALiBi(1.0 / 64)
    assert get_bias({"type": "alibi", "slope": 0.25}) == ALiBi(0.25)
    assert isinstance(get_bias(lambda i, j: 0.0 * (i - j)), Bias)
    assert get_mask("causal") == Causal() and get_mask("causal_strict") == Causal(strict=True)
    assert get_mask(None) is None and MASKS["none"] is None
    assert {"Causal", "ALiBi", "Bias", "causal_sums"} <= set(wflow.__all__)


@pytest.mark.parametrize("call,key", [
    (lambda: get_mask("decoder"), "attention.mask"),
    (lambda: get_mask(3), "attention.mask"),
    (lambda: ALiBi(-0.1), "attention.bias.slope"),
    (lambda: ALiBi(float("nan")), "attention.bias.slope"),
    (lambda: get_bias({"type": "rope"}), "attention.bias.type"),
    (lambda: get_bias({"type": "alibi"}), "attention.bias"),
    (lambda: get_bias({"type": "alibi", "lam": 1.0, "n": 0}), "attention.bias.n"),
    (lambda: get_bias(2.0), "attention.bias"),
    (lambda: check_mask_bias(None, ALiBi(0.1)), "attention.bias"),
])
def test_bad_mask_or_bias_names_the_key(call, key):
    with pytest.raises(ScenarioError, match=key.replace(".", r"\.")):
        call()


@pytest.mark.parametrize("fn,what", [(lambda i, j: np.where(j == 0, np.nan, 0.0 * i), "NaN"),
                                     (lambda i, j: np.zeros(3), "shape")])
def test_a_bad_callable_bias_is_refused_naming_the_key(fn, what):
    x, m = tokens(50, 3)
    Q, K = heads(1, 3)
    with pytest.raises(ScenarioError, match=f"attention.bias.*{what}"):
        causal_sums(x, m, Q, K, beta=1.0, kind="softmax", bias=Bias(fn), backend="direct")


def test_bias_that_could_overflow_is_refused():
    x, m = tokens(40, 3)
    Q, K = heads(1, 3)
    with pytest.raises(FloatingPointError):
        causal_sums(x, m, Q, K, beta=1.0, kind="softmax", backend="direct",
                    bias=Bias(lambda i, j: 800.0 + 0.0 * (i - j)))


# ------------------------------------------------------------------ MPI ranks
@pytest.fixture(scope="module")
def mpi_cases(tmp_path_factory):
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    mpirun = Path(sys.executable).parent / "mpirun"
    if not mpirun.exists() and shutil.which("mpirun") is None:
        pytest.skip("mpirun not available")
    root = Path(__file__).resolve().parents[1]
    out = tmp_path_factory.mktemp("causal_mpi") / "cases.npz"
    env = dict(os.environ, OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join([str(root), os.environ.get("PYTHONPATH", "")]))
    r = subprocess.run([str(mpirun if mpirun.exists() else "mpirun"), "-n", "2", sys.executable,
                        "-m", "tests._causal_mpi_cases", str(out)], capture_output=True,
                       text=True, timeout=900, cwd=root, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    with np.load(out) as d:
        yield {k: d[k] for k in d.files}


def _split_err(d, name: str) -> float:
    Z, Y = d[f"ser_{name}_Z"], d[f"ser_{name}_Y"]
    Zp, Yp = d[f"par_{name}_Z"], d[f"par_{name}_Y"]
    den = np.where(Z > 0, Z, 1.0)
    return float(max(np.max(np.abs(Zp - Z) / den), np.max(np.abs(Yp - Y).max(axis=2) / den)))


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["fast", "fast_strict", "fast_steep", "direct3", "generic",
                                  "wide", "numpy", "nomask"])
def test_two_ranks_equal_serial_to_round_off(mpi_cases, name):
    """``mpirun -n 2`` equals the serial sums: the same terms added in another order (the
    ring: two partial sums per row; the scan: the ranks' prefix in rank order), each sum
    of ``≤ n`` positive terms within ``2 n ε`` of ``Z_i`` (``|Y_i| ≤ Z_i``)."""
    d = mpi_cases
    assert int(d["ranks"]) == 2
    assert str(d[f"par_{name}_backend"]) == str(d[f"ser_{name}_backend"])
    n = d[f"ser_{name}_Z"].shape[1]
    assert _split_err(d, name) <= 2 * n * EPS, _split_err(d, name)


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["bad_mask", "bad_slope"])
def test_negative_control_split_run_with_a_fault_is_caught(mpi_cases, name):
    """The split run with the mask shifted by one (fast sum) / the ALiBi slope +2 % (ring)."""
    n = mpi_cases[f"ser_{name}_Z"].shape[1]
    assert _split_err(mpi_cases, name) > 1e6 * 2 * n * EPS


@pytest.mark.mpi
@pytest.mark.parametrize("name", ["fast", "fast_strict", "fast_steep"])
def test_kept_block_coefficients_equal_the_recomputed_ones(mpi_cases, name):
    """Each rank keeps its blocks' coefficients from its coefficients-only pass for its full
    pass (one coefficient pass instead of two): the same numbers, bit for bit, as computing
    them again. Negative control: block 0, which holds the earlier rank's halo only in the
    full pass, reused as well (a fault) gives other sums."""
    d = mpi_cases
    assert list(d["kept_modes"]) == [1, 2] and list(d["recomputed_modes"]) == [0]
    for c in "ZY":
        np.testing.assert_array_equal(d[f"kept_{name}_{c}"], d[f"recomputed_{name}_{c}"])
        np.testing.assert_array_equal(d[f"kept_{name}_{c}"], d[f"par_{name}_{c}"])
    n = d[f"ser_{name}_Z"].shape[1]
    bad = np.max(np.abs(d[f"fault_{name}_Z"] - d[f"recomputed_{name}_Z"]))
    assert bad > 1e3 * n * EPS * np.max(d[f"recomputed_{name}_Z"]), bad


@pytest.mark.parametrize("backend", ["direct", "fastsum"])
def test_result_does_not_depend_on_the_thread_count(backend):
    """Rows are summed serially in source order, blocks' coefficients and the scan in block
    order: one thread and all threads give the same bits (the docstrings' claim)."""
    import numba

    x, m = tokens(3000, 3, seed=13)
    Q, K = heads(2, 3, seed=14)
    kw = dict(beta=2.0, kind="softmax", bias=ALiBi(0.01), backend=backend)
    old = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        a = causal_sums(x, m, Q, K, **kw)
        numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)
        b = causal_sums(x, m, Q, K, **kw)
    finally:
        numba.set_num_threads(old)
    assert np.array_equal(a.Z, b.Z) and np.array_equal(a.Y, b.Y)
