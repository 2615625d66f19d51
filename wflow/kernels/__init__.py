"""The hot path: all nonlocal attention sums, behind one function.

For targets ``x_i`` (M, d), sources ``y_j`` (N, d) with masses ``m_j`` and
heads ``(Q_h, K_h)``, with scores ``s^h_ij = β <Q_h x_i, K_h y_j>``::

    Z_h(i)   = Σ_j m_j k(s^h_ij)              normaliser
    Y_h(i)   = Σ_j m_j k(s^h_ij) y_j          (d-vector; f_h = V_h Y_h [/ Z_h])
    Φ_h(i)   = Σ_j m_j Φ(s^h_ij)              potential (energy density), optional
    S_h(i)   = Σ_j m_j k(s^h_ij) s^h_ij       score moment (attention entropy), optional

with ``k(s) = e^s`` (softmax, USA) or ``max(0, s)`` (ReLU), and the
potential ``Φ`` with ``Φ' = k``: ``Φ = e^s`` resp. ``Φ = max(0, s)²/2``: the kernel of the
registered attention kind (:mod:`wflow.attention.kinds`, looked up by name; an unknown
name raises ``ValueError`` on every back-end). Kinds without compiled code run on the
NumPy back-end only (``"auto"`` plans it; ``"direct"``/``"fastsum"`` refuse).
Every solver (particles, mesh velocity, energies, JKO gradients, studies)
calls :func:`kernel_sums`; the naive reference lives in the tests.

Back-ends (``backend=``):

``"numpy"``
    The blocked NumPy float64 reference: targets in blocks so the ``(M, N)``
    score matrix never exists at once (memory ``O(block · N)`` per head).
``"direct"``
    Fused multi-core direct sum (numba, :mod:`wflow.kernels._numba`): scores,
    exponential and all accumulations in one pass per target, parallel over
    (head, target block) (serial for small problems, see :data:`SERIAL_TRIPLES`
    and :data:`BUSY_SERIAL_TRIPLES`), ``O(1)`` extra
    memory per target. ``d ≤ 3`` uses a kernel specialised to three components;
    wide heads (``k + d ≥ 24``) build score blocks with BLAS (one BLAS thread per
    worker thread when ``threadpoolctl`` is installed) and fuse the rest.
    Agrees with ``"numpy"`` to ~1e-15 relative (exponential accurate to
    4e-15, summation order differs).
``"fastsum"``
    Spherical-harmonic expansion on S² (``d = 3``, exponential kernels, targets
    on the unit sphere), ``O((M + N) L²)`` with the degree ``L`` chosen from
    ``tol`` (see :mod:`wflow.kernels._fastsum`). Heads whose a-posteriori error estimate
    exceeds ``tol`` are recomputed with ``"direct"``.
``"auto"`` (default)
    ``"fastsum"`` for the heads where it is applicable and its predicted cost
    is below half of the direct sum's, ``"direct"`` otherwise.

The back-end that ran, the reason and the estimated relative error are in
``KernelSums.info`` (:class:`KernelInfo`); :func:`plan_kernel` makes the same
choice without computing anything. Threads: numba's (``NUMBA_NUM_THREADS`` or
``numba.set_num_threads``).

Every back-end refuses scores that could overflow ``e^s`` (``β|Qx||Ky| > 700``).

The thread and memory-layout helpers the compiled particle loops share with the direct
back-end are public here (:func:`threads`, :func:`team`, :func:`pair_once`,
:func:`raise_bound`, :func:`aligned`, :func:`aligned_empty`, :func:`particle_heads3`);
the compiled primitives are in :mod:`wflow.kernels.primitives`.
"""

from __future__ import annotations

import logging
import math
import os
import time
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from typing import Any, NamedTuple

import numpy as np

from ..attention.kinds import AttentionKind, get_kind

__all__ = [
    "KernelSums",
    "KernelInfo",
    "KernelPlan",
    "KernelLog",
    "ParticleTerms",
    "kernel_sums",
    "particle_terms",
    "plan_kernel",
    "particle_heads3",
    "threads",
    "team",
    "pair_once",
    "raise_bound",
    "aligned",
    "aligned_empty",
    "BACKENDS",
    "DEFAULT_TOL",
    "BLOCK_ELEMS",
    "EXP_OVERFLOW",
]

logger = logging.getLogger(__name__)

