"""JKO hook of the ``edi`` study: the summed EDI residual of the JKO scheme vs ``τ``.

Re-exports :func:`wflow.jko.jko_refinement` (see there for the settings).
"""

from __future__ import annotations

from ..jko import jko_refinement

__all__ = ["jko_refinement"]
