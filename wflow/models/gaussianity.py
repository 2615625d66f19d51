"""Gaussianity of a trained transformer's layers fed with Gaussian tokens (docs/theory.md §7).

Study (:func:`gaussianity_study`, :func:`pretrained_gaussianity`): draw ``n`` tokens
``x_i ~ N(m₀, Σ₀)`` — by default the Gaussian moment-matched to the model's embedding-layer
outputs over the vocabulary (``input="embedding"``), or ``N(0, I_d)`` (``"standard"``) —
and feed them as *one* sequence through the encoder (every token attends to every token:
the mean-field particle system). After every sublayer (``attn`` = attention residual before
LN₁, ``ln1``, ``ffn`` = feed-forward residual before LN₂, ``out`` = layer output) it records

* **Mardia** multivariate skewness and kurtosis (:func:`mardia`) of the tokens, in the full
  space (rank-reduced to the support: LayerNorm outputs lie in a hyperplane) and, with
  ``pca_dim = p``, in the span of the top ``p`` principal directions of that stage;
  asymptotic p-values *and* the same statistics of a Gaussian reference sample of the
  same size (the Monte-Carlo null, valid when ``n`` is not ≫ ``d``);
* **W2 to the moment-matched Gaussian** (stage inputs and layer outputs): the exact
  empirical OT distance (POT ``ot.emd2``) between ``n_ot`` tokens and ``n_ot`` samples of
  ``N(m̂, Σ̂)``, next to the distance between two independent samples of ``N(m̂, Σ̂)``
  (the finite-sample floor); their ratio is 1 for Gaussian tokens. (The Bures–Wasserstein
  distance to the *moment-matched* Gaussian is 0 by construction; it is used below to
  compare Gaussians.)
* **moment-map prediction error** (see :mod:`wflow.models.moments`): for every stage, the
  Bures–Wasserstein distance between the Gaussian predicted from the *measured* moments
  of the stage input and the moment-matched Gaussian of the stage output, absolute,
  relative to ``sqrt(tr Σ̂_out)`` and to the distance the stage moved the Gaussian.
  For the attention stage both the discrete map (exact for Gaussian tokens as ``n → ∞``)
  and the moment ODE over unit time are reported. Per layer also the one-layer-ahead
  prediction (the four maps composed from the measured layer-input moments) and the
  open-loop prediction (composed from ``(m₀, Σ₀)`` through all layers so far): Gaussian
  dynamics "accurate for short times" means the open-loop error is small in early layers.
  For scale, ``bw_sampling`` is the Bures–Wasserstein distance between the empirical and
  true moments of an independent ``n``-sample of ``N(m̂, Σ̂)`` (the sampling error of
  moments estimated from ``n`` tokens in ``d`` dimensions). The one-stage predictions start
  from the *measured* input moments of the same tokens, so their sampling errors are
  largely shared with the measured output and the prediction error can lie well below
  ``bw_sampling``; the open-loop prediction does not share them.

Observed on all-MiniLM-L6-v2 (``n = 2000``, input moment-matched to the embeddings, seed 0):
the tokens stay close to Gaussian in layers 0–2 (W2 ratio ≤ 1.01 in the top-16 PCA space,
one-layer Bures–Wasserstein error 11–18 % of ``sqrt(tr Σ̂)``) and become clearly
non-Gaussian in layers 3–5 (PCA-16 Mardia kurtosis z from 19 to ~1000, skewness 17–190×
the Gaussian reference, W2 ratio 1.04–1.7; open-loop error 48 % → 170 %). The attention
moment ODE over unit time blows up (Riccati, docs/theory.md §7) for some layers; the discrete map
is the better description of a residual layer.
"""

from __future__ import annotations

import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, NamedTuple

import numpy as np
from scipy import stats as sps

from ..infra.io import check_finite, write_csv, write_json
from .bert import MODEL_PACKAGE, BertEncoder, load_bert
from .moments import (
    Moments,
    attention_moment_map,
    attention_moment_ode,
    bures_wasserstein,
    ffn_moment_map,
    layer_norm_moment_map,
)

__all__ = [
    "STAGES",
    "MardiaStats",
    "W2Gap",
    "StageGaussianity",
    "PretrainedGaussianity",
    "mardia",
    "whiten",
    "pca_project",
    "w2_to_moment_matched",
    "sample_gaussian",
    "gaussianity_study",
    "pretrained_gaussianity",
    "write_pretrained_report",
]

