"""Shared helpers of the benchmarks: clean peer processes, timing, machine, JSON output.

**Clean peers** (issue 26). Every implementation that a benchmark compares ("peer":
wflow, a NumPy baseline, POT, DOLFINx, the published torch engine) runs in its own fresh
Python process started by :func:`run_peer`, with an explicit environment built by
:func:`peer_env`: the parent's environment without any thread or wait-policy variable
(:data:`POLICY_PREFIXES`: ``OMP_*``, ``GOMP_*``, ``KMP_*``, ``MKL_*``, ``NUMBA_*``,
``OPENBLAS_*``, ``BLIS_*``, ``VECLIB_*``, ``NUMEXPR_*``), then the same thread count for
every library (``NUMBA_NUM_THREADS = OMP_NUM_THREADS = OPENBLAS_NUM_THREADS =
MKL_NUM_THREADS = threads``) and only the variables a row sets on purpose.
``OPENBLAS_CORETYPE`` (a CPU-detection override some virtual machines need, not a
policy) is passed through when set and recorded. Each peer prints one JSON line with its
result and :func:`peer_info` (its own thread counts as the libraries report them, the CPU,
the load); :func:`run_peer` adds the environment it gave the process. Each peer warms up
in its own process (compile, cache load, first-call allocation) before it is timed.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"

#: Environment variables that set threads or wait policies of a peer's libraries: never
#: inherited by a peer process (a row may set them on purpose, and they are recorded).
POLICY_PREFIXES = ("OMP_", "GOMP_", "KMP_", "MKL_", "NUMBA_", "OPENBLAS_", "BLIS_",
                   "VECLIB_", "NUMEXPR_")
#: Passed through when set (CPU detection of this machine, the same for every peer).
PASS_THROUGH = ("OPENBLAS_CORETYPE",)
#: The thread-count variables every peer gets, all equal.
THREAD_VARS = ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS",
               "MKL_NUM_THREADS")


def default_threads() -> int:
    """The thread count of every peer: ``--threads`` or ``WFLOW_BENCH_THREADS``, else cores."""
    return int(os.environ.get("WFLOW_BENCH_THREADS") or os.cpu_count() or 1)


def peer_env(threads: int, extra: dict | None = None) -> dict[str, str]:
    """The explicit environment of one peer process (see the module docstring)."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(POLICY_PREFIXES) or k in PASS_THROUGH}
    env.update({k: str(int(threads)) for k in THREAD_VARS})
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), str(HERE)])
    env.pop("PYTHONWARNINGS", None)
    env.update({k: str(v) for k, v in (extra or {}).items()})
    return env


def recorded_env(env: dict[str, str]) -> dict[str, str]:
    """The part of a peer's environment that sets threads / policies (what is recorded)."""
    keep = {k: v for k, v in env.items() if k.startswith(POLICY_PREFIXES)}
    keep["PYTHONPATH"] = env.get("PYTHONPATH", "")
    return dict(sorted(keep.items()))


def cpu_model() -> str:
    """The CPU model string of ``/proc/cpuinfo`` (``platform.processor()`` elsewhere)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or ""


def cpu_flags() -> list[str]:
    """The vector-unit flags of the CPU that matter for the kernels (``/proc/cpuinfo``)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                return [f for f in ("avx2", "fma", "avx512f", "avx512dq", "avx512vl",
                                    "avx512_bf16", "amx_tile") if f in have]
    except OSError:
        pass
    return []


def load1() -> float:
    """The 1-minute load average (NaN where the OS has none)."""
    try:
        return round(os.getloadavg()[0], 2)
    except OSError:
        return float("nan")


