"""[MH] radial dominance: the other heads' radial shadows against a head's own power."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.optimize import brentq

from ..attention.heads import Attention, Heads
from ..attention.kinds import get_kind
from ..diagnostics import head_rates, radial_shadows
from ..energy import evaluate
from ..geometry.sphere import check_on_sphere

logger = logging.getLogger(__name__)

Errors = Literal["raise", "nan"]


# ------------------------------------------------------------------------ radial dominance
@dataclass(frozen=True)
class RadialDominance:
    """Per-head radial-dominance quantities at one state (integrated over ``μ``; shapes ``(H,)``).

    Attributes
    ----------
    own : tangential own power ``∫ <P∇ψ_h, P w_h f_h>`` (``= ∫ <∇ψ_h, P w_h f_h>``).
    cross_direct : ``∫ <∇ψ_h, Σ_{h'≠h} w_h' f_h'>``.
    cross_radial : exact radial-shadow cross term ``−∫ <∇ψ_h, x> Σ_{h'≠h} w_h' a^{h'}``.
    cross_bound : ``R_h = ∫ |∇ψ_h| Σ_{h'≠h} w_h' |a^{h'}|`` (>= ``|cross_radial|``).
    rate : ``dE_h/dt = own + cross_direct + cross_radial``.
    margin : ``own − R_h``; the [MH] condition (RD) holds iff ``margin >= 0``.
    margin_exact : ``own − |cross_radial|`` (sharp radial comparison).
    margin_general : ``own + cross_direct − R_h``; ``>= 0`` certifies ``dE_h/dt >= 0`` for
        any heads.
    margin_pointwise : ``min_i (own_i − R_{h,i})`` (RD token by token), shape ``(H,)``.
    shadows : radial shadows ``a^h_i``, shape ``(H, n)``.
    direct_bound : ``D_h = Σ_{h'≠h} w_h' ‖A_h V_h'‖ ∫ |Y_h| |Y_h'|/Z_h' dμ``
        (``>= |cross_direct|`` for symmetric heads; NaN for non-symmetric ones).
    """

    own: np.ndarray
    cross_direct: np.ndarray
    cross_radial: np.ndarray
    cross_bound: np.ndarray
    shadows: np.ndarray
    margin_pointwise: np.ndarray
    direct_bound: np.ndarray | None = None

    @property
    def rate(self) -> np.ndarray:
        """``dE_h/dt``."""
        return self.own + self.cross_direct + self.cross_radial

    @property
    def margin(self) -> np.ndarray:
        """``own − R_h`` (radial dominance holds where ``>= 0``)."""
        return self.own - self.cross_bound

    @property
    def margin_exact(self) -> np.ndarray:
        """``own − |cross_radial|``."""
        return self.own - np.abs(self.cross_radial)

    @property
    def margin_general(self) -> np.ndarray:
        """``own + cross_direct − R_h`` (certificate of ``dE_h/dt >= 0`` for any heads)."""
        return self.own + self.cross_direct - self.cross_bound

    @property
    def certificate(self) -> np.ndarray:
        """``own − R_h − D_h``: an a-priori lower bound of ``dE_h/dt`` (symmetric heads)."""
        return self.own - self.cross_bound - self.direct_bound

    @property
    def holds(self) -> np.ndarray:
        """Radial dominance (RD) per head: ``margin >= 0``."""
        return self.margin >= 0

    def as_dict(self) -> dict[str, list[float]]:
        """Plain per-head lists for JSON."""
        return {k: np.asarray(getattr(self, k)).tolist() for k in
                ("own", "cross_direct", "cross_radial", "cross_bound", "rate", "margin",
                 "margin_exact", "margin_general", "margin_pointwise", "direct_bound",
                 "certificate", "holds")}


def radial_dominance(x: np.ndarray, heads: Heads, attn: Attention,
                     m: np.ndarray | None = None) -> RadialDominance:
    """Own tangential power, cross-head radial-shadow terms and margins of every head.

    Parameters
    ----------
    x : (n, d) array
        Tokens on the sphere.
    heads : Heads
        Any heads (the [MH] setting is symmetric value-aligned; the split is general).
    attn : Attention
        Attention kind and ``β``.
    m : (n,) array, optional
        Token masses (default ``1/n``).

    Returns
    -------
    RadialDominance
        See the module docstring for the definitions; ``cross_direct`` and ``cross_radial``
        are those of :func:`wflow.diagnostics.head_rates`; ``own`` equals its ``own`` but is
        evaluated from projected vectors (no cancellation for nearly radial outputs).
    """
    x = check_on_sphere(x, name="tokens")
    n = x.shape[0]
    m = np.full(n, 1.0 / n) if m is None else np.asarray(m, dtype=np.float64)
    fe = evaluate(x, heads, attn, m=m)
    hr = head_rates(x, m, fe, heads)
    a = radial_shadows(x, fe)  # (H, n)
    wa = np.abs(heads.w[:, None] * a)
    others = wa.sum(axis=0)[None, :] - wa  # Σ_{h'≠h} w_h' |a^{h'}|
    gnorm = np.linalg.norm(fe.grad_psi, axis=2)  # |∇ψ_h(x_i)|
    bound_i = gnorm * others
    # own per token as <P∇ψ_h, P w_h f_h>: equal to diagnostics.head_rates' own
    # <∇ψ_h, w_h f_h> − <∇ψ_h, x> w_h a^h, but without its cancellation when the outputs are
    # nearly radial (large β: the tangential parts are e^{−αβ} smaller than the outputs)
    Pg = fe.grad_psi - np.einsum("hnd,nd->hn", fe.grad_psi, x)[:, :, None] * x[None]
    Pf = fe.f - a[:, :, None] * x[None]
    own_i = heads.w[:, None] * np.einsum("hnd,hnd->hn", Pg, Pf)
    return RadialDominance(own_i @ m, hr.cross_direct, hr.cross_radial, bound_i @ m, a,
                           np.min(own_i - bound_i, axis=1),
                           _direct_bound(x, fe, heads, attn, m))


def _direct_bound(x: np.ndarray, fe, heads: Heads, attn: Attention,
                  m: np.ndarray) -> np.ndarray:
    """``D_h = Σ_{h'≠h} w_h' ‖A_h V_h'‖ ∫ |Y_h| |Y_h'|/Z_h' dμ`` (module docstring).

    ``|Y_h|`` needs the full-width sums ``Y_h(x_i) = Σ_j m_j k(s_ij) x_j``: heads of value
    rank ``r`` summed at their rank (``fe.Y`` is ``None``) are evaluated once more with
    their full ``V = W_O W_V`` (``Y`` does not depend on the values).
    """
    H = heads.H
    if not heads.is_symmetric():
        return np.full(H, np.nan)
    if fe.Y is None:
        fe = evaluate(x, heads.with_(V=heads.V), attn, m=m)
    AV = np.array([[np.linalg.norm(heads.A[h] @ heads.V[g], 2) for g in range(H)]
                   for h in range(H)])
    np.fill_diagonal(AV, 0.0)
    ynorm = np.linalg.norm(fe.Y, axis=2)  # (H, n): |Y_h(x_i)|
    normalised = get_kind(attn.kind).normalised
    fnorm = ynorm / fe.Z if normalised else ynorm  # |f_h'| per unit ‖V_h'‖
    pair = np.einsum("hn,gn,n->hg", ynorm, fnorm, m)  # ∫ |Y_h| |Y_g|/Z_g dμ
    return np.einsum("hg,g,hg->h", AV, heads.w, pair)


def dominance_root(x: np.ndarray, heads: Heads, *, bracket: tuple[float, float],
                   which: Literal["margin", "margin_exact", "margin_general"] = "margin",
                   xtol: float = 1e-12) -> float:
    """Numerical root in ``β`` of ``min_h margin_h(β)`` for fixed tokens and softmax heads.

    Brent's method on ``bracket = (β_lo, β_hi)`` (the margin must change sign on it); the
    root is located to ``|β − β_root| <= xtol + 4 eps |β_root|``.
    """
    lo, hi = (float(b) for b in bracket)
    if not 0 < lo < hi:
        raise ValueError(f"bracket: need 0 < beta_lo < beta_hi, got {bracket}")

    def g(beta: float) -> float:
        return float(np.min(getattr(radial_dominance(x, heads, Attention("softmax", beta)),
                                    which)))

    glo, ghi = g(lo), g(hi)
    if glo * ghi > 0:
        raise ValueError(f"bracket: {which} does not change sign on [{lo}, {hi}] "
                         f"(values {glo:.3e}, {ghi:.3e})")
    return float(brentq(g, lo, hi, xtol=xtol, rtol=4 * np.finfo(float).eps))