logger = logging.getLogger(__name__)

#: Sublayer stages recorded in every layer, in order.
STAGES = ("attn", "ln1", "ffn", "out")
#: Eigenvalues below this fraction of the largest are treated as zero (the support of the
#: token cloud; LayerNorm outputs have an exactly null direction).
RANK_RTOL = 1e-10


# ----------------------------------------------------------------------------- statistics
class MardiaStats(NamedTuple):
    """Mardia's multivariate skewness and kurtosis of ``n`` points of rank ``dim``.

    ``b1 = (1/n²) Σ_ij (z_iᵀ S⁻¹ z_j)³``, ``b2 = (1/n) Σ_i (z_iᵀ S⁻¹ z_i)²`` with
    ``z = x − x̄`` and ``S`` the covariance with divisor ``n``. Under Gaussianity (``n → ∞``)
    ``n b1 / 6 ~ χ²`` with ``dim(dim+1)(dim+2)/6`` degrees of freedom and
    ``b2 ~ N(dim(dim+2)(n−1)/(n+1), 8 dim(dim+2)/n)``.
    """

    n: int
    dim: int
    b1: float
    b2: float
    skew_stat: float
    skew_dof: float
    skew_pvalue: float
    kurt_mean: float
    kurt_sd: float
    kurt_z: float
    kurt_pvalue: float


def whiten(x: np.ndarray, *, rtol: float = RANK_RTOL) -> np.ndarray:
    """Centred, whitened coordinates ``(n, r)`` on the support of the sample covariance."""
    x = np.asarray(x, float)
    c = x - x.mean(axis=0)
    S = (c.T @ c) / x.shape[0]
    w, U = np.linalg.eigh(0.5 * (S + S.T))
    if not w[-1] > 0:
        raise ValueError("whiten: the sample has zero covariance")
    keep = w > rtol * w[-1]
    return (c @ U[:, keep]) / np.sqrt(w[keep])


def mardia(x: np.ndarray, *, rtol: float = RANK_RTOL, block: int = 1024) -> MardiaStats:
    """Mardia skewness / kurtosis of the rows of ``x`` (``O(n² r)``), see :class:`MardiaStats`.

    The statistics are computed on the support of the covariance (rank ``r``). Needs
    ``n > r + 1`` (otherwise every Mahalanobis norm is the same and the test is void).
    """
    x = np.asarray(x, float)
    if x.ndim != 2:
        raise ValueError(f"mardia: expected an (n, d) array, got shape {x.shape}")
    n = x.shape[0]
    z = whiten(x, rtol=rtol)
    r = z.shape[1]
    if n <= r + 1:
        raise ValueError(f"mardia: need more points than dimensions + 1 (n = {n}, rank {r}); "
                         "use more samples or a PCA-reduced space")
    b1 = 0.0
    for i0 in range(0, n, block):
        G = z[i0:i0 + block] @ z.T
        b1 += float(np.sum(G * G * G))
    b1 /= n * n
    b2 = float(np.mean(np.sum(z * z, axis=1) ** 2))
    dof = r * (r + 1) * (r + 2) / 6.0
    stat = n * b1 / 6.0
    kmean = r * (r + 2) * (n - 1) / (n + 1)
    ksd = float(np.sqrt(8.0 * r * (r + 2) / n))
    kz = (b2 - kmean) / ksd
    return MardiaStats(n, r, b1, b2, stat, dof, float(sps.chi2.sf(stat, dof)), kmean, ksd,
                       float(kz), float(2 * sps.norm.sf(abs(kz))))


def pca_project(x: np.ndarray, p: int) -> np.ndarray:
    """Coordinates of the centred rows of ``x`` in its top-``p`` principal directions."""
    c = x - x.mean(axis=0)
    S = (c.T @ c) / x.shape[0]
    _, U = np.linalg.eigh(0.5 * (S + S.T))
    return c @ U[:, ::-1][:, :p]


def sample_gaussian(mom: Moments, n: int, rng: np.random.Generator) -> np.ndarray:
    """``n`` samples of ``N(m, S)`` (PSD ``S`` through its eigen-decomposition)."""
    w, U = np.linalg.eigh(0.5 * (mom.S + mom.S.T))
    L = U * np.sqrt(np.clip(w, 0.0, None))
    return mom.m + rng.standard_normal((n, w.size)) @ L.T


