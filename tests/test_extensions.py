"""A user's own attention kind and particle integrator, from the user's own file, on every
entry point (issue 32): they run, or are refused with one message, consistently.

The user's module is ``tests/data/user_extension.py`` (kind ``"softsign"``, NumPy only;
integrator ``"heun"``, order 2, no compiled code), imported as a scenario imports its
``modules``. Checked:

* particles: the Python engine runs both; the compiled engine refuses each, naming it
  (the kind with :meth:`AttentionKind.not_compiled`, the integrator with its class), and
  ``engine = "auto"`` hands over to the Python engine with a WARNING, the engine recorded;
  the result is the Python engine's bit for bit, Heun's fitted order is 2, never Euler's 1;
* a subclass of a built-in integrator or schedule does not inherit the compiled code;
* the PDE under ``kernel_backend = "auto"`` plans and keeps the NumPy sums (equal to an
  explicit ``"numpy"`` run bit for bit), the direct sums refuse the kind;
* the JKO (FV and OT schemes) and the energies, against references from ``Φ``;
* the CLI from TOML (``wflow particles``, ``pde``, ``jko``, ``run``) with
  ``modules = ["user_extension.py"]``; without it the names are refused (exit 2).
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pytest

from wflow.attention.heads import Attention, Heads
from wflow.attention.kinds import KINDS, get_kind, unregister_kind
from wflow.attention.schedules import Static
from wflow.geometry.sphere import normalize, sample_uniform
from wflow.infra.callables import load_module
from wflow.particles import simulate
from wflow.particles.integrators import CODE_RK4, INTEGRATORS, RK4, compiled_code

from .conftest import EPS

USER = Path(__file__).resolve().parent / "data" / "user_extension.py"


@pytest.fixture
def user():
    """The user's module, imported (its kind and integrator registered), then removed."""
    mod = load_module(str(USER))
    try:
        yield mod
    finally:
        if "softsign" in KINDS:
            unregister_kind("softsign")
        if "heun" in INTEGRATORS:
            INTEGRATORS.unregister("heun")


def _static(rng, n=24, d=3, H=2):
    x0 = sample_uniform(n, d, rng)
    heads = Heads.random_symmetric(H, d, rng, scale=0.8, value_sign=-1.0)
    return x0, heads


# rtol = None: the runs alone (the methods' orders and engines are tested, not the default
# tolerance's verdict on their coarse steps)
QUIET = {"head_rates": False, "clusters": False, "rtol": None}


# ------------------------------------------------------------------ particles: integrator
def test_compiled_engine_never_runs_a_user_integrator_as_another(user, rng, caplog):
    x0, heads = _static(rng)
    attn = Attention("softmax", 1.0)  # a compiled kind: only the integrator lacks code
    kw = {"T": 0.4, "dt": 0.05, "integrator": "heun", **QUIET}
    with pytest.raises(ValueError, match=r"particles\.engine: 'compiled' does not apply: "
                                         r"integrator 'heun' \(Heun\) has no compiled code"):
        simulate(x0, heads, attn, engine="compiled", **kw)
    with caplog.at_level(logging.WARNING, logger="wflow.particles.solver"):
        auto = simulate(x0, heads, attn, **kw)
    warned = [r for r in caplog.records if r.levelno == logging.WARNING and "heun" in
              r.getMessage()]
    assert warned and "falls back to the Python loop" in warned[0].getMessage()
    py = simulate(x0, heads, attn, engine="python", **kw)
    assert auto.status == py.status == "success", auto.message
    assert auto.extra["engine"] == "python" and "heun" in auto.extra["engine_reason"]
    assert auto.order == 2
    np.testing.assert_array_equal(auto.x, py.x)  # the Python engine's result, bit for bit
    np.testing.assert_array_equal(auto.history["E"], py.history["E"])
    # never Euler's: Euler is 1e-3 away at this dt (Heun's own error is ~1e-4 smaller)
    eu = simulate(x0, heads, attn, integrator="euler", **{k: v for k, v in kw.items()
                                                         if k != "integrator"})
    assert eu.extra["engine"] == "compiled"  # control: a declared code runs compiled
    assert float(np.max(np.abs(auto.x - eu.x))) > 1e-4


