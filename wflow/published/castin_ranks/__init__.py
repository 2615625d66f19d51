r"""``wflow reproduce castin_ranks``: ranks of the limit covariance of the softmax moment ODE.

The published experiment is the *Traditional self-attention* section of
``histograms.py`` with ``utils.py`` in ``vcastin/2025-transformers-PDEs`` (Castin–Ablin–
Carrillo–Peyré, *A unified perspective on the dynamics of deep transformers*), commit
``53ad7f3``. For a Gaussian measure the softmax transformer PDE closes on its covariance:

.. math:: \\dot Σ = VΣAΣ + (VΣAΣ)^⊤,\\qquad A = K^⊤Q/\\sqrt d,

and the paper histograms the rank of the limit of ``Σ`` over random draws. Conventions,
term by term (``h`` = ``histograms.py``, ``u`` = ``utils.py``):

=======================  ==============================================================
convention               published (line)
=======================  ==============================================================
draws                    ``d ∈ {3, 4, 5}``, 100 per ``d`` (h 12-13); ``Q ∈ R^{⌊d/2⌋×d}``
                         standard normal from ``np.random.seed(40)`` for all ``d`` in
                         order (h 9, 16), ``K = −Q`` (h 17), so ``A = −QᵀQ/√d ≤ 0``
value                    ``V = I`` (h 27), or ``V = WᵀW`` with ``W`` normal from
                         ``np.random.seed(26)`` (h 39-42)
initial covariance       ``Σ₀ = GGᵀ``, ``G`` normal ``d×d``, ``np.random.seed(41)`` at the
                         start of every ``d`` (u 309, 317-318), one per attempt
right-hand side          ``A = (Kᵀ·Q)/√d``, ``R = (V·Σ)·(A·Σ)``, ``R + Rᵀ`` (u 11-14)
integrator               projected Euler: ``Σ ← P(Σ + h R)`` with ``P`` = eigen-
                         decomposition, negative eigenvalues set to ``1e-14`` (u 60-64,
                         88-89); ``h`` = 0.09, 0.05, 0.02 (``V = I``) and 0.09, 0.06,
                         0.02 (``V`` random) for ``d`` = 3, 4, 5 (h 22, 43)
stopping rule            converged when ``‖R‖_F < tol`` (checked after the update,
                         u 87-95): ``tol`` = 1e-4, at most 60 000 steps (``V = I``,
                         h 32-33); 5e-5 and 90 000 (``V`` random, h 57-58); diverged
                         when ``tr Σ > 1e3`` (u 77, 96)
limit                    the *last recorded* iterate, i.e. ``Σ`` before the final
                         update (u 85, 334)
rank                     ``#{eigenvalues > 0.1}`` (u 335, ``tol_rank``, h 34, 59)
rejection                an attempt that did not converge draws a new ``Σ₀`` for the same
                         ``(Q, K, V)`` (u 314-343); a converged one with rank
                         ``> ⌊(d+1)/2⌋`` is an *exception*: counted, left out of the
                         histogram (u 336-341); at most ``n_max`` attempts per ``d``
                         (1000 for ``V = I``, 10 000 for ``V`` random, h 60)
=======================  ==============================================================

The NumPy operations are the published ones in the published order (same BLAS and LAPACK
calls on ``d×d`` arrays), so with the same NumPy the iterates agree bit for bit; the tests
check ranks, iteration counts and limits against the published code run on this machine.

Speed (``RankOptions.lanes``, default 0: the scalar loop). The published loop is sequential: attempt
``k`` uses the draw of index ``i`` = the number of earlier attempts that converged. The
batched engine (:class:`_Speculator`) integrates many ``(k, i)`` nodes at once in
stacked NumPy calls (:func:`batched_euler_step`: the same ``gemm``/``syevd`` per slice,
cheaper per lane and step than the scalar step, which is mostly Python overhead around
``eigh``), spends its lanes on the nodes most likely on the published path, and
commits only nodes whose predecessors' outcomes are known: the published attempts bit for
bit whatever it guesses (tests against the scalar loop and the published run). A compiled
(numba) loop was not used: numba's LAPACK is SciPy's OpenBLAS (another version than
NumPy's), so its ``eigh`` is not guaranteed bit-identical, and ``eigh`` is the cost.

wflow's better solver (:func:`exact_limit`). For ``V = I`` the ODE is solved in closed
form: ``Σ(t) = (Σ₀^{-1} − 2tA)^{-1}`` (differentiate: ``Σ̇ = 2ΣAΣ``), whose limit is
``Σ_∞ = N (Nᵀ Σ₀^{-1} N)^{-1} Nᵀ`` with ``N`` an orthonormal basis of ``ker Q``; its
rank is ``d − ⌊d/2⌋ = ⌈d/2⌉`` exactly. For random ``V`` (no closed form) the ODE is
integrated by :func:`scipy.integrate.solve_ivp` (LSODA, ``rtol = 1e-10``) to
``t = 10⁶`` and on by decades to ``10¹⁰`` while some direction is neither settled (1%
over a decade) nor decaying (a factor 5 per decade; ``1/t`` gives 10): directions still
in transition at ``10¹⁰`` (nearly singular ``V``) are *unsettled*, and the limit's rank
is then only bracketed (:func:`exact_limit`). Both solvers' ranks use the published
threshold 0.1 as well.

The claim (what the histograms and the rejection rule say): *the covariance converges to
a low-rank matrix, of rank at most* ``⌈d/2⌉`` *for every draw.*
"""

# ruff: noqa: F401 (the face keeps every name of the former module importable here)
from __future__ import annotations

from .batched import batched_euler_step, run_case_dim
from .moment_ode import draw_matrices, exact_limit, projected_euler, psd_project, rhs_softmax
from .options import CASES, CLAIM, PAPER, RankCase, RankOptions
from .verdict import (
    RULE,
    RankVerdict,
    control,
    judge_ranks,
    reproduce,
    run_ranks,
    summarize,
    write_ranks,
)

__all__ = [
    "CASES",
    "RankCase",
    "RankOptions",
    "rhs_softmax",
    "psd_project",
    "projected_euler",
    "draw_matrices",
    "run_case_dim",
    "exact_limit",
    "run_ranks",
    "judge_ranks",
    "write_ranks",
]
