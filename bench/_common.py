"""Shared helpers of the benchmarks: timing, machine description, JSON output."""

from __future__ import annotations

import datetime as _dt
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

RESULTS = Path(__file__).resolve().parent / "results"

#: The clock of every measurement: wall time, or process CPU time (``--cpu-time``, one
#: thread: robust when other jobs share the machine, it counts only this process's work).
CLOCK = {"timer": time.perf_counter, "name": "wall"}

_SINGLE = {"NUMBA_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}


def use_cpu_time(argv: list[str]) -> None:
    """Switch to CPU time on one thread; re-executes the script with the thread limits set."""
    import sys

    if any(os.environ.get(k) != v for k, v in _SINGLE.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **_SINGLE})
    CLOCK["timer"] = time.process_time
    CLOCK["name"] = "cpu, 1 thread"


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


def machine() -> dict:
    """CPU model, cores, threads, library versions and the load average right now."""
    import numba

    cpu = platform.processor() or ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
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
    }


def _busy() -> bool:
    from wflow import kernels

    return kernels._busy()


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
