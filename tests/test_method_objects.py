"""Methods passed as objects (issue 39): one registry, and an object wherever a name goes.

* :class:`wflow.infra.registry.Registry`: ``add``/``get``/``resolve``/``view``/``name_of``;
  a wrong value is refused with one error naming the key;
* a user's particle integrator (``Midpoint``, order 2), an :class:`AttentionKind`, a PDE
  integrator and limiter, and a JKO scheme, each passed as an object *without registering
  it*, run through ``simulate``, ``solve_pde`` and ``solve_jko``, bit for bit equal to the
  same method reached by its registered name; an object of another concept is refused;
* the PDE refuses a limiter (or a limiter's parameter) where it has no effect;
* ``wflow heads radial-dominance --modules FILE --kind NAME`` reaches a user's kind.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from wflow.attention import kinds
from wflow.attention.heads import Attention, Heads
from wflow.attention.kinds import RELU_KERNEL, AttentionKind, registered_kind
from wflow.geometry.mesh import icosphere
from wflow.geometry.sphere import normalize, sample_uniform
from wflow.infra.io import to_jsonable
from wflow.infra.registry import Registry, UnknownName, WrongMethod
from wflow.infra.schema import ScenarioError
from wflow.particles import ParticleOptions, simulate
from wflow.particles.integrators import INTEGRATORS, ParticleIntegrator

# rtol = None: the runs alone (the methods' orders and engines are tested, not the default
# tolerance's verdict on their coarse steps)
QUIET = {"head_rates": False, "clusters": False, "rtol": None}


# ---------------------------------------------------------------------- the registry
class _Widget:
    name = ""


def test_registry_add_get_resolve_view_name_of():
    reg: Registry[_Widget] = Registry("widget", _Widget, key="w.kind")

    @reg.register
    class Spoke(_Widget):
        name = "spoke"

    names = reg.view()
    assert names == ("spoke",) and "spoke" in names
    rim = type("Rim", (_Widget,), {"name": "rim"})()
    assert reg.add(rim) is rim and names == ("spoke", "rim")  # the view is live
    assert reg.get("rim") is rim and reg.resolve("rim") is rim
    free = type("Free", (_Widget,), {})()  # unregistered, unnamed
    assert reg.resolve(free) is free and reg.name_of(free) == "Free"
    assert reg.name_of("spoke") == "spoke" and reg.name_of(rim) == "rim"
    with pytest.raises(UnknownName, match=r"w\.kind: unknown widget 'hub': must be one of "
                                          r"\['spoke', 'rim'\]"):
        reg.resolve("hub")
    with pytest.raises(WrongMethod, match=r"w\.kind: expected the name of a registered widget "
                                          r".* or an object of type _Widget, got int 3"):
        reg.resolve(3)
    with pytest.raises(TypeError, match="must be a _Widget"):
        reg.add(object())
    check = reg.checker("auto")
    assert check(free, "k") is free and check("auto", "k") == "auto"
    with pytest.raises(ScenarioError, match=r"k: must be one of \['auto', 'spoke', 'rim'\] "
                                            r"or an object of type _Widget, got 3"):
        check(3, "k")
    assert reg.unregister("rim") is rim and names == ("spoke",)
    builtin = type("Hub", (_Widget,), {"name": "hub"})()
    reg.add(builtin, builtin=True)
    with pytest.raises(ValueError, match="built-in widget"):
        reg.unregister("hub")
    with pytest.raises(ValueError, match="already registered"):
        reg.add(type("Hub", (_Widget,), {"name": "hub"})())


# ------------------------------------------------------------- particles: an integrator
class Midpoint(ParticleIntegrator):
    """The explicit midpoint rule with normalised stages (order 2): a user's own class."""

    name = "midpoint_user"

    def order(self) -> int:
        return 2

    def step(self, x, h, k1, heads, theta, theta_mid, theta_new, schedule, attn, flow,
             kernel):
        fe = kernel.evaluate(normalize(x + 0.5 * h * k1), schedule.heads_at(theta_mid), attn)
        return normalize(x + h * (fe.v if flow == "transformer" else fe.vhat))


