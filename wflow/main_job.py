"""The main job (``wflow run``): PDE, JKO and particles on one initial density, compared.

Phases, each deterministic given the scenario's seeds and checkpointed when done:

1. ``pde`` — the transformer PDE on the sphere mesh (:func:`wflow.pde.solve_pde`);
2. ``particles`` — ``n`` tokens sampled from the initial cell density
   (:func:`wflow.density.sample_particles`) and evolved with the same heads
   (:func:`wflow.particles.simulate`), recorded at the PDE output times;
3. ``jko`` — JKO minimising movements on the same mesh (:mod:`wflow.jko`), if enabled;
4. ``compare`` — exact ``W_2`` (POT, geodesic cost) particles vs PDE at every output
   time and JKO vs PDE at the JKO times;
5. ``report`` — ``summary.json``, ``report.md`` with figures, raw data.

Every section of the scenario (``[jko]`` included: its keys, ``T`` a multiple of ``τ``,
value-aligned symmetric heads) is validated before the first phase, so bad input never
costs a computation nor leaves a checkpoint.

Checkpoints live in ``DIR.ckpt/`` (pickles of the phase results, internal format) with
the scenario and its fingerprint (SHA-256 of the scenario table and of every file it
names); ``wflow run --resume DIR`` skips the phases found there and gives the same result
as an uninterrupted run. Resuming with a scenario that differs from the checkpointed one
is refused, naming the difference; a run without ``--resume`` starts over. The output
directory itself is written atomically at the end.
"""

from __future__ import annotations

import hashlib
import json
import logging
import pickle
import time
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from .io import (
    OutputError,
    atomic_write_bytes,
    check_finite,
    run_directory,
    save_npz,
    write_csv,
    write_json,
)
from .scenario import Scenario, ScenarioError, boolean, choice, number, parse_scenario, take

__all__ = ["RUN_SPEC", "RunOptions", "MainJobResult", "run_main_job", "default_run_scenario"]

logger = logging.getLogger(__name__)

RUN_SPEC = {
    "n_particles": (2000, number(10, integer=True)),
    "particle_integrator": ("rk4", choice("euler", "rk4")),
    "particle_steps_per_save": (4, number(1, integer=True)),
    "jko": (True, boolean),
    "render": (True, boolean),
    "max_ot_points": (6000, number(100, integer=True)),
}


@dataclass(frozen=True)
class RunOptions:
    """Validated ``[run]`` section (see :data:`RUN_SPEC` for keys and defaults)."""

    n_particles: int = 2000
    particle_integrator: str = "rk4"
    particle_steps_per_save: int = 4
    jko: bool = True
    render: bool = True
    max_ot_points: int = 6000


@dataclass(frozen=True)
class MainJobResult:
    """Outcome of :func:`run_main_job`: the summary written and the phase results."""

    status: str
    summary: dict[str, Any]
    out: Path


def default_run_scenario():
    """The scenario shipped with the package for ``wflow run`` without arguments."""
    return resources.files("wflow") / "data" / "default_run.toml"


def _load(path: Path | None) -> tuple[Scenario, dict]:
    if path is None:
        with resources.as_file(default_run_scenario()) as p:
            raw = tomllib.loads(Path(p).read_text(encoding="utf-8"))
            return parse_scenario(raw, base_dir=Path(p).parent), raw
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"scenario file not found: {path}")
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(f"{path}: invalid TOML ({exc})") from exc
    return parse_scenario(raw, base_dir=path.parent), raw


def _fingerprint(raw: dict, base_dir: Path) -> dict[str, str]:
    """SHA-256 of the scenario table and of every existing file a string value in it names.

    Keys: ``"scenario"`` and ``"file:<value>"``; relative paths resolve against ``base_dir``
    (then the shipped ``meshes/``), as the solvers resolve them.
    """
    from .mesh import MESH_DIR

    out = {"scenario": hashlib.sha256(json.dumps(raw, sort_keys=True, default=str).encode())
           .hexdigest()}

    def visit(v: Any) -> None:
        if isinstance(v, dict):
            for x in v.values():
                visit(x)
        elif isinstance(v, list):
            for x in v:
                visit(x)
        elif isinstance(v, str) and v and len(v) < 4096:
            p = Path(v).expanduser()
            for q in ((p,) if p.is_absolute() else (base_dir / p, MESH_DIR / p)):
                if q.is_file():
                    out[f"file:{v}"] = hashlib.sha256(q.read_bytes()).hexdigest()
                    break

    visit(raw)
    return out


