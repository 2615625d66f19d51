"""Transport costs of the JKO step on cell measures and the cached candidate pairs.

* Measures on the cells of a sphere mesh: masses ``ν_i >= 0``, ``Σ ν_i = 1``, located
  at the projected centroids ``ĉ_i = c_i/|c_i|`` (the same measure as the PDE solver).
* Energy ``E(ν) = Σ_h w_h (1/2β) Σ_ij ν_i ν_j Φ(β ĉ_iᵀA_h ĉ_j)`` (quadratic in ``ν``);
  its gradient in the cell masses is ``∂E/∂ν_i = Σ_h w_h Φ_h(ĉ_i)/β`` with
  ``Φ_h(ĉ_i) = Σ_j ν_j Φ(s_ij)`` from :func:`wflow.kernels.kernel_sums` (symmetric
  ``A_h``; checked by a finite-difference test on the simplex).
* Transport cost ``C_ij = d_S(ĉ_i, ĉ_j)² / b̂_ij`` with the lagged effective mobility
  ``b̂_k = (Σ_h w̄_h Z_h[μ_k])^{-1}`` (``≡ 1`` for USA/ReLU: plain ``W_2``) and a
  symmetric mean ``b̂_ij`` of the endpoint values. Default ``"conformal"``:
  ``b̂_ij = ((b̂_i^{-1/2} + b̂_j^{-1/2})/2)^{-2}``. Reason: ``W_{b̂,2}`` with a fixed
  (lagged) mobility is the ``W_2`` distance of the conformal metric ``g/b̂``, whose
  length of the great-circle arc from ``ĉ_i`` to ``ĉ_j`` is ``∫ b̂^{-1/2} ds``; the
  trapezoidal rule gives ``d_S (b̂_i^{-1/2} + b̂_j^{-1/2})/2``, second-order accurate
  in ``d_S``. ``"arithmetic"``, ``"geometric"`` and ``"harmonic"`` are available; all
  agree to ``O(d_S² |∇ log b̂|²)`` on the short arcs the scheme transports along.
* Entropic option (``ot = "sinkhorn"``): ``W²`` is replaced by
  ``OT_ε(μ, ν) = min_π <C, π> + ε KL(π | μ ⊗ α)`` with ``α`` the normalised cell areas
  (the uniform measure), i.e. the entropic JKO of Peyré (2015). Its blur adds a
  diffusion of order ``ε/(4τ)``, so the default is ``ε = eps_scale · τ²`` (``o(τ)``,
  first-order consistent). Against the mesh, ``√ε`` must resolve the cells.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from ..geometry.sphere import pairwise_geodesic
from .options import MOBILITY_MEANS, JKOOptions

__all__ = [
    "pair_mobility",
    "cost_matrix",
    "candidate_block",
    "CANDIDATE_SLACK",
]

#: Slack on the inner-product test ``<ĉ_i, ĉ_j> >= cos r_i - CANDIDATE_SLACK`` of the
#: candidate balls. The centroids are normalised in floating point, so ``|ĉ_i|² = 1 ± 2u``
#: (``u = 2^-53``), and a BLAS dot product of two such 3-vectors carries a rounding error
#: below ``3u`` (Higham, Thm 3.1: ``γ_3 Σ|x_k y_k| <= 3u/(1 − 3u) · |x||y|``): the computed
#: ``<ĉ_i, ĉ_i>`` can be ``1 − 5u`` while ``cos 0 = 1`` exactly, and a row whose proved
#: radius is 0 (the row with the largest ``g`` under exact OT) then had no candidate at all,
#: not even its own cell. ``16 eps = 32u`` covers these errors with a margin; it enlarges
#: every ball by an angle of at most ``sqrt(2 · 16 eps) ≈ 8e-8`` rad (harmless: a ball that
#: contains the minimiser stays one), and every row also gets its own cell explicitly.
CANDIDATE_SLACK = 16.0 * float(np.finfo(np.float64).eps)


def pair_mobility(bi: np.ndarray, bj: np.ndarray, mean: str = "conformal") -> np.ndarray:
    """Symmetric mean ``b̂_ij`` of endpoint mobilities (broadcasting).

    ``conformal``: ``((b_i^{-1/2} + b_j^{-1/2})/2)^{-2}`` (trapezoidal length in the
    metric ``g/b̂``); ``arithmetic``, ``geometric``, ``harmonic``: the usual means.
    Every choice lies between ``min`` and ``max`` of the endpoints.
    """
    if mean == "conformal":
        return 4.0 / (bi ** -0.5 + bj ** -0.5) ** 2
    if mean == "arithmetic":
        return 0.5 * (bi + bj)
    if mean == "geometric":
        return np.sqrt(bi * bj)
    if mean == "harmonic":
        return 2.0 / (1.0 / bi + 1.0 / bj)
    raise ValueError(f"mobility_mean: must be one of {list(MOBILITY_MEANS)}, got {mean!r}")


def cost_matrix(points: np.ndarray, bhat: np.ndarray | None = None, *,
                mean: str = "conformal", rows: np.ndarray | None = None,
                cols: np.ndarray | None = None) -> np.ndarray:
    """Dense transport cost ``C_ij = d_S(ĉ_i, ĉ_j)² / b̂_ij`` (``b̂ ≡ 1``: plain ``W_2``).

    Parameters
    ----------
    points : (M, 3) array
        Unit vectors.
    bhat : (M,) array, optional
        Endpoint mobilities (default 1).
    rows, cols : index arrays, optional
        Sub-blocks (e.g. the supports of the two measures).
    """
    ri = np.arange(points.shape[0]) if rows is None else rows
    ci = np.arange(points.shape[0]) if cols is None else cols
    D = pairwise_geodesic(points[ri], points[ci])
    C = D * D
    if bhat is not None:
        C /= pair_mobility(bhat[ri][:, None], bhat[ci][None, :], mean)
    return C


def candidate_block(x: np.ndarray, rows: np.ndarray, radii: np.ndarray
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Candidate pairs of a block of rows: ``j`` with ``d_S(ĉ_i, ĉ_j) <= r_i`` (and ``j = i``).

    Parameters
    ----------
    x : (M, 3) array
        Unit vectors (normalised centroids).
    rows : (B,) int array
        Row indices ``i``.
    radii : (B,) array
        Ball radii ``r_i`` in radians (``>= π``: every cell).

    Returns
    -------
    rr, J, d2 : arrays of equal length
        Local row index (into ``rows``, sorted), column ``j`` and ``d_S(ĉ_i, ĉ_j)²``.
        Every row has at least one pair, ``(i, i)``: the inner products are compared
        with ``cos r_i − CANDIDATE_SLACK`` (see :data:`CANDIDATE_SLACK`) and the diagonal
        is added explicitly, so a rounding error never leaves a row without its own cell.
    """
    rows = np.asarray(rows)
    radii = np.asarray(radii, dtype=np.float64)
    cosr = np.where(radii >= math.pi, -2.0, np.cos(radii))  # r = π: every cell
    mask = x[rows] @ x.T >= (cosr - CANDIDATE_SLACK)[:, None]
    mask[np.arange(rows.size), rows] = True
    rr, J = np.nonzero(mask)
    diff = x[rows[rr]] - x[J]
    chord = np.sqrt(np.einsum("ij,ij->i", diff, diff))
    d = 2.0 * np.arcsin(np.minimum(0.5 * chord, 1.0))
    return rr, J, d * d


