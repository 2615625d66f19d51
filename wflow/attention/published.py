"""Everything specific to the published [TD] experiments (docs/theory.md §5).

Below the engine: the compiled particle loop recognises :class:`PublishedFrames`, the
verification studies and the scenarios build the published tokens, heads and weights from
here; :mod:`wflow.published.td` re-exports every name for users.

The published experiments' conventions, term by term:

* tokens: :func:`sample_published_clusters` (random vertices of :func:`published_vertices`
  plus Gaussian noise, float32 arithmetic, ``default_rng(42)``);
* heads: :func:`published_heads` (``D_h = Z_h + Z_hᵀ``, value ``V_h = −D_h``, ``w_h = 1/H``),
  with torch's CPU random stream re-implemented in :func:`torch_cpu_normal`;
* weights: :func:`published_ou` (OU drift towards ``I``, ``σ² = 2``, symmetrised noise) and
  :func:`published_relaxed`, the relaxation towards the published frames
  :func:`published_frames`, carried by the explicit target :class:`PublishedFrames` (the
  compiled particle loop recognises it by type and computes the frames in the loop).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..geometry.sphere import normalize
from .heads import Heads
from .schedules import OrnsteinUhlenbeck, Parametrisation, Relaxed

__all__ = [
    "HEAD_GENERATORS",
    "torch_cpu_normal",
    "published_heads",
    "published_ou",
    "published_frames",
    "PublishedFrames",
    "published_relaxed",
    "published_vertices",
    "sample_published_clusters",
]


#: Random generators of :func:`published_heads`: NumPy, or torch's CPU stream (ported).
HEAD_GENERATORS = ("numpy", "torch-cpu")

_MASK53 = np.uint64((1 << 53) - 1)


def torch_cpu_normal(seed: int, shape: tuple[int, ...]) -> np.ndarray:
    """Torch's CPU normals in NumPy: ``torch.randn(shape, dtype=float64, generator=g)``.

    ``g`` is a CPU generator seeded with ``seed``; no torch is needed.

    The published experiments draw their initial heads this way (on the CPU; a CUDA
    generator gives other numbers). What torch's CPU kernels do, re-implemented from
    their behaviour and checked bit for bit against torch 2.14:

    * engine MT19937 with the classic ``init_genrand(seed mod 2³²)`` seeding;
    * a uniform double is ``((a << 32) | b) mod 2⁵³ / 2⁵³`` from two consecutive 32-bit
      outputs ``a, b``;
    * ``numel ≥ 16``: ``numel`` uniforms, Box–Muller in blocks of 16 (for ``j < 8``:
      ``r = √(−2 log(1 − u_j))``, ``θ = 2π u_{j+8}``, outputs ``r cos θ`` at ``j`` and
      ``r sin θ`` at ``j + 8``); if ``numel`` is not a multiple of 16 the last 16 slots
      are redrawn from 16 fresh uniforms and transformed again;
    * ``numel < 16``: scalar Box–Muller, ``r = √(−2 log1p(−u₂))``, ``θ = 2π u₁``, returning
      ``r cos θ`` and caching ``r sin θ`` for the next value.

    Logarithms use libm (:func:`math.log`, as torch does; NumPy's vectorised ``log`` may
    differ by an ulp).
    """
    shape = tuple(int(s) for s in shape)
    size = math.prod(shape)
    bitgen = np.random.MT19937(0)
    bitgen._legacy_seeding(int(seed) & 0xFFFFFFFF)

    def uniforms(k: int) -> np.ndarray:
        r = bitgen.random_raw(2 * k).astype(np.uint64)
        return (((r[0::2] << np.uint64(32)) | r[1::2]) & _MASK53).astype(np.float64) / 2.0**53

    def box_muller16(u: np.ndarray) -> np.ndarray:
        u = u.reshape(-1, 16)
        radius = np.sqrt(-2.0 * np.array([math.log(1.0 - v) for v in u[:, :8].ravel()])
                         .reshape(-1, 8))
        theta = (2.0 * math.pi) * u[:, 8:]
        return np.concatenate([radius * np.cos(theta), radius * np.sin(theta)], axis=1).ravel()

    if size >= 16:
        data = uniforms(size)
        full = 16 * (size // 16)
        data[:full] = box_muller16(data[:full])
        if size % 16:
            data[size - 16:] = box_muller16(uniforms(16))
        return data.reshape(shape)
    out = np.empty(size)
    cached = None
    for i in range(size):
        if cached is not None:
            out[i], cached = cached, None
            continue
        u1, u2 = uniforms(2)
        r = math.sqrt(-2.0 * math.log1p(-float(u2)))
        th = 2.0 * math.pi * float(u1)
        out[i], cached = r * math.cos(th), r * math.sin(th)
    return out.reshape(shape)


def published_heads(H: int, d: int, *, seed: int | None = None,
              rng: np.random.Generator | None = None,
              generator: str = "numpy") -> Heads:
    """The published experiments' initial heads (docs/theory.md §5).

    ``D_h = Z_h + Z_hᵀ`` with ``Z`` standard normal of shape ``(H, d, d)`` (C order,
    head ``h`` gets ``Z[h]``; no scaling: diagonal ``N(0, 4)``, off-diagonal
    ``N(0, 2)``); score ``<x, D_h y>``, value ``V_h = −D_h`` (tokens move against the
    attention output: energy descent), ``w_h = 1/H``. Use with ``β = 1``.

    Parameters
    ----------
    H, d : int
        Number of heads and dimension.
    seed : int, optional
        Seed of ``Z`` (published: ``42 + H``, the default).
    rng : numpy.random.Generator, optional
        ``generator="numpy"`` only: draw ``Z`` from this generator instead of
        ``default_rng(seed)``.
    generator : {"numpy", "torch-cpu"}
        ``"numpy"``: ``Z`` from NumPy — the published law, not the published sample.
        ``"torch-cpu"``: ``Z`` from torch's CPU stream for ``seed``
        (:func:`torch_cpu_normal`), i.e. the very matrices of the published code run
        on a CPU (its CUDA runs draw other matrices).
    """
    if generator not in HEAD_GENERATORS:
        raise ValueError(f"heads.generator: must be one of {HEAD_GENERATORS}, "
                         f"got {generator!r}")
    if int(H) < 1 or int(d) < 2:
        raise ValueError(f"heads: need H >= 1 and d >= 2, got H = {H}, d = {d}")
    seed = 42 + int(H) if seed is None else int(seed)
    if generator == "torch-cpu":
        if rng is not None:
            raise ValueError("heads.generator: 'torch-cpu' draws from the seed, not from rng")
        Z = torch_cpu_normal(seed, (H, d, d))
    else:
        Z = (np.random.default_rng(seed) if rng is None else rng).standard_normal((H, d, d))
    return Heads.bilinear(Z + np.swapaxes(Z, 1, 2), w=1.0 / H, value_sign=-1.0)


def published_ou(theta0: np.ndarray, *, sigma2: float = 2.0,
              w: np.ndarray | float | None = None, value_sign: float = -1.0
              ) -> OrnsteinUhlenbeck:
    """The published OU experiment: ``dD_h = (I − D_h) dt + σ dW_sym``, ``σ² = 2``.

    ``dW_sym = √dt (Z + Zᵀ)/2`` with ``Z`` standard normal per head (diagonal
    increments of variance ``σ² dt``, off-diagonal ``σ² dt/2``); ``σ = √sigma2``
    exactly (:func:`math.sqrt`), ``κ = 1``, ``θ_∞ = I``; bilinear heads with value
    ``V_h = −D_h`` and ``w_h = 1/H`` (the defaults).

    Parameters
    ----------
    theta0 : (H, d, d) array
        ``D_h(0)`` (published: ``Z + Zᵀ``, :func:`~wflow.attention.published.published_heads`).
    sigma2 : float
        Noise variance ``σ²`` (published: 2).
    w : (H,) array or float, optional
        Mixing weights (default ``1/H``).
    value_sign : float
        ``V_h = value_sign · D_h`` (published: −1).
    """
    theta0 = np.asarray(theta0, float)
    if theta0.ndim != 3:
        raise ValueError(f"theta0: expected shape (H, d, d), got {theta0.shape}")
    if not (np.isfinite(sigma2) and sigma2 >= 0):
        raise ValueError(f"ou.sigma2: must be a finite number >= 0, got {sigma2!r}")
    H, d, _ = theta0.shape
    w = 1.0 / H if w is None else w
    param = Parametrisation("bilinear", np.broadcast_to(np.asarray(w, float), (H,)).copy(),
                            value_sign=value_sign)
    return OrnsteinUhlenbeck(param, theta0, np.broadcast_to(np.eye(d), theta0.shape), kappa=1.0,
               sigma0=math.sqrt(sigma2), symmetric_noise=True)


def published_frames(t: float, H: int, d: int) -> np.ndarray:
    """The oscillating targets ``F_h(t)`` of the published experiments, ``(H, d, d)``.

    docs/theory.md §5.

    With ``s = t + 2πh/H`` for heads ``h = 0, …, H−1`` (phases spread over a whole period):

    * ``d = 2``: ``F = [[2 + 1.5 cos s, sin 2s], [sin 2s, 2 − 1.5 cos s]]``;
    * ``d = 3``: ``F = [[2 + 1.5 cos s, sin 2s, sin s], [sin 2s, 2 + 1.5 sin s, cos 2s],
      [sin s, cos 2s, 2 + 1.5 cos(s + π/4)]]``;
    * ``d ≥ 4``: ``F_ii = 2 + 1.5 cos(s + 2πi/d)`` (``i = 0, …, d−1``) and, for the
      ``k``-th pair ``i < j`` in row-major order (``k = 0, …, K−1``, ``K = d(d−1)/2``),
      ``F_ij = F_ji = sin(2s + 2πk/K)``.

    Indices are 0-based as in the published code (head ``h`` pairs with phase ``2πh/H``).
    Period ``2π`` in ``t``. For ``H ≥ 3`` the head average ``(1/H) Σ_h F_h(t)`` is the
    constant ``2I`` (every harmonic cancels); whether the flow keeps moving is what the
    experiments measure.
    """
    if d < 2:
        raise ValueError(f"published_frames: d must be >= 2, got {d}")
    H = int(H)
    s = float(t) + np.array([2.0 * math.pi * h / max(H, 1) for h in range(H)])
    F = np.zeros((H, d, d))
    if d == 2:
        F[:, 0, 0] = 2.0 + 1.5 * np.cos(s)
        F[:, 1, 1] = 2.0 - 1.5 * np.cos(s)
        F[:, 0, 1] = F[:, 1, 0] = np.sin(2.0 * s)
    elif d == 3:
        F[:, 0, 0] = 2.0 + 1.5 * np.cos(s)
        F[:, 1, 1] = 2.0 + 1.5 * np.sin(s)
        F[:, 2, 2] = 2.0 + 1.5 * np.cos(s + math.pi / 4.0)
        F[:, 0, 1] = F[:, 1, 0] = np.sin(2.0 * s)
        F[:, 0, 2] = F[:, 2, 0] = np.sin(s)
        F[:, 1, 2] = F[:, 2, 1] = np.cos(2.0 * s)
    else:
        K = d * (d - 1) // 2
        for i in range(d):
            F[:, i, i] = 2.0 + 1.5 * np.cos(s + 2.0 * math.pi * i / d)
        k = 0
        for i in range(d):
            for j in range(i + 1, d):
                F[:, i, j] = F[:, j, i] = np.sin(2.0 * s + 2.0 * math.pi * k / K)
                k += 1
    return F


@dataclass(frozen=True)
class PublishedFrames:
    """The target ``F(t) = published_frames(t, H, d)`` of :func:`published_relaxed`, ``(H, d, d)``.

    An explicit type (not a closure), so that the compiled particle loop recognises the
    published target (``isinstance``) and evaluates the frames in the loop
    (:func:`wflow.particles._path_numba.published_frames_into` mirrors
    :func:`published_frames`; a test pins them equal).
    """

    H: int
    d: int

    def __post_init__(self) -> None:
        if int(self.H) < 1 or int(self.d) < 2:
            raise ValueError(f"PublishedFrames: need H >= 1 and d >= 2, got H = {self.H}, "
                             f"d = {self.d}")

    def __call__(self, t: float) -> np.ndarray:
        """The frames ``F_h(t)`` of every head, ``(H, d, d)``."""
        return published_frames(t, self.H, self.d)


def published_relaxed(theta0: np.ndarray, *, w: np.ndarray | float | None = None,
              value_sign: float = -1.0, kappa: float = 1.0) -> Relaxed:
    """Bilinear heads relaxing to the published frames, ``dA_h/dt = F_h(t) − A_h``.

    Parameters
    ----------
    theta0 : (H, d, d) array
        ``A_h(0)`` (published: ``Z + Zᵀ``, ``Z`` standard normal).
    w : (H,) array or float, optional
        Mixing weights (published: ``1/H``, the default).
    value_sign : float
        ``V_h = value_sign · A_h`` (published: ``−1``, tokens move against the
        attention output).
    kappa : float
        Relaxation rate (published: 1).
    """
    theta0 = np.asarray(theta0, float)
    H, d, _ = theta0.shape
    w = 1.0 / H if w is None else w

    param = Parametrisation("bilinear", np.broadcast_to(np.asarray(w, float), (H,)).copy(),
                            value_sign=value_sign)
    return Relaxed(param, theta0, PublishedFrames(H, d), kappa)


def published_vertices(d: int, layout: str | None = None) -> np.ndarray:
    """Cluster centres of the published experiments' tokens, float32 ``(2d, d)``.

    ``layout="octahedral"`` (the S² experiments): ``+e_1, −e_1, +e_2, −e_2, +e_3, −e_3``
    (d = 3 only); ``layout="cross"`` (the high-dimensional experiments):
    ``e_1, …, e_d, −e_1, …, −e_d``. ``None`` picks what the published experiments use
    for ``d``: octahedral for ``d = 3``, cross otherwise. The order matters: the random
    vertex indices select rows of this array.
    """
    layout = ("octahedral" if d == 3 else "cross") if layout is None else layout
    if layout == "octahedral":
        if d != 3:
            raise ValueError(f"published_vertices: the octahedral layout needs d = 3, got {d}")
        return np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]],
                        dtype=np.float32)
    if layout == "cross":
        eye = np.eye(d, dtype=np.float32)
        return np.concatenate([eye, -eye], axis=0)
    raise ValueError(f"published_vertices: layout must be 'octahedral' or 'cross', got {layout!r}")


def sample_published_clusters(n: int, d: int, rng: np.random.Generator, *, noise: float = 0.05,
                              layout: str | None = None, float32_exact: bool = False
                              ) -> np.ndarray:
    """The published experiments' initial tokens: random vertices plus Gaussian noise.

    The draws and the arithmetic of the published code, in this order: vertex indices
    ``c = rng.choice(2d, n)`` (uniform, with replacement), then ``ξ = rng.normal(0, noise,
    (n, d))``; in float32, ``p_i = v_{c_i} + float32(ξ_i)`` and ``p_i / |p_i|`` (norm and
    division in float32). With ``rng = numpy.random.default_rng(42)``, ``n = 200`` and
    the vertices of :func:`published_vertices` this gives the published ``x(0)`` bit for
    bit (S²: octahedral layout; d = 5: cross layout).

    Parameters
    ----------
    n, d : int
        Number of tokens and ambient dimension.
    rng : numpy.random.Generator
        Fresh generator (published: ``default_rng(42)``); its first two draws are used.
    noise : float
        Standard deviation of the Gaussian perturbation (published: 0.05).
    layout : {"octahedral", "cross"}, optional
        Vertex order (:func:`published_vertices`; default: the published one for ``d``).
    float32_exact : bool
        Return the published float32 tokens unchanged (as float64). Their norms differ
        from 1 by up to ~1.3e-7 (float32 rounding; the published engine starts from them
        without renormalising), more than wflow's solvers accept (``SPHERE_TOL``). The
        default renormalises these values in float64: ``|x_i| = 1`` to round-off, and
        each coordinate moves by at most ~1.3e-7 (measured: 1.03e-7 on S², 1.29e-7 for
        d = 5 at ``n = 200``, seed 42).

    Returns
    -------
    (n, d) float64 array
    """
    verts = published_vertices(d, layout)
    if not noise >= 0:
        raise ValueError(f"sample_published_clusters: noise must be >= 0, got {noise}")
    idx = rng.choice(verts.shape[0], n)
    pts = verts[idx] + rng.normal(0.0, noise, (n, d)).astype(np.float32)
    x32 = pts / np.linalg.norm(pts, axis=-1, keepdims=True)
    x = x32.astype(np.float64)
    return x if float32_exact else normalize(x)
