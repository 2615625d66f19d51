r"""Token diffusion ``D``: the noise of the *tokens*, a term of the model in every solver.

The noisy transformer (THEORY §8) moves each token by its attention velocity and a
Brownian motion on the sphere ``S^{d-1}`` with generator ``D Δ_S``:

.. math::

    dx_i = v[\mu^n_t, \Theta_t](x_i)\,dt + \sqrt{2D}\,P_{x_i} \circ dW_i
    \quad\text{(Stratonovich)},\qquad
    dx = \big(v - D(d-1)\,x\big)\,dt + \sqrt{2D}\,P_x\,dW \quad\text{(Itô)},

and the density solves the Fokker–Planck equation
``∂_t ρ + div_S(ρ v) = D Δ_S ρ``. ``D`` has units of (sphere radius)² per unit time (depth).

It is *not* the Ornstein–Uhlenbeck noise of the **weights** (``[attention] schedule = "ou"``,
THEORY §5): the two coexist and have distinct names. The scenario key is
``[attention] diffusion`` (default ``0.0``); ``D = 0`` is the noiseless model, bit for bit.

The published convention of Mun & Rosenzweig, ``F_K = ∫ρ log ρ − (K/β)∫∫ e^{β x·y} ρρ``,
is ``F_D / D`` with ``K = 1/(2D)`` (:func:`coupling_of`, :func:`diffusion_of`).
"""

from __future__ import annotations

import math
from dataclasses import field
from typing import Any

from ..infra.options import opt
from ..infra.schema import ScenarioError

__all__ = ["DIFFUSION_KEY", "check_diffusion", "coupling_of", "diffusion_of", "diffusion_field"]

#: The scenario key of the token diffusion (section ``[attention]``).
DIFFUSION_KEY = "attention.diffusion"


def check_diffusion(value: Any, key: str = DIFFUSION_KEY) -> float:
    """Validate a token diffusion ``D``: a finite number ``>= 0`` (returned as ``float``).

    Parameters
    ----------
    value
        The diffusivity ``D`` (units: radius² per unit time).
    key
        The name used in the error message (the scenario key or the option's name).

    Raises
    ------
    ScenarioError
        ``"<key>: ..."`` for a bool, a non-number, NaN, ``±inf`` or a negative value.
    """
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ScenarioError(f"{key}: expected a number >= 0, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise ScenarioError(f"{key}: must be finite, got {value!r}")
    if v < 0.0:
        raise ScenarioError(f"{key}: must be >= 0, got {value!r}")
    return v


def diffusion_field(what: str) -> Any:
    """The ``diffusion`` option of a solver's options dataclass (one declaration for each).

    ``D >= 0`` (:func:`check_diffusion`), default ``0`` (the noiseless model), API only:
    a scenario gives it once, in ``[attention] diffusion`` (:data:`DIFFUSION_KEY`), for
    every solver; ``what`` says how the solver applies it.
    """
    return field(default=0.0, metadata=opt(
        what, check=check_diffusion, toml=False,
        reason="the scenario's ``[attention] diffusion`` (:data:`~wflow.attention.diffusion."
        "DIFFUSION_KEY`)"))


def coupling_of(diffusion: float) -> float:
    """Mun & Rosenzweig's coupling ``K = 1/(2D)`` of a diffusivity ``D > 0`` (THEORY §8)."""
    d = check_diffusion(diffusion, "diffusion")
    if d == 0.0:
        raise ScenarioError("diffusion: K = 1/(2D) needs D > 0")
    return 1.0 / (2.0 * d)


def diffusion_of(coupling: float) -> float:
    """The diffusivity ``D = 1/(2K)`` of Mun & Rosenzweig's coupling ``K > 0`` (THEORY §8)."""
    if isinstance(coupling, bool) or not isinstance(coupling, (int, float)) \
            or not math.isfinite(coupling) or coupling <= 0:
        raise ScenarioError(f"coupling: must be a finite number > 0, got {coupling!r}")
    return 1.0 / (2.0 * float(coupling))