class W2Gap(NamedTuple):
    """Empirical W2 to the moment-matched Gaussian and its Gaussian floor.

    Attributes
    ----------
    n_ot : points on each side of the OT problems
    w2 : ``W2(tokens, Gaussian sample)``
    w2_null : ``W2(Gaussian sample', Gaussian sample)`` (both from ``N(m̂, Σ̂)``)
    ratio : ``w2 / w2_null`` (≈ 1 for Gaussian tokens)
    excess : ``sqrt(max(w2² − w2_null², 0))`` — a debiased distance estimate
    scale : ``sqrt(tr Σ̂)`` (to compare across layers)
    """

    n_ot: int
    w2: float
    w2_null: float
    ratio: float
    excess: float
    scale: float


def w2_to_moment_matched(x: np.ndarray, rng: np.random.Generator, *,
                         n_ot: int = 1000) -> W2Gap:
    """Exact empirical W2 (POT ``ot.emd2``) between tokens and their moment-matched Gaussian."""
    import ot

    x = np.asarray(x, float)
    n = min(int(n_ot), x.shape[0])
    if n < 2:
        raise ValueError(f"n_ot: need at least 2 points, got {n}")
    mom = Moments.of(x)
    xs = x[rng.choice(x.shape[0], size=n, replace=False)] if n < x.shape[0] else x
    g1 = sample_gaussian(mom, n, rng)
    g2 = sample_gaussian(mom, n, rng)
    a = np.full(n, 1.0 / n)

    def w2(p: np.ndarray, q: np.ndarray) -> float:
        cost = ot.dist(p, q)  # squared Euclidean
        return float(np.sqrt(max(ot.emd2(a, a, cost, numItermax=10_000_000), 0.0)))

    d_tok, d_null = w2(xs, g1), w2(g2, g1)
    return W2Gap(n, d_tok, d_null, d_tok / d_null, float(np.sqrt(max(d_tok ** 2 - d_null ** 2,
                                                                      0.0))),
                 float(np.sqrt(np.trace(mom.S))))


# ----------------------------------------------------------------------------- results
@dataclass(frozen=True)
class StageGaussianity:
    """Gaussianity of the tokens after one stage of one layer.

    Attributes
    ----------
    layer : int
        Encoder layer (``-1`` for the Gaussian input).
    stage : str
        ``"input"`` or one of :data:`STAGES`.
    mean_norm, cov_trace : float
        ``|m̂|`` and ``tr Σ̂``; ``token_norm`` the root-mean-square token norm.
    mardia, mardia_null : dict space → MardiaStats
        Spaces ``"full"`` and ``"pca{p}"``; ``mardia_null`` for a Gaussian reference sample.
    w2 : dict space → W2Gap
        Only for the input and layer outputs.
    prediction : dict of float
        Moment-map prediction of this stage from the measured moments of its input
        (``bw_pred``, ``rel_scale = bw_pred / sqrt(tr Σ̂)``, ``rel_move = bw_pred / bw_move``,
        ``mean_rel``, ``cov_rel`` (Frobenius), ``bw_sampling``; attention also ``*_ode``).
    """

    layer: int
    stage: str
    mean_norm: float
    cov_trace: float
    token_norm: float
    mardia: dict[str, MardiaStats]
    mardia_null: dict[str, MardiaStats]
    w2: dict[str, W2Gap] = field(default_factory=dict)
    prediction: dict[str, float] = field(default_factory=dict)

    def row(self) -> dict[str, float | str]:
        """Flat record (CSV row)."""
        out: dict[str, float | str] = {"layer": self.layer, "stage": self.stage,
                                       "mean_norm": self.mean_norm, "cov_trace": self.cov_trace,
                                       "token_norm": self.token_norm}
        for space, ms in self.mardia.items():
            null = self.mardia_null[space]
            out.update({f"{space}_dim": ms.dim, f"{space}_b1": ms.b1,
                        f"{space}_b1_null": null.b1, f"{space}_skew_pvalue": ms.skew_pvalue,
                        f"{space}_b2": ms.b2, f"{space}_b2_null": null.b2,
                        f"{space}_kurt_mean": ms.kurt_mean, f"{space}_kurt_z": ms.kurt_z,
                        f"{space}_kurt_z_null": null.kurt_z,
                        f"{space}_kurt_pvalue": ms.kurt_pvalue})
        for space, g in self.w2.items():
            out.update({f"{space}_w2": g.w2, f"{space}_w2_null": g.w2_null,
                        f"{space}_w2_ratio": g.ratio, f"{space}_w2_excess": g.excess})
        out.update({f"pred_{k}": v for k, v in self.prediction.items()})
        return out


