"""``wflow mesh``: generate, convert, project or check triangulated unit-sphere meshes."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    """Add the ``mesh`` subcommand."""
    from ..geometry.mesh.generation import METHODS

    p = subparsers.add_parser(
        "mesh",
        help="generate or check a triangulated unit-sphere mesh",
        description="Generate a sphere mesh projected to the unit sphere (`--cells N --out FILE`), "
        "or check / convert an existing meshio-readable surface mesh (`--check FILE [--out "
        "FILE]`). A mesh that is not a closed, consistently oriented, single-cover "
        "triangulation of the unit sphere is rejected with the name of the failed check "
        "(read, shape, finite, indices, radius, degenerate, duplicate_vertices, manifold, "
        "closed, orientation, connected, euler, covering). `--project` first projects the "
        "vertices radially onto the unit sphere (x -> x/|x|; e.g. a single-precision file, "
        "or a sphere of another radius), so the mesh written with --out passes --check. "
        "A mesh whose vertices are off the sphere by more than 1e-8 is never written without "
        "--project (it would fail --check). The output format follows the suffix (.msh = gmsh "
        "4.1 binary, .xdmf, .vtu, ...; anything meshio writes); an existing --out file is "
        "replaced only with --overwrite.",
    )
    p.add_argument("--cells", type=int, default=None,
                   help="target number of cells (icosphere: exactly 20 n^2 with n = "
                   "round(sqrt(N/20)); gmsh: approximate)")
    p.add_argument("--method", choices=METHODS, default="icosphere",
                   help="generator (default: icosphere)")
    p.add_argument("--check", metavar="FILE", default=None,
                   help="read FILE with meshio and validate it instead of generating")
    p.add_argument("--project", action="store_true",
                   help="project the vertices of the --check mesh onto the unit sphere first")
    p.add_argument("--radius-tol", type=float, default=None,
                   help="accepted max | |x| - 1 | of the vertices for --check (default 1e-8)")
    p.add_argument("--out", metavar="FILE", default=None,
                   help="write the (validated, outward-oriented) mesh here")
    p.add_argument("--overwrite", action="store_true",
                   help="replace an existing --out file")
    p.add_argument("--json", action="store_true", help="print the statistics as JSON")
    from . import add_yes

    add_yes(p, mesh=True)
    p.set_defaults(func=handler)


def _check_out(args: argparse.Namespace) -> None:
    """Refuse a bad --out before reading or generating anything."""
    from ..infra.io import check_parent

    out = Path(args.out).expanduser()
    if out.is_dir():
        raise ValueError(f"--out {args.out}: is a folder, expected a mesh file name")
    if (out.exists() or out.is_symlink()) and not args.overwrite:
        raise FileExistsError(f"--out {args.out}: exists; pass --overwrite to replace it")
    check_parent(out, name=f"--out {args.out}")
    args.out = str(out)


def handler(args: argparse.Namespace) -> int:
    """Run ``wflow mesh``."""
    from ..geometry.mesh import (
        RADIUS_TOL,
        generate_sphere,
        project_to_sphere,
        read_surface,
        validate_sphere,
        write_surface,
    )

    tol = RADIUS_TOL if args.radius_tol is None else args.radius_tol
    if not tol > 0:
        raise ValueError(f"--radius-tol: must be > 0, got {tol}")
    if (args.cells is None) == (args.check is None):
        raise ValueError("mesh: give exactly one of --cells N (generate) or --check FILE")
    if args.project and args.check is None:
        raise ValueError("--project: only with --check FILE (generated meshes are on the sphere)")
    if args.out is not None:
        _check_out(args)
    before = None
    if args.check is not None:
        tri = read_surface(args.check)
        if args.project:
            tri, before = project_to_sphere(tri)
    else:
        if args.out is None:
            raise ValueError("--out: required when generating a mesh (--cells)")
        from ..apps.jobs.mesh import check_mesh_estimate

        check_mesh_estimate(cells=args.cells, method=args.method, confirm=args.yes)
        tri = generate_sphere(args.cells, method=args.method)
    tri, rep = validate_sphere(tri.points, tri.cells, radius_tol=tol)
    if args.out is not None and rep.max_radius_error > RADIUS_TOL:
        raise ValueError(
            f"--out {args.out}: the vertices are off the unit sphere by up to "
            f"{rep.max_radius_error:.1e} > {RADIUS_TOL:.0e}, so the file would fail `wflow mesh "
            "--check`; add --project to project them onto the sphere")
    if args.out is not None:
        write_surface(args.out, tri, overwrite=args.overwrite)
    stats = rep._asdict()
    if before is not None:
        stats["radius_error_before_projection"] = before
    if args.json:
        print(json.dumps(stats, indent=2))
    else:
        src = args.check if args.check is not None else f"{args.method}:{args.cells}"
        proj = (f"  projected onto the sphere (max | |x| - 1 | was {before:.1e})"
                if before is not None else "")
        print(f"{src}: OK  cells {rep.cells}, vertices {rep.vertices}, "
              f"cell area [{rep.min_area:.3e}, {rep.max_area:.3e}], "
              f"max edge {rep.max_edge:.4f}" + proj + (f"  -> {args.out}" if args.out else ""),
              file=sys.stdout)
    return 0
