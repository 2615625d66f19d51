r"""Position-binned spherical-harmonic moments: causal tokens against the kinetic slices.

The one definition of the comparison of ``n`` causal tokens (in array order, token ``i`` at
position ``s = i/n``) with the slices of :func:`wflow.kinetic.solve_kinetic`, shared by
the ``causal-mean-field`` study and the causal main job (``wflow run`` with
``[attention] mask``).

``B`` position bins of consecutive tokens: bin ``b`` holds the tokens ``i`` (0-based)
with ``⌊bn/B⌋ ≤ i < ⌊(b+1)n/B⌋`` (``n/B`` each when ``B`` divides ``n``). Per bin the mean
real spherical-harmonic moments ``μ_{b,k} = (1/n_b) Σ_{i ∈ b} Y_k(x_i)``,
``0 ≤ k < (L+1)²`` (:func:`binned_token_moments`). The kinetic prediction of bin ``b`` is
the mean over its ``S/B`` slices of the moments of each slice's probability density
(:func:`slice_moments`, :func:`bin_means`): the bin average ``B ∫_{bin} μ(ρ_t(s)) ds``
to ``O(S^{-2})``. The vector over (bins × moments) is laid out behind one mass entry,

.. math::

    (μ_{0,0},\ μ_{0,1 \dots K},\ μ_{1,1 \dots K},\ \dots,\ μ_{B-1,1 \dots K}),
    \qquad K = (L+1)^2 − 1,

``1 + BK`` numbers (:func:`flat`), which is the layout
:func:`wflow.geometry.moment_test.moment_test` takes when ``1 + BK = (L'+1)²``
(:func:`layout_degree`; ``L = 2``: ``B = 1, 3, 6, 10, 15, …``, the triangular numbers).

Control variates (:func:`wflow.geometry.moment_test.control_variates`) in this layout:
the harmonics ``Z_j`` (``1 ≤ j < (L_c+1)²``) of each token's initial position, one block
of controls per bin, ``Z_i^{(b)} = B·1[i ∈ b] Z(x_i(0))`` against the blocked moments
``B·1[i ∈ b] Y(x_i(T))`` (:func:`blocked_cross_sums`, :func:`binned_cross_sums`; bins of
``n/B`` tokens each). Their exact means are the bins' initial kinetic moments
(:func:`bin_means` of :func:`slice_moments` at degree ``L_c``, the mass entry dropped).
"""

from __future__ import annotations

import numpy as np

from ..geometry.harmonics import cell_moments, token_cross_sums, token_moment_sums

__all__ = ["flat", "bin_means", "token_var", "slice_moments", "binned_token_moments",
           "layout_degree", "bin_edges", "blocked_cross_sums", "binned_cross_sums"]


def flat(mom: np.ndarray) -> np.ndarray:
    """``(B, (L+1)²)`` per-bin moments -> ``[mass, bin 0's k ≥ 1, bin 1's, …]``, ``(1 + BK,)``."""
    return np.concatenate([[mom[0, 0]], mom[:, 1:].ravel()])


def bin_means(mom: np.ndarray, B: int) -> np.ndarray:
    """``(S, (L+1)²)`` slice moments -> the ``B`` bins' means (``S/B`` slices each), flat."""
    return flat(mom.reshape(B, -1, mom.shape[1]).mean(axis=1))


def token_var(M: np.ndarray, Q: np.ndarray, B: int) -> np.ndarray:
    """Per-token variance of the blocked moments, ``B q_b − m_b²``, flat (i.i.d. s.e.).

    ``M``, ``Q``: ``(R, B, (L+1)²)`` per-replicate bin means of ``Y_k`` and of ``Y_k²``;
    the blocked token vector ``B·1[i ∈ b] Y_k(x_i)`` has mean ``m_b`` and second moment
    ``B q_b`` over the ``n`` tokens.
    """
    m, q = M.mean(axis=0), Q.mean(axis=0)
    return flat(B * q - m * m)


def slice_moments(verts: np.ndarray, masses: np.ndarray, L: int) -> np.ndarray:
    """Moments of each slice's probability density, ``(S, (L+1)²)``.

    ``verts``: the cells ``(M, 3, 3)``; ``masses``: the slices' cell masses ``(S, M)``
    (:attr:`wflow.kinetic.KineticResult.masses` at one time, each slice summing to
    ``1/S``), renormalised to probabilities (:func:`~wflow.geometry.harmonics.cell_moments`).
    """
    masses = np.asarray(masses, float)
    S = masses.shape[0]
    return np.array([cell_moments(verts, S * m, L) for m in masses])


