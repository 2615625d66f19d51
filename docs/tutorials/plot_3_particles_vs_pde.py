"""
Particles against the PDE: W₂ against n
=======================================

With ``n`` tokens drawn i.i.d. from the initial density, the empirical measure of the
particle system stays close to the PDE solution: ``W₂(μⁿ_t, ρ_t)`` is of the order of
the initial sampling error, which decays like ``n^{-1/2}`` (up to logarithms) on S²,
amplified at most by the Grönwall factor ``e^{Lt}`` (docs/theory.md §5). This tutorial
measures it with exact optimal transport (POT, geodesic cost) between the particles and
the PDE's cell masses, and fits the rate. The study ``wflow verify mean-field`` does the
same with replicates and a judged criterion.
"""

# %%
# One density, one set of heads, two solvers
# ------------------------------------------
import matplotlib.pyplot as plt
import numpy as np

import wflow
from wflow.geometry.density import initial_density, sample_particles

rng = np.random.default_rng(0)
heads = wflow.Heads.random_symmetric(1, 3, rng, scale=0.5)
attn = wflow.Attention("softmax", beta=2.0)
bump = {"type": "vmf", "means": [[0, 0, 1]], "kappas": [3.0], "weights": [1.0]}
mesh = wflow.load_mesh("sphere_2420.msh")
T = 1.0
pde = wflow.solve_pde(bump, heads, attn, mesh=mesh,
                      options=wflow.PDEOptions(T=T, order=2, n_saves=2))
masses0 = initial_density(mesh, bump) * pde.areas  # file order, as the result's areas
cells = pde.centroids / np.linalg.norm(pde.centroids, axis=1, keepdims=True)
print(pde.status, "cells:", pde.areas.size)

# %%
# The particles, for several n
# ----------------------------
# ``sample_particles`` draws tokens from the cell masses (uniformly inside the cells);
# each sample is evolved with the same heads (RK4) and compared with the PDE at ``t = 0``
# and ``t = T``.
ns = np.array([100, 200, 400, 800])
reps = 2
w0, wT = np.zeros((ns.size, reps)), np.zeros((ns.size, reps))
for i, n in enumerate(ns):
    for r in range(reps):
        x0 = sample_particles(mesh, masses0, int(n), rng)
        res = wflow.simulate(x0, heads, attn, T=T, dt=0.05, integrator="rk4")
        w0[i, r] = wflow.w2_sphere(x0, cells, None, pde.masses[0])
        wT[i, r] = wflow.w2_sphere(res.x[0], cells, None, pde.masses[-1])  # x: (P, n, d)
    print(f"n = {n:4d}: W2 at t = 0 {w0[i].mean():.4f}, at t = T {wT[i].mean():.4f}")

# %%
# The rate
# --------
# A least-squares line through ``log W₂`` against ``log n``. The level at ``T`` over the
# level at ``t = 0`` is the measured amplification (the Grönwall factor); the mesh's own
# quantisation sets a floor that larger ``n`` would reach.
slope0 = np.polyfit(np.log(ns), np.log(w0.mean(axis=1)), 1)[0]
slopeT = np.polyfit(np.log(ns), np.log(wT.mean(axis=1)), 1)[0]
print(f"fitted exponent: {slope0:.2f} at t = 0, {slopeT:.2f} at t = T (theory: about -0.5)")
print(f"amplification W2(T)/W2(0): {np.round(wT.mean(axis=1) / w0.mean(axis=1), 2)}")

fig, ax = plt.subplots(figsize=(5, 3.8))
ax.loglog(ns, w0.mean(axis=1), "o-", label="t = 0")
ax.loglog(ns, wT.mean(axis=1), "s-", label=f"t = T = {T:g}")
ax.loglog(ns, w0.mean(axis=1)[0] * (ns / ns[0]) ** -0.5, "k:", label="n^(-1/2)")
ax.set(xlabel="n (particles)", ylabel="W₂ (radians)", title="particles against the PDE")
ax.xaxis.set_minor_formatter(plt.NullFormatter())
ax.set_xticks(ns, [str(n) for n in ns])
ax.legend()
fig.tight_layout()