#: Target block size of the NumPy back-end: a block of scores holds about this many doubles.
BLOCK_ELEMS = 1 << 22
#: Largest score bound accepted for exponential kernels (e^709 overflows float64).
EXP_OVERFLOW = 700.0
#: Back-ends accepted by :func:`kernel_sums`.
BACKENDS = ("auto", "numpy", "direct", "fastsum")
#: Default relative tolerance of the fast summation (per target, relative to ``Z_i``).
DEFAULT_TOL = 1e-10
#: ``auto`` never tries the fast summation below this many (target, source, head) triples.
FASTSUM_MIN_TRIPLES = 1 << 22
#: Heads with ``k + d`` at least this use BLAS score blocks in the direct back-end.
WIDE = 24
#: Below this many triples the direct back-end runs on the calling thread only.
SERIAL_TRIPLES = 1 << 18
#: ... and below this many when the machine is oversubscribed (1-min load average ≥ cores):
#: then a thread team waits for the OS to schedule all its threads (often a 4-16 ms time
#: slice), which costs more than the work (~1 ns per triple and core) below ~30 ms of it.
BUSY_SERIAL_TRIPLES = 1 << 25
_LOAD_CACHE = [0.0, 0.0]  # [time of the last reading, busy flag]
#: particle_terms sums symmetric heads pair-once (parallel over heads) from this many heads.
PAIR_ONCE_HEADS = 4

# Cost model of ``auto`` (core-seconds; only ratios matter). Measured on one core with
# bench/bench_kernels.py: direct d = 3 ≈ 0.85 ns per triple; fast summation per head
# ≈ (M + N) · (250 ns + 1.0 ns · L(L+1)/2) + 0.3 ms (4 charge sets, both sides).
_COST_DIRECT3 = 0.85e-9
_COST_FAST_POINT = 250e-9
_COST_FAST = 1.0e-9
_COST_FAST_FIXED = 3e-4

_EPS = float(np.finfo(np.float64).eps)


# ---------------------------------------------------------------------- results
@dataclass(frozen=True)
class KernelInfo:
    """How a :func:`kernel_sums` call was evaluated (for logs and ``summary.json``).

    Attributes
    ----------
    backend : str
        What ran: ``"numpy"``, ``"direct"``, ``"fastsum"``, or ``"fastsum+direct"``
        (some heads fell back to the direct sum).
    requested : str
        The ``backend`` argument.
    reason : str
        Why this back-end was chosen (and why heads fell back, if any).
    err_est : float
        Estimated relative error: ``max_i max(|ΔZ_i|, |ΔY_i|∞) / Z_i`` for the
        fast summation (a-posteriori bound), ``N · ε`` for direct sums (bound of
        float64 summation of positive terms).
    tol : float
        Requested tolerance of the fast summation.
    degree : tuple of int
        Truncation degree per head (``-1``: that head was summed directly).
    threads : int
        Threads used.
    triples : int
        ``M · N · H``.
    """

    backend: str
    requested: str
    reason: str
    err_est: float
    tol: float
    degree: tuple[int, ...] = ()
    threads: int = 1
    triples: int = 0

    def as_dict(self) -> dict[str, Any]:
        """Plain ``dict`` (JSON-ready with :func:`wflow.infra.io.to_jsonable`)."""
        return asdict(self)


@dataclass(frozen=True)
class KernelPlan:
    """The back-end :func:`kernel_sums` would use, and why (see :func:`plan_kernel`).

    Attributes
    ----------
    backend : str
        ``"numpy"``, ``"direct"`` or ``"fastsum"``.
    reason : str
    fast_heads : tuple of bool
        Heads to expand (``backend == "fastsum"``); the others are summed directly.
    degree : tuple of int
        Predicted truncation degree per head (``-1`` where not expanded).
    radius : tuple of float
        ``β R'`` per head (radius of the shifted source cloud ``A_h y_j``).
    cost_direct, cost_fast : float
        Model cost in core-seconds (``nan`` where not evaluated).
    """

    backend: str
    reason: str
    fast_heads: tuple[bool, ...] = ()
    degree: tuple[int, ...] = ()
    radius: tuple[float, ...] = ()
    cost_direct: float = math.nan
    cost_fast: float = math.nan


class _KernelSumsFields(NamedTuple):
    Z: np.ndarray
    Y: np.ndarray
    Phi: np.ndarray | None
    S: np.ndarray | None


class KernelSums(_KernelSumsFields):
    """Nonlocal sums for all heads and targets (see module docstring).

    A 4-tuple ``(Z, Y, Phi, S)``; ``.info`` (not a tuple field, so unpacking
    stays ``Z, Y, Phi, S = ...``) says how it was computed.

    Attributes
    ----------
    Z : (H, M) array
    Y : (H, M, d) array
    Phi : (H, M) array or None
        Only when ``potential=True``; for exponential kernels it is ``Z``.
    S : (H, M) array or None
        Only when ``scores=True``.
    info : KernelInfo or None
    """

    info: KernelInfo | None = None

    def __new__(cls, Z, Y, Phi, S, info: KernelInfo | None = None):  # noqa: D102
        self = super().__new__(cls, Z, Y, Phi, S)
        if info is not None:
            self.info = info
        return self


