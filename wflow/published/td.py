"""The published [TD] experiments' conventions (docs/theory.md §5), for users.

They live below the engine, in :mod:`wflow.attention.published` (the compiled particle loop
recognises :class:`PublishedFrames`; a verification study builds the published heads); this
module re-exports them under the name of the reproductions' package.
"""

from __future__ import annotations

from ..attention import published as _published
from ..attention.published import (  # noqa: F401  (re-exported: __all__ below)
    HEAD_GENERATORS,
    PublishedFrames,
    published_frames,
    published_heads,
    published_ou,
    published_relaxed,
    published_vertices,
    sample_published_clusters,
    torch_cpu_normal,
)

#: The same names as :mod:`wflow.attention.published` (defined once, there).
__all__ = list(_published.__all__)
