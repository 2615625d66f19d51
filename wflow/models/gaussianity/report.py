"""The Gaussianity study's report: tables, numeric columns and its figure.

Part of :mod:`wflow.models.gaussianity` (the package re-exports its names).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from ...infra.io import write_csv, write_json
from .results import PretrainedGaussianity, StageGaussianity
from .statistics import STAGES


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

    from ...infra.io import atomic_write_bytes

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
