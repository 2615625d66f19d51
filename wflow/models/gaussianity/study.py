"""The Gaussianity study: a trained encoder's token clouds, stage by stage, against the moment maps.

Part of :mod:`wflow.models.gaussianity` (the package re-exports its names).
"""

from __future__ import annotations

import logging
import time
import warnings
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ...infra.io import check_finite
from ..bert import MODEL_PACKAGE, BertEncoder, load_bert
from ..moments import (
    Moments,
    attention_moment_map,
    attention_moment_ode,
    bures_wasserstein,
    ffn_moment_map,
    layer_norm_moment_map,
)
from .results import PretrainedGaussianity, StageGaussianity
from .statistics import (
    STAGES,
    MardiaStats,
    mardia,
    pca_project,
    sample_gaussian,
    w2_to_moment_matched,
)

logger = logging.getLogger(__name__)


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
