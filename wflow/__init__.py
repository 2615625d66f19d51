"""wflow: the mean-field dynamics of transformers, computed and verified.

Tokens are points on ``S^{d-1}``, attention heads move them, depth is time.
See ``THEORY.md`` (shipped in the repository) for every formula.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .energy import FieldEval, SlopeTerms, evaluate, head_energies, slope_terms
from .heads import Attention, Heads
from .kernels import KernelSums, kernel_sums

__all__ = [
    "__version__",
    "Attention",
    "Heads",
    "KernelSums",
    "kernel_sums",
    "FieldEval",
    "SlopeTerms",
    "evaluate",
    "head_energies",
    "slope_terms",
]
