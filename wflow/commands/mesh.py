"""``wflow mesh``: generate, convert or check triangulated unit-sphere meshes."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``mesh`` subcommand."""
    p = subparsers.add_parser(
        "mesh",
        help="generate or check a triangulated unit-sphere mesh",
        description="Generate a sphere mesh projected to the unit sphere (`--cells N --out FILE`), "
        "or check / convert an existing meshio-readable surface mesh (`--check FILE [--out "
        "FILE]`). A mesh that is not a closed, consistently oriented, single-cover "
        "triangulation of the unit sphere is rejected with the name of the failed check "
        "(shape, finite, indices, radius, degenerate, duplicate_vertices, manifold, closed, "
        "orientation, connected, euler, covering). The output format follows the suffix "
        "(.msh = gmsh 4.1 binary, .xdmf, .vtu, ...; anything meshio writes).",
    )
    p.add_argument("--cells", type=int, default=None,
                   help="target number of cells (icosphere: exactly 20 n^2 with n = "
                   "round(sqrt(N/20)); gmsh: approximate)")
    p.add_argument("--method", choices=("icosphere", "gmsh"), default="icosphere",
                   help="generator (default: icosphere)")
    p.add_argument("--check", metavar="FILE", default=None,
                   help="read FILE with meshio and validate it instead of generating")
    p.add_argument("--radius-tol", type=float, default=None,
                   help="accepted max | |x| - 1 | of the vertices (default 1e-8)")
    p.add_argument("--out", metavar="FILE", default=None,
                   help="write the (validated, outward-oriented) mesh here")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    p.set_defaults(func=handler)


def handler(args: argparse.Namespace) -> int:
    """Run ``wflow mesh``."""
    from ..mesh import RADIUS_TOL, generate_sphere, read_surface, validate_sphere, write_surface

    tol = RADIUS_TOL if args.radius_tol is None else args.radius_tol
    if (args.cells is None) == (args.check is None):
        raise ValueError("mesh: give exactly one of --cells N (generate) or --check FILE")
    if args.check is not None:
        tri = read_surface(args.check)
    else:
        if args.out is None:
            raise ValueError("--out: required when generating a mesh (--cells)")
        tri = generate_sphere(args.cells, method=args.method)
    tri, rep = validate_sphere(tri.points, tri.cells, radius_tol=tol)
    if args.out is not None:
        write_surface(args.out, tri)
    stats = rep._asdict()
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        src = args.check if args.check is not None else f"{args.method}:{args.cells}"
        print(f"{src}: OK  cells {rep.cells}, vertices {rep.vertices}, "
              f"cell area [{rep.min_area:.3e}, {rep.max_area:.3e}], "
              f"max edge {rep.max_edge:.4f}" + (f"  -> {args.out}" if args.out else ""))
    return 0
