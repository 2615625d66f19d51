"""What a solver declares once: its :class:`SolverSpec`, registered in :data:`SOLVERS`.

A solver package (``wflow/<solver>/spec.py``) describes itself by one object: the section
of the scenario it reads, the options dataclass and the parser of that section (validated
once, when the scenario loads), its cost estimate (``<solver>/estimate.py``), its output
keys (``<solver>/keys.py``) and its solve function. The scenario loader checks every
registered section for every command, the one job runner (:mod:`wflow.apps.jobs.runner`)
drives every spec — options → estimate → solve → write — and the output-key reference
reads the keys from here. This module is generic: it imports nothing of the solvers and
names none of them.

Example::

    SPEC = SOLVERS.register(SolverSpec(
        name="mysolver", section="mysolver", options=MyOptions,
        parse=my_table_from_dict, estimate=estimate_mine, solve=solve_mine,
        keys=SUMMARY_KEYS, columns=CSV_COLUMNS))
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from .output_keys import OutputKey
from .registry import Registry

__all__ = ["SolverSpec", "SpecRegistry", "SOLVERS"]

#: ``parse(table, scenario_sections, seed)``: the validated, typed section (errors name
#: the key, ``section.key: ...``).
Parser = Callable[[Mapping[str, Any] | None, Mapping[str, Any], int], Any]


@dataclass(frozen=True, kw_only=True)
class SolverSpec:
    """Everything one solver knows, declared once.

    Attributes
    ----------
    name : str
        The solver's name (its command, ``wflow <name>``, and the ``solver`` of its
        ``summary.json``).
    section : str or None
        The scenario table it reads (``[name]``), ``None`` for a solver with a scenario
        file of its own.
    options : type
        Its keyword-only options dataclass (the single source of the table's schema).
    parse : callable
        ``parse(table, sections, seed) -> typed table``: validates the section against the
        other sections it defaults from (``sections``: every table of the scenario, raw);
        called once, when the scenario loads.
    estimate : callable
        ``estimate(typed_table, **size) -> Estimate``: the cost model, reading stage counts
        and costs from the method objects the options hold.
    solve : callable
        The solve function of the numerics (``simulate``, ``solve_pde``, …).
    keys, columns : tuple of OutputKey
        The ``summary.json`` keys and CSV columns that only this solver writes.
    """

    name: str
    section: str | None
    options: type
    parse: Parser
    estimate: Callable[..., Any]
    solve: Callable[..., Any]
    keys: tuple[OutputKey, ...] = ()
    columns: tuple[OutputKey, ...] = ()


class SpecRegistry(Registry[SolverSpec]):
    """Name -> :class:`SolverSpec`, in registration order (a :class:`.registry.Registry`).

    Registering another spec under a taken name, or a second spec reading a taken
    section (two solvers cannot own one table), raises ``ValueError``.
    """

    def __init__(self) -> None:
        super().__init__("solver", SolverSpec, admit=self._one_reader)

    def _one_reader(self, spec: SolverSpec) -> None:
        for other in self.values():
            if other.name != spec.name and spec.section is not None \
                    and other.section == spec.section:
                raise ValueError(f"section [{spec.section}] is already read by solver "
                                 f"{other.name!r}")

    def sections(self) -> dict[str, SolverSpec]:
        """Section name -> the spec that reads it (specs with a section only)."""
        return {s.section: s for s in self.values() if s.section is not None}


#: The registered solvers (each solver package registers its spec on import).
SOLVERS = SpecRegistry()
