"""
An attention kind and an integrator of your own
===============================================

An attention kind is a kernel ``k = Φ'`` of the scores ``s = β <Q x, K y>`` and whether
the heads are normalised (docs/theory.md §1): the head output is
``f(x) = ∫ k(s) V y dμ(y) / Z(x)`` with ``Z = ∫ k(s) dμ`` (normalised), and the energy
``E = (1/2β) ∫∫ Φ(s) dμ dμ``. Here the kernel is the Taylor polynomial of ``e^s`` of
even degree ``p``,

.. math::

    k_p(s) = \\sum_{j=0}^{p} \\frac{s^j}{j!} > 0, \\qquad
    \\Phi_p(s) = \\sum_{j=0}^{p} \\frac{s^{j+1}}{(j+1)!}, \\qquad
    \\Phi_p''(s) = \\sum_{j=0}^{p-1} \\frac{s^j}{j!},

normalised like softmax (``k_p → e^s`` as ``p → ∞``), and the integrator is the explicit
midpoint rule with normalised stages on the sphere,
``y = P(x + (h/2) v(x))``, ``x⁺ = P(x + h v(y))``, ``P(z) = z/|z|``, of order 2.

Both are defined below in this file — a user's own module — with NumPy only: wflow has
no compiled code for them. Every entry point then runs them or refuses them with one
message: the particles on the Python engine (the compiled engine refuses, ``auto`` hands
over with a warning and records the engine), the PDE and the JKO on the NumPy sums, the
energies. A scenario reaches the same definitions with ``modules = ["my_kinds.py"]`` at
its top level (``wflow particles / pde / jko / run``). It runs in a few seconds.
"""

# %%
# The kind: a kernel with ``Φ``, ``Φ'``, ``Φ''``
# ----------------------------------------------
# A :class:`~wflow.attention.kinds.Kernel` gives the three functions in NumPy and
# ``code=None`` (no compiled kernel); :func:`~wflow.attention.kinds.register_kind` makes
# its name valid everywhere (``Attention``, the scenario's ``[attention] kind``, the CLI).
import math
from dataclasses import dataclass

import matplotlib.pyplot as plt
import numpy as np

import wflow
from wflow.attention.kinds import AttentionKind, Kernel, get_kind, register_kind
from wflow.geometry.mesh import icosphere
from wflow.geometry.sphere import normalize, sample_uniform
from wflow.particles.integrators import INTEGRATORS, ParticleIntegrator


@dataclass(frozen=True)
class TaylorExp(Kernel):
    """``k = Σ_{j≤p} s^j/j!`` (even ``p``: positive), ``Φ = Σ_{j≤p} s^{j+1}/(j+1)!``."""

    degree: int = 4

    def _series(self, s, first, last):
        """``Σ_{j=first}^{last} s^j / j!`` by Horner's rule."""
        out = np.zeros_like(np.asarray(s, dtype=float))
        for j in range(last, first - 1, -1):
            out = out * s + 1.0 / math.factorial(j)
        return out * s**first if first else out

    def phi(self, s):  # noqa: D102
        return self._series(s, 1, self.degree + 1)

    def dphi(self, s):  # noqa: D102
        return self._series(s, 0, self.degree)

    def d2phi(self, s):  # noqa: D102
        return self._series(s, 0, self.degree - 1)


TAYLOR4 = register_kind(AttentionKind(
    "taylor4", "T4-SA", TaylorExp("taylor4", None, exponential=False, fastsum=False),
    normalised=True))
s = np.linspace(-3, 3, 61)
h = 1e-5
fd = (TAYLOR4.phi(s + h) - TAYLOR4.phi(s - h)) / (2 * h)
print(f"max |Φ' − k| by central differences: {np.max(np.abs(fd - TAYLOR4.dphi(s))):.1e}")
print("kinds:", wflow.attention.kinds.KINDS)


# %%
# The integrator: explicit midpoint on the sphere
# -----------------------------------------------
# A :class:`~wflow.particles.integrators.ParticleIntegrator` declares its name, its order
# and its step; it declares no ``compiled_code``, so the compiled particle engine never
# runs it (nor runs another integrator in its place).
@INTEGRATORS.register
class Midpoint(ParticleIntegrator):
    """``y = P(x + h/2 k₁)``, ``x⁺ = P(x + h v(y))``; weights by RK4 half steps."""

    name = "midpoint"
    weights = "rk4"

    def order(self) -> int:  # noqa: D102
        return 2

    def step(self, x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
             kernel):  # noqa: D102
        heads_mid = heads if schedule.static else schedule.heads_at(theta_mid)
        fe = kernel.evaluate(normalize(x + 0.5 * h * k1), heads_mid, attn)
        return normalize(x + h * (fe.v if flow == "transformer" else fe.vhat))


