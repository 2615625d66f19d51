"""The results of the Gaussianity study: one stage of one layer, and the whole pretrained model.

Part of :mod:`wflow.models.gaussianity` (the package re-exports its names).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .statistics import MardiaStats, W2Gap


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
