"""Reference runs: a refactor's bit-for-bit guard (issue #32, "30 or more reference runs").

Runs a fixed set of small problems through the command line (stable across refactors of
the Python layout) and through the public Python API, and records every number they
produce: every array of every ``.npz``, every numeric column of every ``.csv`` (wall and
CPU times excluded) and every numeric leaf of ``summary.json`` not named after a time or a
path. ``--record FILE`` writes them; ``--compare FILE`` reruns and reports each run whose
numbers differ (exactly: ``np.array_equal`` with NaN equal to NaN), exit 1 on any
difference.

"Bit for bit" is a property of one machine and one BLAS kernel: record and compare on the
same machine, with the same ``OPENBLAS_CORETYPE`` and thread counts (both recorded).

Usage (from the tree under test)::

    PYTHONPATH=$PWD .venv/bin/python bench/reference_runs.py --record /tmp/base.npz
    PYTHONPATH=$PWD .venv/bin/python bench/reference_runs.py --compare /tmp/base.npz
    ... --only particles-rk4,pde-o2      # a subset
    ... --list                           # the names
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import resource
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]

#: Keys (substrings, lower case) of times, paths and versions: not results.
_SKIP = ("time", "wall", "cpu", "elapsed", "second", "eta", "date", "version", "path",
         "host", "file", "out", "dir", "load", "thread", "rss", "memory", "estimate", "pid",
         "command", "argv", "python", "numpy", "platform", "started", "finished")


def _skip(key: str) -> bool:
    k = key.lower()
    if k in ("t", "times", "t_eval", "t_half", "T"):  # the time grid is a result
        return False
    return any(s in k for s in _SKIP)


# --------------------------------------------------------------------------------------
# scenarios (TOML text) for the command-line runs
# --------------------------------------------------------------------------------------
_ATT = '[attention]\nkind = "{kind}"\nbeta = {beta}\nd = {d}\n'
_TOK = '[tokens]\nn = {n}\nsampler = "vmf"\nmeans = [{mean}]\nkappas = [3.0]\n'
_HEADS = ('[heads]\ntype = "random_symmetric"\nH = {H}\nscale = 0.5\nvalue_sign = 1\n'
          'w = "mean"\n')


def _particles(kind="softmax", beta=1.0, d=3, n=300, H=2, T=1.0, dt=0.05, integrator="rk4",
               extra="", schedule='[schedule]\ntype = "static"\n', heads=None) -> str:
    mean = ", ".join(["1.0"] + ["0.0"] * (d - 1))
    return (f"seed = 3\n{_ATT.format(kind=kind, beta=beta, d=d)}"
            f"{_TOK.format(n=n, mean='[' + mean + ']')}"
            f"{heads or _HEADS.format(H=H)}{schedule}"
            f'[particles]\nT = {T}\ndt = {dt}\nintegrator = "{integrator}"\n{extra}')


_MATRICES = ('[heads]\ntype = "matrices"\nA = [[[1.5, 0.3, 0.0], [0.3, 0.5, 0.0], '
             '[0.0, 0.0, -0.5]], [[0.2, 0.0, 0.4], [0.0, 1.0, 0.0], [0.4, 0.0, 1.2]]]\n'
             'value_sign = 1\nw = "mean"\n')
_DENSITY = ('[density]\ntype = "vmf"\nmeans = [[1.0, 0.0, 0.2], [-0.3, 1.0, 0.0]]\n'
            'kappas = [5.0, 4.0]\nweights = [0.6, 0.4]\n')


def _pde(kind="softmax", order=2, flow="transformer", T=0.3, dt=0.05, extra="",
         schedule='[schedule]\ntype = "static"\n', mesh="sphere_720.msh") -> str:
    return (f"seed = 5\n{_ATT.format(kind=kind, beta=1.0, d=3)}{_MATRICES}{schedule}"
            f"{_DENSITY}[pde]\nmesh = \"{mesh}\"\nT = {T}\ndt = {dt}\norder = {order}\n"
            f'flow = "{flow}"\nn_saves = 4\n{extra}')


def _jko(kind="softmax", extra="") -> str:
    return (f"seed = 5\n{_ATT.format(kind=kind, beta=1.0, d=3)}{_MATRICES}"
            '[schedule]\ntype = "static"\n'
            f'{_DENSITY}[jko]\nmesh = "sphere_720.msh"\nT = 0.5\ntau = 0.25\n{extra}')


_OU = ('[schedule]\ntype = "ou"\ntarget = "identity"\nkappa = 1.0\nsigma2 = 0.5\n'
       'symmetric_noise = true\n')
_OSC = '[schedule]\ntype = "oscillating"\namplitude = 0.3\nomega = 2.0\n'
_REL = '[schedule]\ntype = "relaxed"\n'

#: name -> (command, scenario TOML or None, extra arguments)
CLI_RUNS: dict[str, tuple[str, str | None, list[str]]] = {
    "particles-rk4": ("particles", _particles(), []),
    "particles-rk4-python": ("particles", _particles(extra='engine = "python"\n'), []),
    "particles-euler": ("particles", _particles(integrator="euler"), []),
    "particles-usa": ("particles", _particles(kind="usa"), []),
    "particles-relu": ("particles", _particles(kind="relu"), []),
    "particles-surrogate": ("particles", _particles(extra='flow = "surrogate"\n'), []),
    "particles-ou-paths": ("particles", _particles(T=0.5, dt=0.01, integrator="euler",
                                                   schedule=_OU, extra="n_paths = 3\n"), []),
    "particles-oscillating": ("particles", _particles(schedule=_OSC), []),
    "particles-relaxed": ("particles", _particles(schedule=_REL, integrator="euler", dt=0.01,
                                                  T=0.5), []),
    "particles-d6": ("particles", _particles(d=6, n=200), []),
    "particles-entropy": ("particles", _particles(extra="entropy = true\n", heads=_MATRICES),
                          []),
    "particles-fastsum": ("particles", _particles(n=4000, T=0.2, dt=0.1,
                                                  extra='kernel_backend = "fastsum"\n'), []),
    "particles-trajectory": ("particles", _particles(n=100, T=0.5, dt=0.1),
                             ["--save-trajectory"]),
    "pde-o2": ("pde", _pde(), []),
    "pde-o1": ("pde", _pde(order=1), []),
    "pde-surrogate": ("pde", _pde(flow="surrogate"), []),
    "pde-usa": ("pde", _pde(kind="usa"), []),
    "pde-oscillating": ("pde", _pde(schedule=_OSC.replace("amplitude = 0.3",
                                                          "amplitude = 0.2")), []),
    "pde-2420": ("pde", _pde(mesh="sphere_2420.msh", T=0.2), []),
    "jko-fv": ("jko", _jko(), []),
    "jko-fv-usa": ("jko", _jko(kind="usa"), []),
    "jko-ot": ("jko", _jko(extra='scheme = "ot"\not = "emd"\n'), []),
    "gaussian-riccati": ("gaussian", (ROOT / "demos/gaussian_riccati.toml").read_text(), []),
    "gaussian-blowup": ("gaussian", (ROOT / "demos/gaussian_blowup.toml").read_text(), []),
    "gaussian-algebraic": ("gaussian", (ROOT / "demos/gaussian_algebraic.toml").read_text(),
                           []),
    "gaussian-reach": ("gaussian reach", (ROOT / "demos/gaussian_riccati.toml").read_text(),
                       []),
    "mesh-500": ("mesh", None, ["--cells", "500"]),
    "verify-equiangular": ("verify equiangular", None, ["--quick"]),
    "verify-radial-dominance": ("verify radial-dominance", None, ["--quick"]),
    "reproduce-staircase": ("reproduce metastable_staircase", None, ["--quick"]),
    "run-default": ("run", None, []),
}


def _cli(name: str, tmp: Path) -> dict[str, np.ndarray]:
    command, toml, extra = CLI_RUNS[name]
    argv = command.split()
    work = tmp / name
    work.mkdir(parents=True)
    if toml is not None:
        scen = work / "scenario.toml"
        scen.write_text(toml)
        argv.append(str(scen))
    out = work / ("mesh.msh" if command == "mesh" else "out")
    argv += ["--out", str(out), *extra]
    env = {**os.environ, "MPLBACKEND": "Agg"}
    r = subprocess.run([sys.executable, "-m", "wflow.cli", *argv], env=env, cwd=work,
                       capture_output=True, text=True)
    if r.returncode not in (0, 1):
        raise RuntimeError(f"{name}: exit {r.returncode}\n{r.stderr[-2000:]}")
    data: dict[str, np.ndarray] = {"exit": np.array(r.returncode)}
    if command == "mesh":
        import meshio

        m = meshio.read(out)
        data["points"] = m.points
        data["cells"] = np.concatenate([c.data.ravel() for c in m.cells])
        return data
    for f in sorted(out.rglob("*")):
        rel = str(f.relative_to(out))
        if f.suffix == ".npz":
            with np.load(f, allow_pickle=False) as z:
                for k in z.files:
                    if not _skip(k):
                        data[f"{rel}:{k}"] = z[k]
        elif f.suffix == ".csv":
            data.update(_csv(f, rel))
        elif f.name == "summary.json":
            _leaves(json.loads(f.read_text()), rel, data)
    return data


def _csv(f: Path, rel: str) -> dict[str, np.ndarray]:
    with f.open() as fh:
        rows = list(csv.reader(row for row in fh if not row.startswith("#")))
    if not rows:
        return {}
    head, body = rows[0], rows[1:]
    out = {}
    for j, col in enumerate(head):
        if _skip(col):
            continue
        try:
            out[f"{rel}:{col}"] = np.array([float(r[j]) for r in body if j < len(r)])
        except ValueError:
            continue
    return out


def _leaves(obj, prefix: str, out: dict) -> None:
    if isinstance(obj, dict):
        for k, v in obj.items():
            if not _skip(str(k)):
                _leaves(v, f"{prefix}/{k}", out)
    elif isinstance(obj, list):
        try:
            arr = np.array(obj, dtype=np.float64)
            out[prefix] = arr
        except (ValueError, TypeError):
            for i, v in enumerate(obj):
                _leaves(v, f"{prefix}[{i}]", out)
    elif isinstance(obj, bool | int | float) and obj is not None:
        out[prefix] = np.array(float(obj))


# --------------------------------------------------------------------------------------
# Python API runs (kernels, energies, transport): the layers below the commands
# --------------------------------------------------------------------------------------
def _data(n=400, m=300, d=3, H=2, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    y = rng.standard_normal((m, d))
    y /= np.linalg.norm(y, axis=1, keepdims=True)
    w = rng.random(m)
    w /= w.sum()
    Q = 0.6 * rng.standard_normal((H, d, d))
    K = 0.6 * rng.standard_normal((H, d, d))
    return x, y, w, Q, K


def _kernel(kind: str, backend: str, n=400, m=300, d=3) -> Callable[[], dict]:
    def run() -> dict:
        from wflow.kernels import kernel_sums

        x, y, w, Q, K = _data(n, m, d)
        s = kernel_sums(x, y, w, Q, K, beta=1.5, kind=kind, potential=True, backend=backend)
        return {f: np.asarray(v) for f, v in zip(s._fields, s, strict=False)
                if isinstance(v, np.ndarray)}
    return run


def _evaluate(kind: str, flow_d: int = 3) -> Callable[[], dict]:
    def run() -> dict:
        import wflow

        rng = np.random.default_rng(1)
        x, _, _, _, _ = _data(300, 1, flow_d)
        heads = wflow.Heads.random_symmetric(3, flow_d, rng, scale=0.7)
        fe = wflow.evaluate(x, heads, wflow.Attention(kind, beta=1.2))
        out = {}
        for f in getattr(fe, "_fields", ()) or vars(fe):
            v = getattr(fe, f)
            if isinstance(v, np.ndarray):
                out[f] = v
        m = np.full(x.shape[0], 1.0 / x.shape[0])
        out["E_h"] = np.asarray(wflow.head_energies(fe, m, wflow.Attention(kind, beta=1.2)))
        return out
    return run


def _w2(method: str) -> Callable[[], dict]:
    def run() -> dict:
        import wflow

        x, y, w, _, _ = _data(250, 200)
        if method == "sparse":
            r = wflow.w2_sphere_sparse(x, y, b=w)
            return {f: np.asarray(getattr(r, f), dtype=float) for f in ("value", "bound")
                    if hasattr(r, f)}
        return {"value": np.asarray(wflow.w2_sphere(x, y, b=w), dtype=float)}
    return run


def _formulas() -> dict:
    import wflow.multihead as mh

    return {"beta_star": np.array([mh.beta_star(n=n, H=H, alpha=1.0)
                                   for n in (8, 64) for H in (1, 2, 4)]),
            "c_star": np.array([mh.c_star(H) for H in range(1, 6)]),
            "lambda_c": np.array([mh.lambda_c(beta=1.0, n=n) for n in (8, 64)])}


API_RUNS: dict[str, Callable[[], dict]] = {
    **{f"kernel-{k}-{b}": _kernel(k, b) for k in ("softmax", "usa", "relu")
       for b in ("numpy", "direct")},
    "kernel-softmax-fastsum": _kernel("softmax", "fastsum", n=3000, m=3000),
    "kernel-softmax-d8": _kernel("softmax", "direct", d=8),
    **{f"evaluate-{k}": _evaluate(k) for k in ("softmax", "usa", "relu")},
    "evaluate-softmax-d5": _evaluate("softmax", 5),
    "w2-dense": _w2("dense"),
    "w2-sparse": _w2("sparse"),
    "multihead-formulas": _formulas,
}


def _cpu() -> float:
    """CPU seconds of this process and its finished children (user + system)."""
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + ch.ru_utime + ch.ru_stime


def run_all(names: list[str]) -> tuple[dict[str, np.ndarray], dict[str, float]]:
    """Every selected run's numbers (``"run|key" -> array``) and its CPU seconds.

    CPU time (this process and the command's subprocess), not wall time: the machine may
    be shared, and a refactor's cost shows in CPU seconds.
    """
    flat: dict[str, np.ndarray] = {}
    secs: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="wflow-ref-") as tmp:
        for name in names:
            t0 = _cpu()
            try:
                data = _cli(name, Path(tmp)) if name in CLI_RUNS else API_RUNS[name]()
            except Exception as exc:  # noqa: BLE001 - a run that breaks is a difference
                data = {"ERROR": np.array(str(exc)[:500])}
            secs[name] = _cpu() - t0
            for k, v in data.items():
                flat[f"{name}|{k}"] = np.asarray(v)
            print(f"{name:28s} {len(data):5d} arrays  {secs[name]:6.1f} s CPU", flush=True)
    return flat, secs


def _equal(a: np.ndarray, b: np.ndarray) -> bool:
    if a.shape != b.shape or a.dtype.kind != b.dtype.kind:
        return False
    if a.dtype.kind in "fc":
        return bool(np.array_equal(a, b, equal_nan=True))
    return bool(np.array_equal(a, b))


def compare(ref: dict[str, np.ndarray], new: dict[str, np.ndarray], names: list[str]) -> int:
    """Print the runs whose numbers differ; the number of differing runs."""
    bad = 0
    for name in names:
        rk = {k for k in ref if k.startswith(name + "|")}
        nk = {k for k in new if k.startswith(name + "|")}
        diffs = []
        for k in sorted(rk | nk):
            if k not in rk or k not in nk:
                diffs.append(f"  {k}: {'missing' if k not in nk else 'new'}")
            elif not _equal(ref[k], new[k]):
                a, b = ref[k], new[k]
                detail = ""
                if a.shape == b.shape and a.dtype.kind in "fiu":
                    with np.errstate(invalid="ignore"):
                        detail = f" max |diff| {np.nanmax(np.abs(a.astype(float) - b)):.3g}"
                diffs.append(f"  {k}: differs{detail}")
        if not rk:
            diffs.append("  (no reference recorded)")
        status = "identical" if not diffs else f"DIFFERS ({len(diffs)} keys)"
        print(f"{name:28s} {len(nk):5d} arrays  {status}")
        for line in diffs[:8]:
            print(line)
        bad += bool(diffs)
    return bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--record", type=Path)
    g.add_argument("--compare", type=Path)
    g.add_argument("--list", action="store_true")
    ap.add_argument("--only", default="", help="comma-separated run names")
    args = ap.parse_args()
    names = [*CLI_RUNS, *API_RUNS]
    if args.list:
        print("\n".join(names))
        return 0
    if args.only:
        names = [n for n in args.only.split(",") if n]
    env = {k: os.environ.get(k) for k in ("OPENBLAS_CORETYPE", "NUMBA_NUM_THREADS",
                                          "OMP_NUM_THREADS")}
    print(f"{len(names)} runs; environment {env}; wflow from "
          f"{__import__('wflow').__file__}", flush=True)
    flat, secs = run_all(names)
    if args.record:
        meta = {"__env__": np.array(json.dumps(env)),
                "__seconds__": np.array(json.dumps(secs))}
        np.savez_compressed(args.record, **flat, **meta)
        print(f"recorded {len(flat)} arrays of {len(names)} runs in {args.record} "
              f"({sum(secs.values()):.0f} s CPU)")
        return 0
    with np.load(args.compare, allow_pickle=False) as z:
        ref = {k: z[k] for k in z.files if not k.startswith("__")}
        ref_secs = json.loads(str(z["__seconds__"])) if "__seconds__" in z.files else {}
    bad = compare(ref, flat, names)
    print(f"{len(names) - bad} of {len(names)} runs identical")
    both = [n for n in names if n in ref_secs]
    if both:
        a, b = sum(ref_secs[n] for n in both), sum(secs[n] for n in both)
        print(f"CPU time: {b:.1f} s against the reference's {a:.1f} s ({b / a:.3f}x)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
