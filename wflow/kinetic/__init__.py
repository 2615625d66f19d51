"""The kinetic (mean-field) limit of causal attention: a family of densities in the position.

A decoder's tokens at positions ``i = 1..n`` become, as ``n → ∞``, a family ``ρ_t(s, ·)``
of densities on S², ``s = i/n ∈ [0, 1]``; the density at ``s`` is transported by the
attention to the cumulative measure ``∫_0^s e^{b(s, s')} ρ(s', ·) ds'`` (docs/theory.md,
the kinetic limit of causal attention). :func:`solve_kinetic` discretises ``s`` by ``S``
slices and the sphere by the finite volumes of :mod:`wflow.pde`.

Rooms:

* :mod:`~wflow.kinetic.options` — :class:`KineticOptions` (and the ``[kinetic]`` schema);
* :mod:`~wflow.kinetic.slices` — slice centres and the quadrature of the cumulative measure
  (:class:`CumulativeMeasure`, prefix sums);
* :mod:`~wflow.kinetic.solver` — :func:`iterate_kinetic` (generator), :func:`solve_kinetic`;
* :mod:`~wflow.kinetic.result` — :class:`KineticResult`.
"""

from .options import KINETIC_SCHEMA, KINETIC_SPEC, QUADRATURES, KineticOptions
from .result import KineticResult
from .slices import CumulativeMeasure, slice_centres
from .solver import KineticState, initial_slices, iterate_kinetic, solve_kinetic

__all__ = [
    "KineticOptions",
    "KineticResult",
    "KineticState",
    "CumulativeMeasure",
    "QUADRATURES",
    "KINETIC_SCHEMA",
    "KINETIC_SPEC",
    "initial_slices",
    "iterate_kinetic",
    "slice_centres",
    "solve_kinetic",
]
