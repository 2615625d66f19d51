"""An independent reference: the exact JKO step of a zonal problem on S² (a test utility).

For measures invariant under the rotations about the ``z`` axis (*zonal*), ``W₂`` on
``S²`` equals the 1-D ``W₂`` of the polar-angle marginals with cost ``|θ − θ'|²``
(docs/theory.md §4: ``d_S(x, y) >= |θ(x) − θ(y)|``, attained by meridian transport). For a
head ``A = diag(a, a, b)`` (axisymmetric) the energy of a zonal measure with polar-angle
law ``ν`` is ``E = (1/2β) ∫∫ k(θ, θ') dν dν`` with the ring kernel (azimuthal average)::

    k(θ, θ') = e^{β b cosθ cosθ'} I₀(β a sinθ sinθ')
             = e^{β (b cosθ cosθ' + a sinθ sinθ')} ive(0, β a sinθ sinθ')

(``scipy.special.ive`` keeps it finite). With the quantile function ``Θ(q)`` of ``ν``,
``W₂²(ν₀, ν) = ∫₀¹ |Θ − Θ₀|² dq`` and the exact JKO step (USA, ``b̂ ≡ 1``)::

    Θ_{k+1} = argmin_Θ  (1/2τ) ∫|Θ − Θ_k|² dq − (s/2β) ∫∫ k(Θ(q), Θ(q')) dq dq'

is a smooth finite-dimensional problem on the midpoint quantiles ``q_i = (i + ½)/n``,
solved here with L-BFGS-B (bounds ``[0, π]``) to a gradient tolerance. The restriction
to zonal measures is exact for the zonal problem's own minimiser when it is unique (then
it is zonal by symmetry); in general it gives a zonal stationary point of the full step.

Nothing here uses the mesh solver: :func:`cell_masses` integrates the reference density
over the cells of a mesh by quadrature (for L¹ comparisons), :func:`w2_marginal` is the
1-D ``W₂`` of the polar-angle marginals of two cell measures.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import ive

__all__ = [
    "ZonalProblem",
    "zonal_jko",
    "quantiles_from_density",
    "density_from_quantiles",
    "cell_masses",
    "w2_marginal",
    "w2_quantiles",
]


@dataclass(frozen=True)
class ZonalProblem:
    """A zonal USA problem: one head ``A = diag(a, a, b)``, weight ``w``, ``β``, sign ``s``."""

    beta: float = 2.0
    a: float = 1.0
    b: float = 1.0
    w: float = 1.0
    sign: int = 1

    def kernel(self, t1: np.ndarray, t2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``k(θ_i, θ'_j)`` and ``∂k/∂θ`` on the grid ``(t1[:, None], t2[None, :])``."""
        c1, s1 = np.cos(t1)[:, None], np.sin(t1)[:, None]
        c2, s2 = np.cos(t2)[None, :], np.sin(t2)[None, :]
        z = self.beta * self.a * s1 * s2
        e = np.exp(self.beta * (self.b * c1 * c2 + self.a * s1 * s2))
        i0 = ive(0, z)
        i1 = ive(1, z)
        k = e * i0
        # d/dθ: e' = e β(−b s1 c2 + a c1 s2); d ive0/dz = ive1 − ive0, dz/dθ = β a c1 s2
        dk = e * (self.beta * (-self.b * s1 * c2 + self.a * c1 * s2) * i0
                  + (i1 - i0) * self.beta * self.a * c1 * s2)
        return k, dk

    def energy(self, theta: np.ndarray) -> float:
        """``E = (w/2β) (1/n²) Σ_ij k(Θ_i, Θ_j)`` for equal-mass quantile points."""
        k, _ = self.kernel(theta, theta)
        return float(self.w * k.mean() / (2.0 * self.beta))


def quantiles_from_density(g: Callable[[np.ndarray], np.ndarray], n: int, *,
                           fine: int = 200_001) -> np.ndarray:
    """Midpoint quantiles ``Θ(q_i)`` of the polar angle for a zonal density ``g(z)`` on S².

    ``g`` is the (unnormalised) density in ``z = cos θ`` (area element ``dz dφ``); the
    polar CDF is tabulated on ``fine`` points (cumulative trapezoid in ``z``) and
    inverted by linear interpolation (error ``O(fine⁻²)``).
    """
    z = np.linspace(1.0, -1.0, fine)  # θ increasing
    gz = g(z)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (gz[1:] + gz[:-1]) * (z[:-1] - z[1:]))])
    cdf /= cdf[-1]
    q = (np.arange(n) + 0.5) / n
    return np.arccos(np.clip(np.interp(q, cdf, z), -1.0, 1.0))


def zonal_jko(theta0: np.ndarray, prob: ZonalProblem, *, tau: float, steps: int,
              gtol: float = 1e-12) -> list[np.ndarray]:
    """The exact JKO sequence ``Θ_0, …, Θ_steps`` of the zonal problem (quantile form).

    Each step minimises ``Σ_i (Θ_i − Θ_{k,i})²/(2τn) − s E(Θ)`` with L-BFGS-B from the
    explicit prediction ``Θ_k + τ s ∂E``; raises ``RuntimeError`` if it does not converge.
    """
    n = theta0.size
    out = [np.asarray(theta0, dtype=np.float64)]
    s = prob.sign
    coef = prob.w / (prob.beta * n * n)

    for _ in range(steps):
        tk = out[-1]

        def fun(t: np.ndarray, tk: np.ndarray = tk) -> tuple[float, np.ndarray]:
            k, dk = prob.kernel(t, t)
            f = float(np.sum((t - tk) ** 2) / (2.0 * tau * n)
                      - s * prob.w * k.sum() / (2.0 * prob.beta * n * n))
            grad = (t - tk) / (tau * n) - s * coef * dk.sum(axis=1)
            return f, grad

        _, g0 = fun(tk)
        start = np.clip(tk - tau * n * g0, 0.0, np.pi)
        res = minimize(fun, start, jac=True, method="L-BFGS-B",
                       bounds=[(0.0, np.pi)] * n,
                       options={"maxiter": 5000, "gtol": gtol / n, "ftol": 1e-15,
                                "maxcor": 30})
        _, gr = fun(res.x)
        free = (res.x > 0) & (res.x < np.pi)
        if not np.max(np.abs(gr[free]) * n) < 1e-7:
            raise RuntimeError(f"zonal_jko: L-BFGS-B did not converge ({res.message}; "
                               f"max |grad| n = {np.max(np.abs(gr[free]) * n):.2e})")
        out.append(np.sort(res.x))
    return out