def _final(x0, heads, attn, integrator, dt, T=0.5):
    r = simulate(x0, heads, attn, T=T, dt=dt, integrator=integrator, record_every=10**6,
                 **QUIET)
    assert r.status == "success", r.message
    return r.x[0]


def test_user_integrator_has_its_fitted_order_not_eulers(user, rng):
    """Log–log fit of the final-time error over dt: Heun's 2 (it is no Euler: 1)."""
    x0, heads = _static(rng)
    attn = Attention("softmax", 1.0)
    ref = _final(x0, heads, attn, "rk4", 1e-3)
    dts = np.array([0.1, 0.05, 0.025, 0.0125])
    rates = {}
    for name in ("heun", "euler"):
        err = [float(np.max(np.abs(_final(x0, heads, attn, name, dt) - ref))) for dt in dts]
        rates[name] = float(np.polyfit(np.log(dts), np.log(err), 1)[0])
    assert 1.8 <= rates["heun"] <= 2.3, f"heun: observed order {rates['heun']:.2f}, want 2"
    # negative control: the fit tells Euler's order apart
    assert 0.8 <= rates["euler"] <= 1.2, f"euler: observed order {rates['euler']:.2f}"


def test_a_subclass_does_not_inherit_the_compiled_code(rng, caplog):
    """A subclass of RK4 with its own step, and of Static, take the Python engine."""

    class HalfRK4(RK4):
        name = "rk4_half"  # RK4's step taken twice with h/2: not the compiled RK4

        def step(self, x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
                 kernel):
            y = super().step(x, 0.5 * h, k1, heads, theta, theta, theta_mid, schedule,
                             attn, flow, kernel)
            fe = kernel.evaluate(y, heads, attn)
            return super().step(y, 0.5 * h, fe.v, heads, theta_mid, theta_mid, theta_new,
                                schedule, attn, flow, kernel)

    class MyStatic(Static):
        pass

    assert compiled_code(INTEGRATORS["rk4"]) == CODE_RK4  # control
    INTEGRATORS.register(HalfRK4)
    try:
        assert compiled_code(INTEGRATORS["rk4_half"]) is None
        x0, heads = _static(rng)
        attn = Attention("usa", 1.0)
        kw = {"T": 0.2, "dt": 0.05, **QUIET}
        r = simulate(x0, heads, attn, integrator="rk4_half", **kw)
        assert r.extra["engine"] == "python"
        np.testing.assert_array_equal(
            r.x, simulate(x0, heads, attn, integrator="rk4_half", engine="python", **kw).x)
        with pytest.raises(ValueError, match="rk4_half"):
            simulate(x0, heads, attn, integrator="rk4_half", engine="compiled", **kw)
    finally:
        INTEGRATORS.unregister("rk4_half")
    sched = MyStatic.of(heads)
    with pytest.raises(ValueError, match="MyStatic schedules run on the Python path"):
        simulate(x0, sched, attn, engine="compiled", **kw)
    with caplog.at_level(logging.WARNING, logger="wflow.particles.solver"):
        r = simulate(x0, sched, attn, **kw)
    assert r.extra["engine"] == "python" and any("MyStatic" in m for m in caplog.messages)
    assert simulate(x0, Static.of(heads), attn, **kw).extra["engine"] == "compiled"