@dataclass(frozen=True)
class PretrainedGaussianity:
    """Result of :func:`gaussianity_study`.

    Attributes
    ----------
    status : {"success", "failed"}
    message : str
    model : dict
        Source and config of the encoder.
    n_samples, seed, input_kind, pca_dim, layers, spaces
        The study's settings (``layers``: the encoder layers reported).
    stages : tuple of StageGaussianity
        The Gaussian input, then the stages of every reported layer.
    layer_predictions : dict layer → dict
        ``one_layer`` and ``open_loop`` prediction errors of every layer output
        (``bw``, ``rel_scale``) and the attention entropy per head (nats; ``log n`` is uniform).
    notes : tuple of str
        Things to know (e.g. a moment ODE that blew up, skipped full-space statistics).
    wall_time : float
        Seconds.
    """

    status: str
    message: str
    model: dict[str, Any]
    n_samples: int
    seed: int
    input_kind: str
    pca_dim: int | None
    layers: tuple[int, ...]
    spaces: tuple[str, ...]
    stages: tuple[StageGaussianity, ...]
    layer_predictions: dict[int, dict[str, Any]]
    notes: tuple[str, ...] = ()
    wall_time: float = 0.0

    def stage(self, layer: int, stage: str) -> StageGaussianity:
        """The record of ``stage`` in ``layer`` (``layer=-1, stage="input"`` for the input)."""
        for s in self.stages:
            if s.layer == layer and s.stage == stage:
                return s
        raise KeyError(f"no stage {stage!r} in layer {layer}")

    def layer_rows(self, layer: int) -> dict[str, list]:
        """CSV columns for one layer (rows: its stages)."""
        rows = [s.row() for s in self.stages if s.layer == layer]
        keys: list[str] = []
        for r in rows:
            keys += [k for k in r if k not in keys]
        return {k: [r.get(k, float("nan")) for r in rows] for k in keys}

    def summary(self) -> dict[str, Any]:
        """Compact per-layer table: kurtosis z, skewness ratio, W2 ratio, prediction errors."""
        out: dict[str, Any] = {}
        for s in self.stages:
            if s.stage not in ("input", "out"):
                continue
            key = "input" if s.stage == "input" else f"layer{s.layer}"
            rec: dict[str, Any] = {}
            for space, ms in s.mardia.items():
                null = s.mardia_null[space]
                rec[f"{space}_kurt_z"] = ms.kurt_z
                rec[f"{space}_kurt_z_null"] = null.kurt_z
                rec[f"{space}_skew_ratio"] = ms.b1 / null.b1 if null.b1 > 0 else float("nan")
            for space, g in s.w2.items():
                rec[f"{space}_w2_ratio"] = g.ratio
            if s.layer in self.layer_predictions:
                lp = self.layer_predictions[s.layer]
                rec["one_layer_rel"] = lp["one_layer"]["rel_scale"]
                rec["open_loop_rel"] = lp["open_loop"]["rel_scale"]
                rec["attn_rel"] = self.stage(s.layer, "attn").prediction["rel_scale"]
            out[key] = rec
        return out

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (summary first, then every stage in full)."""
        return {
            "status": self.status, "message": self.message, "model": self.model,
            "n_samples": self.n_samples, "seed": self.seed, "input": self.input_kind,
            "pca_dim": self.pca_dim, "layers": list(self.layers), "spaces": list(self.spaces),
            "wall_time": self.wall_time, "notes": list(self.notes),
            "summary": self.summary(),
            "layer_predictions": {str(k): v for k, v in self.layer_predictions.items()},
            "stages": [{"layer": s.layer, "stage": s.stage, "mean_norm": s.mean_norm,
                        "cov_trace": s.cov_trace, "token_norm": s.token_norm,
                        "mardia": {k: v._asdict() for k, v in s.mardia.items()},
                        "mardia_null": {k: v._asdict() for k, v in s.mardia_null.items()},
                        "w2": {k: v._asdict() for k, v in s.w2.items()},
                        "prediction": s.prediction} for s in self.stages],
        }


# ----------------------------------------------------------------------------- study
def _pred_errors(pred: Moments, src: Moments, out: Moments, floor: float) -> dict[str, float]:
    bw = bures_wasserstein(pred.m, pred.S, out.m, out.S)
    move = bures_wasserstein(src.m, src.S, out.m, out.S)
    scale = float(np.sqrt(np.trace(out.S)))
    return {
        "bw_pred": bw,
        "bw_move": move,
        "rel_scale": bw / scale,
        "rel_move": bw / move if move > 0 else float("inf"),
        "mean_rel": float(np.linalg.norm(pred.m - out.m) / max(np.linalg.norm(out.m), scale)),
        "cov_rel": float(np.linalg.norm(pred.S - out.S) / np.linalg.norm(out.S)),
        "bw_sampling": floor,
    }


def _stage_maps(enc: BertEncoder, ell: int, mom: Moments, *, ode_steps: int,
                hermite_order: int) -> dict[str, Moments]:
    """The four stage maps of layer ``ell`` composed from ``mom`` (predicted moments)."""
    lay, eps = enc.layers[ell], enc.config.layer_norm_eps
    a = attention_moment_map(lay, enc.config, mom.m, mom.S)
    u = layer_norm_moment_map(lay.ln1_g, lay.ln1_b, eps, a.m, a.S)
    r, _ = ffn_moment_map(lay, u.m, u.S, order=hermite_order)
    o = layer_norm_moment_map(lay.ln2_g, lay.ln2_b, eps, r.m, r.S)
    return {"attn": a, "ln1": u, "ffn": r, "out": o}


def gaussianity_study(encoder: BertEncoder, *, n_samples: int, seed: int,
                      layers: list[int] | None = None, pca_dim: int | None = None,
                      input_kind: Literal["embedding", "standard"] = "embedding",
                      n_ot: int = 1000, ode_steps: int = 16, hermite_order: int = 40,
                      null: bool = True) -> PretrainedGaussianity:
    """Per-layer Gaussianity of ``encoder`` fed with ``n_samples`` Gaussian tokens.

    Parameters
    ----------
    encoder : BertEncoder
    n_samples : int
        Number of tokens ``n`` (one sequence; cost ``O(L H n² k + n² d)``).
    seed : int
        Seed of the Gaussian tokens and of the reference samples.
    layers : list of int, optional
        Encoder layers (0-based) to report; all by default. The encoder runs up to the
        largest one.
    pca_dim : int, optional
        Also compute the statistics in the top-``pca_dim`` principal subspace of each stage.
    input_kind : {"embedding", "standard"}
        ``N(m₀, Σ₀)`` moment-matched to the embedding outputs (needs embedding tables), or
        ``N(0, I_d)``.
    n_ot : int
        Points per side of the empirical OT problems (``O(n_ot³)``; 0 disables them).
    ode_steps : int
        RK4 steps of the attention moment ODE over unit time.
    hermite_order : int
        Mehler terms of the feed-forward covariance.
    null : bool
        Compute the Mardia statistics of Gaussian reference samples.

    Returns
    -------
    PretrainedGaussianity
    """
    t0 = time.perf_counter()
    cfg = encoder.config
    d, L = cfg.hidden_size, cfg.num_hidden_layers
    n = int(n_samples)
    if n < 3:
        raise ValueError(f"n_samples: need at least 3 tokens, got {n_samples}")
    sel = list(range(L)) if layers is None else sorted({int(v) for v in layers})
    if not sel or min(sel) < 0 or max(sel) >= L:
        raise ValueError(f"layers: indices must lie in [0, {L - 1}], got {layers}")
    if pca_dim is not None and not 1 <= int(pca_dim) < d:
        raise ValueError(f"pca_dim: must lie in [1, {d - 1}], got {pca_dim}")
    if input_kind not in ("embedding", "standard"):
        raise ValueError(f"input: must be 'embedding' or 'standard', got {input_kind!r}")
    notes: list[str] = []
    spaces: list[str] = []
    if n > d + 1:
        spaces.append("full")
    else:
        notes.append(f"full-space Mardia statistics skipped: n_samples = {n} <= d + 1 = {d + 1}")
    if pca_dim is not None:
        if n <= int(pca_dim) + 1:
            raise ValueError(f"n_samples: need more than pca_dim + 1 = {int(pca_dim) + 1} "
                             f"tokens, got {n}")
        spaces.append(f"pca{int(pca_dim)}")
    if not spaces:
        raise ValueError(f"n_samples: {n} tokens in d = {d} need n_samples > {d + 1} for "
                         "full-space statistics, or pass pca_dim")

    ss = np.random.SeedSequence(int(seed))
    rng_in, rng_null, rng_ot = (np.random.default_rng(s) for s in ss.spawn(3))
    if input_kind == "embedding":
        mom0 = Moments(*encoder.embedding_moments())
    else:
        mom0 = Moments(np.zeros(d), np.eye(d))
    x = sample_gaussian(mom0, n, rng_in)

    null_cache: dict[int, MardiaStats] = {}

    def spaces_of(z: np.ndarray) -> dict[str, np.ndarray]:
        out = {}
        for sp in spaces:
            out[sp] = z if sp == "full" else pca_project(z, int(pca_dim))
        return out

    def gauss_stats(z: np.ndarray, *, with_w2: bool) -> tuple[dict, dict, dict, float, Moments]:
        mom = Moments.of(z)
        ref = sample_gaussian(mom, n, rng_null)
        ms, mn, w2 = {}, {}, {}
        for sp, zz in spaces_of(z).items():
            ms[sp] = mardia(zz)
            if not null:
                continue
            if sp == "full":  # affine invariance: the null depends on (n, rank) only
                r = ms[sp].dim
                if r not in null_cache:
                    null_cache[r] = mardia(rng_null.standard_normal((n, r)))
                mn[sp] = null_cache[r]
            else:
                mn[sp] = mardia(pca_project(ref, int(pca_dim)))
        if with_w2 and n_ot > 0:
            for sp, zz in spaces_of(z).items():
                w2[sp] = w2_to_moment_matched(zz, rng_ot, n_ot=n_ot)
        rm = Moments.of(ref)
        floor = bures_wasserstein(rm.m, rm.S, mom.m, mom.S)
        return ms, mn, w2, floor, mom

    def record(ell: int, stage: str, z: np.ndarray, *, with_w2: bool,
               pred: dict[str, float] | None = None) -> tuple[StageGaussianity, float, Moments]:
        ms, mn, w2, floor, mom = gauss_stats(z, with_w2=with_w2)
        st = StageGaussianity(ell, stage, float(np.linalg.norm(mom.m)), float(np.trace(mom.S)),
                              float(np.sqrt(np.mean(np.sum(z * z, axis=1)))), ms, mn, w2,
                              pred or {})
        return st, floor, mom

    stages: list[StageGaussianity] = []
    st, _, mom_x = record(-1, "input", x, with_w2=True)
    stages.append(st)
    layer_pred: dict[int, dict[str, Any]] = {}
    open_mom = mom0
    status, message = "success", ""
    try:
        for ell in range(max(sel) + 1):
            tr = encoder.layer_trace(ell, x)
            lay = encoder.layers[ell]
            report = ell in sel
            open_maps = _stage_maps(encoder, ell, open_mom, ode_steps=ode_steps,
                                    hermite_order=hermite_order)
            open_mom = open_maps["out"]
            if report:
                one = _stage_maps(encoder, ell, mom_x, ode_steps=ode_steps,
                                  hermite_order=hermite_order)
                src = mom_x
                states = {"attn": tr.attn_residual, "ln1": tr.attn_out,
                          "ffn": tr.ffn_residual, "out": tr.out}
                measured: dict[str, Moments] = {}
                for stage in STAGES:
                    z = states[stage]
                    mom = Moments.of(z)
                    if stage == "attn":
                        pred_m = attention_moment_map(lay, cfg, src.m, src.S)
                    elif stage == "ln1":
                        pred_m = layer_norm_moment_map(lay.ln1_g, lay.ln1_b, cfg.layer_norm_eps,
                                                       src.m, src.S)
                    elif stage == "ffn":
                        pred_m, bound = ffn_moment_map(lay, src.m, src.S, order=hermite_order)
                    else:
                        pred_m = layer_norm_moment_map(lay.ln2_g, lay.ln2_b, cfg.layer_norm_eps,
                                                       src.m, src.S)
                    st, floor, _ = record(ell, stage, z, with_w2=(stage == "out"))
                    pred = _pred_errors(pred_m, src, mom, floor)
                    if stage == "ffn":
                        pred["mehler_bound"] = bound
                    if stage == "attn":
                        ode = attention_moment_ode(lay, cfg, src.m, src.S, steps=ode_steps)
                        if np.all(np.isfinite(ode.m)) and np.all(np.isfinite(ode.S)):
                            pe = _pred_errors(ode, src, mom, floor)
                            pred.update({f"{k}_ode": v for k, v in pe.items()
                                         if k in ("bw_pred", "rel_scale", "rel_move")})
                        else:
                            notes.append(f"layer {ell}: attention moment ODE blew up before t=1")
                    stages.append(StageGaussianity(st.layer, st.stage, st.mean_norm,
                                                   st.cov_trace, st.token_norm, st.mardia,
                                                   st.mardia_null, st.w2, pred))
                    measured[stage] = mom
                    src = mom
                out_m = measured["out"]
                scale = float(np.sqrt(np.trace(out_m.S)))
                bw1 = bures_wasserstein(one["out"].m, one["out"].S, out_m.m, out_m.S)
                bwo = bures_wasserstein(open_mom.m, open_mom.S, out_m.m, out_m.S)
                layer_pred[ell] = {
                    "one_layer": {"bw": bw1, "rel_scale": bw1 / scale},
                    "open_loop": {"bw": bwo, "rel_scale": bwo / scale},
                    "attention_entropy": tr.stats.entropy.tolist(),
                    "attention_max_score": tr.stats.max_score.tolist(),
                    "log_n": float(np.log(n)),
                }
                logger.info("layer %d: kurt z %s, one-layer rel %.3g, open-loop rel %.3g", ell,
                            {k: round(v.kurt_z, 1) for k, v in stages[-1].mardia.items()},
                            bw1 / scale, bwo / scale)
            x = tr.out
            mom_x = Moments.of(x)
        for s in stages:
            check_finite(f"stage[{s.layer},{s.stage}]", s.row())
        check_finite("layer_predictions", layer_pred)
    except FloatingPointError as exc:
        status, message = "failed", str(exc)
        warnings.warn(f"pretrained gaussianity study failed: {exc}", RuntimeWarning,
                      stacklevel=2)
        logger.error("gaussianity study failed: %s", exc)
    return PretrainedGaussianity(
        status, message, {"name": _model_name(encoder.source), "source": encoder.source,
                          "config": cfg.to_dict()}, n, int(seed),
        input_kind, None if pca_dim is None else int(pca_dim), tuple(sel), tuple(spaces),
        tuple(stages), layer_pred, tuple(notes), time.perf_counter() - t0)


def _model_name(source: str) -> str:
    if MODEL_PACKAGE in source:
        return "all-MiniLM-L6-v2"
    p = Path(source)
    return p.parent.name if p.name == "model.safetensors" else (p.stem or source)


def pretrained_gaussianity(*, n_samples: int, seed: int, layers: list[int] | None = None,
                           pca_dim: int | None = None, model_path: str | None = None,
                           **options: Any) -> PretrainedGaussianity:
    """:func:`gaussianity_study` on all-MiniLM-L6-v2 (or the model at ``model_path``).

    Raises
    ------
    ImportError, FileNotFoundError
        The ``wflow[models]`` extra is missing (the message says ``pip install
        'wflow[models]'``) or ``model_path`` does not exist.
    """
    enc = load_bert(model_path)  # ImportError / FileNotFoundError name INSTALL_HINT
    return gaussianity_study(enc, n_samples=n_samples, seed=seed, layers=layers,
                             pca_dim=pca_dim, **options)


# ----------------------------------------------------------------------------- report
def write_pretrained_report(result: PretrainedGaussianity, out_dir: str | Path, *,
                            plot: bool = True) -> Path:
    """Write ``summary.json``, ``layer_input.csv``, ``layer{ℓ}.csv`` and ``gaussianity.png``.

    Every file is written atomically into ``out_dir`` (created if needed; other files in it
    are left alone — wrap the call in :func:`wflow.infra.io.run_directory` for an all-or-nothing
    directory). The plot is skipped with a note in the summary when matplotlib is missing.
    CSV rows are the stages ``stage_index`` 0 = input, 1 = attn, 2 = ln1, 3 = ffn, 4 = out.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    payload = result.to_dict()
    write_csv(out / "layer_input.csv", _numeric(result.layer_rows(-1)))
    for ell in result.layers:
        write_csv(out / f"layer{ell}.csv", _numeric(result.layer_rows(ell)))
    if plot and result.status == "success":
        try:
            _plot(result, out / "gaussianity.png")
        except ImportError:
            payload["notes"].append("plot skipped: matplotlib not installed "
                                    "(pip install 'wflow[plot]')")
    write_json(out / "summary.json", payload)
    return out