def density_from_quantiles(theta0: np.ndarray, theta: np.ndarray,
                           g0: Callable[[np.ndarray], np.ndarray]
                           ) -> Callable[[np.ndarray], np.ndarray]:
    """Normalised zonal density ``ρ(z)`` (per unit area) of ``T_#ρ₀``, ``T: Θ₀(q) ↦ Θ(q)``.

    The monotone map is interpolated by a PCHIP spline through the quantile pairs and the
    poles; ``ρ(θ') = ρ₀(S(θ')) sin S(θ') S'(θ') / sin θ'`` with ``S = T⁻¹``.
    """
    from scipy.interpolate import PchipInterpolator

    zz = np.linspace(-1.0, 1.0, 20001)
    norm = np.trapezoid(g0(zz), zz) * 2.0 * np.pi
    a = np.concatenate([[0.0], theta, [np.pi]])
    b = np.concatenate([[0.0], theta0, [np.pi]])
    S = PchipInterpolator(a, b)
    dS = S.derivative()

    def rho(z: np.ndarray) -> np.ndarray:
        tp = np.arccos(np.clip(z, -1.0, 1.0))
        t0 = S(tp)
        st = np.maximum(np.sin(tp), 1e-300)
        return g0(np.cos(t0)) / norm * np.sin(t0) * dS(tp) / st

    return rho


def cell_masses(points: np.ndarray, cells: np.ndarray,
                rho: Callable[[np.ndarray], np.ndarray], *, sub: int = 8) -> np.ndarray:
    """``∫_K ρ dA`` over the spherical triangles of a mesh (zonal ``ρ(z)``).

    Each triangle is split into ``sub²`` barycentric sub-triangles, projected to the
    sphere; each contributes its exact spherical area times ``ρ`` at its projected
    centroid (error ``O((h/sub)²)`` per cell, relative).
    """
    p = np.asarray(points, dtype=np.float64)
    p = p / np.linalg.norm(p, axis=1, keepdims=True)
    A, B, C = p[cells[:, 0]], p[cells[:, 1]], p[cells[:, 2]]
    out = np.zeros(cells.shape[0])

    def proj(u: np.ndarray) -> np.ndarray:
        return u / np.linalg.norm(u, axis=1, keepdims=True)

    def bary(i: float, j: float) -> np.ndarray:
        return proj(A + (B - A) * (i / sub) + (C - A) * (j / sub))

    def area(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
        num = np.einsum("ij,ij->i", a, np.cross(b, c))
        den = 1.0 + np.einsum("ij,ij->i", a, b) + np.einsum("ij,ij->i", b, c) \
            + np.einsum("ij,ij->i", c, a)
        return np.abs(2.0 * np.arctan2(num, den))

    for i in range(sub):
        for j in range(sub - i):
            tris = [(bary(i, j), bary(i + 1, j), bary(i, j + 1))]
            if i + j < sub - 1:
                tris.append((bary(i + 1, j), bary(i + 1, j + 1), bary(i, j + 1)))
            for a, b, c in tris:
                cen = proj(a + b + c)
                out += area(a, b, c) * rho(cen[:, 2])
    return out


def w2_quantiles(t1: np.ndarray, t2: np.ndarray) -> float:
    """1-D ``W₂`` of two equal-size sets of midpoint quantiles."""
    return float(np.sqrt(np.mean((np.sort(t1) - np.sort(t2)) ** 2)))


def w2_marginal(theta_a: np.ndarray, ma: np.ndarray, theta_b: np.ndarray,
                mb: np.ndarray) -> float:
    """1-D ``W₂`` between the atomic laws ``Σ ma δ_{θ_a}`` and ``Σ mb δ_{θ_b}`` (normalised).

    Exact for atoms (monotone rearrangement: merge both CDFs and integrate the squared
    quantile difference piece by piece).
    """
    ia, ib = np.argsort(theta_a), np.argsort(theta_b)
    ta, wa = np.asarray(theta_a)[ia], np.asarray(ma)[ia] / np.sum(ma)
    tb, wb = np.asarray(theta_b)[ib], np.asarray(mb)[ib] / np.sum(mb)
    ca, cb = np.cumsum(wa), np.cumsum(wb)
    ca[-1] = cb[-1] = 1.0
    knots = np.unique(np.concatenate([[0.0], ca, cb]))
    mid = 0.5 * (knots[1:] + knots[:-1])
    qa = ta[np.minimum(np.searchsorted(ca, mid), ta.size - 1)]
    qb = tb[np.minimum(np.searchsorted(cb, mid), tb.size - 1)]
    return float(np.sqrt(np.sum(np.diff(knots) * (qa - qb) ** 2)))