# ------------------------------------------------------------------ the kind on every solver
def test_user_kind_on_particles_and_energies(user, rng):
    from wflow.energy import evaluate, head_energies

    spec = get_kind("softsign")
    x0, heads = _static(rng, n=30)
    attn = Attention("softsign", 1.5)
    m = np.full(30, 1 / 30)
    s = attn.beta * np.einsum("id,hde,je->hij", x0, heads.A, x0)
    E_ref = heads.w @ (np.einsum("i,hij,j->h", m, spec.phi(s), m) / (2 * attn.beta))
    fe = evaluate(x0, heads, attn)
    # sums of n² terms of both signs: round-off ~ n² eps times the sum of |terms|
    E_abs = heads.w @ (np.einsum("i,hij,j->h", m, np.abs(spec.phi(s)), m) / (2 * attn.beta))
    assert abs(heads.w @ head_energies(fe, m, attn) - E_ref) <= 30**2 * EPS * E_abs
    np.testing.assert_allclose(fe.Z, np.einsum("hij,j->hi", spec.dphi(s), m),
                               rtol=30 * 16 * EPS)
    with pytest.raises(ValueError) as exc:
        simulate(x0, heads, attn, T=0.1, dt=0.05, engine="compiled")
    assert str(exc.value).endswith(spec.not_compiled())
    r = simulate(x0, heads, attn, T=0.2, dt=0.05, integrator="heun", **QUIET)
    assert r.status == "success" and r.extra["engine"] == "python", r.message
    assert set(r.extra["kernel"]["calls"]) == {"numpy"}


def test_user_kind_on_the_pde(user):
    import wflow

    mesh = wflow.load_mesh("icosphere:1280")
    heads = Heads.scalar([1.0], 3)
    attn = Attention("softsign", 1.0)
    bump = {"type": "vmf", "means": [[0, 0, 1]], "kappas": [3.0], "weights": [1.0]}
    kw = {"T": 0.1, "dt": 0.05, "order": 2, "n_saves": 2}
    auto = wflow.solve_pde(bump, heads, attn, mesh=mesh, **kw)
    assert auto.status == "success", auto.message
    assert set(auto.stats["kernel"]["calls"]) == {"numpy"}, auto.stats["kernel"]
    num = wflow.solve_pde(bump, heads, attn, mesh=mesh, kernel_backend="numpy", **kw)
    np.testing.assert_array_equal(auto.masses, num.masses)  # the plan, honoured
    with pytest.raises(ValueError) as exc:
        wflow.solve_pde(bump, heads, attn, mesh=mesh, kernel_backend="direct", **kw)
    assert str(exc.value).endswith(get_kind("softsign").not_compiled())


@pytest.mark.filterwarnings("ignore::wflow.jko.JKOWarning")  # OT locks on 180 cells
@pytest.mark.parametrize("scheme", ["fv", "ot"])
def test_user_kind_on_the_jko(user, scheme):
    import wflow
    from wflow.geometry.mesh import icosphere
    from wflow.jko import energy_gradient

    tri = icosphere(3)
    P = tri.points[tri.cells]
    c = P.mean(axis=1)
    pts = c / np.linalg.norm(c, axis=1, keepdims=True)
    areas = 0.5 * np.linalg.norm(np.cross(P[:, 1] - P[:, 0], P[:, 2] - P[:, 0]), axis=1)
    m0 = np.exp(2.0 * pts[:, 2]) * areas
    m0 /= m0.sum()
    heads = Heads.scalar([1.0], 3)
    attn = Attention("softsign", 1.0)
    res = wflow.solve_jko(m0, heads, attn, points=pts, areas=areas, T=0.2, tau=0.1, scheme=scheme,
                          mesh=tri if scheme == "fv" else None)
    assert res.status in ("success", "locked"), res.message  # OT may lock on 180 cells
    E = res.history["E"]  # V = +A (ascent): E grows, or stays where the OT step locks
    assert np.all(np.isfinite(E)) and np.all(np.diff(E) >= 0)
    assert scheme == "ot" or E[-1] > E[0] + 1e-3
    spec = get_kind("softsign")
    s = attn.beta * pts @ pts.T
    E0 = 0.5 * m0 @ spec.phi(s) @ m0 / attn.beta
    # 180² terms of both signs: round-off ~ 180·16 eps of the sum of |terms|
    tol = 180 * 16 * EPS * (0.5 * m0 @ np.abs(spec.phi(s)) @ m0 / attn.beta)
    assert abs(0.5 * m0 @ energy_gradient(pts, m0, heads, attn) - E0) <= tol
    if scheme == "ot":  # the OT scheme's energy is that of the cell masses at the points
        assert abs(res.history["E"][0] - E0) <= tol