def _flat(d: Any, prefix: str = "") -> dict[str, Any]:
    if not isinstance(d, dict):
        return {prefix: d}
    out: dict[str, Any] = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def _differences(old_raw: dict, new_raw: dict, old_fp: dict, new_fp: dict) -> list[str]:
    """Human-readable differences between two scenarios (keys, then files)."""
    a, b = _flat(old_raw), _flat(new_raw)
    diff = [f"{k}: {a.get(k, '(unset)')!r} -> {b.get(k, '(unset)')!r}"
            for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
    diff += [f"file {k[5:]!r} changed" for k in sorted(set(old_fp) & set(new_fp))
             if k.startswith("file:") and old_fp[k] != new_fp[k]]
    return diff


class _Checkpoint:
    """Phase results pickled into ``DIR.ckpt/`` (written atomically) with the scenario.

    ``scenario.json`` holds ``{"wflow_checkpoint": 1, "raw", "base_dir", "fingerprint"}``;
    a folder ``DIR.ckpt`` that is not such a checkpoint is never touched (refused).
    """

    def __init__(self, out: Path) -> None:
        self.dir = out.with_name(out.name + ".ckpt")

    def meta(self) -> dict | None:
        """The checkpoint's ``scenario.json``, or ``None`` if there is no checkpoint."""
        try:
            meta = json.loads((self.dir / "scenario.json").read_text())
        except (OSError, ValueError):
            return None
        return meta if isinstance(meta, dict) and "raw" in meta else None

    def _ours(self) -> bool:
        """True if the folder holds nothing but a checkpoint's files."""
        return self.meta() is not None and all(
            f.name == "scenario.json" or f.suffix == ".pkl"
            or (f.name.startswith(".") and f.is_file()) for f in self.dir.iterdir())

    def check(self) -> None:
        """Refuse (``OutputError``) a ``DIR.ckpt`` that wflow did not write."""
        if (self.dir.exists() or self.dir.is_symlink()) and (
                self.dir.is_symlink() or not self.dir.is_dir() or not self._ours()):
            raise OutputError(f"{self.dir}: exists and is not a wflow checkpoint (the main job "
                              "keeps its checkpoints there): move it away or choose another --out")

    def has(self, name: str) -> bool:
        return (self.dir / f"{name}.pkl").is_file()

    def load(self, name: str) -> Any:
        with open(self.dir / f"{name}.pkl", "rb") as fh:
            return pickle.load(fh)

    def save(self, name: str, obj: Any) -> None:
        atomic_write_bytes(self.dir / f"{name}.pkl", pickle.dumps(obj))

    def start(self, raw: dict, base_dir: Path, fingerprint: dict) -> None:
        """Start a fresh checkpoint (an old one of wflow's is cleared first)."""
        self.clear()
        self.dir.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(self.dir / "scenario.json", json.dumps(
            {"wflow_checkpoint": 1, "raw": raw, "base_dir": str(base_dir),
             "fingerprint": fingerprint}, default=str).encode())

    def clear(self) -> None:
        """Delete the checkpoint's own files, then the folder if nothing else is in it."""
        if not self.dir.is_dir() or self.dir.is_symlink() or not self._ours():
            return
        for f in self.dir.iterdir():
            f.unlink()
        self.dir.rmdir()


def _phase(ck: _Checkpoint, name: str, fn: Callable[[], Any], timings: dict) -> Any:
    if ck.has(name):
        logger.info("run: phase %s restored from checkpoint", name)
        obj = ck.load(name)
        timings[name] = obj.get("_wall", 0.0) if isinstance(obj, dict) else 0.0
        return obj
    print(f"run: phase {name} ...", flush=True)
    t0 = time.perf_counter()
    obj = fn()
    wall = time.perf_counter() - t0
    if isinstance(obj, dict):
        obj["_wall"] = wall
    timings[name] = wall
    ck.save(name, obj)
    print(f"run: phase {name} done in {wall:.1f} s", flush=True)
    return obj


def run_main_job(scenario: str | Path | None, out: str | Path, *, resume: bool = False,
                 progress: bool | None = None) -> MainJobResult:
    """Run the main job; write ``out/`` (see module docstring).

    Parameters
    ----------
    scenario : path or None
        Scenario TOML; ``None`` uses the shipped default, or with ``resume`` the
        checkpointed scenario. With ``resume`` a given scenario must equal the
        checkpointed one (the table and the files it names), else ``ScenarioError``
        names the differences.
    out : path
        Output directory (a previous wflow output there is replaced; check it first
        with :func:`wflow.io.prepare_output`, as ``wflow run`` does).
    resume : bool
        Continue from ``out.ckpt/``.

    Raises
    ------
    ScenarioError, ValueError, FileNotFoundError
        Bad input, before any phase runs (nothing written, no checkpoint).
    KeyboardInterrupt
        With a message saying how to resume (the completed phases stay checkpointed).
    """
    out = Path(out)
    ck = _Checkpoint(out)
    ck.check()
    if resume:
        meta = ck.meta()
        if meta is None:
            raise FileNotFoundError(f"--resume: no checkpoint found at {ck.dir}")
        base = Path(meta["base_dir"])
        fp_old = meta.get("fingerprint") or _fingerprint(meta["raw"], base)
        if scenario is None:
            sc, raw = parse_scenario(meta["raw"], base_dir=base), meta["raw"]
        else:
            sc, raw = _load(Path(scenario))
        fp = _fingerprint(raw, sc.base_dir)
        diff = _differences(meta["raw"], raw, fp_old, fp)
        if fp != fp_old and not diff:
            diff = ["the scenario's folder or the files it names"]
        if diff:
            more = f" (and {len(diff) - 3} more)" if len(diff) > 3 else ""
            raise ScenarioError(
                f"--resume: {scenario} differs from the scenario checkpointed in {ck.dir}: "
                f"{'; '.join(diff[:3])}{more}; run without --resume to start over")
    else:
        sc, raw = _load(None if scenario is None else Path(scenario))
        fp = _fingerprint(raw, sc.base_dir)
    ropts = RunOptions(**take(sc.sections.get("run", {}), RUN_SPEC, "run"))

    from .density import density_spec_from_scenario, initial_density
    from .mesh import load_mesh
    from .pde.options import pde_options_from_dict

    mesh_spec, popts = pde_options_from_dict(sc.sections.get("pde"), seed=sc.seed)
    popts = type(popts)(**{**popts.__dict__, "progress": progress})
    if mesh_spec != "default" and ":" not in str(mesh_spec) and sc.path(mesh_spec).is_file():
        mesh_spec = sc.path(mesh_spec)  # scenario-relative file; else shipped name / generator
    if sc.d != 3:
        raise ScenarioError("attention.d: the main job runs on S² meshes, d must be 3")
    mesh = load_mesh(mesh_spec)
    rho0 = initial_density(mesh, density_spec_from_scenario(sc), base_dir=sc.base_dir)
    schedule = sc.build_schedule()
    attn = sc.attention_obj()
    if ropts.jko:
        _check_jko(mesh, rho0, schedule, attn, sc, popts)
    if not resume:  # everything validated: start a fresh checkpoint
        ck.start(raw, sc.base_dir, fp)
    timings: dict[str, float] = {}
    t_total = time.perf_counter()
    try:
        pde = _phase(ck, "pde", lambda: {"res": _run_pde(mesh, rho0, schedule, attn, popts)},
                     timings)["res"]
        parts = _phase(ck, "particles", lambda: _run_particles(mesh, pde, schedule, attn,
                                                               popts, ropts, sc, progress),
                       timings)
        jko = None
        if ropts.jko:
            jko = _phase(ck, "jko", lambda: {"res": _run_jko(mesh, rho0, schedule, attn, sc,
                                                             popts, progress)}, timings)["res"]
        cmp_ = _phase(ck, "compare", lambda: _compare(pde, parts, jko, ropts), timings)
    except KeyboardInterrupt as exc:
        raise KeyboardInterrupt(f"completed phases are checkpointed in {ck.dir}; continue "
                                f"with: wflow run --resume {out}") from exc
    summary = _summary(sc, raw, pde, parts, jko, cmp_, timings, ropts, mesh,
                       time.perf_counter() - t_total)
    with run_directory(out) as stage:
        _write_outputs(stage, pde, parts, jko, cmp_, summary, ropts, mesh)
    ck.clear()
    return MainJobResult(summary["status"], summary, out)


def _check_jko(mesh, rho0, schedule, attn, sc: Scenario, popts) -> None:
    """Validate the ``[jko]`` phase before any phase runs (as :func:`_run_jko` will run it).

    The options (keys, ``T`` a multiple of ``τ``) and the JKO scheme's own checks of its
    input (value-aligned symmetric heads, jump times of the schedule on the ``τ`` grid):
    the scheme's first state is computed (one energy evaluation) and discarded.
    """
    from dataclasses import replace

    from .jko import jko_options_from_dict
    from .jko.solver import iterate_jko

    _, opts, _ = jko_options_from_dict(sc.sections.get("jko"), T=popts.T)
    gen = iterate_jko(mesh.gather_owned(mesh.centroids), mesh.gather_owned(mesh.areas),
                      np.asarray(rho0) * mesh.gather_owned(mesh.areas), schedule, attn,
                      options=replace(opts, progress=False))
    try:
        next(gen)
    finally:
        gen.close()


# --------------------------------------------------------------------------- phases
def _run_pde(mesh, rho0, schedule, attn, popts):
    from .pde import solve_pde

    res = solve_pde(mesh, rho0, schedule, attn, options=popts)
    if res.status != "success":
        raise FloatingPointError(f"pde phase failed: {res.message}")
    return res


def _run_particles(mesh, pde, schedule, attn, popts, ropts: RunOptions, sc: Scenario,
                   progress) -> dict:
    from .density import sample_particles
    from .particles import simulate

    rng = np.random.default_rng([sc.seed, 4242])
    x0 = sample_particles(mesh, pde.masses[0], ropts.n_particles, rng)
    nsave = len(pde.t) - 1
    steps = nsave * ropts.particle_steps_per_save
    res = simulate(x0, schedule, attn, T=popts.T, dt=popts.T / steps,
                   integrator=ropts.particle_integrator, flow=popts.flow,
                   record_every=ropts.particle_steps_per_save, save_trajectory=True,
                   head_rates=False, seed=sc.seed, progress=progress)
    if res.status != "success":
        raise FloatingPointError(f"particle phase failed: {res.message}")
    return {"res": res, "x0": x0}


def _run_jko(mesh, rho0, schedule, attn, sc: Scenario, popts, progress):
    from .jko.run import run_jko_scenario

    res = run_jko_scenario(mesh, rho0, schedule, attn, sc, T=popts.T, progress=progress)
    if res.status not in ("success", "not_converged"):
        raise FloatingPointError(f"jko phase failed: {res.message}")
    return res


def _compare(pde, parts: dict, jko, ropts: RunOptions) -> dict:
    from .transport import w2_sphere

    pres = parts["res"]
    chat = pde.centroids / np.linalg.norm(pde.centroids, axis=1, keepdims=True)
    traj = pres.trajectory[0]
    n = min(traj.shape[1], ropts.max_ot_points)
    w2_parts = np.array([w2_sphere(traj[k, :n], chat, None, pde.masses[k],
                                   max_points=max(ropts.max_ot_points, chat.shape[0]))
                         for k in range(len(pde.t))])
    out = {"t": pde.t, "w2_particles_vs_pde": w2_parts}
    if jko is not None:
        t_j = np.asarray(jko.t)
        idx = [int(np.argmin(np.abs(pde.t - tj))) for tj in t_j]
        ok = [i for i, k in enumerate(idx) if abs(pde.t[k] - t_j[i]) < 1e-9 * max(1, pde.t[-1])]
        out["t_jko"] = t_j[ok]
        out["w2_jko_vs_pde"] = np.array([
            w2_sphere(chat, chat, jko.masses[i], pde.masses[idx[i]],
                      max_points=max(ropts.max_ot_points, chat.shape[0])) for i in ok])
    return out


# --------------------------------------------------------------------------- summary & output
def _edi_block(bal: dict) -> dict:
    """EDI residual (absolute and relative to the dissipation) of one solver.

    ``None`` where undefined: heads that are not value-aligned have no gradient-flow
    direction.
    """
    resid = float(bal.get("edi", float("nan")))
    diss = float(bal["dissipation"])
    defined = np.isfinite(resid)
    return {"residual": resid if defined else None,
            "relative": abs(resid) / abs(diss) if (defined and diss) else None,
            "dissipation": diss, "chain_residual": float(bal["chain"]), "dE": float(bal["dE"])}


def _summary(sc, raw, pde, parts, jko, cmp_, timings, ropts, mesh, wall) -> dict:
    from .jobs import provenance

    pres = parts["res"]
    pbal = {k: float(v[0]) for k, v in pres.balance.items()}
    summary: dict[str, Any] = {
        "status": "success",
        "scenario": raw,
        "provenance": provenance(),
        "seeds": {"scenario": sc.seed, "particles_sampling": [sc.seed, 4242]},
        "mesh": {"cells": int(pde.areas.size), "spec": str(sc.sections.get("pde", {}).get(
            "mesh", "default"))},
        "flow": pde.options.flow,
        "edi": {"pde": _edi_block(pde.balance), "particles": _edi_block(pbal)},
        "w2": {"particles_vs_pde": float(cmp_["w2_particles_vs_pde"][-1]),
               "particles_vs_pde_initial": float(cmp_["w2_particles_vs_pde"][0]),
               "particles_vs_pde_max": float(np.max(cmp_["w2_particles_vs_pde"]))},
        "mass_error": float(pde.stats["mass_error_max"]),
        "min_density": float(pde.stats["rho_min"]),
        "n_particles": int(pres.x.shape[1]),
        "wall_time_s": {**{k: float(v) for k, v in timings.items()}, "total": float(wall)},
        "pde_stats": pde.stats,
        "kernel": {"pde": pde.stats.get("kernel"), "particles": pres.extra.get("kernel")},
    }
    if jko is not None:
        summary["edi"]["jko"] = _edi_block(jko.balance)
        w = cmp_.get("w2_jko_vs_pde", np.array([np.nan]))
        summary["w2"]["jko_vs_pde"] = float(np.max(w)) if w.size else float("nan")
        summary["w2"]["jko_vs_pde_final"] = float(w[-1]) if w.size else float("nan")
        summary["jko_status"] = jko.status
    check_finite("summary.edi", summary["edi"])
    check_finite("summary.w2", summary["w2"])
    return summary


def _write_outputs(stage: Path, pde, parts, jko, cmp_, summary, ropts, mesh) -> None:
    from .jobs import history_columns
    from .report import write_report

    pres = parts["res"]
    write_json(stage / "summary.json", summary)
    hist = {k: np.asarray(v)[None] for k, v in pde.history.items()}
    write_csv(stage / "diagnostics_pde.csv", history_columns(pde.t, hist))
    write_csv(stage / "diagnostics_particles.csv", history_columns(pres.t, pres.history))
    write_csv(stage / "w2.csv", {"t": cmp_["t"],
                                 "w2_particles_vs_pde": cmp_["w2_particles_vs_pde"]})
    save_npz(stage / "density.npz", t=pde.t, rho=pde.rho, centroids=pde.centroids,
             areas=pde.areas)
    save_npz(stage / "trajectory.npz", t=pres.t, x=pres.trajectory[0])
    if jko is not None:
        jh = {k: np.asarray(v)[None] for k, v in jko.history.items()}
        write_csv(stage / "diagnostics_jko.csv", history_columns(np.asarray(jko.t), jh))
        save_npz(stage / "density_jko.npz", t=np.asarray(jko.t), rho=np.asarray(jko.rho),
                 centroids=pde.centroids, areas=pde.areas)
        if "w2_jko_vs_pde" in cmp_:
            write_csv(stage / "w2_jko.csv", {"t": cmp_["t_jko"],
                                             "w2_jko_vs_pde": cmp_["w2_jko_vs_pde"]})
    write_report(stage, summary=summary, pde=pde, particles=pres, jko=jko, compare=cmp_,
                 mesh=mesh, render=ropts.render)
