"""``wflow verify`` studies of THEORY.md §6 ([MH] multi-head results).

Merged into the ``wflow verify`` registry by :mod:`wflow.studies.registry`.
"""

from __future__ import annotations

__all__ = ["STUDIES"]

#: Study name → module exposing ``run(*, out, quick, seed) -> StudyResult``.
STUDIES: dict[str, str] = {
    "radial-dominance": "wflow.studies.radial_dominance",
    "head-monotonicity": "wflow.studies.head_monotonicity",
    "equiangular": "wflow.studies.equiangular",
    "superadditivity": "wflow.studies.superadditivity",
    "relu-vs-softmax": "wflow.studies.relu_vs_softmax",
    "entropy": "wflow.studies.entropy",
}