# ------------------------------------------------------------------ the CLI from TOML
SCENARIO = """seed = 1
MODULES
[attention]
kind = "softsign"
beta = 1.0
[heads]
type = "matrices"
A = [[[1.0, 0.2, 0.0], [0.2, 0.5, 0.0], [0.0, 0.0, -0.5]]]
[particles]
T = 0.1
dt = 0.02
integrator = "heun"
[density]
type = "vmf"
means = [[0.0, 0.0, 1.0]]
kappas = [4.0]
[pde]
mesh = "icosphere:1280"
T = 0.1
dt = 0.05
order = 2
n_saves = 2
[jko]
tau = 0.05
[run]
n_particles = 60
particle_steps_per_save = 1
jko = true
render = false
"""


def _scenario(tmp_path: Path, modules: bool = True) -> Path:
    shutil.copy(USER, tmp_path / "user_extension.py")
    sc = tmp_path / "s.toml"
    sc.write_text(SCENARIO.replace("MODULES", 'modules = ["user_extension.py"]' if modules
                                   else ""))
    return sc


@pytest.mark.parametrize("command", ["particles", "pde", "jko", "run"])
def test_cli_runs_a_scenario_whose_module_registers_kind_and_integrator(
        tmp_path, capsys, command):
    from wflow.cli import main

    out = tmp_path / "o"
    try:
        rc = main([command, str(_scenario(tmp_path)), "--out", str(out)])
        err = capsys.readouterr().err
        assert rc == 0, err
        s = json.loads((out / "summary.json").read_text())
        assert s["status"] in ("success", "locked"), s.get("message")
        text = json.dumps(s)
        assert "softsign" in text
        if command == "particles":  # the engine that ran, and why
            assert s["engine"] == "python" and "softsign" in s["engine_reason"], s["engine"]
        if command in ("particles", "pde"):  # the NumPy sums, as planned
            kernel = s["kernel"] if command == "particles" else s["stats"]["kernel"]
            assert set(kernel["calls"]) == {"numpy"}, kernel
    finally:
        if "softsign" in KINDS:
            unregister_kind("softsign")
        if "heun" in INTEGRATORS:
            INTEGRATORS.unregister("heun")


def test_cli_refuses_the_names_without_the_module(tmp_path, capsys):
    """Negative control: the same scenario without ``modules`` exits 2 naming the key."""
    from wflow.cli import main

    assert "softsign" not in KINDS and "heun" not in INTEGRATORS
    assert main(["particles", str(_scenario(tmp_path, modules=False)), "--out",
                 str(tmp_path / "o")]) == 2
    assert "attention.kind: must be one of" in capsys.readouterr().err


def test_normalize_is_the_users_projection():
    """The user's module uses wflow's public projection (a plain function of the sphere)."""
    z = np.array([[3.0, 4.0, 0.0]])
    np.testing.assert_allclose(normalize(z), [[0.6, 0.8, 0.0]], rtol=4 * EPS)


# ------------------------------------------------------------------ the tutorial
def test_tutorial_own_kind_and_integrator_runs_and_pins_its_numbers():
    """docs/tutorials/plot_4_own_kind_and_integrator.py end to end (the docs build runs it
    only in the slow suite): the midpoint rule's fitted order, E(T) of the Taylor kind."""
    import runpy

    path = Path(__file__).resolve().parents[1] / "docs" / "tutorials" / \
        "plot_4_own_kind_and_integrator.py"
    try:
        g = runpy.run_path(str(path), run_name="tutorial_4")
    finally:
        if "taylor4" in KINDS:
            unregister_kind("taylor4")
        if "midpoint" in INTEGRATORS:
            INTEGRATORS.unregister("midpoint")
    assert g["res"].extra["engine"] == "python" and g["sm"].extra["engine"] == "python"
    assert set(g["pde"].stats["kernel"]["calls"]) == {"numpy"}
    assert 1.8 <= g["order"] <= 2.2, f"midpoint: observed order {g['order']:.2f}, want 2"
    # 50 midpoint steps of 40 tokens: round-off ~ 1e-13 of E; pinned to 1e-10 relative
    assert g["E_T"] == pytest.approx(0.210100464643, rel=1e-10)
    assert g["jko"].status == "success" and np.all(np.diff(g["jko"].history["E"]) > 0)
