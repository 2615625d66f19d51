"""The one registry of ``wflow verify`` studies: name → module, and the docs/theory.md section.

Every module exposes ``run(*, out, quick, seed) -> StudyResult`` (run → fit → verdict);
a study with negative controls also takes ``fault=NAME`` for a name of its ``FAULTS``
(see :mod:`wflow.studies.base`). A new study is one module in :mod:`wflow.studies` and one
line here.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .base import StudyResult

__all__ = ["STUDIES", "SECTION", "all_studies", "load_study", "seed_independent", "verify",
           "check_fault"]

#: Study name → module, in docs/theory.md order.
STUDIES: dict[str, str] = {
    # §3, §5: [TD] — particles, PDE, JKO
    "edi": "wflow.studies.edi",
    "mean-field": "wflow.studies.mean_field",
    "stability": "wflow.studies.stability",
    "gamma": "wflow.studies.gamma",
    "asymptotics": "wflow.studies.asymptotics",
    "noisy-edi": "wflow.studies.noisy_edi",
    # §6: [MH] — multi-head quantitative results
    "radial-dominance": "wflow.studies.radial_dominance",
    "head-monotonicity": "wflow.studies.head_monotonicity",
    "equiangular": "wflow.studies.equiangular",
    "superadditivity": "wflow.studies.superadditivity",
    "relu-vs-softmax": "wflow.studies.relu_vs_softmax",
    "entropy": "wflow.studies.entropy",
    # §7: [GA] — Gaussian dynamics
    "gaussian-particles": "wflow.studies.gaussian_particles",
}

#: Study name → the docs/theory.md section whose claims it checks.
SECTION: dict[str, str] = {
    **{k: "§5" for k in ("edi", "mean-field", "stability", "gamma", "asymptotics", "noisy-edi")},
    **{k: "§6" for k in ("radial-dominance", "head-monotonicity", "equiangular",
                         "superadditivity", "relu-vs-softmax", "entropy")},
    "gaussian-particles": "§7",
}


def all_studies() -> dict[str, str]:
    """Every study name with its module."""
    return dict(STUDIES)


def load_study(name: str) -> ModuleType:
    """Import the module of study ``name`` (``ValueError`` naming the known studies)."""
    if name not in STUDIES:
        raise ValueError(f"verify: unknown study {name!r} (known: {sorted(STUDIES)})")
    return importlib.import_module(STUDIES[name])


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


def verify(study: str, *, out: str | Path, quick: bool = False, seed: int = 0,
           fault: str | None = None) -> StudyResult:
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
    return mod.run(out=out, quick=quick, seed=seed, **kw)
