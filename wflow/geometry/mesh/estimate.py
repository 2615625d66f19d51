"""The cost of a mesh before it exists: its cell count from its spec, and generating it.

:func:`mesh_cells` reads the cell count of ``icosphere:N``, ``gmsh:N``, the default mesh
or a gmsh file's header without generating or reading the mesh, so that the solvers'
estimates (``wflow/<solver>/estimate.py``) refuse an absurd run in about the time the
interpreter takes to start; :func:`estimate_mesh` costs ``wflow mesh --cells N``.
"""

from __future__ import annotations

import os

from ...infra.estimate import Estimate

__all__ = ["mesh_cells", "estimate_mesh", "MESH_CELL_BYTES", "MESH_CELL_SECONDS",
           "MESH_BASELINE_BYTES", "MESH_STARTUP_SECONDS", "MSH_BYTES_PER_CELL"]

#: Peak bytes per cell of ``wflow mesh --cells N`` (generation, validation, writing) above
#: the libraries, and its CPU seconds per cell, fitted on icospheres of 8 000 – 500 000
#: cells (peak RSS 89 – 356 MiB, CPU 0.87 – 5.76 s; ``tests/test_estimates_absurd.py``
#: pins them on the recorded measurements).
MESH_CELL_BYTES = 570.0
MESH_CELL_SECONDS = 1.0e-5
#: Resident size and start-up of ``wflow mesh`` (NumPy, meshio; no DOLFINx).
MESH_BASELINE_BYTES, MESH_STARTUP_SECONDS = 85 * 2**20, 0.8

#: Bytes per cell of a binary gmsh 4.1 surface mesh of triangles (the shipped meshes:
#: 48.0–48.1), used only where the header cannot be parsed.
MSH_BYTES_PER_CELL = 48.0


def mesh_cells(spec: str, *, path: str | os.PathLike[str] | None = None,
               default_cells: int = 2420) -> int | None:
    """Cells of the mesh ``spec`` names, without generating or reading the mesh.

    ``"icosphere:N"``: ``20 k²`` with ``k = max(1, round(√(N/20)))`` (the generator's
    rule); ``"gmsh:N"``: ``N`` (the generator's target); ``"default"``: ``default_cells``;
    a file (``path``, resolved by the caller): the element count of a gmsh 4 header
    (``$Elements``, found by a memory-mapped search: milliseconds for a 500 MB file), else
    ``None`` (another format: estimated after loading).
    """
    import math as _m

    name, _, arg = str(spec).partition(":")
    if name in ("icosphere", "gmsh") and arg:
        try:
            N = int(float(arg))
        except ValueError:
            return None  # the loader refuses it with its own message
        if N < 1:
            return None
        return 20 * max(1, round(_m.sqrt(N / 20.0))) ** 2 if name == "icosphere" else N
    if spec == "default":
        return int(default_cells)
    if path is None:
        return None
    return _gmsh_cells(path)


def _gmsh_cells(path: str | os.PathLike[str]) -> int | None:
    """Element count of a gmsh 4.x file from its ``$Elements`` header (``None``: not one)."""
    import mmap
    import struct

    try:
        with open(path, "rb") as fh:
            head = fh.read(64)
            if not head.startswith(b"$MeshFormat"):
                return None
            fmt = head.split(b"\n")[1].split() if b"\n" in head else []
            if len(fmt) < 3 or not fmt[0].startswith(b"4"):
                return None
            binary, size_t = fmt[1] == b"1", int(fmt[2])
            with mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ) as mm:
                i = mm.find(b"\n$Elements\n")
                if i < 0:
                    return None
                j = i + len(b"\n$Elements\n")
                if binary:
                    if size_t != 8 or j + 16 > len(mm):
                        return None
                    return int(struct.unpack("<2Q", mm[j:j + 16])[1])
                line = mm[j:mm.find(b"\n", j)].split()
                return int(line[1]) if len(line) >= 2 else None
    except (OSError, ValueError, IndexError):
        return None


def estimate_mesh(*, cells: int, method: str = "icosphere", what: str = "mesh") -> Estimate:
    """Estimate of ``wflow mesh --cells N``: generation, validation and writing.

    Memory ``MESH_BASELINE + MESH_CELL_BYTES M``; time ``MESH_STARTUP + MESH_CELL_SECONDS
    M`` (``M`` the cells generated: :func:`mesh_cells` of ``method:N``); gmsh meshes are
    costed like icospheres (the same arrays; the generator's own time comes on top).
    """
    M = float(mesh_cells(f"{method}:{int(cells)}") or cells)
    parts = {"libraries": float(MESH_BASELINE_BYTES),
             "points, cells and checks": MESH_CELL_BYTES * M}
    return Estimate(what, sum(parts.values()), 1.0,
                    MESH_STARTUP_SECONDS + MESH_CELL_SECONDS * M, parts)