def _tokens(rng, n=16, d=3):
    return sample_uniform(n, d, rng), Heads.random_symmetric(2, d, rng, scale=0.8)


def test_an_unregistered_integrator_object_runs_and_has_its_order(rng):
    x0, heads = _tokens(rng)
    attn = Attention("softmax", 1.0)
    assert "midpoint_user" not in INTEGRATORS
    obj = simulate(x0, heads, attn, options=ParticleOptions(T=0.4, dt=0.05,
                                                            integrator=Midpoint(), **QUIET))
    assert obj.status == "success" and obj.extra["engine"] == "python"
    INTEGRATORS.register(Midpoint)
    try:  # the same method reached by its registered name: bit for bit
        named = simulate(x0, heads, attn, T=0.4, dt=0.05, integrator="midpoint_user", **QUIET)
    finally:
        INTEGRATORS.unregister("midpoint_user")
    assert np.array_equal(obj.x, named.x)
    # its declared order, fitted: error against a fine RK4 run at dt, dt/2, dt/4
    ref = simulate(x0, heads, attn, T=0.4, dt=0.4 / 512, integrator="rk4", **QUIET).x
    dts = np.array([0.1, 0.05, 0.025])
    err = [np.max(np.abs(simulate(x0, heads, attn, T=0.4, dt=dt, integrator=Midpoint(),
                                  **QUIET).x - ref)) for dt in dts]
    slope = float(np.polyfit(np.log(dts), np.log(err), 1)[0])
    print(f"Midpoint (unregistered object): fitted order {slope:.3f}")
    assert abs(slope - Midpoint().order()) < 0.3
    # negative control: Euler's fitted order on the same grid is not 2
    err_e = [np.max(np.abs(simulate(x0, heads, attn, T=0.4, dt=dt, integrator="euler",
                                    **QUIET).x - ref)) for dt in dts]
    assert abs(float(np.polyfit(np.log(dts), np.log(err_e), 1)[0]) - 2) > 0.5


def test_a_wrong_integrator_object_is_refused_naming_the_key(rng):
    from wflow.pde.integrators import SSPRK2

    with pytest.raises(ScenarioError, match=r"particles\.integrator: must be one of "
                                            r"\[.*\] or an object of type "
                                            r"ParticleIntegrator"):
        ParticleOptions(integrator=SSPRK2())  # a PDE integrator is not a particle one
    with pytest.raises(ScenarioError, match=r"particles\.integrator"):
        ParticleOptions(integrator=42)


# --------------------------------------------------------------------- an attention kind
def test_an_unregistered_kind_object_runs_as_its_registered_twin(rng):
    x0, heads = _tokens(rng)
    kind = AttentionKind("relu_sa_user", "ReLU-SA", RELU_KERNEL, normalised=True)
    for engine in ("python", "compiled"):
        obj = simulate(x0, heads, Attention(kind, 1.0), T=0.3, dt=0.05, engine=engine,
                       **QUIET)
        with registered_kind(kind):
            named = simulate(x0, heads, Attention("relu_sa_user", 1.0), T=0.3, dt=0.05,
                             engine=engine, **QUIET)
        assert obj.status == "success" and np.array_equal(obj.x, named.x), engine
    # negative control: the unnormalised ReLU is another flow
    relu = simulate(x0, heads, Attention("relu", 1.0), T=0.3, dt=0.05, **QUIET)
    assert not np.allclose(relu.x, obj.x)
    # an object that could not be registered does not run either: a new kernel claiming
    # the compiled code of e^s would run as e^s in the compiled paths
    claims = type(RELU_KERNEL)("relu_twin", kinds.CODE_EXP, exponential=False, fastsum=False)
    with pytest.raises(ValueError, match="claims compiled code 0, which is the code of "
                                         "kernel 'exp'"):
        Attention(AttentionKind("twin", "T", claims), 1.0)
    with pytest.raises(ValueError, match=r"attention\.kind: expected the name of a registered "
                                         r"attention kind .* or an object of type "
                                         r"AttentionKind, got _ReLU"):
        Attention(RELU_KERNEL, 1.0)


