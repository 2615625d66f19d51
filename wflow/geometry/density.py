"""Initial densities: one specification for every solver (PDE, JKO, the main job, studies).

A density is given as ``"uniform"``; a von Mises–Fisher mixture
``{"type": "vmf", "means", "kappas", "weights"}`` (``κ/(4π sinh κ) e^{κ μ·x}``); a cap
indicator ``{"type": "cap", "center", "radius"}``; cell values from a ``.npy`` file; a
``"package.module:function"`` or Python callable of points ``(M, 3)``; or an array of
cell values. :func:`initial_density` turns it into cell densities of mass 1 on a sphere
mesh; :func:`density_spec_from_scenario` reads it from a scenario (``[density]``, else
the token law of ``[tokens]``, so that particles and meshes start from the same
distribution); :func:`sample_particles` draws tokens i.i.d. from cell masses.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ..infra.schema import ScenarioError, Spec, choice, number, string, take
from .sphere import check_masses, normalize, sample_cells

if TYPE_CHECKING:
    from .mesh import SphereMesh

__all__ = [
    "DENSITY_SCHEMA",
    "DENSITY_SPEC",
    "density_values",
    "initial_density",
    "density_spec_from_scenario",
    "sample_particles",
    "vmf_density",
]


def vmf_density(x: np.ndarray, means: np.ndarray, kappas: np.ndarray,
                 weights: np.ndarray) -> np.ndarray:
    """Mixture of von Mises–Fisher densities on S² (w.r.t. area), overflow-safe."""
    out = np.zeros(x.shape[0])
    for mu, k, w in zip(means, kappas, weights, strict=True):
        mu = mu / np.linalg.norm(mu)
        if k == 0:
            out += w / (4 * math.pi)
        else:  # κ/(4π sinh κ) e^{κ μ·x} = κ/(2π(1 − e^{−2κ})) e^{κ(μ·x − 1)}
            out += w * k / (2 * math.pi * -math.expm1(-2 * k)) * np.exp(k * (x @ mu - 1.0))
    return out


def density_values(points: np.ndarray, spec: Any, base_dir: Path | None,
                    num_global: int) -> np.ndarray:
    """Unnormalised density at the projected centroids (global order)."""
    if callable(spec):
        vals = spec(points)
        where = "density.function"
    elif isinstance(spec, np.ndarray):
        vals = spec
        where = "density (array)"
    else:
        if isinstance(spec, str):
            spec = {"type": spec}
        if not isinstance(spec, Mapping):
            raise ValueError(f"density: expected 'uniform', a mapping, an array or a callable, "
                             f"got {type(spec).__name__}")
        typ = spec.get("type", "uniform")
        where = f"density ({typ})"
        if typ == "uniform":
            vals = np.ones(points.shape[0])
        elif typ == "vmf":
            if spec.get("means") is None:
                raise ValueError("density.means: required for type = 'vmf'")
            means = np.atleast_2d(np.asarray(spec["means"], dtype=float))
            if means.shape[1] != 3:
                raise ValueError(f"density.means: rows must have length 3, got {means.shape}")
            C = means.shape[0]
            kap = np.asarray(10.0 if spec.get("kappas") is None else spec["kappas"], dtype=float)
            if kap.ndim > 1 or kap.size not in (1, C) or not np.all(np.isfinite(kap)) \
                    or np.any(kap < 0):
                raise ValueError(f"density.kappas: one finite non-negative number, or one per "
                                 f"mean ({C}), got {spec.get('kappas')!r}")
            kap = np.broadcast_to(kap.reshape(-1), (C,))
            w = spec.get("weights")
            w = np.full(C, 1.0 / C) if w is None else np.asarray(w, dtype=float)
            if w.shape != (C,) or not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
                raise ValueError(f"density.weights: one finite non-negative weight per mean "
                                 f"({C}), not all zero, got {spec.get('weights')!r}")
            vals = vmf_density(points, means, kap, w / w.sum())
        elif typ == "cap":
            c = np.asarray(spec.get("center", [0.0, 0.0, 1.0]), dtype=float)
            if c.shape != (3,) or not np.linalg.norm(c) > 0:
                raise ValueError(f"density.center: expected a non-zero 3-vector, got {c}")
            r = float(spec.get("radius", 0.5))
            if not 0 < r <= math.pi:
                raise ValueError(f"density.radius: angular radius must lie in (0, π], got {r}")
            ang = np.arccos(np.clip(points @ (c / np.linalg.norm(c)), -1.0, 1.0))
            vals = (ang <= r).astype(float)
        elif typ == "file":
            f = spec.get("file")
            if f is None:
                raise ValueError("density.file: required for type = 'file' (.npy of cell values)")
            p = Path(f)
            if not p.is_absolute() and base_dir is not None:
                p = base_dir / p
            if not p.is_file():
                raise FileNotFoundError(f"density.file: file not found: {p}")
            vals = np.load(p)
            where = f"density.file {p.name}"
        elif typ == "callable":
            from ..infra.callables import load_callable

            fn = spec.get("function")
            if fn is None:
                raise ValueError("density.function: required for type = 'callable' "
                                 "('package.module:function' mapping points (M, 3) to (M,))")
            vals = load_callable(fn, name="density.function")(points)
            where = f"density.function {fn}"
        else:
            raise ValueError(f"density.type: must be one of ['uniform', 'vmf', 'cap', 'file', "
                             f"'callable'], got {typ!r}")
    return check_masses(vals, num_global, name=where, what="cell values")


def initial_density(mesh: SphereMesh, spec: Any = "uniform", *,
                    base_dir: str | Path | None = None) -> np.ndarray:
    """Initial cell densities, normalised to mass 1 (global original cell order).

    Parameters
    ----------
    mesh : SphereMesh
    spec : str, mapping, (M,) array or callable
        ``"uniform"``; ``{"type": "vmf", "means": (C, 3), "kappas": (C,), "weights": (C,)}``
        (mixture of ``κ/(4π sinh κ) e^{κ μ·x}``); ``{"type": "cap", "center": (3,),
        "radius": angle}`` (indicator of a spherical cap); ``{"type": "file", "file":
        "rho.npy"}`` (cell values in the mesh file's cell order); ``{"type": "callable",
        "function": "pkg.mod:fn"}`` or a Python callable mapping points ``(M, 3)`` on the
        sphere to densities ``(M,)``. Point values are taken at the projected
        centroids ``ĉ_K``.
    base_dir : path, optional
        Directory for relative ``file`` paths.

    Returns
    -------
    (M,) array
        ``ρ_K >= 0`` with ``Σ_K ρ_K |K| = 1``.
    """
    chat = normalize(mesh.gather_owned(mesh.centroids))
    areas = mesh.gather_owned(mesh.areas)
    vals = density_values(chat, spec, None if base_dir is None else Path(base_dir),
                           mesh.num_global)
    mass = float(vals @ areas)
    if not mass > 0:
        raise ValueError("density: total mass is zero (the density vanishes on every cell)")
    return vals / mass


#: The ``[density]`` table: ``key -> (default, checker)``.
DENSITY_SCHEMA: Spec = {
    "type": ("uniform", choice("uniform", "vmf", "cap", "file", "callable")),
    "means": (None, None),
    "kappas": (None, None),
    "weights": (None, None),
    "center": (None, None),
    "radius": (0.5, number(0, strict_lo=True)),
    "file": (None, string),
    "function": (None, string),
}

#: What each ``[density]`` key means, in words (the site's scenario-key reference).
DENSITY_DOCS: dict[str, str] = {
    "type": "The initial density on the mesh: uniform, a von Mises–Fisher mixture, a "
            "spherical cap, cell values from a file, or a user's function.",
    "means": "vmf: the mixture's mean directions, one row (x, y, z) per component.",
    "kappas": "vmf: concentration κ of each component (one number or one per component).",
    "weights": "vmf: mixture weights of the components (default: equal).",
    "center": "cap: the cap's centre, a direction (x, y, z).",
    "radius": "cap: the cap's geodesic radius in radians (uniform inside, zero outside).",
    "file": "file: a .npy array of one density value per cell, in the mesh file's cell "
            "order, relative to the scenario's folder.",
    "function": "callable: \"pkg.module:function\" mapping points (M, 3) to densities (a "
                "module beside the scenario, mydens.py for \"mydens:f\", is found there "
                "first); normalised to mass 1 on the mesh.",
}

#: The keys each ``[density] type`` reads (the others' defaults are not carried along).
_TYPE_KEYS: dict[str, tuple[str, ...]] = {
    "uniform": (), "vmf": ("means", "kappas", "weights"), "cap": ("center", "radius"),
    "file": ("file",), "callable": ("function",),
}

#: Keys of the ``[density]`` section.
DENSITY_SPEC = ("type", "means", "kappas", "weights", "center", "radius", "file", "function")


def density_spec_from_scenario(sc: Any) -> dict[str, Any]:
    """The initial density of a scenario: ``[density]``, else derived from ``[tokens]``.

    ``[density]`` keys: ``type = "uniform" | "vmf" | "cap" | "file" | "callable"``,
    ``means``, ``kappas``, ``weights`` (vmf), ``center``, ``radius`` (cap, radians),
    ``file`` (.npy of cell values, relative to the scenario), ``function``
    (``"pkg.module:function"`` mapping points (M, 3) to densities; a module file beside
    the scenario, ``mydens.py`` for ``"mydens:f"``, is found there first, see
    :func:`wflow.infra.callables.resolve_callable`). Only the keys of the chosen type are
    returned. Without a
    ``[density]`` table the token law of ``[tokens]`` is used (``uniform`` or
    ``vmf`` samplers), so particles and PDE start from the same distribution.
    """
    if "density" in sc.sections:
        tables = getattr(sc, "tables", {})  # parsed at load (wflow.apps.scenario)
        vals = dict(tables["density"]) if "density" in tables else take(
            sc.sections["density"], DENSITY_SCHEMA, "density")
        if vals["file"] is not None:
            vals["file"] = str(sc.path(vals["file"]))
        if vals["function"] is not None:  # a module beside the scenario resolves there
            from ..infra.callables import resolve_callable

            vals["function"] = resolve_callable(vals["function"], sc.base_dir)
        keys = ("type", *_TYPE_KEYS.get(vals["type"], ()))  # no defaults of other types
        return {k: vals[k] for k in keys if vals[k] is not None}
    tok = sc.tokens
    if tok["sampler"] == "uniform":
        return {"type": "uniform"}
    if tok["sampler"] == "vmf":
        if tok["means"] is None:
            raise ScenarioError("tokens.means: required for sampler = 'vmf'")
        return {"type": "vmf", "means": tok["means"],
                "kappas": 10.0 if tok["kappas"] is None else tok["kappas"],
                "weights": tok["weights"]}
    raise ScenarioError(f"density: a [density] table is required for the PDE when "
                        f"tokens.sampler = {tok['sampler']!r} (only 'uniform' and 'vmf' token "
                        "laws have a density)")


def sample_particles(mesh: SphereMesh, masses: np.ndarray, n: int,
                     rng: np.random.Generator) -> np.ndarray:
    """``n`` tokens i.i.d. from the piecewise-constant density with cell ``masses``.

    ``masses`` in the mesh's original cell order (as :func:`initial_density` and the
    solvers return them); see :func:`wflow.geometry.sphere.sample_cells`. Collective under MPI.
    """
    return sample_cells(mesh.gather_owned(mesh.cell_vertices), masses, n, rng)