def _numeric(cols: dict[str, list]) -> dict[str, np.ndarray]:
    """Columns for :func:`wflow.infra.io.write_csv` (the stage name becomes an index column)."""
    out: dict[str, Any] = {}
    for k, v in cols.items():
        if k == "stage":
            out["stage_index"] = np.array([(("input",) + STAGES).index(s) for s in v], float)
        else:
            out[k] = np.asarray(v, float)
    return out


def _plot(result: PretrainedGaussianity, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from ..infra.io import atomic_write_bytes

    labels, idx = [], []
    rows: list[StageGaussianity] = []
    for s in result.stages:
        labels.append("in" if s.stage == "input" else f"{s.layer}.{s.stage}")
        idx.append(len(idx))
        rows.append(s)
    fig, axes = plt.subplots(2, 2, figsize=(12, 8))
    ax = axes[0, 0]
    for sp in result.spaces:
        ax.plot(idx, [r.mardia[sp].kurt_z for r in rows], "o-", label=f"{sp}")
        if rows[0].mardia_null:
            ax.plot(idx, [r.mardia_null[sp].kurt_z for r in rows], "x:", label=f"{sp} null")
    ax.axhspan(-2, 2, color="0.85")
    ax.set_ylabel("Mardia kurtosis z")
    ax.set_yscale("symlog", linthresh=10)
    ax.legend(fontsize=7)
    ax = axes[0, 1]
    for sp in result.spaces:
        if rows[0].mardia_null:
            ax.plot(idx, [r.mardia[sp].b1 / r.mardia_null[sp].b1 for r in rows], "o-",
                    label=sp)
    ax.axhline(1.0, color="k", lw=0.5)
    ax.set_yscale("log")
    ax.set_ylabel("Mardia skewness b1 / b1(Gaussian ref.)")
    ax.legend(fontsize=7)
    for ax in axes[0]:
        ax.set_xticks(idx)
        ax.set_xticklabels(labels, rotation=90, fontsize=6)
    ax = axes[1, 0]
    outs = [s for s in rows if s.w2]
    for sp in result.spaces:
        ax.plot([s.layer for s in outs], [s.w2[sp].ratio for s in outs], "o-", label=sp)
    ax.axhline(1.0, color="k", lw=0.5)
    ax.set_xlabel("layer (−1 = Gaussian input)")
    ax.set_ylabel("W2(tokens, N(m̂,Σ̂)) / W2(Gaussian, Gaussian)")
    ax.legend(fontsize=7)
    ax = axes[1, 1]
    ls = sorted(result.layer_predictions)
    ax.plot(ls, [result.layer_predictions[ell]["one_layer"]["rel_scale"] for ell in ls], "o-",
            label="one layer")
    ax.plot(ls, [result.layer_predictions[ell]["open_loop"]["rel_scale"] for ell in ls], "s-",
            label="open loop")
    ax.plot(ls, [result.stage(ell, "attn").prediction["rel_scale"] for ell in ls], "^-",
            label="attention map")
    if all("rel_scale_ode" in result.stage(ell, "attn").prediction for ell in ls):
        ax.plot(ls, [result.stage(ell, "attn").prediction["rel_scale_ode"] for ell in ls],
                "v--", label="attention ODE")
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("BW(predicted, measured) / sqrt(tr Σ̂)")
    ax.legend(fontsize=7)
    fig.suptitle(f"Gaussian tokens through {result.model.get('name', 'the encoder')}"
                 f" (n = {result.n_samples}, input {result.input_kind})")
    fig.tight_layout()
    import io as _io

    buf = _io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())
