r"""A two-sided test of spherical-harmonic moments against a reference, with a stated null law.

The particles of a mean-field system are compared with the PDE through the moments
``μ_k = ∫ Y_k dμ`` of :mod:`wflow.geometry.harmonics` (``k = 1 … K``, ``K = (L+1)² − 1``;
the mass moment ``k = 0`` is equal by construction and left out). At time ``t > 0`` the
tokens are *not* independent (propagation of chaos): the fluctuation of the empirical
moments is ``O(n^{-1/2})`` but its covariance is the initial one pushed through the
linearised flow. So the standard error is estimated from ``R`` independent replicates of
the whole particle system, ``\bar m = R^{-1} Σ_r m_r``,

.. math::

    \hat Σ = \frac{1}{R-1} Σ_r (m_r − \bar m)(m_r − \bar m)^T, \qquad
    s_k = (\hat Σ_{kk} / R)^{1/2},

and the reference's own error ``e_k`` (the PDE's discretisation error, estimated by
Richardson from two mesh levels) is added in quadrature, conservatively:

.. math::

    t_k = \frac{\bar m_k − μ_k}{(s_k² + e_k²)^{1/2}} .

Statistics (each with its null law when ``\bar m`` estimates ``μ`` and ``e = 0``):

* ``max_k |t_k|``: each ``t_k`` is Student-``t(R − 1)``; the ``K`` tests are combined by
  Šidák, ``p = 1 − (1 − p_min)^K`` (exact for independent moments, conservative for
  positively dependent ones), and the critical value at level ``α`` is
  ``t_{R−1}^{-1}(1 − (1 − (1 − α)^{1/K})/2)``;
* Hotelling's ``T² = d^T (\hat Σ / R + \mathrm{diag}\, e²)^{-1} d`` with
  ``d = \bar m − μ`` (needs ``R > K``): ``(R − K)/(K (R − 1)) T²`` is
  ``F(K, R − K)`` for Gaussian replicate means (the moments of ``n`` tokens are, by the
  central limit theorem); ``e > 0`` makes it conservative;
* a kernel MMD for the heat kernel truncated at degree ``L``,
  ``MMD² = Σ_k a_k d_k²`` (:func:`wflow.geometry.harmonics.zonal_mmd2`), with a
  moment-matched scaled-``χ²`` null (Satterthwaite: mean ``tr(A S)``, variance
  ``2 tr((A S)²)``, ``S = \hat Σ / R + diag e²``): reported, its null is approximate.

Beside the replicate standard error the test reports the i.i.d. formula
``σ_k / (n R)^{1/2}`` (``σ_k²`` the per-token variance of ``Y_k``) and the ratio of the two:
``1`` at ``t = 0``, the linearised flow's amplification (or contraction) at ``t``.
The *smallest detectable* moment error at level ``α`` is ``t_crit (s_k² + e_k²)^{1/2}``.

Control variates (:func:`control_variates`). Most of a moment's fluctuation at ``T`` is
the fluctuation of the initial sample carried by the flow: ``Y_k(x_i(T))`` is nearly a
smooth function of ``x_i(0)``. With the harmonics ``Z_j`` of the *initial* tokens up to a
degree ``L_c`` as controls, whose means ``ν_j = ∫ Z_j dρ_0`` are known exactly (the PDE's
initial cell masses, :func:`wflow.geometry.harmonics.cell_moments`), each replicate's
moments are replaced by

.. math::

    m^{cv}_r = m_r − B^T (\bar Z_r − ν), \qquad
    B = \Big(Σ_r C^{ZZ}_r\Big)^{-1} Σ_r C^{ZY}_r ,

``C_r`` the within-replicate centred cross-products, pooled over the ``R`` replicates.
The mean of ``m^{cv}`` is that of ``m`` up to ``O(1/(nR))`` (``B`` estimated; exact for a
fixed ``B``), and the replicates stay independent up to the same order, so the test above
applies to them unchanged, with the variance reduced by the fraction of it the controls
explain (measured in the mean-field study: the standard error ×0.5–0.8 at ``L_c = 8``).
It tests the *dynamics*: the initial sample's deviation from ``ρ_0`` is regressed out,
so a biased initial sampler is the test at ``t = 0``'s to catch, not this one's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["MomentTest", "moment_test", "sidak_critical", "ControlVariates",
           "control_variates"]


def sidak_critical(alpha: float, K: int, df: float) -> float:
    """Critical ``|t|`` of the Šidák-combined two-sided ``t(df)`` tests of ``K`` moments."""
    from scipy.stats import t as student

    per = 1.0 - (1.0 - alpha) ** (1.0 / K)
    return float(student.isf(per / 2.0, df))


@dataclass(frozen=True)
class MomentTest:
    r"""Outcome of :func:`moment_test` (vectors indexed ``k = 1 … K``, the mass left out).

    Attributes
    ----------
    R : int
        Replicates.
    n : int
        Tokens per replicate.
    L : int
        Largest degree.
    alpha : float
        Level of the tests.
    diff : (K,) array
        ``\bar m − μ``.
    se_mc : (K,) array
        Replicate standard error ``s_k``.
    se_iid : (K,) array or None
        The i.i.d. formula ``σ_k/(nR)^{1/2}``.
    pde_err : (K,) array
        The reference's error ``e_k``.
    t : (K,) array
        ``t_k``.
    max_t, t_crit, p_max_t : float
        ``max |t_k|``, its critical value at ``alpha`` and its Šidák p-value.
    hotelling, hotelling_crit, p_hotelling : float
        ``T²``, its critical value, its p-value (NaN when ``R <= K``).
    mmd2, p_mmd : float
        Heat-kernel ``MMD²`` of the moment differences and its approximate p-value.
    detectable : (K,) array
        ``t_crit (s_k² + e_k²)^{1/2}``: the smallest moment error caught at ``alpha``
        (with probability ≈ 1/2).
    """

    R: int
    n: int
    L: int
    alpha: float
    diff: np.ndarray
    se_mc: np.ndarray
    se_iid: np.ndarray | None
    pde_err: np.ndarray
    t: np.ndarray
    max_t: float
    t_crit: float
    p_max_t: float
    hotelling: float
    hotelling_crit: float
    p_hotelling: float
    mmd2: float
    p_mmd: float
    detectable: np.ndarray

    @property
    def se_ratio(self) -> float:
        """Median over moments of ``s_k / (i.i.d. s.e.)`` (NaN without ``se_iid``)."""
        if self.se_iid is None:
            return float("nan")
        return float(np.median(self.se_mc / self.se_iid))

    def as_dict(self) -> dict[str, Any]:
        """Plain dict for JSON (scalars, and the vectors as lists)."""
        out: dict[str, Any] = {}
        for k, v in self.__dict__.items():
            if isinstance(v, np.ndarray):
                out[k] = [float(x) for x in v]
            elif v is None:
                out[k] = None
            else:
                out[k] = float(v) if isinstance(v, float) else v
        out["se_ratio"] = self.se_ratio
        return out


def moment_test(replicates: np.ndarray, reference: np.ndarray, *, n: int,
                alpha: float, L: int, ref_error: np.ndarray | None = None,
                token_var: np.ndarray | None = None, mmd_tau: float = 0.05) -> MomentTest:
    """Test replicate moments against reference moments (module docstring).

    Parameters
    ----------
    replicates : (R, (L+1)²) array
        Moments of each replicate (each the mean over its ``n`` tokens).
    reference : ((L+1)²,) array
        The reference moments (the PDE's).
    n : int
        Tokens per replicate (for the i.i.d. standard error).
    alpha : float
        Level of the tests.
    L : int
        Largest degree.
    ref_error : ((L+1)²,) array, optional
        The reference's error ``e`` (default 0).
    token_var : ((L+1)²,) array, optional
        Per-token variance of ``Y_k`` (for the i.i.d. standard error).
    mmd_tau : float
        Heat-kernel time of the MMD weights ``e^{−τ l(l+1)}``.
    """
    from scipy.stats import chi2
    from scipy.stats import f as fisher
    from scipy.stats import t as student

    from .harmonics import heat_weights

    M = np.asarray(replicates, float)
    R, nk = M.shape
    if nk != (L + 1) ** 2 or R < 2:
        raise ValueError(f"moment_test: need R >= 2 replicates of {(L + 1) ** 2} moments, "
                         f"got {M.shape}")
    sl = slice(1, None)  # the mass moment is equal by construction
    M = M[:, sl]
    K = M.shape[1]
    ref = np.asarray(reference, float)[sl]
    e = np.zeros(K) if ref_error is None else np.abs(np.asarray(ref_error, float)[sl])
    mbar = M.mean(axis=0)
    dev = M - mbar
    cov = dev.T @ dev / (R - 1)
    se = np.sqrt(np.diag(cov) / R)
    d = mbar - ref
    tot = np.sqrt(se**2 + e**2)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.where(tot > 0, d / tot, np.where(d == 0, 0.0, np.inf))
    df = R - 1
    max_t = float(np.max(np.abs(t)))
    p_min = float(2.0 * student.sf(max_t, df))
    p_max_t = float(1.0 - (1.0 - p_min) ** K) if p_min < 1 else 1.0
    # a tiny p_min: 1 − (1 − p)^K loses digits; K p is its first-order value
    if p_min < 1e-12:
        p_max_t = K * p_min
    t_crit = sidak_critical(alpha, K, df)
    S = cov / R + np.diag(e**2)
    if R > K:
        try:
            T2 = float(d @ np.linalg.solve(S, d))
        except np.linalg.LinAlgError:
            T2 = float("inf")
        scale = (R - K) / (K * (R - 1.0))
        p_h = float(fisher.sf(scale * T2, K, R - K))
        h_crit = float(fisher.isf(alpha, K, R - K) / scale)
    else:
        T2 = p_h = h_crit = float("nan")
    a = heat_weights(L, mmd_tau)[sl]
    mmd2 = float(np.sum(a * d * d))
    AS = a[:, None] * S
    mean0, var0 = float(np.trace(AS)), float(2.0 * np.sum(AS * AS.T))
    if mean0 > 0 and var0 > 0:
        c, nu = var0 / (2.0 * mean0), 2.0 * mean0**2 / var0
        p_mmd = float(chi2.sf(mmd2 / c, nu))
    else:
        p_mmd = float("nan")
    se_iid = None
    if token_var is not None:
        se_iid = np.sqrt(np.maximum(np.asarray(token_var, float)[sl], 0.0) / (n * R))
    return MomentTest(R=int(R), n=int(n), L=int(L), alpha=float(alpha), diff=d, se_mc=se,
                      se_iid=se_iid, pde_err=e, t=t, max_t=max_t, t_crit=t_crit,
                      p_max_t=p_max_t, hotelling=T2, hotelling_crit=h_crit, p_hotelling=p_h,
                      mmd2=mmd2, p_mmd=p_mmd, detectable=t_crit * tot)


@dataclass(frozen=True)
class ControlVariates:
    r"""Outcome of :func:`control_variates`.

    Attributes
    ----------
    adjusted : (R, K) array
        ``m^{cv}_r`` (``K = (L+1)²``, the mass moment included: unchanged).
    coef : (P, K) array
        ``B``.
    token_var : (K,) array
        Per-token residual variance ``σ_k²(1 − R_k²)`` (for the i.i.d. standard error).
    explained : (K,) array
        ``R_k²``, the fraction of the per-token variance of ``Y_k`` the controls explain
        (0 for the mass moment).
    controls : int
        ``P``.
    """

    adjusted: np.ndarray
    coef: np.ndarray
    token_var: np.ndarray
    explained: np.ndarray
    controls: int


def control_variates(sums: list[tuple[np.ndarray, ...]], nu: np.ndarray, *,
                     n: int) -> ControlVariates:
    r"""Control-variate moments of ``R`` replicates (module docstring).

    Parameters
    ----------
    sums : list of R tuples
        Each replicate's :func:`wflow.geometry.harmonics.token_cross_sums`
        ``(S_Z, S_Y, S_ZZ, S_ZY, S_YY)`` over its ``n`` tokens.
    nu : (P,) or (P+1,) array
        The controls' exact means ``ν`` (with the mass moment first when ``P + 1``).
    n : int
        Tokens per replicate.

    Returns
    -------
    ControlVariates
    """
    R = len(sums)
    if R < 2:
        raise ValueError("control_variates: need at least 2 replicates")
    P = sums[0][0].shape[0]
    nu = np.asarray(nu, float)
    if nu.shape == (P + 1,):
        nu = nu[1:]
    if nu.shape != (P,):
        raise ValueError(f"control_variates: {P} controls but ν of shape {nu.shape}")
    if n * R <= 10 * P:
        raise ValueError(f"control_variates: {n * R} tokens are too few for {P} controls "
                         "(need > 10 per control)")
    zb = np.array([s[0] for s in sums]) / n
    yb = np.array([s[1] for s in sums]) / n
    czz = sum(s[2] - n * np.outer(z, z) for s, z in zip(sums, zb, strict=True))
    czy = sum(s[3] - n * np.outer(z, y) for s, z, y in zip(sums, zb, yb, strict=True))
    cyy = sum(s[4] - n * y * y for s, y in zip(sums, yb, strict=True))
    B = np.linalg.lstsq(czz, czy, rcond=None)[0]
    explained_ss = np.sum(czy * B, axis=0)  # diag(C_ZYᵀ C_ZZ⁻¹ C_ZY)
    resid = np.maximum(cyy - explained_ss, 0.0)
    with np.errstate(divide="ignore", invalid="ignore"):
        r2 = np.where(cyy > 0, explained_ss / cyy, 0.0)
    adjusted = yb - (zb - nu) @ B
    return ControlVariates(adjusted=adjusted, coef=B, token_var=resid / (n * R),
                           explained=r2, controls=int(P))
