"""The hot path: all nonlocal attention sums, behind one function.

For targets ``x_i`` (M, d), sources ``y_j`` (N, d) with masses ``m_j`` and
heads ``(Q_h, K_h)``, with scores ``s^h_ij = β <Q_h x_i, K_h y_j>``::

    Z_h(i)   = Σ_j m_j k(s^h_ij)              normaliser
    Y_h(i)   = Σ_j m_j k(s^h_ij) y_j          (d-vector; f_h = V_h Y_h [/ Z_h])
             = Σ_j m_j k(s^h_ij) W_{V,h} y_j  (r-vector, ``values=W_V``: a value of rank r,
                                               f_h = W_{O,h} Y_h [/ Z_h])
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
    wide heads (score width + value width ``min(k, d) + r ≥ 24``) run by tiles of
    targets × sources, scores and values as BLAS GEMMs per tile and the compiled
    exponential between (:mod:`wflow.kernels._tiled`; one BLAS thread per worker thread
    when ``threadpoolctl`` is installed, memory ``O(tile)``).
    Agrees with ``"numpy"`` to ~1e-15 relative (exponential accurate to
    4e-15, summation order differs). ``dtype="float32"`` runs the tiles in float32
    (shifted exponential, float64 sums; error in ``KernelInfo.err_est``).
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

This package's face re-exports its rooms: :mod:`~wflow.kernels.results` (the result
types), :mod:`~wflow.kernels.validation` (inputs, the overflow bound),
:mod:`~wflow.kernels.reference` (NumPy), :mod:`~wflow.kernels.direct` (numba, threads and
layout helpers), :mod:`~wflow.kernels.plan` (:func:`plan_kernel`, the cost model of
``auto``), :mod:`~wflow.kernels.sums` (:func:`kernel_sums`) and
:mod:`~wflow.kernels.terms` (:func:`particle_terms`).
"""


from __future__ import annotations

from .direct import aligned, aligned_empty, pair_once, team, threads
from .plan import plan_kernel
from .reference import BLOCK_ELEMS
from .results import KernelInfo, KernelLog, KernelPlan, KernelSums
from .sums import kernel_sums
from .terms import ParticleTerms, particle_heads3, particle_terms
from .validation import BACKENDS, DEFAULT_TOL, DTYPES, EXP_OVERFLOW, raise_bound

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
    "DTYPES",
    "DEFAULT_TOL",
    "BLOCK_ELEMS",
    "EXP_OVERFLOW",
]
