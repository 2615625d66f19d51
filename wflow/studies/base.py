"""Shared pieces of the verification studies: result type, fits, output writing.

A study is a module ``wflow.studies.<name>`` exposing
``run(*, out: Path, quick: bool, seed: int) -> StudyResult``; it computes, fits the
quantities the theory predicts, compares them with the prediction (a *verdict*), and
writes ``summary.json`` and a plot into ``out`` (atomically).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..io import check_finite, run_directory, write_json
from ..parallel import comm_rank_size

__all__ = ["StudyResult", "fit_loglog", "LogLogFit", "write_study"]


@dataclass(frozen=True)
class StudyResult:
    """Outcome of one study.

    Attributes
    ----------
    name : str
        Study name (as in ``wflow verify <name>``).
    summary : dict
        Fitted quantities, raw series and settings (written to ``summary.json``).
    verdict : str
        One or two sentences comparing the fit with the theory.
    passed : bool
        Whether the fit agrees with the theory within the stated tolerance.
    figures : tuple of str
        Paths of the plots written.
    """

    name: str
    summary: dict[str, Any]
    verdict: str
    passed: bool
    figures: tuple[str, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class LogLogFit:
    """Least-squares fit ``log y = slope · log x + intercept`` with the slope's standard error.

    ``stderr`` is ``None`` for a two-point fit (no residual degrees of freedom).
    """

    slope: float
    intercept: float
    stderr: float | None

    def as_dict(self) -> dict[str, float | None]:
        """Plain dict for JSON."""
        return {"slope": self.slope, "intercept": self.intercept, "stderr": self.stderr}


def fit_loglog(x: np.ndarray, y: np.ndarray) -> LogLogFit:
    """Fit a power law ``y ≈ C x^slope`` on a log–log scale (needs ≥ 2 positive points)."""
    x, y = np.asarray(x, float), np.abs(np.asarray(y, float))
    ok = (x > 0) & (y > 0) & np.isfinite(x) & np.isfinite(y)
    if ok.sum() < 2:
        raise ValueError("fit_loglog: need at least two positive, finite points")
    lx, ly = np.log(x[ok]), np.log(y[ok])
    A = np.vstack([lx, np.ones_like(lx)]).T
    coef, res, *_ = np.linalg.lstsq(A, ly, rcond=None)
    n = lx.size
    if n > 2:
        s2 = float(np.sum((ly - A @ coef) ** 2) / (n - 2))
        se = float(np.sqrt(s2 / np.sum((lx - lx.mean()) ** 2)))
    else:
        se = None
    return LogLogFit(float(coef[0]), float(coef[1]), se)


def write_study(out: str | Path, result: StudyResult, make_plot=None) -> StudyResult:
    """Write ``summary.json`` (+ plot via ``make_plot(stage_dir) -> list of filenames``).

    Refuses non-finite fitted numbers (``FloatingPointError``) so a study never reports
    success with NaN/Inf. Under MPI only rank 0 writes. Returns the result with the
    figure paths filled in.
    """
    check_finite(f"{result.name}.fits", result.summary.get("fits", {}))
    if comm_rank_size()[1] != 0:  # under MPI only rank 0 writes
        return result
    out = Path(out)
    with run_directory(out) as stage:
        figs = tuple(make_plot(stage) if make_plot is not None else ())
        result = StudyResult(result.name, result.summary, result.verdict, result.passed,
                             tuple(str(out / f) for f in figs))
        write_json(stage / "summary.json", {"study": result.name, "passed": result.passed,
                                            "verdict": result.verdict, "figures": list(figs),
                                            **result.summary})
    return result
