"""Importing wflow changes no process-wide setting (issue 26).

Importing ``wflow`` once set ``OMP_WAIT_POLICY=PASSIVE`` in the process environment, so
every OpenMP library of the user's process (torch, BLAS, scikit-learn) and every child
process changed how it waits for threads. The checks below import every module of the
package in a fresh interpreter and compare, before and after:

* ``os.environ``;
* the Python signal handlers and the kernel's caught / ignored / blocked signal masks
  (``/proc/self/status``: handlers installed from C show there too);
* ``warnings.filters`` and ``warnings.showwarning``;
* numba's thread count, threading layer and whether its thread pool has started;
* the thread count of every BLAS / OpenMP library threadpoolctl sees;
* NumPy's floating-point error state and print options, the recursion limit, the switch
  interval, ``sys.excepthook``, the root logger, ``faulthandler``, the umask.

"Before" is taken after importing the third-party modules that importing wflow brings in
(found by a first fresh interpreter), so that only wflow's own effects are measured.
Negative controls inject one change of each kind after the imports and show that the
comparison reports it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import wflow

ROOT = Path(wflow.__file__).resolve().parent.parent

#: Runs in the child. argv: JSON {"modules": [...], "pre": [...], "inject": code or ""}.
_CHILD = r'''
import importlib, json, os, sys

spec = json.loads(sys.argv[1])


def snapshot():
    import faulthandler, logging, signal, warnings
    out = {"environ": dict(os.environ)}
    sigs = {}
    for s in signal.valid_signals():
        try:
            sigs[str(int(s))] = repr(signal.getsignal(s))
        except (OSError, ValueError):
            pass
    out["signal_handlers"] = sigs
    try:
        with open("/proc/self/status") as f:
            out["signal_masks"] = {l.split(":")[0]: l.split(":")[1].strip() for l in f
                                   if l.startswith(("SigCgt", "SigIgn", "SigBlk"))}
    except OSError:
        out["signal_masks"] = {}
    out["warnings_filters"] = [repr(f) for f in warnings.filters]
    out["showwarning"] = repr(warnings.showwarning)
    out["excepthook"] = repr(sys.excepthook)
    out["recursionlimit"] = sys.getrecursionlimit()
    out["switchinterval"] = sys.getswitchinterval()
    root = logging.getLogger()
    out["root_logger"] = [root.level, [repr(h) for h in root.handlers]]
    out["faulthandler"] = faulthandler.is_enabled()
    mask = os.umask(0o22)
    os.umask(mask)
    out["umask"] = mask
    if "numpy" in sys.modules:
        import numpy as np
        out["numpy_err"] = np.geterr()
        out["numpy_print"] = repr(np.get_printoptions())
    if "numba" in sys.modules:
        import numba
        from numba.np.ufunc import parallel
        started = bool(parallel._is_initialized)  # read first: get_num_threads starts it
        out["numba"] = {"threads": numba.get_num_threads() if started else None,
                        "config_threads": numba.config.NUMBA_NUM_THREADS,
                        "layer": numba.config.THREADING_LAYER,
                        "pool_started": started}
    if "threadpoolctl" in sys.modules:
        import threadpoolctl
        out["threadpools"] = {i["filepath"]: i["num_threads"]
                              for i in threadpoolctl.threadpool_info()}
    return out


failed = []
for name in spec["pre"]:
    try:
        importlib.import_module(name)
    except Exception:
        failed.append(name)
before = snapshot()
for name in spec["modules"]:
    importlib.import_module(name)
exec(spec["inject"])
after = snapshot()
third = [m for m in sys.modules if m.split(".")[0] != "wflow"]
print(json.dumps({"before": before, "after": after, "third_party": third,
                  "pre_failed": failed}))
'''


def wflow_modules() -> list[str]:
    """Every module of the package, found on disk (no import)."""
    pkg = ROOT / "wflow"
    names = []
    for path in sorted(pkg.rglob("*.py")):
        if "__pycache__" in path.parts:
            continue
        rel = path.relative_to(ROOT).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts[-1] == "__main__":
            continue
        names.append(".".join(parts))
    return names


def clean_env() -> dict[str, str]:
    """The test's environment without OpenMP / BLAS / numba settings (so a change shows)."""
    drop = ("OMP_", "GOMP_", "KMP_", "MKL_", "OPENBLAS_", "NUMBA_", "PYTHONWARNINGS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(drop)}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return env


def run_child(modules: list[str], pre: list[str], inject: str = "") -> dict:
    out = subprocess.run(
        [sys.executable, "-c", _CHILD, json.dumps({"modules": modules, "pre": pre,
                                                   "inject": inject})],
        env=clean_env(), cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def changes(rec: dict) -> dict:
    """The settings that differ between the two snapshots: ``{field: (before, after)}``."""
    b, a = rec["before"], rec["after"]
    diff = {}
    for key in sorted(set(a) | set(b)):
        vb, va = b.get(key), a.get(key)
        if key in ("environ", "signal_handlers"):
            vb, va = vb or {}, va or {}
            for k in sorted(set(va) | set(vb)):
                if vb.get(k) != va.get(k):
                    diff[f"{key}[{k}]"] = (vb.get(k), va.get(k))
        elif key == "threadpools" and vb is not None:
            # a library loaded by the import (with its default threads) is no change;
            # a changed thread count of one already loaded is
            for k in sorted(set(vb) & set(va or {})):
                if vb[k] != va[k]:
                    diff[f"threadpools[{k}]"] = (vb[k], va[k])
        elif vb is None and key in ("numpy_err", "numpy_print", "numba", "threadpools"):
            continue  # the library was not loaded before the imports: nothing to change
        elif vb != va:
            diff[key] = (vb, va)
    return diff


@pytest.fixture(scope="module")
def third_party() -> list[str]:
    """The non-wflow modules that importing all of wflow loads, in import order."""
    rec = run_child(wflow_modules(), [])
    return [m for m in rec["third_party"] if m != "__main__"]


@pytest.fixture(scope="module")
def clean_import(third_party) -> dict:
    """Snapshots around importing every wflow module (third-party modules loaded before)."""
    return run_child(wflow_modules(), [*third_party, "threadpoolctl"])


#: One injected change of each kind, and the field that must report it.
INJECTED = [
    ("os.environ.setdefault('OMP_WAIT_POLICY', 'PASSIVE')", "environ[OMP_WAIT_POLICY]"),
    ("import warnings; warnings.simplefilter('ignore', RuntimeWarning)", "warnings_filters"),
    ("import signal; signal.signal(signal.SIGUSR1, signal.SIG_IGN)", "signal_handlers[10]"),
    ("import numba; numba.set_num_threads(1)", "numba"),
    ("import numpy; numpy.seterr(all='ignore')", "numpy_err"),
    ("import threadpoolctl; _limits = threadpoolctl.threadpool_limits(1)", "threadpools"),
]


@pytest.fixture(scope="module")
def injected(third_party) -> dict:
    """The same imports with every change of :data:`INJECTED` made after them."""
    return run_child(wflow_modules(), [*third_party, "threadpoolctl"],
                     "\n".join(code for code, _ in INJECTED))


def test_module_list_covers_the_package():
    mods = wflow_modules()
    assert "wflow" in mods and "wflow.cli" in mods and "wflow.particles" in mods
    assert len(mods) > 30, mods


def test_import_changes_no_process_wide_setting(clean_import):
    assert changes(clean_import) == {}, (
        f"importing wflow changed process-wide settings: {changes(clean_import)}")


def test_import_starts_no_thread_pool(clean_import):
    assert clean_import["before"]["numba"]["pool_started"] is False
    assert clean_import["after"]["numba"]["pool_started"] is False


@pytest.mark.parametrize("inject, field", INJECTED, ids=[f for _, f in INJECTED])
def test_negative_control_injected_change_is_caught(injected, inject, field):
    found = changes(injected)
    if field == "threadpools":
        if all(v == 1 for v in injected["before"]["threadpools"].values()):
            pytest.skip("every BLAS library already runs one thread: a limit of 1 is no change")
        assert any(k.startswith("threadpools[") for k in found), found
    else:
        assert field in found, f"injected {inject!r} not reported; changes: {found}"


def test_cli_sets_the_wait_policy_for_its_own_process_only():
    code = ("import os, sys\nfrom wflow.cli import main\n"
            "main([])\nprint('call', os.environ.get('OMP_WAIT_POLICY'))\n"
            "sys.argv = ['wflow']\nmain()\nprint('command', os.environ.get('OMP_WAIT_POLICY'))\n")
    out = subprocess.run([sys.executable, "-c", code], env=clean_env(), cwd=ROOT,
                         capture_output=True, text=True, timeout=120)
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith(("call", "command"))]
    assert lines == ["call None", "command PASSIVE"], out.stdout + out.stderr[-2000:]