def peer_info() -> dict:
    """In a peer process: its thread counts as its libraries report them, CPU, load.

    Reads, without starting anything new: numba's threads (only if its pool has started),
    every BLAS / OpenMP library that threadpoolctl sees, torch's threads (if imported).
    """
    info = {"cpu": cpu_model(), "cores": os.cpu_count(), "load1": load1(),
            "python": platform.python_version(), "executable": sys.executable,
            "pid": os.getpid()}
    if "numpy" in sys.modules:
        info["numpy"] = np.__version__
    if "numba" in sys.modules:
        import numba
        from numba.np.ufunc import parallel

        info["numba"] = numba.__version__
        if parallel._is_initialized:
            info["numba_threads"] = numba.get_num_threads()
            info["numba_layer"] = numba.threading_layer()
    if "torch" in sys.modules:
        torch = sys.modules["torch"]
        info["torch"] = torch.__version__
        info["torch_threads"] = torch.get_num_threads()
        info["torch_interop_threads"] = torch.get_num_interop_threads()
    try:
        import threadpoolctl

        info["threadpools"] = [{k: p.get(k) for k in ("internal_api", "num_threads",
                                                      "threading_layer", "filepath")}
                               for p in threadpoolctl.threadpool_info()]
    except ImportError:
        pass
    return info


def run_peer(cmd: list[str], *, threads: int, extra_env: dict | None = None,
             timeout: float | None = None, label: str = "") -> dict:
    """Run one peer in a fresh process with :func:`peer_env`; its last stdout line as JSON.

    Adds ``env`` (the recorded environment), ``cmd``, ``load_before`` / ``load_after``
    (1-min load of the machine) and ``wall_process_s`` to the peer's record.
    """
    env = peer_env(threads, extra_env)
    l0, t0 = load1(), time.perf_counter()
    out = subprocess.run(cmd, env=env, cwd=ROOT, capture_output=True, text=True,
                         timeout=timeout)
    if out.returncode != 0:
        raise RuntimeError(f"peer {label or cmd[1:3]} failed (exit {out.returncode}):\n"
                           f"{out.stderr[-3000:]}")
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
    if not lines:
        raise RuntimeError(f"peer {label or cmd[1:3]} printed no JSON:\n{out.stdout[-2000:]}"
                           f"\n{out.stderr[-2000:]}")
    rec = json.loads(lines[-1])
    rec.update(env=recorded_env(env), cmd=[str(c) for c in cmd], load_before=l0,
               load_after=load1(), wall_process_s=time.perf_counter() - t0)
    return rec


def call_peer(func: str, *, threads: int, python: str | None = None,
              extra_env: dict | None = None, timeout: float | None = None, **kwargs) -> dict:
    """:func:`run_peer` of ``MODULE:FUNCTION(**kwargs)`` of a bench module (``_peer.py``).

    The function runs in the fresh process and returns a JSON-able dict; the record is that
    dict plus ``peer`` (:func:`peer_info` after the call) and what :func:`run_peer` adds.
    """
    cmd = [python or sys.executable, str(HERE / "_peer.py"), func, json.dumps(kwargs)]
    return run_peer(cmd, threads=threads, extra_env=extra_env, timeout=timeout, label=func)

#: The clock of every measurement: wall time, or process CPU time (``--cpu-time``, one
#: thread: robust when other jobs share the machine, it counts only this process's work).
CLOCK = {"timer": time.perf_counter, "name": "wall"}

def use_cpu_time(argv: list[str]) -> None:
    """Switch to CPU time on one thread: re-executes the script in :func:`peer_env` (1)."""
    ensure_clean(1)
    CLOCK["timer"] = time.process_time
    CLOCK["name"] = "cpu, 1 thread"


def ensure_clean(threads: int, extra: dict | None = None) -> None:
    """Re-execute this script in the clean environment :func:`peer_env` (``threads``).

    For benchmarks whose only peer is the script itself (``bench_reproduce.py``,
    ``bench_pair_once.py``): their process then has the same explicit, recorded
    environment as every peer of :func:`run_peer`; ``extra``: variables set on purpose.
    """
    if os.environ.get("WFLOW_BENCH_CLEAN") != str(int(threads)):
        env = peer_env(threads, {**(extra or {}), "WFLOW_BENCH_CLEAN": str(int(threads))})
        os.execve(sys.executable, [sys.executable, *sys.argv], env)


