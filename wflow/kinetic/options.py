"""Options of the kinetic (causal mean-field) solver and the ``[kinetic]`` table.

:class:`KineticOptions` holds what is new in the kinetic limit (the number of slices in the
position ``s``, the quadrature of the cumulative measure, the ALiBi slope ``λ`` of the
limit bias) and, in its field ``pde``, the :class:`~wflow.pde.PDEOptions` of the
finite-volume discretisation every slice shares (``T``, ``dt``, ``order``, the time
integrator, limiter, CFL factor, quadrature points on the edges, output times, kernel
back-end). The options of the PDE that have no meaning for the causal system are refused
(:func:`check_pde_options`): token diffusion, the surrogate flow and the energy-based
outputs (the causal system has no energy). Error control (``rtol``/``atol``,
``adaptive``) is the PDE's step doubling over all slices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..infra.options import documented, keys_of, opt, schema_of, validate
from ..infra.schema import ScenarioError, Spec, choice, number, take
from ..pde.options import PDEOptions, pde_options_from_dict

__all__ = ["KineticOptions", "KINETIC_SCHEMA", "KINETIC_SPEC", "QUADRATURES",
           "check_pde_options", "KineticTable", "kinetic_table_from_dict"]

#: Quadratures of the cumulative measure ``μ_{s_k} = ∫_0^{s_k} ρ(s') ds'`` at the slice
#: centre ``s_k``, by the weight of slice ``k`` itself (the slices before it weigh 1):
#: ``midpoint`` (½, order 2 in ``1/S``), ``exclusive`` (0: the strict mask ``j < i`` taken
#: slice-wise, order 1) and ``inclusive`` (1: ``j ≤ i`` slice-wise, order 1).
QUADRATURES: dict[str, float] = {"midpoint": 0.5, "exclusive": 0.0, "inclusive": 1.0}

#: PDE options with no meaning for the causal system, and the value they must keep.
_REFUSED: dict[str, Any] = {"diffusion": 0.0, "flow": "transformer", "entropy": False,
                            "head_rates": False}

_QUADRATURE_DOC = (
    "Quadrature of the cumulative measure at ``s_k``: the slices before ``k`` and "
    "``midpoint`` half of slice ``k`` (order 2 in ``1/S``), ``exclusive`` none of it or "
    "``inclusive`` all of it (order 1; the strict resp. non-strict mask slice-wise).")


def check_pde_options(value: Any, key: str = "kinetic.pde") -> PDEOptions:
    """The :class:`~wflow.pde.PDEOptions` of a kinetic run, refusing what does not apply.

    Raises
    ------
    ScenarioError
        Not a ``PDEOptions``, or one of ``diffusion``, ``flow``, ``entropy``,
        ``head_rates`` set (the causal system has no energy, no surrogate flow; token
        diffusion is not implemented here). ``balance``
        and the cluster options are not used (no energy; no cluster count per slice).
    """
    if not isinstance(value, PDEOptions):
        raise ScenarioError(f"{key}: expected PDEOptions, got {type(value).__name__}")
    for name, keep in _REFUSED.items():
        if getattr(value, name) != keep:
            raise ScenarioError(
                f"{key}.{name}: not available in the kinetic solver (the causal system is "
                f"not a gradient flow: no energy, no surrogate flow; no diffusion); "
                f"leave it at {keep!r}, got {getattr(value, name)!r}")
    return value


@documented
@dataclass(frozen=True)
class KineticOptions:
    """Options of :func:`wflow.kinetic.solve_kinetic` (keyword-only in the API)."""

    SECTION = "kinetic"

    S: int = field(default=16, metadata=opt(
        "Number of slices in the position ``s ∈ [0, 1]``; slice ``k`` is centred at "
        "``s_k = (k + ½)/S`` and carries mass ``1/S``.", check=number(1, integer=True)))
    quadrature: str = field(default="midpoint", metadata=opt(_QUADRATURE_DOC,
                                                              check=choice(*QUADRATURES)))
    alibi: float = field(default=0.0, metadata=opt(
        "Slope ``λ >= 0`` of the limit of the ALiBi bias, ``b(s, s') = −λ (s − s')`` (the "
        "token-level slope times the number of tokens); ``0``: no bias.",
        check=number(0)))
    pde: PDEOptions = field(default_factory=lambda: PDEOptions(balance=False, clusters=False),
                            metadata=opt(
        "The finite-volume discretisation shared by every slice (``T``, ``dt``, ``order``, "
        "time integrator, limiter, ``cfl``, ``n_saves``, kernel back-end, ...).",
        check=check_pde_options, toml=False, reason="the scenario's ``[pde]`` table"))

    def __post_init__(self) -> None:
        validate(self)

    @property
    def self_weight(self) -> float:
        """Weight of slice ``k`` in its own cumulative measure (:data:`QUADRATURES`)."""
        return QUADRATURES[self.quadrature]


#: The ``[kinetic]`` table: ``key -> (default, checker)`` (derived from :class:`KineticOptions`).
KINETIC_SCHEMA: Spec = schema_of(KineticOptions)

#: Keys of the ``[kinetic]`` section.
KINETIC_SPEC: tuple[str, ...] = keys_of(KineticOptions)


@dataclass(frozen=True)
class KineticTable:
    """The ``[kinetic]`` table of a scenario and the ``[pde]`` table its slices share.

    ``[kinetic]`` is validated when the scenario loads (every command: a typo is refused
    at once); its combination with ``[pde]`` (:attr:`options`) when a kinetic run asks for
    it, since a ``[pde]`` key with no meaning in the causal system (the surrogate flow, say)
    is right for ``wflow pde``.

    Attributes
    ----------
    mesh : str
        The mesh spec (``[pde] mesh``): every slice lives on it.
    S, quadrature, alibi
        ``[kinetic]``'s keys (:class:`KineticOptions`).
    pde : PDEOptions
        ``[pde]``'s options as the scenario gives them.
    alibi_given : bool
        ``[kinetic] alibi`` was set in the scenario (else the command derives ``λ`` from
        ``[attention] bias``).
    """

    mesh: str
    S: int
    quadrature: str
    alibi: float
    pde: PDEOptions
    alibi_given: bool = False

    @property
    def options(self) -> KineticOptions:
        """The run's :class:`KineticOptions`: ``[pde]`` with ``balance`` and ``clusters`` off.

        Raises
        ------
        ScenarioError
            A ``[pde]`` key with no meaning in the causal system, named ``pde.<key>``
            (:func:`check_pde_options`).
        """
        pde = check_pde_options(replace(self.pde, balance=False, clusters=False), key="pde")
        return KineticOptions(S=self.S, quadrature=self.quadrature, alibi=self.alibi, pde=pde)


def kinetic_table_from_dict(d: Mapping[str, Any] | None, sections: Mapping[str, Any],
                            seed: int = 0) -> KineticTable:
    """Validate ``[kinetic]`` into a :class:`KineticTable` (with ``[pde]``'s mesh and options).

    Errors name the key: ``kinetic.<key>`` (at load), ``pde.<key>`` for a ``[pde]`` key
    with no meaning in the causal system (when :attr:`KineticTable.options` is read).
    """
    vals = take(d or {}, KINETIC_SCHEMA, "kinetic")
    mesh, pde = pde_options_from_dict(sections.get("pde"), seed=seed)
    return KineticTable(mesh, pde=pde, alibi_given="alibi" in (d or {}), **vals)