@dataclass
class KernelLog:
    """Accumulates :class:`KernelInfo` of many calls (one solver run) for ``summary.json``.

    ``log.add(sums.info)`` after each call; :meth:`summary` gives the counts per
    back-end, the largest error estimate and the last reason.
    """

    counts: dict[str, int] = field(default_factory=dict)
    max_err_est: float = 0.0
    max_degree: int = -1
    last: KernelInfo | None = None

    def add(self, info: KernelInfo | None) -> None:
        """Record one call (``None`` is ignored)."""
        if info is None:
            return
        self.counts[info.backend] = self.counts.get(info.backend, 0) + 1
        self.max_err_est = max(self.max_err_est, float(info.err_est))
        if info.degree:
            self.max_degree = max(self.max_degree, max(info.degree))
        self.last = info

    def summary(self) -> dict[str, Any]:
        """``{"calls": {backend: n}, "max_err_est", "max_degree", "last": {...}}``."""
        return {
            "calls": dict(self.counts),
            "max_err_est": self.max_err_est,
            "max_degree": self.max_degree,
            "last": None if self.last is None else self.last.as_dict(),
        }


# ------------------------------------------------------------------ validation
def _apply(Q: np.ndarray, x: np.ndarray) -> np.ndarray:
    """``Q_h x_i`` for all heads, shape ``(H, M, k)`` (batched matmul: far faster than einsum)."""
    return np.matmul(x, np.swapaxes(Q, 1, 2))


def _scores_A(Q: np.ndarray, K: np.ndarray) -> np.ndarray:
    """``A_h = Q_hᵀ K_h``, shape ``(H, d, d)``."""
    return np.matmul(np.swapaxes(Q, 1, 2), K)


def _max_norm(v: np.ndarray) -> float:
    return math.sqrt(float(np.max(np.einsum("...k,...k->...", v, v)))) if v.size else 0.0


def _check_bound(qx: np.ndarray, ky: np.ndarray, beta: float) -> None:
    raise_bound(beta * _max_norm(qx) * _max_norm(ky))


def raise_bound(bound: float) -> None:
    """``FloatingPointError`` if the score bound ``β|Qx||Ky|`` exceeds :data:`EXP_OVERFLOW`.

    The overflow guard of exponential kernels (``e^709`` overflows float64), shared by
    every back-end and the compiled particle loops.
    """
    if bound > EXP_OVERFLOW:
        raise FloatingPointError(
            f"attention scores may reach β|Qx||Ky| = {bound:.1f} > {EXP_OVERFLOW}: e^s would "
            "overflow float64. Lower attention.beta or the head scale.")


def _validate(x, y, m, Q, K, beta, kind, backend, tol):
    spec = get_kind(kind)  # ValueError naming the known kinds
    if backend not in BACKENDS:
        raise ValueError(f"backend: must be one of {BACKENDS}, got {backend!r}")
    if not (np.isfinite(beta) and beta > 0):
        raise ValueError(f"beta: must be a finite number > 0, got {beta!r}")
    if not (np.isfinite(tol) and tol > 0):
        raise ValueError(f"tol: must be a finite number > 0, got {tol!r}")
    x = np.ascontiguousarray(x, dtype=np.float64)
    y = np.ascontiguousarray(y, dtype=np.float64)
    m = np.ascontiguousarray(m, dtype=np.float64)
    Q = np.ascontiguousarray(Q, dtype=np.float64)
    K = np.ascontiguousarray(K, dtype=np.float64)
    if x.ndim != 2:
        raise ValueError(f"x: expected shape (M, d), got {x.shape}")
    d = x.shape[1]
    if y.ndim != 2 or y.shape[1] != d:
        raise ValueError(f"y: expected shape (N, {d}), got {y.shape}")
    if m.shape != (y.shape[0],):
        raise ValueError(f"m: expected shape ({y.shape[0]},), got {m.shape}")
    if Q.ndim != 3 or Q.shape[2] != d:
        raise ValueError(f"Q: expected shape (H, k, {d}), got {Q.shape}")
    if K.shape != Q.shape:
        raise ValueError(f"K: shape {K.shape} must equal Q shape {Q.shape}")
    return x, y, m, Q, K, spec


