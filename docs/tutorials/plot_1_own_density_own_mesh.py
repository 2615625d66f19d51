"""
A density of your own on a mesh of your own
===========================================

This tutorial builds a sphere mesh with gmsh (what ``wflow mesh --cells N --method gmsh
--out FILE`` does), puts a density of our own on it — a Python function of the points —,
evolves it with the transformer PDE (docs/theory.md §2) and writes an XDMF time series
that ParaView opens. It then does the same from a scenario file, with the density in a
module beside the scenario, as ``wflow pde`` would. It runs in a few seconds.

Conventions to keep in mind (docs/theory.md §8): a density here is per area of the flat
triangles (``Σ_K ρ_K |K| = 1``); everything a solver returns is in the mesh file's cell
order, with the areas and centroids of the result in the same order.
"""

# %%
# A mesh of our own
# -----------------
# ``gmsh_sphere`` meshes the unit sphere with about the requested number of triangles;
# ``write_surface`` writes it (``.msh``, or any format meshio knows) and ``load_mesh``
# validates it (closed, manifold, oriented, on the unit sphere) and builds the DOLFINx
# geometry the finite volumes need.
import tempfile
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np

import wflow
from wflow.apps.jobs.pde import write_xdmf
from wflow.geometry.mesh import gmsh_sphere, load_mesh, mesh_stats, write_surface

work = Path(tempfile.mkdtemp(prefix="wflow-tutorial-"))
tri = gmsh_sphere(1000)
write_surface(work / "my_sphere.msh", tri)
mesh = load_mesh(work / "my_sphere.msh")
print(mesh_stats(tri))

# %%
# A density of our own
# --------------------
# Any function mapping points ``(M, 3)`` on the sphere to non-negative values ``(M,)``
# is a density: wflow evaluates it at the projected cell centroids and normalises it to
# mass 1 on the mesh. Here, two bumps of different widths.


def two_bumps(x: np.ndarray) -> np.ndarray:
    """Unnormalised density per area: a narrow bump at the north pole, a wide one at +x."""
    return np.exp(4.0 * (x[:, 2] - 1.0)) + 0.6 * np.exp(2.0 * (x[:, 0] - 1.0))


# %%
# Its evolution
# -------------
# Two random symmetric softmax heads, value-aligned (``V_h = A_h``), averaged
# (``w_h = 1/2``): the ascent convention of docs/theory.md §3, under which mass gathers.
rng = np.random.default_rng(3)
heads = wflow.Heads.random_symmetric(2, 3, rng, scale=0.5)
attn = wflow.Attention("softmax", beta=1.0)
res = wflow.solve_pde(two_bumps, heads, attn, mesh=mesh,
                      options=wflow.PDEOptions(T=0.6, order=2, n_saves=4))
print(res.status, res.message)
print("mass at every output time:", (res.rho * res.areas).sum(axis=1))
print("energy E(t):", res.history["E"])

# %%
# XDMF for ParaView
# -----------------
# ``write_xdmf`` writes ``density.xdmf`` and its ``density.h5``: cell data ``rho`` at
# every output time on the mesh, in the mesh file's cell order. Open the ``.xdmf`` file in
# ParaView (reader "Xdmf3 Reader T") and press play.
write_xdmf(mesh, res.t, res.rho, work / "density.xdmf")
print(sorted(p.name for p in work.iterdir()))

# %%
# A look without ParaView
# -----------------------
# The cell densities at the first and last output time, by longitude and latitude of
# the cell centres.
c = res.centroids / np.linalg.norm(res.centroids, axis=1, keepdims=True)
lon, lat = np.arctan2(c[:, 1], c[:, 0]), np.arcsin(np.clip(c[:, 2], -1, 1))
fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
vmax = res.rho.max()
for ax, k in zip(axes, (0, -1), strict=True):
    sc = ax.scatter(lon, lat, c=res.rho[k], s=12, cmap="viridis", vmin=0, vmax=vmax)
    ax.set(title=f"ρ at t = {res.t[k]:.2f}", xlabel="longitude", ylabel="latitude")
fig.colorbar(sc, ax=axes, label="density per flat area")

# %%
# The same from a scenario file
# -----------------------------
# ``[density] type = "callable"`` takes ``"module:function"``; a module beside the
# scenario is found there, like every relative path of a scenario. This is what
# ``wflow pde scenario.toml --out DIR`` runs.
(work / "mydens.py").write_text(
    "import numpy as np\n\n"
    "def two_bumps(x):\n"
    "    return np.exp(4.0 * (x[:, 2] - 1.0)) + 0.6 * np.exp(2.0 * (x[:, 0] - 1.0))\n")
(work / "scenario.toml").write_text("""
seed = 3
[attention]
kind = "softmax"
beta = 1.0
d = 3
[heads]
type = "random_symmetric"
H = 2
scale = 0.5
[density]
type = "callable"
function = "mydens:two_bumps"
[pde]
mesh = "my_sphere.msh"
T = 0.6
order = 2
n_saves = 4
""")
from wflow.apps.jobs.pde import run_pde  # noqa: E402
from wflow.apps.scenario import load_scenario  # noqa: E402

res2 = run_pde(load_scenario(work / "scenario.toml"), work / "out", progress=False)
print(res2.status, sorted(p.name for p in (work / "out").iterdir()))
