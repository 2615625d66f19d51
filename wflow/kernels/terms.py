"""The particle step's terms in one pass (:func:`particle_terms`).

Part of :mod:`wflow.kernels` (the face re-exports the public names).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from .direct import aligned, aligned_empty, pair_once, team
from .validation import DEFAULT_TOL, _scores_A, _validate, raise_bound


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
