"""A faithful float64 NumPy re-implementation of the published [TD] engine's time step.

The reference of ``bench_published.py``: the step of the published multi-head experiments
(github ``alexmassucco/Transformers_as_time_dependent_gradient_flows``, commit 693474c,
package ``attn_sphere``), written from its conventions (documented term by term in the
issue-13 notes), not copied: the same batched array layout (``x: [P, n, d]``,
``D: [P, H, d, d]``), the same einsum formulation, every diagnostic of the published step
computed every step exactly as it does:

* scores ``<x_i, D_h x_j>`` (β = 1, no max-shift), values ``D_h``, softmax rows, the
  velocity projected per head and averaged (``w_h = 1/H``), tokens moved along ``−v``;
* ``E = Σ e^{s}/(2Hn²)``; ``∂_tE`` with the drift and the Itô term in expectation form,
  ``(σ²/4)(1 + <x_i, x_j>²)``; ``G² = mean_i |v_i|² HM_h(Z_ih)``; left-point integrals;
* weights ``D ← D + f(D, t) dt`` then ``+ σ √dt (Z + Zᵀ)/2`` with one normal draw of shape
  ``[P, H, d, d]`` per step; the martingale increment with the attention of step ``k`` and
  the tokens of step ``k + 1`` (as published).

``bench_published.py`` shows that it reproduces the published engine's numbers (same
initial data and normals, to round-off) where torch is installed, and times it against
``wflow.particles.simulate(engine="compiled")``. Plain NumPy: runs without torch.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

__all__ = [
    "tokens_octahedral",
    "tokens_cross_polytope",
    "frames",
    "ou_drift",
    "oscillating_drift",
    "forward_metrics",
    "simulate_batch",
]


# ----------------------------------------------------------------------------- initial data
def _float32_tokens(verts: np.ndarray, n: int, seed: int, noise: float) -> np.ndarray:
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(verts), n)  # first draw: a vertex per token
    eps = rng.normal(0.0, noise, (n, verts.shape[1])).astype(np.float32)  # then the noise
    pts = verts[idx] + eps
    return pts / np.linalg.norm(pts, axis=-1, keepdims=True)  # float32, as published


def tokens_octahedral(n: int = 200, seed: int = 42, noise: float = 0.05) -> np.ndarray:
    """S² tokens near the octahedron vertices ``±e_i`` (order +x, −x, +y, −y, +z, −z), float32."""
    verts = np.array([[1, 0, 0], [-1, 0, 0], [0, 1, 0], [0, -1, 0], [0, 0, 1], [0, 0, -1]],
                     dtype=np.float32)
    return _float32_tokens(verts, n, seed, noise)


def tokens_cross_polytope(n: int = 200, d: int = 5, seed: int = 42,
                          noise: float = 0.05) -> np.ndarray:
    """``S^{d-1}`` tokens near ``[e_1..e_d, −e_1..−e_d]``, float32."""
    eye = np.eye(d, dtype=np.float32)
    return _float32_tokens(np.concatenate([eye, -eye]), n, seed, noise)


# ----------------------------------------------------------------------------- weight drifts
def frames(H: int, d: int, t: float) -> np.ndarray:
    """Oscillating targets ``F_h(t)``, ``h = 0..H−1``, phase ``t + 2πh/H``; ``[H, d, d]``."""
    tt = t + 2.0 * math.pi * np.arange(H, dtype=np.float64) / max(H, 1)
    F = np.zeros((H, d, d))
    if d == 2:
        c = 1.5 * np.cos(tt)
        F[:, 0, 0] = 2.0 + c
        F[:, 1, 1] = 2.0 - c
        F[:, 0, 1] = F[:, 1, 0] = np.sin(2.0 * tt)
    elif d == 3:
        F[:, 0, 0] = 2.0 + 1.5 * np.cos(tt)
        F[:, 1, 1] = 2.0 + 1.5 * np.sin(tt)
        F[:, 2, 2] = 2.0 + 1.5 * np.cos(tt + math.pi / 4.0)
        F[:, 0, 1] = F[:, 1, 0] = np.sin(2.0 * tt)
        F[:, 0, 2] = F[:, 2, 0] = np.sin(tt)
        F[:, 1, 2] = F[:, 2, 1] = np.cos(2.0 * tt)
    else:
        K = max(d * (d - 1) // 2, 1)
        for i in range(d):
            F[:, i, i] = 2.0 + 1.5 * np.cos(tt + 2.0 * math.pi * i / d)
        k = 0
        for i in range(d):
            for j in range(i + 1, d):
                F[:, i, j] = F[:, j, i] = np.sin(2.0 * tt + 2.0 * math.pi * k / K)
                k += 1
    return F


def ou_drift(D: np.ndarray, t: float) -> np.ndarray:
    """``f = I − D``."""
    return np.eye(D.shape[-1]) - D


def oscillating_drift(D: np.ndarray, t: float) -> np.ndarray:
    """``f = F(t) − D`` (the frames broadcast over paths)."""
    return frames(D.shape[-3], D.shape[-1], t) - D


# ----------------------------------------------------------------------------- one step
def forward_metrics(x: np.ndarray, D: np.ndarray, drift: Callable, noise_var: float,
                    t: float) -> tuple:
    """``(f, U, E, dEdt, G2, v)`` at ``(x_k, D_k, t_k)``; ``x: [P, n, d]``, ``D: [P, H, d, d]``."""
    P, n, d = x.shape
    H = D.shape[1]
    inv = 1.0 / (H * n * n)
    f = drift(D, t)
    Dx = np.einsum("phde,pne->phnd", D, x)  # D_h x_m
    U = np.exp(np.einsum("pnd,phmd->phnm", x, Dx))  # e^{<x_n, D_h x_m>}, no max-shift
    N = U.sum(axis=-1, keepdims=True)
    A = U / N  # softmax rows
    E = 0.5 * U.sum(axis=(1, 2, 3)) * inv
    drift_term = np.einsum("pnd,phmd->phnm", x, np.einsum("phde,pne->phnd", f, x))
    xxT = np.matmul(x, np.swapaxes(x, -1, -2))
    ito_term = (noise_var / 4.0) * (xxT ** 2 + 1.0)[:, None, :, :]
    dEdt = 0.5 * (U * (drift_term + ito_term)).sum(axis=(1, 2, 3)) * inv
    weighted = np.matmul(A, Dx)  # Σ_m A_nm D_h x_m
    v_dot_x = (weighted * x[:, None]).sum(axis=-1, keepdims=True)
    v = (weighted - v_dot_x * x[:, None]).mean(axis=1)  # P_x per head, then w_h = 1/H
    G2 = ((v * v).sum(axis=-1) / (n / N[..., 0]).mean(axis=1)).mean(axis=1)
    return f, U, E, dEdt, G2, v


def simulate_batch(x0: np.ndarray, D0: np.ndarray, drift: Callable, noise_var: float, T: float,
                   dt: float, rec: int, *, n_paths: int = 1,
                   normals: Callable[[tuple], np.ndarray] | None = None) -> dict:
    """``P = n_paths`` paths from the same ``(x0, D0)``; every diagnostic every step.

    ``normals(shape)``: the standard normals of one step (default: NumPy's
    ``default_rng(0)``); the published engine draws them from a torch generator.
    Returns the recorded ``t, E, G2, dE_int, G2_int, add_int`` (``[P, m]``) and the
    final ``x`` and ``D``.
    """
    P = n_paths
    x = np.broadcast_to(np.asarray(x0, dtype=np.float64), (P,) + np.shape(x0)).copy()
    D = np.broadcast_to(np.asarray(D0, dtype=np.float64), (P,) + np.shape(D0)).copy()
    H, n = D.shape[1], x.shape[1]
    g = math.sqrt(noise_var)
    sqrt_dt = math.sqrt(dt)
    n_steps = int(round(T / dt))
    if normals is None:
        normals = np.random.default_rng(0).standard_normal
    dE_int, G2_int, add_int = np.zeros(P), np.zeros(P), np.zeros(P)
    recs: dict[str, list] = {k: [] for k in ("t", "E", "G2", "dE_int", "G2_int", "add_int")}

    def record(tv, E, G2):
        for key, val in (("t", tv), ("E", E), ("G2", G2), ("dE_int", dE_int),
                         ("G2_int", G2_int), ("add_int", add_int)):
            recs[key].append(np.copy(val))

    for k in range(n_steps):
        t = k * dt
        f, U, E, dEdt, G2, v = forward_metrics(x, D, drift, noise_var, t)
        if k % rec == 0:
            record(t, E, G2)  # before this step's increments (integrals over [0, t_k))
        dE_int += dEdt * dt
        G2_int += G2 * dt
        x_new = x - dt * v
        x = x_new / np.linalg.norm(x_new, axis=-1, keepdims=True)
        D = D + f * dt
        if noise_var > 0.0:
            Z = normals((P, H) + D.shape[2:])
            dW = sqrt_dt * 0.5 * (Z + np.swapaxes(Z, -1, -2))
            D = D + g * dW
            # martingale: U of step k, tokens of step k+1 (as published)
            gWx = np.einsum("phde,pne->phnd", g * dW, x)
            stoch = np.einsum("pnd,phmd->phnm", x, gWx)
            add_int += 0.5 * (U * stoch).sum(axis=(1, 2, 3)) / (H * n * n)
    f, U, E, dEdt, G2, v = forward_metrics(x, D, drift, noise_var, T)
    if not recs["t"] or recs["t"][-1] < T - 1e-12:
        record(T, E, G2)
    out = {"t": np.array(recs["t"])}
    for key in ("E", "G2", "dE_int", "G2_int", "add_int"):
        out[key] = np.stack(recs[key], axis=1)
    out["x"], out["D"] = x, D
    return out
