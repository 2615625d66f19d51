"""Names of the ``wflow verify`` studies and the modules that implement them."""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = ["STUDIES", "all_studies", "load_study"]

#: Studies of THEORY.md §5 (particles, PDE, JKO).
STUDIES: dict[str, str] = {
    "asymptotics": "wflow.studies.asymptotics",
    "noisy-edi": "wflow.studies.noisy_edi",
    "stability": "wflow.studies.stability",
    "gamma": "wflow.studies.gamma",
    "edi": "wflow.studies.edi",
    "mean-field": "wflow.studies.mean_field",
    "gaussian-particles": "wflow.studies.gaussian_particles",
}

#: Registries contributed by other parts of the library (merged if importable).
_EXTRA = ("wflow.studies.registry_multihead",)


def all_studies() -> dict[str, str]:
    """Every study name with its module, core and contributed, whose module exists."""
    out = dict(STUDIES)
    for mod in _EXTRA:
        try:
            out.update(importlib.import_module(mod).STUDIES)
        except ImportError:
            continue
    return {k: v for k, v in out.items() if importlib.util.find_spec(v) is not None}


def load_study(name: str) -> ModuleType:
    """Import the module of study ``name`` (``ValueError`` naming the known studies)."""
    studies = all_studies()
    if name not in studies:
        raise ValueError(f"verify: unknown study {name!r} (known: {sorted(studies)})")
    return importlib.import_module(studies[name])