def best_time(fn, *, repeat: int = 3, min_time: float = 0.0) -> tuple[float, object]:
    """Best wall time of ``repeat`` calls (after one warm-up call), and the last result.

    ``repeat=0``: a single timed call, no warm-up (for long reference runs).
    """
    timer = CLOCK["timer"]
    if repeat == 0:
        t0 = timer()
        out = fn()
        return timer() - t0, out
    out = fn()
    best = float("inf")
    t_total = 0.0
    k = 0
    while k < repeat or t_total < min_time:
        t0 = timer()
        out = fn()
        dt = timer() - t0
        best = min(best, dt)
        t_total += dt
        k += 1
        if k >= 50:
            break
    return best, out


def best_cpu(fn, *, repeat: int = 2) -> tuple[float, object]:
    """Fewest CPU seconds (``time.process_time``) of ``repeat`` calls, and the last result.

    No warm-up call: the caller warms up on a small input (a full-size warm-up would
    double a long run).
    """
    best, out = float("inf"), None
    for _ in range(repeat):
        t0 = time.process_time()
        out = fn()
        best = min(best, time.process_time() - t0)
    return best, out


def machine() -> dict:
    """CPU model, cores, threads, library versions and the load average right now."""
    import numba

    cpu = cpu_model()
    try:
        load = os.getloadavg()
    except OSError:
        load = (float("nan"),) * 3
    try:
        layer = numba.threading_layer()
    except ValueError:
        layer = "not started"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "numba_threads": numba.get_num_threads(),
        "threading_layer": layer,
        "python": platform.python_version(),
        "numpy": np.__version__,
        "numba": numba.__version__,
        "loadavg": [round(v, 2) for v in load],
        "clock": CLOCK["name"],
        "oversubscribed": _busy(),
        "date": _dt.datetime.now().isoformat(timespec="seconds"),
        "env": recorded_env(dict(os.environ)),
    }


def parent_machine() -> dict:
    """The orchestrating process's view: CPU, cores, load, date (imports nothing heavy)."""
    try:
        load = [round(v, 2) for v in os.getloadavg()]
    except OSError:
        load = [float("nan")] * 3
    return {"cpu": cpu_model(), "cpu_flags": cpu_flags(), "cores": os.cpu_count(),
            "loadavg": load,
            "python": platform.python_version(), "platform": platform.platform(),
            "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
            "parent_env": recorded_env(dict(os.environ))}


def _busy() -> bool:
    from wflow.kernels import direct

    return direct._busy()


def write_json(name: str, payload: dict) -> Path:
    """Write ``bench/results/<name>.json`` (pretty, sorted keys)."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / f"{name}.json"
    path.write_text(json.dumps(payload, indent=1, sort_keys=True, default=float) + "\n")
    return path


def table(rows: list[dict], cols: list[tuple[str, str, str]]) -> str:
    """Plain-text table: ``cols`` = (key, header, format)."""
    head = [h for _, h, _ in cols]
    body = [[(fmt.format(r[k]) if r.get(k) is not None else "-") for k, _, fmt in cols]
            for r in rows]
    w = [max(len(h), *(len(b[i]) for b in body)) if body else len(h) for i, h in enumerate(head)]
    lines = ["  ".join(h.rjust(w[i]) for i, h in enumerate(head)),
             "  ".join("-" * x for x in w)]
    lines += ["  ".join(c.rjust(w[i]) for i, c in enumerate(b)) for b in body]
    return "\n".join(lines)


def sphere(rng: np.random.Generator, n: int, d: int) -> np.ndarray:
    """``n`` uniform points on ``S^{d-1}``."""
    x = rng.standard_normal((n, d))
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def toml_text(doc: dict) -> str:
    """A scenario's TOML text from a dict: top-level keys, then one table per dict value.

    Every value is written as JSON, which TOML reads alike (numbers, strings, booleans,
    arrays of them).
    """
    out = [f"{k} = {json.dumps(v)}" for k, v in doc.items() if not isinstance(v, dict)]
    for sec, kv in doc.items():
        if isinstance(kv, dict):
            out += [f"[{sec}]", *(f"{k} = {json.dumps(v)}" for k, v in kv.items())]
    return "\n".join(out) + "\n"