def test_an_admitted_kind_is_checked_again_when_the_registry_changes():
    """The admission of an unregistered kind is cached for the hot loops, never stale."""
    from wflow.attention.kinds import get_kind

    def kernel():  # a NumPy-only kernel named "shared" (two definitions: two objects)
        return type(RELU_KERNEL)("shared", None, exponential=False, fastsum=False)

    a = AttentionKind("a_user", "A", kernel())
    assert get_kind(a) is a and get_kind(a) is a  # admitted (then from the cache)
    with registered_kind(AttentionKind("b_user", "B", kernel())):
        with pytest.raises(ValueError, match="kernel name 'shared' is taken"):
            get_kind(a)
    assert get_kind(a) is a  # the other kernel gone, admitted again


# -------------------------------------------------------------------------------- PDE
@pytest.fixture(scope="module")
def pde_case():
    from wflow.geometry.mesh import load_mesh
    from wflow.pde import initial_density

    mesh = load_mesh("icosphere:180")
    heads = Heads.random_symmetric(2, 3, np.random.default_rng(3), scale=0.8)
    rho0 = initial_density(mesh, {"type": "vmf", "means": [[1, 0, 0]], "kappas": [3.0]})
    return mesh, rho0, heads, Attention("softmax", 1.0)


def test_pde_integrator_and_limiter_objects_run_unregistered(pde_case):
    from wflow.pde import PDEOptions, solve_pde
    from wflow.pde.integrators import SSPRK3
    from wflow.pde.limiters import Venkatakrishnan

    class MyRK3(SSPRK3):
        name = "my_ssprk3"

    class MyVenkat(Venkatakrishnan):
        name = "my_venkat"

    mesh, rho0, heads, attn = pde_case
    kw = {"T": 0.1, "order": 2, "balance": False, "n_saves": 2, "venkat_k": 3.0}
    obj = solve_pde(rho0, heads, attn, mesh=mesh, options=PDEOptions(
        time_integrator=MyRK3(), limiter=MyVenkat(), **kw))
    named = solve_pde(rho0, heads, attn, mesh=mesh, options=PDEOptions(
        time_integrator="ssprk3", limiter="venkatakrishnan", **kw))
    assert obj.status == named.status == "completed"
    assert np.array_equal(obj.rho, named.rho)
    rec = json.loads(json.dumps(to_jsonable(obj.options)))  # what outputs record of them
    assert rec["limiter"] == {"name": "my_venkat", "class": f"{__name__}.{MyVenkat.__qualname__}"}
    other = solve_pde(rho0, heads, attn, mesh=mesh, options=PDEOptions(
        time_integrator="ssprk3", limiter="barth_jespersen", **{**kw, "venkat_k": 5.0}))
    assert not np.array_equal(other.rho, obj.rho)  # control: another limiter differs
    with pytest.raises(ScenarioError, match=r"pde\.limiter: must be one of .* type Limiter"):
        PDEOptions(limiter=MyRK3())
    with pytest.raises(ScenarioError, match=r"pde\.time_integrator: .* type TimeIntegrator"):
        PDEOptions(time_integrator=MyVenkat())


