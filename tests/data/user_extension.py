"""A user's own extension module, outside wflow: an attention kind and a particle integrator.

Imported by ``tests/test_extensions.py`` and by the scenarios there (``modules = [...]``),
as a user's file would be: nothing in wflow knows these names.

* kind ``"softsign"``: the kernel ``k(s) = 1 + s/(1 + |s|)`` (positive, bounded), its
  potential ``Φ(s) = s + |s| − log(1 + |s|)`` and ``Φ''(s) = 1/(1 + |s|)²``, normalised
  like softmax, NumPy only (``code=None``);
* integrator ``"heun"``: Heun's method (explicit trapezoid) with normalised stages on the
  sphere, ``y = P(x + h k₁)``, ``x⁺ = P(x + h(k₁ + k₂)/2)`` with ``k₂ = v(y)`` and
  ``P(z) = z/|z|``: order 2, no compiled code.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wflow.attention.kinds import AttentionKind, Kernel, register_kind
from wflow.geometry.sphere import normalize
from wflow.particles.integrators import INTEGRATORS, ParticleIntegrator


@dataclass(frozen=True)
class Softsign(Kernel):
    """``k = 1 + s/(1+|s|)``, ``Φ = s + |s| − log(1+|s|)``, ``Φ'' = (1+|s|)^{-2}``."""

    def phi(self, s):  # noqa: D102
        a = np.abs(s)
        return s + a - np.log1p(a)

    def dphi(self, s):  # noqa: D102
        return 1.0 + s / (1.0 + np.abs(s))

    def d2phi(self, s):  # noqa: D102
        a = 1.0 + np.abs(s)
        return 1.0 / (a * a)


SOFTSIGN = register_kind(AttentionKind(
    "softsign", "SS", Softsign("softsign", None, exponential=False, fastsum=False),
    normalised=True))


@INTEGRATORS.register
class Heun(ParticleIntegrator):
    """Heun's method with normalised stages (order 2); weights by RK4 half steps."""

    name = "heun"
    weights = "rk4"

    def order(self) -> int:  # noqa: D102
        return 2

    def step(self, x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
             kernel):  # noqa: D102
        heads_new = heads if schedule.static else schedule.heads_at(theta_new)
        fe = kernel.evaluate(normalize(x + h * k1), heads_new, attn)
        k2 = fe.v if flow == "transformer" else fe.vhat
        return normalize(x + 0.5 * h * (k1 + k2))
