"""Geometry of the unit sphere S^{d-1} ⊂ R^d.

Tangent projection ``P_x = I - x xᵀ``, exponential map,
geodesic distance, input validation and token samplers (uniform,
von Mises–Fisher mixtures, clusters around polytope vertices).

All functions act on arrays of points of shape ``(n, d)`` (rows are points)
and are vectorised over ``n``.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "project_tangent",
    "normalize",
    "exp_map",
    "geodesic_distance",
    "pairwise_geodesic",
    "check_on_sphere",
    "check_masses",
    "sample_uniform",
    "sample_vmf",
    "sample_vmf_mixture",
    "polytope_vertices",
    "sample_polytope_clusters",
    "orthonormal_tokens",
    "equiangular_tokens",
    "sample_cells",
]

#: Default tolerance for ``| |x| - 1 |`` when validating user tokens.
SPHERE_TOL = 1e-8


def project_tangent(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Tangent projection ``P_x v = v - <x, v> x`` (rows of ``x`` are unit vectors).

    Parameters
    ----------
    x : (..., d) array
        Base points on the sphere.
    v : (..., d) array
        Ambient vectors.

    Returns
    -------
    (..., d) array
        The tangential part of ``v`` at ``x``.
    """
    return v - np.sum(x * v, axis=-1, keepdims=True) * x


def normalize(x: np.ndarray) -> np.ndarray:
    """Radial projection ``x / |x|`` onto the sphere (row-wise)."""
    nrm = np.linalg.norm(x, axis=-1, keepdims=True)
    if np.any(nrm == 0):
        raise ValueError("normalize: a zero vector cannot be projected onto the sphere")
    return x / nrm


