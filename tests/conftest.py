"""Shared test settings: float64, fixed seeds, strict NumPy errors, headless plotting."""

from __future__ import annotations

import os

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")

#: Tolerance for identities that hold exactly up to round-off in float64.
EPS = np.finfo(np.float64).eps


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator (the same in every test)."""
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True)
def _strict_numpy():
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        yield