# ---------------------------------------------------------------- numpy (reference)
def _numpy_sums(x, y, m, Q, K, beta, spec: AttentionKind, potential, scores, block):
    """The blocked NumPy float64 reference, any registered kind (its kernel's ``Φ'``, ``Φ``)."""
    H = Q.shape[0]
    M, d = x.shape
    N = y.shape[0]
    kern = spec.kernel
    expo = kern.exponential  # Φ = k: the potential sums are Z
    qx = np.einsum("hkd,md->hmk", Q, x)  # (H, M, k)
    ky = np.einsum("hkd,nd->hnk", K, y)  # (H, N, k)
    if expo:
        _check_bound(qx, ky, beta)
    Z = np.empty((H, M))
    Y = np.empty((H, M, d))
    Phi = np.empty((H, M)) if (potential and not expo) else None
    S = np.empty((H, M)) if scores else None
    B = max(1, min(M, (BLOCK_ELEMS // max(N, 1)) if block is None else int(block)))
    for h in range(H):
        kyT = np.ascontiguousarray(ky[h].T) * beta  # (k, N), β folded in
        for i0 in range(0, M, B):
            i1 = min(M, i0 + B)
            s = qx[h, i0:i1] @ kyT  # (b, N) scores β<Qx, Ky>
            kmat = kern.dphi(s)
            if Phi is not None:
                Phi[h, i0:i1] = kern.phi_of(s, kmat) @ m
            if S is not None:
                S[h, i0:i1] = (kmat * s) @ m
            kmat *= m  # weight by source masses
            Z[h, i0:i1] = kmat.sum(axis=1)
            Y[h, i0:i1] = kmat @ y
    if potential and expo:
        Phi = Z
    return Z, Y, Phi, S


# ---------------------------------------------------------------- direct (numba)
def threads() -> int:
    """Threads the numba kernels may use (``numba.get_num_threads()``)."""
    import numba

    return int(numba.get_num_threads())


def _busy() -> bool:
    """Whether the machine is oversubscribed (1-min load ≥ usable cores; re-read every 2 s)."""
    now = time.monotonic()
    if now - _LOAD_CACHE[0] > 2.0:
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - not on Linux
            cores = os.cpu_count() or 1
        try:
            _LOAD_CACHE[1] = float(os.getloadavg()[0] >= cores)
        except OSError:  # pragma: no cover
            _LOAD_CACHE[1] = 0.0
        _LOAD_CACHE[0] = now
    return bool(_LOAD_CACHE[1])


def _serial(triples: int) -> bool:
    """Whether to run on the calling thread (results are identical: same summation order)."""
    if triples < SERIAL_TRIPLES or threads() == 1:
        return True
    return triples < BUSY_SERIAL_TRIPLES and _busy()


ALIGN = 64  # bytes: one cache line, one AVX-512 vector


def aligned_empty(shape: int | tuple[int, ...]) -> np.ndarray:
    """Uninitialised C-contiguous float64 array whose data start on an :data:`ALIGN` boundary.

    The vectorised reductions of the compiled kernels sum in an order that depends on
    where the data start (measured: the same particle step differed by an ulp between
    reruns). NumPy aligns to 16 bytes only, so every array a kernel reduces over goes
    through :func:`aligned` / :func:`aligned_empty`: reruns, and serial vs MPI, then
    agree bit for bit.
    """
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    size = math.prod(shape)
    buf = np.empty(size + ALIGN // 8, dtype=np.float64)
    k = (-buf.ctypes.data % ALIGN) // 8
    return buf[k:k + size].reshape(shape)


def aligned(a: np.ndarray) -> np.ndarray:
    """C-contiguous float64 copy of ``a`` starting on an :data:`ALIGN` boundary."""
    a = np.asarray(a, dtype=np.float64)
    out = aligned_empty(a.shape)
    out[...] = a
    return out


def pair_once(sym: bool, n: int, H: int) -> bool:
    """Whether to count every pair once (symmetric heads, self-interaction).

    Fixed rule (the summation order never depends on threads or load): with
    ``PAIR_ONCE_HEADS`` heads or more the pair-once loop is parallel over heads; below
    :data:`SERIAL_TRIPLES` the sums run on one thread anyway, so halving the kernel
    evaluations always pays.
    """
    return sym and (H >= PAIR_ONCE_HEADS or n * n * H < SERIAL_TRIPLES)


@contextmanager
def team(work: float):
    """Run the numba kernels inside with one thread when ``work`` (≈ ns) is small."""
    if not _serial(int(work)):
        yield
        return
    import numba

    old = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(old)


def _score_factors(x, y, Q, K, beta):
    """``(qx, ky)`` with ``s = <qx_i, ky_j>`` and ``β`` folded in, of the smaller width.

    ``k ≥ d``: ``qx = β Aᵀ x``, ``ky = y`` (width ``d``); else ``β Q x``, ``K y`` (width ``k``).
    """
    H, k, d = Q.shape
    if k >= d:
        qx = beta * np.matmul(x, _scores_A(Q, K))  # rows xᵢᵀ A = (Aᵀ xᵢ)ᵀ
        ky = np.broadcast_to(y, (H,) + y.shape)
    else:
        qx = beta * _apply(Q, x)
        ky = _apply(K, y)
    return qx, ky


def _direct_sums(x, y, m, Q, K, beta, spec: AttentionKind, potential, scores):
    from . import _numba as kn

    H, k, d = Q.shape
    M = x.shape[0]
    N = y.shape[0]
    expo = spec.exponential
    kcode = spec.require_compiled("backend='direct'")
    Z = np.empty((H, M))
    Y = np.empty((H, M, d))
    P = np.empty((H, M))
    S = np.empty((H, M))
    if M == 0 or N == 0 or H == 0:
        Z[:] = 0.0
        Y[:] = 0.0
        P[:] = 0.0
        S[:] = 0.0
    elif d <= 3:
        qx, ky = _score_factors(x, y, Q, K, beta)
        w = qx.shape[2]
        qx3 = np.zeros((H, M, 3))
        qx3[:, :, :w] = qx
        ky3 = aligned_empty((H, 3, N))
        ky3[:] = 0.0
        ky3[:, :w, :] = np.swapaxes(ky, 1, 2)
        my = aligned_empty((3, N))
        my[:] = 0.0
        my[:d] = (m[:, None] * y).T
        Y3 = Y if d == 3 else np.empty((H, M, 3))
        with team(M * N * H):
            kn.direct3(qx3, ky3, my, aligned(m), kcode, scores, Z, Y3, P, S)
        if d < 3:
            Y[:] = Y3[:, :, :d]
    else:
        qx, ky = _score_factors(x, y, Q, K, beta)
        w = qx.shape[2]
        qx = np.ascontiguousarray(qx)
        if w + d < WIDE:
            kyT = aligned(np.swapaxes(ky, 1, 2))
            with team(M * N * H * (w + d) / 4):
                kn.direct_generic(qx, kyT, aligned(y.T), aligned(m), kcode, scores, Z, Y, P, S)
        else:
            _blas_sums(qx, ky, y, m, kcode, scores, Z, Y, P, S)
    Phi = (Z if expo else P) if potential else None
    return Z, Y, Phi, (S if scores else None)


def _blas_sums(qx, ky, y, m, kcode, scores, Z, Y, P, S):
    """Wide heads: score blocks ``(b, N)`` by BLAS, exponential + sums fused (numba), ``Y`` by BLAS.

    Blocks of about ``2^21`` doubles (16 MiB) stay in the last-level cache. With
    ``threadpoolctl`` available, ``numba.get_num_threads()`` Python threads each
    run whole blocks (BLAS limited to one thread, the GIL-free numba pass), so
    one team of threads does everything; otherwise the blocks run in sequence
    with BLAS's own threads and a serial element-wise pass (two thread teams
    alternating on the same cores spin against each other).
    """
    from . import _numba as kn

    H, M, _ = qx.shape
    N = y.shape[0]
    B = max(1, min(M, (1 << 21) // N))
    kyT = [np.ascontiguousarray(ky[h].T) for h in range(H)]
    m = aligned(m)

    def block(job: tuple[int, int], buf: np.ndarray) -> None:
        h, i0 = job
        i1 = min(M, i0 + B)
        sc = buf[: i1 - i0]
        np.matmul(qx[h, i0:i1], kyT[h], out=sc)
        kn.exp_block(sc, m, kcode, scores, Z[h, i0:i1], P[h, i0:i1], S[h, i0:i1])
        np.matmul(sc, y, out=Y[h, i0:i1])

    jobs = [(h, i0) for h in range(H) for i0 in range(0, M, B)]
    nt = min(threads(), len(jobs))
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - optional
        threadpool_limits = None
    if nt <= 1 or threadpool_limits is None or _serial(M * N * H * qx.shape[2]):
        buf = aligned_empty((B, N))
        for job in jobs:
            block(job, buf)
        return
    import threading
    from concurrent.futures import ThreadPoolExecutor

    local = threading.local()

    def run(job: tuple[int, int]) -> None:  # dynamic: a paused thread does not hold the rest
        if not hasattr(local, "buf"):
            local.buf = aligned_empty((B, N))
        block(job, local.buf)

    with threadpool_limits(1, user_api="blas"), ThreadPoolExecutor(nt) as ex:
        list(ex.map(run, jobs))


# ---------------------------------------------------------------------- planning
def plan_kernel(
    x: np.ndarray,
    y: np.ndarray,
    Q: np.ndarray,
    K: np.ndarray,
    *,
    beta: float,
    kind: str,
    backend: str = "auto",
    tol: float = DEFAULT_TOL,
    m: np.ndarray | None = None,
) -> KernelPlan:
    """Choose the back-end of :func:`kernel_sums` (nothing is summed).

    ``"fastsum"`` is applicable for ``d = 3``, exponential kernels and targets
    on the unit sphere; ``"auto"`` takes it for the heads whose predicted cost
    ``(M + N) L(L+1)/2`` is below half the direct cost ``M N`` (model constants
    measured by ``bench/bench_kernels.py``), where the truncation degree
    ``L(β R', tol)`` exists (``L ≤ MAX_DEGREE``). Whether the round-off of the
    expansion meets ``tol`` depends on the data (smallest ``Z_i``), so it is
    checked after the expansion, head by head; failed heads cost the expansion
    (at most half a direct sum) plus the direct sum. With the masses ``m``,
    ``"auto"`` first bounds that estimate from below on a few probe targets
    (:func:`wflow.kernels._fastsum.estimate_floor`, ``O(16 N)``) and skips heads that
    would surely fail.

    Parameters
    ----------
    x, y, Q, K, beta, kind, backend, tol
        As in :func:`kernel_sums`.
    m : (N,) array, optional
        Source masses (enables the probe check).
    """
    from . import _fastsum as fs

    spec = get_kind(kind)
    H, k, d = np.shape(Q)
    M, N = np.shape(x)[0], np.shape(y)[0]
    if backend == "numpy":
        return KernelPlan("numpy", "requested")
    if not spec.compiled:
        if backend != "auto":
            spec.require_compiled(f"backend={backend!r}")
        return KernelPlan("numpy", f"kind {spec.name!r} has no compiled kernel")
    if backend == "direct":
        return KernelPlan("direct", "requested")
    why = None
    if d != 3:
        why = f"fast summation needs d = 3 (S²), got d = {d}"
    elif not spec.fastsum:
        why = ("fast summation needs the exponential kernel, got "
               f"{spec.label} ({spec.kernel.name})")
    else:
        dev = float(np.max(np.abs(np.linalg.norm(x, axis=1) - 1.0))) if M else 0.0
        if dev > 1e-6:
            why = f"targets are not on the unit sphere (max ||x| - 1| = {dev:.1e})"
    if why is None and backend == "auto" and M * N * H < FASTSUM_MIN_TRIPLES:
        why = f"small problem (M·N·H = {M * N * H} < {FASTSUM_MIN_TRIPLES})"
    if why is not None:
        if backend == "fastsum":
            raise ValueError(f"backend='fastsum' not applicable: {why}")
        return KernelPlan("direct", why)
    A = _scores_A(Q, K)
    y = np.asarray(y, dtype=np.float64)
    degrees, radii, fast = [], [], []
    cost_fast = 0.0
    cost_dir = _COST_DIRECT3 * M * N * H
    for h in range(H):
        u = y @ A[h].T
        c, zR, L = fs.plan_head(u, beta, tol)
        radii.append(float(zR))
        feasible = L is not None
        if feasible and m is not None and backend == "auto":
            feasible = fs.estimate_floor(x, y, m, u, c, beta) <= tol
        c_h = ((M + N) * (_COST_FAST_POINT + _COST_FAST * (L + 1) * (L + 2) / 2)
               + _COST_FAST_FIXED if L is not None else math.inf)
        use = feasible and (backend == "fastsum" or c_h < 0.5 * _COST_DIRECT3 * M * N)
        fast.append(bool(use))
        degrees.append(int(L) if use else -1)
        cost_fast += c_h if use else _COST_DIRECT3 * M * N
    if not any(fast):
        if backend == "fastsum":
            raise ValueError(
                "backend='fastsum' not applicable: the expansion cannot meet "
                f"tol={tol:g} for β R' = {max(radii):.3g} (degree > {fs.MAX_DEGREE}); "
                "use backend='direct' or a larger tol")
        return KernelPlan("direct", "fast summation would not pay off "
                          f"(β R' up to {max(radii):.3g}, tol {tol:g})", tuple(fast),
                          tuple(degrees), tuple(radii), cost_dir, cost_fast)
    reason = "requested" if backend == "fastsum" else (
        f"fast summation predicted {cost_dir / cost_fast:.1f}x cheaper than direct")
    return KernelPlan("fastsum", reason, tuple(fast), tuple(degrees), tuple(radii), cost_dir,
                      cost_fast)


# ---------------------------------------------------------------------- main API
def kernel_sums(
    x: np.ndarray,
    y: np.ndarray,
    m: np.ndarray,
    Q: np.ndarray,
    K: np.ndarray,
    *,
    beta: float,
    kind: str,
    potential: bool = False,
    scores: bool = False,
    block: int | None = None,
    backend: str = "auto",
    tol: float = DEFAULT_TOL,
) -> KernelSums:
    """Evaluate the nonlocal attention sums (module docstring) with the chosen back-end.

    Parameters
    ----------
    x : (M, d) array
        Targets.
    y : (N, d) array
        Sources.
    m : (N,) array
        Source masses (``1/n`` for an empirical measure, cell masses on a mesh).
    Q, K : (H, k, d) arrays
        Query and key matrices.
    beta : float
        Inverse temperature.
    kind : str
        A registered attention kind (:data:`wflow.attention.kinds.KINDS`: ``"softmax"``,
        ``"usa"``, ``"relu"``); its kernel ``k`` (``e^s`` resp. ``max(0, s)``). Unknown
        names raise ``ValueError``.
    potential, scores : bool
        Also return ``Φ_h`` resp. ``S_h``.
    block : int, optional
        Targets per block of the ``"numpy"`` back-end (default ``BLOCK_ELEMS // N``).
    backend : {"auto", "numpy", "direct", "fastsum"}
        See the module docstring; ``"fastsum"`` raises ``ValueError`` where it
        is not applicable.
    tol : float
        Relative tolerance of the fast summation (per target, relative to
        ``Z_i``); ignored by the direct back-ends (exact to round-off).

    Returns
    -------
    KernelSums
        With ``.info`` (:class:`KernelInfo`).
    """
    x, y, m, Q, K, spec = _validate(x, y, m, Q, K, beta, kind, backend, tol)
    H = Q.shape[0]
    M, N = x.shape[0], y.shape[0]
    expo = spec.exponential
    triples = M * N * H
    err_direct = max(N, 1) * _EPS
    if backend == "numpy" or not spec.compiled:
        why = "requested"
        if backend != "numpy":  # a kind without compiled kernels: NumPy under "auto" only
            why = plan_kernel(x, y, Q, K, beta=beta, kind=spec, backend=backend).reason
        Z, Y, Phi, S = _numpy_sums(x, y, m, Q, K, beta, spec, potential, scores, block)
        return KernelSums(Z, Y, Phi, S, KernelInfo("numpy", backend, why, err_direct,
                                                   tol, (), 1, triples))
    if expo and M and N and H:
        from . import _numba as kn

        raise_bound(beta * kn.max_rownorm(Q, x) * kn.max_rownorm(K, y))
    plan = plan_kernel(x, y, Q, K, beta=beta, kind=kind, backend=backend, tol=tol, m=m)
    if plan.backend == "direct":
        Z, Y, Phi, S = _direct_sums(x, y, m, Q, K, beta, spec, potential, scores)
        return KernelSums(Z, Y, Phi, S, KernelInfo("direct", backend, plan.reason, err_direct,
                                                   tol, (), threads(), triples))
    from . import _fastsum as fs

    A = _scores_A(Q, K)
    work = sum((M + N) * (L + 1) * (L + 2) / 2 for L in plan.degree if L >= 0)
    with team(work):
        res = fs.harmonic_sums(x, y, m, A, beta=beta, tol=tol, scores=scores,
                               heads=np.asarray(plan.fast_heads))
    Z, Y, S = res.Z, res.Y, res.S
    redo = ~res.ok
    degree = tuple(int(L) if ok else -1 for L, ok in zip(res.degree, res.ok, strict=True))
    reason = plan.reason
    name = "fastsum"
    if np.any(redo):
        idx = np.flatnonzero(redo)
        failed = [h for h in idx if plan.fast_heads[h]]
        if failed:
            ests = ", ".join(f"head {h}: {res.err_est[h]:.1e}" for h in failed)
            reason += f"; estimate above tol={tol:g} ({ests}), summed directly"
            logger.info("fast summation fell back to direct sums (%s)", ests)
        Zd, Yd, _, Sd = _direct_sums(x, y, m, Q[idx], K[idx], beta, spec, False, scores)
        Z[idx] = Zd
        Y[idx] = Yd
        if scores:
            S[idx] = Sd
        name = "fastsum+direct" if np.any(res.ok) else "direct"
    ests = [float(e) for e in res.err_est[res.ok]] + ([err_direct] if np.any(redo) else [])
    err = float(max(ests))
    Phi = Z if potential else None
    return KernelSums(Z, Y, Phi, S, KernelInfo(name, backend, reason, err, tol, degree,
                                               threads(), triples))


# ------------------------------------------------------- particle step, one pass
class ParticleTerms(NamedTuple):
    """Velocity, energies and slope terms of one particle state (conventions of wflow.energy).

    Attributes
    ----------
    velocity : (n, d)  velocity of the requested flow (``v`` or ``vhat``).
    v, vhat : (n, d)  transformer velocity and effective-mobility surrogate.
    Z : (H, n), Y : (H, n, d), Phi : (H, n), grad_psi : (H, n, d)
        As in :class:`wflow.energy.FieldEval`.
    E_heads : (H,)  ``E_h = (1/2β) Σ_i m_i Φ_h(x_i)``.
    E : float  ``Σ_h w_h E_h``.
    power, slope2, speed2, G2 : float
        As in :class:`wflow.energy.SlopeTerms`, for ``velocity``.
    power_heads : (H,)  ``∫ <∇ψ_h, velocity> dμ``.
    """

    velocity: np.ndarray
    v: np.ndarray
    vhat: np.ndarray
    Z: np.ndarray
    Y: np.ndarray
    Phi: np.ndarray
    grad_psi: np.ndarray
    E_heads: np.ndarray
    E: float
    power: float
    slope2: float
    speed2: float
    G2: float
    power_heads: np.ndarray


def particle_heads3(Q: np.ndarray, K: np.ndarray,
                    V: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """Heads in the layout of the compiled particle kernels (``d ≤ 3``).

    Returns ``(A3, V3, sym)``: ``A_h = Q_hᵀ K_h`` and ``V_h`` zero-padded to ``(H, 3, 3)``,
    and whether every ``A_h`` is symmetric to 1e-12 relative (then pairs are summed once
    and ``∇ψ_h = A_h Y_h``).
    """
    A = _scores_A(Q, K)
    H, d, _ = A.shape
    scale = max(1.0, float(np.max(np.abs(A)))) if A.size else 1.0
    sym = bool(np.max(np.abs(A - np.swapaxes(A, 1, 2)), initial=0.0) <= 1e-12 * scale)
    A3, V3 = np.zeros((H, 3, 3)), np.zeros((H, 3, 3))
    A3[:, :d, :d] = A
    V3[:, :d, :d] = V
    return A3, V3, sym


def particle_terms(
    x: np.ndarray,
    m: np.ndarray,
    Q: np.ndarray,
    K: np.ndarray,
    V: np.ndarray,
    w: np.ndarray,
    *,
    beta: float,
    kind: str,
    flow: str = "transformer",
) -> ParticleTerms:
    """Everything one particle step needs, in ONE compiled pass (``d ≤ 3``, targets = sources).

    Equals ``wflow.energy.evaluate`` + ``head_energies`` + ``slope_terms`` (tested to
    1e-12) without their ``O(H n d)`` NumPy temporaries and per-call overhead, which
    dominate for small systems (the published multi-head experiments: ``n = 200``).

    Parameters
    ----------
    x : (n, d) array, ``d ≤ 3``
        Tokens on the sphere (also the sources).
    m : (n,) array
        Token masses.
    Q, K : (H, k, d) arrays; V : (H, d, d) array; w : (H,) array
        Head parameters (``wflow.attention.heads.Heads`` fields).
    beta, kind
        Attention (``kind``: a registered kind with a compiled kernel, see
        :mod:`wflow.attention.kinds`).
    flow : {"transformer", "surrogate"}
        Which velocity the slope terms and ``velocity`` refer to.
    """
    from . import _numba as kn

    x, _, m, Q, K, spec = _validate(x, x, m, Q, K, beta, kind, "direct", DEFAULT_TOL)
    kcode = spec.require_compiled("particle_terms")
    if flow not in ("transformer", "surrogate"):
        raise ValueError(f"flow: must be 'transformer' or 'surrogate', got {flow!r}")
    n, d = x.shape
    H = Q.shape[0]
    if d > 3:
        raise ValueError(f"x: particle_terms needs d <= 3, got d = {d}; use wflow.energy")
    V = np.ascontiguousarray(V, dtype=np.float64)
    w = np.ascontiguousarray(w, dtype=np.float64)
    if V.shape != (H, d, d) or w.shape != (H,):
        raise ValueError(f"V, w: expected shapes {(H, d, d)} and {(H,)}, got {V.shape}, {w.shape}")
    expo = spec.exponential
    if expo and n:
        raise_bound(beta * kn.max_rownorm(Q, x) * kn.max_rownorm(K, x))
    A3, V3, sym = particle_heads3(Q, K, V)
    xT = aligned_empty((3, n))  # component-major, on a 64-byte boundary (see aligned_empty)
    xT[:] = 0.0
    xT[:d] = x.T
    Z = np.empty((H, n))
    Y = np.empty((H, 3, n))
    Yp = Y if sym else np.empty((H, 3, n))
    G = np.empty((H, n, 3))
    P = np.empty((H, n))
    PH = np.empty((H, n))
    vel = np.empty((n, 3))
    v = np.empty((n, 3))
    vhat = np.empty((n, 3))
    terms = np.empty((4, n))
    # pair-once halves the kernels of symmetric heads (parallel over heads only); fixed
    # rule, so the summation order never depends on threads or load
    once = pair_once(sym, n, H)
    with team(n * n * H * (1 if sym else 2)):
        kn.particle_terms(xT, A3, V3, w, w / w.sum(), aligned(m), float(beta),
                          kcode, spec.normalised, sym, once,
                          flow == "surrogate", Z, Y, Yp, P, G, vel, v, vhat, terms, PH)
    if spec.normalised and n and np.any(Z <= 0):
        raise FloatingPointError("softmax normaliser underflowed to 0; lower attention.beta")
    E_heads = P @ m / (2.0 * beta)
    tm = terms @ m
    return ParticleTerms(
        velocity=vel[:, :d], v=v[:, :d], vhat=vhat[:, :d], Z=Z,
        Y=np.swapaxes(Y, 1, 2)[:, :, :d],
        Phi=P, grad_psi=G[:, :, :d], E_heads=E_heads, E=float(w @ E_heads),
        power=float(tm[0]), slope2=float(tm[1]), speed2=float(tm[2]), G2=float(tm[3]),
        power_heads=PH @ m)