@pytest.mark.parametrize("given, refused", [
    ({"order": 1, "limiter": "venkatakrishnan"}, "pde.limiter: applies only with order = 2"),
    ({"order": 1, "venkat_k": 2.0}, "pde.venkat_k: applies only with order = 2"),
    ({"order": 2, "venkat_k": 2.0}, "pde.venkat_k: applies only with limiter = "
                                    "'venkatakrishnan', and this run's limiter is "
                                    "'barth_jespersen'"),
    # negative controls: where the option acts, or is left at its default, the run goes on
    ({"order": 2, "limiter": "venkatakrishnan", "venkat_k": 2.0}, None),
    ({"order": 1}, None),
])
def test_pde_refuses_a_limiter_where_it_has_no_effect(pde_case, given, refused):
    from wflow.pde import PDEOptions, solve_pde

    mesh, rho0, heads, attn = pde_case
    opts = PDEOptions(T=0.02, balance=False, n_saves=2, **given)
    if refused is None:
        assert solve_pde(rho0, heads, attn, mesh=mesh, options=opts).status == "completed"
    else:
        with pytest.raises(ScenarioError, match=refused):
            solve_pde(rho0, heads, attn, mesh=mesh, options=opts)




@pytest.mark.parametrize("order, rc", [(1, 2), (2, 0)])  # (2, 0): the negative control
def test_wflow_pde_refuses_a_limiter_at_order_1(tmp_path, capsys, order, rc):
    from wflow.cli import main

    from .test_cli_pde import BASE, SYM

    sc = tmp_path / "s.toml"  # the PDE CLI tests' scenario, small, with a limiter
    sc.write_text(BASE.replace("AAA", SYM).replace("VVV", "").replace(
        "icosphere:1280", "icosphere:180").replace("order = 2", f"order = {order}\n"
        "limiter = \"venkatakrishnan\"\nbalance = false\nrtol = 1e-2"))
    assert main(["pde", str(sc), "--out", str(tmp_path / "o")]) == rc
    err = capsys.readouterr().err
    assert ("pde.limiter: applies only with order = 2, and this run's order is 1" in err) \
        == (rc == 2), err


def test_pde_limiter_given_at_its_default_warns(caplog):
    from wflow.pde import PDEOptions
    from wflow.pde.limiters import check_applicable

    with caplog.at_level("WARNING", logger="wflow.pde.limiters"):
        check_applicable(PDEOptions(order=1), given=["limiter", "order"])
    assert "pde.limiter: applies only with order = 2" in caplog.text
    caplog.clear()
    check_applicable(PDEOptions(order=1), given=["order"])  # control: not given, no word
    assert caplog.text == ""


@pytest.mark.filterwarnings("ignore::wflow.jko.options.JKOWarning")  # a coarse, short run
def test_an_unregistered_kind_object_runs_in_the_pde_and_the_jko(pde_case):
    from wflow.jko import JKOOptions, solve_jko
    from wflow.pde import PDEOptions, solve_pde

    mesh, rho0, heads, _ = pde_case
    kind = AttentionKind("relu_sa_user2", "ReLU-SA", RELU_KERNEL, normalised=True)
    popts = PDEOptions(T=0.05, n_saves=2)
    tri, c, areas, m0 = _jko_geometry()
    jkw = {"points": c, "areas": areas, "mesh": tri,
           "options": JKOOptions(T=0.4, tau=0.2, verify=False)}
    pde_obj = solve_pde(rho0, heads, Attention(kind, 1.0), mesh=mesh, options=popts)
    jko_obj = solve_jko(m0, heads, Attention(kind, 1.0), **jkw)
    with registered_kind(kind):
        pde_named = solve_pde(rho0, heads, Attention(kind.name, 1.0), mesh=mesh,
                              options=popts)
        jko_named = solve_jko(m0, heads, Attention(kind.name, 1.0), **jkw)
    assert pde_obj.status == pde_named.status != "failed"
    assert np.array_equal(pde_obj.rho, pde_named.rho)
    assert jko_obj.status == jko_named.status != "failed"
    assert np.array_equal(jko_obj.masses, jko_named.masses)
    # negative control: the registered unnormalised ReLU is another flow
    relu = solve_pde(rho0, heads, Attention("relu", 1.0), mesh=mesh, options=popts)
    assert not np.allclose(relu.rho[-1], pde_obj.rho[-1])


