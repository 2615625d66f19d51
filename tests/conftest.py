"""Shared test settings: float64, fixed seeds, strict NumPy errors, headless plotting.

Shared constants (``from .conftest import EPS, KINDS``): :data:`EPS` and :data:`KINDS`, the
attention kinds read from the registry :mod:`wflow.attention.kinds`, so that every
kind-parametrised test runs for a newly registered kind with no edit. Their references
are built from the kind's own ``Φ``, ``Φ'``, ``Φ''`` (and its ``normalised`` flag), never
from a table of the built-in kernels.

``WFLOW_TEST_EXTRA_KINDS="poly2,tanh"`` registers the NumPy-only kinds of
:data:`EXTRA_KINDS` before collection: the kind-parametrised suite then runs for them too
(the proof that a new kernel needs no test edit; ``tests/test_kinds.py`` runs it). Tests
of compiled paths skip them, with the reason, through :func:`needs_compiled`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import numpy as np
import pytest

os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("VTK_DEFAULT_OPENGL_WINDOW", "vtkEGLRenderWindow")

from wflow.attention.kinds import KINDS as _REGISTERED  # noqa: E402
from wflow.attention.kinds import AttentionKind, Kernel, get_kind, register_kind  # noqa: E402

#: Tolerance for identities that hold exactly up to round-off in float64.
EPS = np.finfo(np.float64).eps


@dataclass(frozen=True)
class Poly2Kernel(Kernel):
    """``k = 1 + s + s²/2`` (positive: no real root), ``Φ = s + s²/2 + s³/6``, ``Φ'' = 1 + s``."""

    def phi(self, s):  # noqa: D102
        return s + 0.5 * s * s + s * s * s / 6.0

    def dphi(self, s):  # noqa: D102
        return 1.0 + s + 0.5 * s * s

    def d2phi(self, s):  # noqa: D102
        return 1.0 + s


@dataclass(frozen=True)
class TanhKernel(Kernel):
    """``k = 1 + tanh s`` (positive, bounded), ``Φ = s + log cosh s``, ``Φ'' = sech² s``.

    In ``e = e^{-2|s|}`` (no overflow, no cancellation): ``log cosh s = |s| + log1p(e) −
    log 2``, ``1 + tanh s = 2/(1 + e)`` (``s ≥ 0``) or ``2e/(1 + e)``, ``sech² = 4e/(1 + e)²``.
    """

    def phi(self, s):  # noqa: D102
        a = np.abs(s)
        return s + a + np.log1p(np.exp(-2.0 * a)) - np.log(2.0)

    def dphi(self, s):  # noqa: D102
        e = np.exp(-2.0 * np.abs(s))
        return np.where(s >= 0, 2.0, 2.0 * e) / (1.0 + e)

    def d2phi(self, s):  # noqa: D102
        e = np.exp(-2.0 * np.abs(s))
        return 4.0 * e / ((1.0 + e) * (1.0 + e))


#: NumPy-only kinds (``code=None``) a test run may add (``WFLOW_TEST_EXTRA_KINDS``): one
#: normalised, one not, neither in wflow.
EXTRA_KINDS = {
    "poly2": AttentionKind("poly2", "P2", Poly2Kernel("poly2", None, exponential=False,
                                                      fastsum=False), normalised=False),
    "tanh": AttentionKind("tanh", "T-SA", TanhKernel("tanh", None, exponential=False,
                                                     fastsum=False), normalised=True),
}
for _name in filter(None, os.environ.get("WFLOW_TEST_EXTRA_KINDS", "").split(",")):
    register_kind(EXTRA_KINDS[_name.strip()])

#: Every registered attention kind (``wflow.attention.kinds.KINDS``), in registration order.
KINDS: tuple[str, ...] = tuple(_REGISTERED)


def needs_compiled(kind: str) -> None:
    """Skip the calling test for a kind without compiled kernel (the compiled paths refuse
    it: ``tests/test_kinds.py`` checks that they do, with one message)."""
    spec = get_kind(kind)
    if not spec.compiled:
        pytest.skip(f"{kind}: no compiled kernel (code=None); the compiled paths refuse it")


@pytest.fixture
def rng() -> np.random.Generator:
    """A seeded generator (the same in every test)."""
    return np.random.default_rng(12345)


@pytest.fixture(autouse=True)
def _strict_numpy():
    with np.errstate(over="raise", invalid="raise", divide="raise"):
        yield


def load_script(path, name: str):
    """Import a script that is not a package module (a demo, a bench script) by its path."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod
