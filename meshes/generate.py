"""Regenerate the shipped sphere meshes and meshes/README.md.

    .venv/bin/python meshes/generate.py

Geodesic icosphere meshes (every icosahedron face split into n² triangles,
vertices projected radially onto the unit sphere): 20 n² cells, 10 n² + 2
vertices. The files are deterministic; `wflow mesh --cells 20n² --out F`
writes the same mesh.
"""

from __future__ import annotations

from pathlib import Path

from wflow.geometry.mesh import icosphere, validate_sphere, write_surface

HERE = Path(__file__).resolve().parent
FREQUENCIES = (6, 11, 16, 22, 32, 45)


def main() -> None:
    """Write the meshes and the README table."""
    rows = []
    for n in FREQUENCIES:
        tri, rep = validate_sphere(*icosphere(n))
        name = f"sphere_{rep.cells}.msh"
        write_surface(HERE / name, tri)
        rows.append(f"| `{name}` | icosphere n={n} | {rep.cells} | {rep.vertices} | "
                    f"{rep.min_area:.3e} | {rep.max_area:.3e} | {rep.max_edge:.4f} |")
    text = README_HEAD + "\n".join(rows) + "\n" + README_TAIL
    (HERE / "README.md").write_text(text)


README_HEAD = """# Shipped sphere meshes

Triangulations of the unit sphere S² for `wflow pde` (gmsh 4.1 binary `.msh`,
read through meshio). Geodesic icospheres: each face of the icosahedron is split
into n² triangles and the vertices are projected radially onto the unit sphere,
so all vertices satisfy | |x| − 1 | ≤ 2.3e-16. Cells are flat triangles with
outward orientation; the areas below are flat-triangle areas. Regenerate with
`.venv/bin/python meshes/generate.py` (deterministic), or make other sizes with
`wflow mesh --cells N --out FILE [--method gmsh]`.

The default mesh of a PDE scenario is `sphere_2420.msh`.

| file | construction | cells | vertices | min cell area | max cell area | max edge length |
| --- | --- | ---: | ---: | ---: | ---: | ---: |
"""

README_TAIL = """
Every file passes `wflow mesh --check FILE` (closed, manifold, consistently
oriented, single cover, Euler characteristic 2, radius within 1e-8).
"""

if __name__ == "__main__":
    main()