# -------------------------------------------------------------------------------- JKO
def _jko_geometry():
    tri = icosphere(2)
    P = tri.points[tri.cells]
    c = normalize(P.mean(axis=1))
    areas = 0.5 * np.linalg.norm(np.cross(P[:, 1] - P[:, 0], P[:, 2] - P[:, 0]), axis=1)
    m = areas * np.exp(3.0 * (c @ normalize(np.array([1.0, 0.2, 0.0])) - 1.0))
    return tri, c, areas, m / m.sum()


@pytest.mark.filterwarnings("ignore::wflow.jko.options.JKOWarning")  # OT locks at τ = 0.2
@pytest.mark.parametrize("base, mesh_given", [("ot", False), ("fv", True)])
def test_an_unregistered_jko_scheme_object_runs_as_its_named_twin(base, mesh_given):
    from wflow.jko import SCHEMES, JKOOptions, solve_jko

    calls = []
    parent = type(SCHEMES.get(base))

    class Counting(parent):
        name = f"counting_{base}"

        def step(self, run, m, *args, **kw):
            calls.append(float(m.sum()))
            return super().step(run, m, *args, **kw)

    tri, c, areas, m0 = _jko_geometry()
    heads, attn = Heads.scalar([2.0], 3), Attention("softmax", 1.0)
    mesh = tri if mesh_given else None
    kw = {"T": 0.4, "tau": 0.2, "verify": False}
    obj = solve_jko(m0, heads, attn, points=c, areas=areas, mesh=mesh,
                    options=JKOOptions(scheme=Counting(), **kw))
    named = solve_jko(m0, heads, attn, points=c, areas=areas, mesh=mesh,
                      options=JKOOptions(scheme=base, **kw))
    assert len(calls) == 2 and "counting_" + base not in SCHEMES
    assert obj.status == named.status and np.array_equal(obj.masses, named.masses)
    assert set(obj.history) == set(named.history)


def test_a_wrong_jko_scheme_is_refused_naming_the_key():
    from wflow.jko import JKOOptions
    from wflow.pde.limiters import BarthJespersen

    with pytest.raises(ScenarioError, match=r"jko\.scheme: must be one of \['auto', 'fv', "
                                            r"'ot'\] or an object of type JKOScheme"):
        JKOOptions(scheme=BarthJespersen())
    with pytest.raises(ScenarioError, match=r"jko\.scheme: .*got 'fvm'"):
        JKOOptions(scheme="fvm")


# ------------------------------------------------------------ wflow heads --kind --modules
USER_KIND = '''
from wflow.attention.kinds import RELU_KERNEL, AttentionKind, register_kind

register_kind(AttentionKind("relu_sa_cli", "ReLU-SA", RELU_KERNEL, normalised=True))
'''


def test_heads_kind_reaches_a_kind_registered_by_a_module(tmp_path, capsys, rng,
                                                          monkeypatch):
    from wflow.attention.kinds import KINDS, unregister_kind
    from wflow.cli import main

    np.save(tmp_path / "x.npy", sample_uniform(6, 3, rng))
    Heads.random_symmetric(2, 3, rng).save_npz(tmp_path / "h.npz")
    (tmp_path / "my_kinds.py").write_text(USER_KIND)
    monkeypatch.chdir(tmp_path)
    argv = ["heads", "radial-dominance", "--tokens", "x.npy", "--heads", "h.npz", "--beta",
            "1.0", "--kind", "relu_sa_cli", "--json"]
    assert main(argv) == 2  # negative control: without the module, the name is unknown
    assert "--kind: unknown attention kind 'relu_sa_cli'" in capsys.readouterr().err
    try:
        assert main([*argv, "--modules", "my_kinds.py"]) == 0
        out = json.loads(capsys.readouterr().out)
        assert len(out["own"]) == 2
    finally:
        if "relu_sa_cli" in KINDS:
            unregister_kind("relu_sa_cli")