def bin_edges(n: int, B: int) -> np.ndarray:
    """Token index edges of the ``B`` bins, ``(B + 1,)``: bin ``b`` is ``[e_b, e_{b+1})``."""
    return (np.arange(B + 1) * int(n)) // int(B)


def binned_token_moments(x: np.ndarray, B: int, L: int) -> tuple[np.ndarray, np.ndarray]:
    """Per-bin means of ``Y_k`` and of ``Y_k²`` of tokens ``x`` ``(n, 3)`` in array order.

    Returns two ``(B, (L+1)²)`` arrays (:func:`~wflow.geometry.harmonics.token_moment_sums`
    over each bin, divided by its token count).
    """
    x = np.asarray(x, float)
    e = bin_edges(x.shape[0], B)
    if np.any(np.diff(e) < 1):
        raise ValueError(f"binned moments: {x.shape[0]} tokens cannot fill {B} bins")
    means, squares = [], []
    for b in range(B):
        s, q = token_moment_sums(x[e[b]:e[b + 1]], L, squares=True)
        means.append(s / (e[b + 1] - e[b]))
        squares.append(q / (e[b + 1] - e[b]))
    return np.array(means), np.array(squares)


def layout_degree(B: int, L: int) -> int:
    """``L'`` with ``1 + B((L+1)² − 1) = (L'+1)²``: the flat layout's degree.

    Raises ``ValueError`` when ``1 + B((L+1)² − 1)`` is not a square.
    """
    size = 1 + int(B) * ((int(L) + 1) ** 2 - 1)
    Lf = int(round(np.sqrt(size))) - 1
    if (Lf + 1) ** 2 != size:
        raise ValueError(f"binned moments: {B} bins of degree {L} give {size} numbers, not a "
                         "square (the moment test's layout)")
    return Lf


def blocked_cross_sums(per_bin: list[tuple[np.ndarray, ...]], n: int
                       ) -> tuple[np.ndarray, ...]:
    """The cross sums of the blocked token vectors ``B·1[i ∈ b] (Z_i, Y_i)`` (module docstring).

    ``per_bin``: each bin's :func:`wflow.geometry.harmonics.token_cross_sums` (``n/B``
    tokens each); the mass entry ``Y_0`` is not blocked. Returns ``(S_Z, S_Y, S_ZZ, S_ZY,
    S_YY)`` of the ``n`` tokens in the flat layout: ``(BP,)``, ``(1 + BK,)``,
    ``(BP, BP)``, ``(BP, 1 + BK)``, ``(1 + BK,)``.
    """
    B = len(per_bin)
    P = per_bin[0][0].size
    sz = B * np.concatenate([s[0] for s in per_bin])
    sy = np.concatenate([[sum(s[1][0] for s in per_bin)],
                         B * np.concatenate([s[1][1:] for s in per_bin])])
    syy = np.concatenate([[sum(s[4][0] for s in per_bin)],
                          B * B * np.concatenate([s[4][1:] for s in per_bin])])
    K1 = per_bin[0][1].size - 1
    szz = np.zeros((B * P, B * P))
    szy = np.zeros((B * P, 1 + B * K1))
    for b, s in enumerate(per_bin):
        zb = slice(b * P, (b + 1) * P)
        szz[zb, zb] = B * B * s[2]
        szy[zb, 0] = B * s[3][:, 0]
        szy[zb, 1 + b * K1:1 + (b + 1) * K1] = B * B * s[3][:, 1:]
    return sz, sy, szz, szy, syy


def binned_cross_sums(x_ctrl: np.ndarray, x: np.ndarray, B: int, L_ctrl: int, L: int
                      ) -> tuple[np.ndarray, ...]:
    """:func:`blocked_cross_sums` of tokens at two times, ``x_ctrl`` and ``x`` ``(n, 3)``.

    ``B`` must divide ``n`` (bins of ``n/B`` tokens: the blocked layout's weights).
    """
    n = int(np.shape(x)[0])
    if n % int(B):
        raise ValueError(f"binned cross sums: {B} bins must divide the {n} tokens")
    e = bin_edges(n, B)
    return blocked_cross_sums([token_cross_sums(x_ctrl[e[b]:e[b + 1]], x[e[b]:e[b + 1]],
                                                L_ctrl, L) for b in range(B)], n)
