"""The one registry of ``wflow verify`` studies: name → module, and the docs/theory.md section.

Every module exposes ``run(*, out, quick, seed) -> StudyResult`` (run → fit → verdict);
a study with negative controls also takes ``fault=NAME`` for a name of its ``FAULTS``
(see :mod:`wflow.studies.base`), and a study that declares ``DTYPES`` takes ``dtype=``
(``"float32"``: :func:`check_dtype`). A new study is one module in :mod:`wflow.studies` and one
line here (:data:`STUDIES`, a :class:`~wflow.infra.registry.Registry` of :class:`Study`).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

from ..infra.registry import Registry

if TYPE_CHECKING:
    from .base import StudyResult

__all__ = ["Study", "STUDIES", "all_studies", "load_study", "seed_independent", "verify",
           "check_fault", "check_dtype"]


@dataclass(frozen=True)
class Study:
    """One ``wflow verify`` study: its name, its module and the claims it checks.

    Attributes
    ----------
    name : str
        The name of ``wflow verify NAME``.
    module : str
        The dotted module exposing ``run(*, out, quick, seed[, fault]) -> StudyResult``.
    section : str
        The docs/theory.md section whose claims it checks (``"§5"``).
    """

    name: str
    module: str
    section: str


#: The studies, by name, in docs/theory.md order (the only list of them).
STUDIES: Registry[Study] = Registry("study", Study, key="verify")

for _section, _names in (
        # §3, §5: [TD] — particles, PDE, JKO
        ("§5", ("edi", "mean-field", "stability", "gamma", "asymptotics", "noisy-edi")),
        # §6: [MH] — multi-head quantitative results
        ("§6", ("radial-dominance", "head-monotonicity", "equiangular", "superadditivity",
                "relu-vs-softmax", "entropy")),
        # §7: [GA] — Gaussian dynamics
        ("§7", ("gaussian-particles",)),
        # §9: the noisy transformer (token diffusion)
        ("§9", ("noisy-mean-field", "free-energy", "phase")),
        # §10: causal attention (decoder transformers) and its kinetic limit
        ("§10", ("causal-mean-field",))):
    for _name in _names:
        STUDIES.add(Study(_name, "wflow.studies." + _name.replace("-", "_"), _section),
                    builtin=True)


def all_studies() -> dict[str, str]:
    """Every study name with its module."""
    return {name: study.module for name, study in STUDIES.items()}


def load_study(name: str) -> ModuleType:
    """Import the module of study ``name`` (``ValueError`` naming the known studies).

    Its ``run`` is wrapped once by :func:`wflow.studies.base.never_raise`: an exception
    inside a run (a diverging solver, a guard refusing a POT/SciPy input) becomes a FAIL
    of a named criterion.
    """
    mod = importlib.import_module(STUDIES.get(name).module)
    if not getattr(mod.run, "__never_raise__", False):
        # a wrong or diverging solver FAILs a named criterion, never raises (studies.base)
        from .base import never_raise

        mod.run = never_raise(mod.run, name=name, faults=getattr(mod, "FAULTS", {}),
                              families=getattr(mod, "FAMILIES", None),
                              parts=getattr(mod, "PARTS", None),
                              dtypes=getattr(mod, "DTYPES", None),
                              fault_dtypes=getattr(mod, "FAULT_DTYPES", None))
    return mod


def seed_independent(name: str) -> bool:
    """Whether study ``name``'s criteria cannot depend on the seed (it runs once).

    Declared by the module (``SEED_INDEPENDENT = True``): the seed only rotates its inputs
    or draws reported, unjudged samples, so running it at several seeds repeats one test.
    """
    return bool(getattr(load_study(name), "SEED_INDEPENDENT", False))


def check_fault(name: str, fault: str) -> None:
    """``ValueError`` unless ``fault`` is a negative control of study ``name``.

    A name of its ``FAULTS`` or ``FAMILY:S`` for a family of its ``FAMILIES``
    (:func:`wflow.studies.base.parse_fault`); the message names the known ones.
    """
    from .base import parse_fault

    mod = load_study(name)
    faults = getattr(mod, "FAULTS", {})
    families = getattr(mod, "FAMILIES", {})
    if fault not in faults and parse_fault(fault, families)[1] is None:
        fam = f"; families: {sorted(families)} as FAMILY:S" if families else ""
        raise ValueError(f"{name} has no negative control {fault!r} (known: {sorted(faults)}"
                         f"{fam})")


def check_dtype(name: str, dtype: str, fault: str | None = None) -> None:
    """``ValueError`` unless study ``name`` runs at precision ``dtype`` (with ``fault``).

    A precision of :data:`wflow.kernels.validation.DTYPES` that the study declares in its
    ``DTYPES`` (a study without them: ``"float64"`` alone), and one that its ``FAULT_DTYPES``
    allows ``fault`` (:func:`wflow.studies.base.check_dtype`); the message says why.
    """
    from .base import check_dtype as _check

    mod = load_study(name)
    _check(name, dtype, getattr(mod, "DTYPES", None), fault=fault,
           fault_dtypes=getattr(mod, "FAULT_DTYPES", None))


def verify(study: str, *, out: str | Path, quick: bool = False, seed: int = 0,
           fault: str | None = None, dtype: str = "float64") -> StudyResult:
    """Run the verification study ``study`` and write ``out/`` (what ``wflow verify`` runs).

    Parameters
    ----------
    study : str
        A name of :data:`STUDIES` (``ValueError`` naming the known ones otherwise).
    out : path
        Output directory (``summary.json``, the raw series, the figures).
    quick : bool
        The small version that runs in seconds (the test suite's).
    seed : int
        Master seed.
    fault : str, optional
        Inject one of the study's negative controls (:func:`check_fault`: refused before
        anything runs); a documented control must FAIL.
    dtype : str
        ``"float64"`` (default) or ``"float32"`` where the study declares it in its
        ``DTYPES`` (:func:`check_dtype`: refused before anything runs); ``summary.json``
        records it.

    Returns
    -------
    StudyResult
        The fits, the criteria and the verdict (``passed``).
    """
    mod = load_study(study)
    kw = {}
    if fault is not None:
        check_fault(study, fault)
        kw["fault"] = fault
    check_dtype(study, dtype, fault)
    return mod.run(out=out, quick=quick, seed=seed, dtype=dtype, **kw)