def exp_map(x: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Riemannian exponential map ``exp_x(v) = cos|v| x + sin|v| v/|v|``.

    ``v`` must be tangent at ``x``; the result is renormalised to remove
    round-off drift.
    """
    nv = np.linalg.norm(v, axis=-1, keepdims=True)
    y = np.cos(nv) * x + np.sinc(nv / np.pi) * v  # sinc(|v|/π) = sin|v|/|v|
    return normalize(y)


def geodesic_distance(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Great-circle distance ``d_S(x, y) = arccos<x, y>`` row-wise.

    Computed as
    ``θ = 2 atan2(|x − y|, |x + y|)``), accurate for nearby and antipodal
    points where ``arccos`` loses half the digits.
    """
    return 2.0 * np.arctan2(np.linalg.norm(x - y, axis=-1), np.linalg.norm(x + y, axis=-1))


def pairwise_geodesic(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Matrix of geodesic distances ``D_ij = d_S(x_i, y_j)``, shape ``(n, m)``."""
    dot = x @ y.T
    # θ = 2 atan2(|x - y|, |x + y|) with |x ∓ y|² = 2 ∓ 2<x, y>: no arccos blow-up at ±1
    return 2.0 * np.arctan2(np.sqrt(np.maximum(2.0 - 2.0 * dot, 0.0)),
                            np.sqrt(np.maximum(2.0 + 2.0 * dot, 0.0)))


def check_masses(values: np.ndarray, n: int, *, name: str, what: str) -> np.ndarray:
    """Validate the ``n`` masses (or densities) of a discrete measure; return them as float64.

    Parameters
    ----------
    values : (n,) array_like
        The masses ``m_i ≥ 0`` (cell masses or densities, point weights).
    n : int
        How many there must be (cells, points).
    name : str
        What the array is, named in the messages (``"w2_sphere: a"``, ``"density.file …"``).
    what : str
        What one entry is, plural (``"cell values"``, ``"masses"``).

    Raises
    ------
    ValueError
        Naming ``name``: a shape other than ``(n,)``, a NaN or Inf, a negative entry (how
        many, and the smallest).
    """
    v = np.asarray(values, dtype=np.float64)
    if v.shape != (n,):
        raise ValueError(f"{name}: expected {n} {what}, got shape {v.shape}")
    if not np.all(np.isfinite(v)):
        raise ValueError(f"{name}: contains NaN or Inf")
    if np.any(v < 0):
        raise ValueError(f"{name}: {what} must be non-negative, negative in "
                         f"{int(np.sum(v < 0))} (min {v.min():.3e})")
    return v


def check_on_sphere(x: np.ndarray, *, name: str = "x", tol: float = SPHERE_TOL) -> np.ndarray:
    """Validate an array of unit vectors; return it as float64 ``(n, d)``.

    Raises
    ------
    ValueError
        With a message naming ``name`` if the array is not 2-D, contains
        NaN/Inf, or a row's norm differs from 1 by more than ``tol``.
    """
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2 or arr.shape[1] < 2 or arr.shape[0] < 1:
        raise ValueError(f"{name}: expected an array of shape (n, d) with n >= 1, d >= 2; "
                         f"got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: contains NaN or Inf")
    err = np.abs(np.linalg.norm(arr, axis=1) - 1.0)
    if np.max(err) > tol:
        i = int(np.argmax(err))
        raise ValueError(f"{name}: row {i} is not on the unit sphere (| |x| - 1 | = {err[i]:.3e} "
                         f"> tol {tol:g}); normalise tokens first")
    return arr


# --------------------------------------------------------------------------- samplers


def sample_uniform(n: int, d: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` i.i.d. points uniform on ``S^{d-1}`` (normalised Gaussians)."""
    return normalize(rng.standard_normal((n, d)))


def sample_vmf(n: int, mean: np.ndarray, kappa: float, rng: np.random.Generator) -> np.ndarray:
    """Sample the von Mises–Fisher law ``∝ exp(κ <μ, x>)`` on ``S^{d-1}`` (Wood 1994).

    Parameters
    ----------
    n : int
        Number of samples.
    mean : (d,) array
        Mean direction (normalised internally).
    kappa : float
        Concentration ``κ >= 0`` (``κ = 0`` is uniform).
    rng : numpy.random.Generator
        Seeded generator.
    """
    mu = normalize(np.asarray(mean, dtype=float)[None, :])[0]
    d = mu.size
    if kappa < 0:
        raise ValueError(f"kappa must be >= 0, got {kappa}")
    if kappa == 0:
        return sample_uniform(n, d, rng)
    # Wood's rejection sampler for w = <μ, x>
    b = (d - 1) / (2 * kappa + np.sqrt(4 * kappa**2 + (d - 1) ** 2))
    x0 = (1 - b) / (1 + b)
    c = kappa * x0 + (d - 1) * np.log(1 - x0**2)
    w = np.empty(n)
    filled = 0
    while filled < n:
        m = max(2 * (n - filled), 16)
        z = rng.beta((d - 1) / 2, (d - 1) / 2, size=m)
        wc = (1 - (1 + b) * z) / (1 - (1 - b) * z)
        u = rng.uniform(size=m)
        ok = kappa * wc + (d - 1) * np.log(1 - x0 * wc) - c >= np.log(u)
        take = wc[ok][: n - filled]
        w[filled : filled + take.size] = take
        filled += take.size
    # uniform direction orthogonal to μ
    v = rng.standard_normal((n, d))
    v = normalize(project_tangent(np.broadcast_to(mu, v.shape), v))
    return normalize(w[:, None] * mu[None, :] + np.sqrt(np.clip(1 - w**2, 0, None))[:, None] * v)


def sample_vmf_mixture(
    n: int,
    means: np.ndarray,
    kappas: np.ndarray,
    weights: np.ndarray | None,
    rng: np.random.Generator,
) -> np.ndarray:
    """Sample a mixture ``Σ_c π_c vMF(μ_c, κ_c)``; ``means`` has shape ``(C, d)``."""
    means = np.atleast_2d(np.asarray(means, dtype=float))
    kappas = np.broadcast_to(np.asarray(kappas, dtype=float), (means.shape[0],))
    pis = np.full(means.shape[0], 1.0 / means.shape[0]) if weights is None else np.asarray(
        weights, dtype=float)
    if pis.shape != (means.shape[0],) or np.any(pis < 0) or pis.sum() <= 0:
        raise ValueError("weights: need one non-negative weight per mixture component")
    pis = pis / pis.sum()
    comp = rng.choice(means.shape[0], size=n, p=pis)
    out = np.empty((n, means.shape[1]))
    for c in range(means.shape[0]):
        idx = np.flatnonzero(comp == c)
        if idx.size:
            out[idx] = sample_vmf(idx.size, means[c], float(kappas[c]), rng)
    return out


def polytope_vertices(name: str, d: int = 3) -> np.ndarray:
    """Vertices (unit vectors) of a named polytope.

    ``"octahedron"`` / ``"cross"`` (±e_i, any d), ``"simplex"`` (d+1 vertices,
    any d), ``"cube"`` (d = 3, 8 vertices), ``"icosahedron"`` (d = 3).
    """
    if name in ("octahedron", "cross"):
        eye = np.eye(d)
        return np.vstack([eye, -eye])
    if name == "simplex":
        v = np.eye(d + 1) - 1.0 / (d + 1)
        # orthonormal basis of the hyperplane sum = 0
        u, _, _ = np.linalg.svd(v)
        pts = v @ u[:, :d]
        return normalize(pts)
    if name == "cube" and d == 3:
        s = np.array([[a, b, c] for a in (-1, 1) for b in (-1, 1) for c in (-1, 1)], float)
        return normalize(s)
    if name == "icosahedron" and d == 3:
        p = (1 + 5**0.5) / 2
        v = [(-1, p, 0), (1, p, 0), (-1, -p, 0), (1, -p, 0), (0, -1, p), (0, 1, p), (0, -1, -p),
             (0, 1, -p), (p, 0, -1), (p, 0, 1), (-p, 0, -1), (-p, 0, 1)]
        return normalize(np.array(v, float))
    raise ValueError(f"polytope: unknown name {name!r} for d={d} "
                     "(known: octahedron, cross, simplex, cube (d=3), icosahedron (d=3))")


def sample_polytope_clusters(
    n: int, d: int, rng: np.random.Generator, *, polytope: str = "octahedron", noise: float = 0.05
) -> np.ndarray:
    """Tokens clustered around polytope vertices: ``normalize(v_{i mod V} + noise·N(0, I))``.

    Token ``i`` sits near vertex ``i mod V`` (every vertex gets ``n/V`` tokens, up to
    one): a balanced variant of the published initial condition, which draws the
    vertices at random (:func:`sample_published_clusters`).
    """
    verts = polytope_vertices(polytope, d)
    idx = np.arange(n) % verts.shape[0]
    return normalize(verts[idx] + noise * rng.standard_normal((n, d)))


def orthonormal_tokens(n: int, d: int, rng: np.random.Generator | None = None) -> np.ndarray:
    """``n <= d`` mutually orthogonal unit tokens (a random rotation of ``e_1..e_n``)."""
    if n > d:
        raise ValueError(f"orthonormal_tokens: need n <= d, got n={n}, d={d}")
    if rng is None:
        return np.eye(d)[:n]
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return q[:, :n].T.copy()


def equiangular_tokens(n: int, gamma: float, d: int | None = None,
                       rng: np.random.Generator | None = None) -> np.ndarray:
    """``n`` unit tokens with ``<x_i, x_j> = γ`` for all ``i ≠ j``.

    Built as ``x_i = sqrt(1-γ) e_i + sqrt(γ) ... `` from the Cholesky factor of
    the Gram matrix ``(1-γ) I + γ 11ᵀ`` (needs ``-1/(n-1) < γ < 1``); ``d >= n``.
    """
    if not -1.0 / (n - 1) < gamma < 1.0:
        raise ValueError(f"equiangular_tokens: gamma must lie in (-1/(n-1), 1), got {gamma}")
    d = n if d is None else d
    if d < n:
        raise ValueError(f"equiangular_tokens: need d >= n, got d={d}, n={n}")
    gram = (1 - gamma) * np.eye(n) + gamma * np.ones((n, n))
    L = np.linalg.cholesky(gram)
    x = np.zeros((n, d))
    x[:, :n] = L
    if rng is not None:
        q, _ = np.linalg.qr(rng.standard_normal((d, d)))
        x = x @ q.T
    return normalize(x)


def sample_cells(vertices: np.ndarray, masses: np.ndarray, n: int,
                 rng: np.random.Generator) -> np.ndarray:
    """``n`` i.i.d. points from a piecewise-constant density on a triangulated sphere.

    A cell ``K`` is drawn with probability ``m_K / Σ m``, then a point uniform in the flat
    triangle (``x = a + r₁(b − a) + r₂(c − a)`` folded into the triangle) is projected
    radially to the sphere. The radial projection distorts the in-cell density by
    ``O(h²)`` (``h`` the mesh size), below the ``O(h)`` resolution of a cell average.

    Parameters
    ----------
    vertices : (M, 3, 3) array
        Vertex coordinates of each cell.
    masses : (M,) array
        Non-negative cell masses.
    """
    m = np.asarray(masses, float)
    if m.ndim != 1 or m.shape[0] != vertices.shape[0] or np.any(m < 0) or m.sum() <= 0:
        raise ValueError("sample_cells: need one non-negative mass per cell with positive sum")
    cells = rng.choice(m.size, size=n, p=m / m.sum())
    r = rng.uniform(size=(n, 2))
    fold = r.sum(axis=1) > 1
    r[fold] = 1 - r[fold]
    a, b, c = vertices[cells, 0], vertices[cells, 1], vertices[cells, 2]
    return normalize(a + r[:, :1] * (b - a) + r[:, 1:] * (c - a))