class _Pairs(NamedTuple):
    """Candidate pairs in CSR order over all ``M`` rows.

    Row pointer, column index, squared geodesic distance, and the radius each row was
    built with (``-1``: row not built).
    """

    indptr: np.ndarray
    J: np.ndarray
    d2: np.ndarray
    radii: np.ndarray


class _Geometry:
    """Points, reference measure and the cached candidate-pair list.

    The list is reused across inner iterations and, with ``warm_start``, across steps.
    """

    def __init__(self, points: np.ndarray, areas: np.ndarray, opts: JKOOptions) -> None:
        self.x = points
        self.M = points.shape[0]
        self.alpha = areas / areas.sum()
        self.log_alpha = np.log(self.alpha)
        self.opts = opts
        self.pairs: _Pairs | None = None
        self.builds = 0

    def candidates(self, rows: np.ndarray, radii: np.ndarray) -> _Pairs | None:
        """Pairs ``(i, j)``, ``i ∈ rows``, ``d_ij <= radii[i]``.

        Cached; rebuilt with a 30 % margin when a row needs more. ``None`` above
        ``max_pairs`` candidates.
        """
        p = self.pairs
        if p is not None and np.all(p.radii[rows] >= radii[rows]):
            return p
        r = np.full(self.M, -1.0)
        r[rows] = np.minimum(1.3 * radii[rows], math.pi)
        frac = 0.5 * (1.0 - np.cos(r[rows]))  # area fractions of the caps
        if float(frac.sum()) * self.M > self.opts.max_pairs:
            return None
        B = max(1, (1 << 22) // self.M)
        I_l, J_l, D_l = [], [], []
        for b0 in range(0, rows.size, B):
            blk = rows[b0:b0 + B]
            rr, J, d2 = candidate_block(self.x, blk, r[blk])
            I_l.append(blk[rr])
            J_l.append(J)
            D_l.append(d2)
        I = np.concatenate(I_l)
        indptr = np.concatenate([[0], np.cumsum(np.bincount(I, minlength=self.M))])
        pairs = _Pairs(indptr, np.concatenate(J_l), np.concatenate(D_l), r)
        self.builds += 1
        self.pairs = pairs
        return pairs

    def drop_cache(self) -> None:
        """Forget the candidate list (used when ``warm_start`` is off)."""
        self.pairs = None