# %%
# Particles: the Python engine runs them, the compiled one refuses
# ----------------------------------------------------------------
rng = np.random.default_rng(0)
x0 = sample_uniform(40, 3, rng)
heads = wflow.Heads.random_symmetric(2, 3, rng, scale=0.5)
attn = wflow.Attention("taylor4", beta=1.0)
quiet = {"head_rates": False, "clusters": False}
res = wflow.simulate(x0, heads, attn, T=1.0, dt=0.02, integrator="midpoint", **quiet)
print(res.status, "engine:", res.extra["engine"], "| kernel sums:", res.extra["kernel"]["calls"])
try:
    wflow.simulate(x0, heads, attn, T=1.0, dt=0.02, engine="compiled")
except ValueError as exc:
    print("compiled engine:", exc)
# a compiled kind with the user's integrator: ``auto`` hands over (a WARNING) ...
sm = wflow.simulate(x0, heads, wflow.Attention("softmax", 1.0), T=1.0, dt=0.02,
                    integrator="midpoint", **quiet)
print("softmax + midpoint, engine:", sm.extra["engine"], "-", sm.extra["engine_reason"])
# ``Φ_p`` has no constant term (``Φ_p(0) = 0``, ``e^0 = 1``): the energies differ by
# ``Σ_h w_h/(2β) = 0.5`` plus terms of order ``s^{p+2}``.
E_T = float(res.history["E"][0, -1])
print(f"E(T) of taylor4 = {E_T:.12f}, of softmax = {sm.history['E'][0, -1]:.12f}")

# %%
# The midpoint rule has order 2: a log–log fit of the final error over ``dt`` (reference:
# RK4 at a fine step).
ref = wflow.simulate(x0, heads, attn, T=0.5, dt=1e-3, integrator="rk4", **quiet).x[0]
dts = np.array([0.1, 0.05, 0.025])
err = [np.max(np.abs(wflow.simulate(x0, heads, attn, T=0.5, dt=dt, integrator="midpoint",
                                    **quiet).x[0] - ref)) for dt in dts]
order = float(np.polyfit(np.log(dts), np.log(err), 1)[0])
print(f"fitted order of the midpoint rule: {order:.2f} (declared {Midpoint().order()})")

# %%
# Energies
# --------
# The energy from :mod:`wflow.energy` is the double sum of the kind's own ``Φ``.
m = np.full(40, 1 / 40)
fe = wflow.energy.evaluate(x0, heads, attn)
S = attn.beta * np.einsum("id,hde,je->hij", x0, heads.A, x0)
E_sum = heads.w @ (np.einsum("i,hij,j->h", m, TAYLOR4.phi(S), m) / (2 * attn.beta))
print(f"E = {heads.w @ wflow.energy.head_energies(fe, m, attn):.15f} (double sum {E_sum:.15f})")

# %%
# The PDE and the JKO
# -------------------
# ``kernel_backend = "auto"`` plans the NumPy sums for a kind without compiled code, and
# the solvers keep the plan.
mesh = wflow.load_mesh("icosphere:1280")
bump = {"type": "vmf", "means": [[0, 0, 1]], "kappas": [3.0], "weights": [1.0]}
pde = wflow.solve_pde(bump, heads, attn, mesh=mesh, T=0.2, dt=0.05, order=2, n_saves=3)
print("pde:", pde.status, "| kernel sums:", pde.stats["kernel"]["calls"])
tri = icosphere(4)
P = tri.points[tri.cells]
pts = normalize(P.mean(axis=1))
areas = 0.5 * np.linalg.norm(np.cross(P[:, 1] - P[:, 0], P[:, 2] - P[:, 0]), axis=1)
m0 = np.exp(3.0 * pts[:, 2]) * areas
jko = wflow.solve_jko(m0 / m0.sum(), wflow.Heads.scalar([1.0], 3), attn, points=pts,
                      areas=areas, T=0.2, tau=0.05, scheme="fv", mesh=tri)
print("jko:", jko.status, "E:", np.round(jko.history["E"], 6))
assert get_kind("taylor4") is TAYLOR4

fig, ax = plt.subplots(figsize=(5, 3))
ax.plot(res.t, res.history["E"][0], label="taylor4 (midpoint, Python engine)")
ax.plot(sm.t, sm.history["E"][0], "--", label="softmax (midpoint, Python engine)")
ax.set_xlabel("t")
ax.set_ylabel("E")
ax.legend()
fig.tight_layout()
plt.show()
