"""Trained attention heads as a piecewise-constant weight schedule (docs/theory.md §1, "layers").

Layer ``ℓ`` of a BERT encoder has, for every head ``h`` (rows ``h k … (h+1)k − 1``)::

    Q_h = W_Q[h] ∈ R^{k×d},   K_h = W_K[h] ∈ R^{k×d},   V_h = W_O[:, h] W_V[h] ∈ R^{d×d}

and the heads keep the value at its rank ``k`` (``Heads(..., WV=W_V[h], WO=W_O[:, h])``, see
:class:`~wflow.attention.heads.Heads`), so the kernel sums accumulate ``k``-vectors.

and its score is ``<Q_h x, K_h y>/√k``. :func:`export_heads` returns these as
:class:`~wflow.attention.heads.Heads` per layer and a
:class:`~wflow.attention.schedules.Layers` schedule
(layer ``ℓ`` acts on ``[ℓΔ, (ℓ+1)Δ)``) for :func:`wflow.particles.simulate`.

Conventions
-----------
* **Score scale.** ``fold="query"`` (default) folds ``1/√k`` into ``Q_h`` and returns
  ``β = 1``; ``fold="beta"`` keeps ``Q_h = W_Q[h]`` and returns ``β = 1/√k``. Either way
  ``β <Q_h x, K_h y>`` is the model's bilinear score.
* **Mixing weights** ``w_h = 1`` (BERT sums its heads through ``W_O``: the [MH] convention).
* **Dropped terms.** The biases ``b_Q, b_K, b_V, b_O``, the residual connection, the
  LayerNorms and the feed-forward block are not part of the particle model. (``b_K``
  shifts every score of a query by the same amount and cancels in the softmax; ``b_Q``
  tilts the scores by ``<W_Kᵀ b_Q, y>/√k``, which the bilinear model has no term for.)
* **Radius.** BERT tokens have norm ``r ≈ sqrt(d) · rms(γ)``; on the unit sphere the
  scores are ``r²`` times smaller. ``beta_at_radius = β r²`` (``r`` the root-mean-square
  norm of the layer inputs used for the basis) reproduces the model's score scale for
  tokens ``x = r x̂``.
* **PCA projection** (``pca_dim = p``): with an orthonormal basis ``U ∈ R^{d×p}`` of the
  layer inputs, ``Q' = Q U``, ``K' = K U``, ``V' = Uᵀ V U`` (factors ``W_V U``, ``Uᵀ W_O``
  while ``k < p``; a full ``V'`` when ``k ≥ p``, where the rank saves nothing), so for
  tokens in the span,
  ``x = U x'``, the scores are exact: ``<Q' x', K' y'> = <Q x, K y>``, and ``V'`` is the
  value map followed by the orthogonal projection onto the span. ``U`` spans the top
  ``p`` eigenvectors of the *uncentred* second moment ``E[x xᵀ]`` of the inputs of the
  exported layers (pooled), the best ``p``-dimensional subspace for the tokens
  themselves (their mean included); ``center=True`` uses the covariance instead.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

from ..attention.heads import Heads
from ..attention.schedules import Layers
from .bert import BertEncoder
from .gaussianity import sample_gaussian
from .moments import Moments

__all__ = ["ExportedHeads", "export_heads", "layer_heads", "pca_basis"]


@dataclass(frozen=True)
class ExportedHeads:
    """Heads of a trained encoder as a weight schedule.

    Attributes
    ----------
    schedule : Layers
        ``qkv``-parametrised, one layer per exported encoder layer, length ``delta`` each.
    heads : tuple of Heads
        The heads of each exported layer (``Q, K`` of shape ``(H, k, p)``, ``V`` ``(H, p, p)``;
        values of rank ``k`` kept as factors when ``k < p``).
    layers : tuple of int
        Encoder layers exported, in order.
    beta : float
        Inverse temperature to use with the heads (1 or ``1/√k``, see ``fold``).
    fold : {"query", "beta"}
    basis : (d, p) array or None
        Orthonormal PCA basis (``None``: no projection, ``p = d``).
    explained : float
        Fraction of ``E|x|²`` (or of ``tr Cov`` when centred) of the basis tokens captured
        by ``basis`` (1 without projection).
    token_radius : float
        Root-mean-square norm of the tokens the basis was computed from (``nan`` if none).
    beta_at_radius : float
        ``beta · token_radius²``.
    tokens : (n, p) array or None
        The first exported layer's input tokens projected and normalised onto
        ``S^{p-1}`` (an initial condition for :func:`wflow.particles.simulate`).
    """

    schedule: Layers
    heads: tuple[Heads, ...]
    layers: tuple[int, ...]
    beta: float
    fold: str
    basis: np.ndarray | None
    explained: float
    token_radius: float
    beta_at_radius: float
    tokens: np.ndarray | None

    @property
    def d(self) -> int:
        """Dimension of the exported heads (``p`` after projection)."""
        return self.heads[0].d


def layer_heads(encoder: BertEncoder, ell: int, *, fold: Literal["query", "beta"] = "query",
                w: float = 1.0, basis: np.ndarray | None = None) -> Heads:
    """:class:`Heads` of encoder layer ``ell`` (see the module docstring for the conventions)."""
    cfg = encoder.config
    if not 0 <= int(ell) < cfg.num_hidden_layers:
        raise ValueError(f"layers: index {ell} outside [0, {cfg.num_hidden_layers - 1}]")
    if fold not in ("query", "beta"):
        raise ValueError(f"fold: must be 'query' or 'beta', got {fold!r}")
    lay = encoder.layers[int(ell)]
    scale = 1.0 / np.sqrt(cfg.head_dim) if fold == "query" else 1.0
    sl = lay.head_slices(cfg)
    Q = np.stack([scale * lay.Wq[s] for s in sl])
    K = np.stack([lay.Wk[s] for s in sl])
    WV = np.stack([lay.Wv[s] for s in sl])  # (H, k, d)
    WO = np.stack([lay.Wo[:, s] for s in sl])  # (H, d, k)
    if basis is not None:
        U = basis
        Q, K, WV = Q @ U, K @ U, WV @ U
        WO = np.matmul(U.T, WO)
    wts = np.full(len(sl), float(w))
    if WV.shape[1] >= WV.shape[2]:  # rank k ≥ width p: the full value is cheaper
        return Heads(Q, K, np.matmul(WO, WV), wts)
    return Heads(Q, K, None, wts, WV=WV, WO=WO)


def pca_basis(tokens: np.ndarray, p: int, *, center: bool = False) -> tuple[np.ndarray, float]:
    """Top-``p`` eigenvectors of ``E[x xᵀ]`` (or of the covariance) and the captured fraction."""
    x = np.asarray(tokens, float)
    if x.ndim != 2:
        raise ValueError(f"tokens: expected an (n, d) array, got shape {x.shape}")
    if not 1 <= int(p) <= x.shape[1]:
        raise ValueError(f"pca_dim: must lie in [1, {x.shape[1]}], got {p}")
    c = x - x.mean(axis=0) if center else x
    M = (c.T @ c) / x.shape[0]
    w, U = np.linalg.eigh(0.5 * (M + M.T))
    order = np.argsort(w)[::-1][: int(p)]
    return U[:, order].copy(), float(np.sum(w[order]) / np.sum(w))


def export_heads(encoder: BertEncoder, *, layers: list[int] | None = None,
                 pca_dim: int | None = None, basis: np.ndarray | None = None,
                 tokens: np.ndarray | None = None, n_samples: int = 512, seed: int = 0,
                 input_kind: Literal["embedding", "standard"] = "embedding",
                 fold: Literal["query", "beta"] = "query", center: bool = False,
                 delta: float = 1.0, w: float = 1.0) -> ExportedHeads:
    """Export the attention heads of ``encoder`` as a ``Layers`` schedule.

    Parameters
    ----------
    encoder : BertEncoder
    layers : list of int, optional
        Encoder layers to export, in this order (default: all).
    pca_dim : int, optional
        Project the heads to ``p = pca_dim`` dimensions (see the module docstring).
    basis : (d, p) array, optional
        Use this orthonormal basis instead of computing one.
    tokens : (n, d) array, optional
        Tokens entering the first exported layer (e.g. embeddings of real text). Default:
        ``n_samples`` Gaussian tokens (``input_kind`` as in the Gaussianity study) run
        through the encoder; the inputs of every exported layer are pooled for the basis.
    fold : {"query", "beta"}
        Where ``1/√k`` goes.
    center : bool
        Centred PCA (covariance) instead of the uncentred second moment.
    delta : float
        Duration of each layer in the schedule.
    w : float
        Mixing weight of every head.

    Returns
    -------
    ExportedHeads
    """
    cfg = encoder.config
    L = cfg.num_hidden_layers
    order = list(range(L)) if layers is None else [int(v) for v in layers]
    if not order or min(order) < 0 or max(order) >= L:
        raise ValueError(f"layers: indices must lie in [0, {L - 1}], got {layers}")
    d = cfg.hidden_size
    # Inputs of each encoder layer (needed for the basis, the radius and initial tokens).
    if tokens is None:
        if input_kind == "embedding":
            mom = Moments(*encoder.embedding_moments())
        elif input_kind == "standard":
            mom = Moments(np.zeros(d), np.eye(d))
        else:
            raise ValueError(f"input: must be 'embedding' or 'standard', got {input_kind!r}")
        x0 = sample_gaussian(mom, int(n_samples), np.random.default_rng(seed))
        states = encoder.forward(x0, num_layers=max(order))
    else:
        x0 = np.asarray(tokens, float)
        if x0.ndim != 2 or x0.shape[1] != d:
            raise ValueError(f"tokens: expected shape (n, {d}), got {x0.shape}")
        states = encoder.forward(x0, num_layers=max(order))
    pooled = np.concatenate([states[ell] for ell in order])
    radius = float(np.sqrt(np.mean(np.sum(pooled * pooled, axis=1))))
    explained = 1.0
    if basis is not None:
        U = np.asarray(basis, float)
        if U.ndim != 2 or U.shape[0] != d or U.shape[1] > d:
            raise ValueError(f"basis: expected shape ({d}, p) with p <= {d}, got {U.shape}")
        # orthonormal columns up to float64 round-off of a QR / eigh basis
        if np.max(np.abs(U.T @ U - np.eye(U.shape[1]))) > 1e-8:
            raise ValueError("basis: columns must be orthonormal (UᵀU = I)")
        if pca_dim is not None and int(pca_dim) != U.shape[1]:
            raise ValueError(f"pca_dim = {pca_dim} does not match basis with {U.shape[1]} columns")
        tot = np.sum(pooled * pooled) if not center else np.sum((pooled - pooled.mean(0)) ** 2)
        proj = pooled @ U if not center else (pooled - pooled.mean(0)) @ U
        explained = float(np.sum(proj * proj) / tot)
    elif pca_dim is not None:
        U, explained = pca_basis(pooled, int(pca_dim), center=center)
    else:
        U = None
    heads = tuple(layer_heads(encoder, ell, fold=fold, w=w, basis=U) for ell in order)
    beta = 1.0 if fold == "query" else 1.0 / np.sqrt(cfg.head_dim)
    first = states[order[0]]
    proj = first if U is None else first @ U
    norms = np.linalg.norm(proj, axis=1)
    toks = proj[norms > 0] / norms[norms > 0, None]
    sched = Layers.of(list(heads), delta=delta)
    return ExportedHeads(sched, heads, tuple(order), float(beta), fold, U, explained, radius,
                         float(beta * radius ** 2), toks)
