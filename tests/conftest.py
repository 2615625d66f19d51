"""Shared test settings: float64, fixed seeds, strict NumPy errors, headless plotting.

Shared constants (``from .conftest import EPS, KINDS``): :data:`EPS` and :data:`KINDS`, the
attention kinds read from the registry :mod:`wflow.attention.kinds`, so that every
kind-parametrised test runs for a newly registered kind with no edit.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")

from wflow.attention.kinds import KINDS as _REGISTERED  # noqa: E402

#: Tolerance for identities that hold exactly up to round-off in float64.
EPS = np.finfo(np.float64).eps
#: Every registered attention kind (``wflow.attention.kinds.KINDS``), in registration order.
KINDS: tuple[str, ...] = tuple(_REGISTERED)


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator (the same in every test)."""
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True)
def _strict_numpy():
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        yield
