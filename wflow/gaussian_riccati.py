"""Moved to :mod:`wflow.gaussian.riccati` and :mod:`wflow.gaussian.classify` (imports kept)."""

from .gaussian.classify import LABELS, Classification, PhaseDiagram, classify, phase_diagram
from .gaussian.riccati import (
    Equilibrium,
    equilibria,
    riccati_linearisation,
    riccati_residual,
    sym_basis,
)

__all__ = ["Equilibrium", "Classification", "PhaseDiagram", "LABELS", "riccati_residual",
           "riccati_linearisation", "sym_basis", "equilibria", "classify", "phase_diagram"]
