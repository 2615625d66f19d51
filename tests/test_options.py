"""Options written once: every field reachable from TOML (or API-only with a reason), schema and
docs derived, registries of limiters, integrators and schedule types that refuse unknown names."""

from __future__ import annotations

import dataclasses
import logging
from dataclasses import dataclass, field

import numpy as np
import pytest

from wflow.apps.main import RUN_SCHEMA, RUN_SPEC, RunOptions
from wflow.apps.scenario import SCHEDULE_SCHEMA, ScenarioError, parse_scenario
from wflow.attention.heads import Attention, Heads
from wflow.attention.schedules import SCHEDULE_TYPES, CallableSchedule, Parametrisation
from wflow.gaussian.options import ClassifyOptions, GaussianParticleOptions, GaussianRunOptions
from wflow.geometry.sphere import sample_uniform
from wflow.infra.options import (
    META_KEY,
    SAME,
    audit,
    docs_of,
    from_table,
    keys_of,
    markdown_of,
    opt,
    schema_of,
    validate,
)
from wflow.infra.registry import Registry, UnknownName
from wflow.infra.schema import number
from wflow.jko.options import JKOOptions
from wflow.particles import INTEGRATOR_ORDER, INTEGRATORS, simulate
from wflow.particles.options import PARTICLES_SCHEMA, PARTICLES_SPEC, ParticleOptions
from wflow.pde.integrators import TIME_INTEGRATORS
from wflow.pde.limiters import LIMITERS
from wflow.pde.options import PDE_SCHEMA, PDE_SPEC, PDEOptions, pde_options_from_dict

#: Every options class with a TOML table (wflow.jko.options.JKOOptions joins when converted).
OPTION_CLASSES = [PDEOptions, ParticleOptions, RunOptions, GaussianRunOptions, ClassifyOptions,
                  GaussianParticleOptions, JKOOptions]


def decay(theta, t):
    """A drift for ``schedule.type = "callable"`` (imported by name by the scenario)."""
    return -0.5 * theta


# ----------------------------------------------------------------------------- options classes
@pytest.mark.parametrize("cls", OPTION_CLASSES, ids=lambda c: c.__name__)
def test_every_field_is_reachable_from_toml_or_api_only(cls):
    assert audit(cls) == []
    keys = set(keys_of(cls))
    for f in dataclasses.fields(cls):
        meta = f.metadata[META_KEY]
        assert (f.name in keys) == meta.toml, f.name
        if not meta.toml:
            assert meta.reason, f"{cls.__name__}.{f.name}: API-only without a reason"


@pytest.mark.parametrize("cls", OPTION_CLASSES, ids=lambda c: c.__name__)
def test_defaults_agree_between_dataclass_and_schema(cls):
    inst = cls()
    spec = schema_of(cls)
    extras = getattr(cls, "TABLE_EXTRAS", {})
    for key, (default, check) in spec.items():
        if key in extras:
            assert default == extras[key].default
            continue
        if cls.__dataclass_fields__[key].metadata[META_KEY].table_default is not SAME:
            continue  # a table default declared different on purpose (documented there)
        assert default == getattr(inst, key), key
        if check is not None and default is not None:
            back = check(default, f"x.{key}")
            assert back == default and type(back) is type(default), key
    if not extras:  # the table of defaults gives the default options
        table = {k: v for k, (v, _) in spec.items() if v is not None}
        assert from_table(cls, table) == inst


@pytest.mark.parametrize("cls", OPTION_CLASSES, ids=lambda c: c.__name__)
def test_the_docs_list_every_key(cls):
    docs = docs_of(cls)
    assert [d.key for d in docs] == list(keys_of(cls))
    assert all(d.doc.strip() and d.type for d in docs)
    every = {d.key for d in docs_of(cls, api=True)}
    assert {f.name for f in dataclasses.fields(cls)} <= every
    for key in every:  # the generated numpydoc section names each of them
        assert f"    {key} : " in cls.__doc__, key
    md = markdown_of(cls).splitlines()
    assert len(md) == 2 + len(docs) and all(f"`{d.key}` | " in md[i + 2]
                                            for i, d in enumerate(docs))


def test_derived_tables_are_the_declared_ones():
    assert PDE_SCHEMA == schema_of(PDEOptions) and PDE_SPEC == tuple(PDE_SCHEMA)
    assert PARTICLES_SCHEMA == schema_of(ParticleOptions)
    assert PARTICLES_SPEC == tuple(PARTICLES_SCHEMA)
    assert RUN_SCHEMA == schema_of(RunOptions) and RUN_SPEC == tuple(RUN_SCHEMA)
    for spec in (PDE_SPEC, PARTICLES_SPEC, RUN_SPEC):  # every *_SPEC is the key tuple
        assert isinstance(spec, tuple) and all(isinstance(k, str) for k in spec)
    assert "mesh" in PDE_SPEC and "seed" not in PDE_SPEC and "progress" not in PDE_SPEC


def test_venkat_k_and_min_dt_are_settable_from_toml():
    mesh, o = pde_options_from_dict({"venkat_k": 2.5, "min_dt": 1e-9, "order": 2,
                                     "mesh": "icosphere:2"}, seed=7)
    assert (mesh, o.venkat_k, o.min_dt, o.order, o.seed) == ("icosphere:2", 2.5, 1e-9, 2, 7)
    with pytest.raises(ScenarioError, match=r"pde\.venkat_k: must be > 0"):
        pde_options_from_dict({"venkat_k": 0.0})
    with pytest.raises(ScenarioError, match=r"pde\.min_dt"):
        pde_options_from_dict({"min_dt": -1.0})
    with pytest.raises(ScenarioError, match=r"pde\.seed: unknown key \(known keys: "):
        pde_options_from_dict({"seed": 3})  # API-only: the scenario's top-level seed


def test_the_api_runs_the_same_checkers():
    with pytest.raises(ValueError, match=r"pde\.limiter: must be one of \['barth_jespersen'"):
        PDEOptions(limiter="minmod")
    with pytest.raises(ValueError, match=r"pde\.cluster_level: must be < 1"):
        PDEOptions(cluster_level=1.0)
    with pytest.raises(ValueError, match=r"particles\.integrator: must be one of \['euler'"):
        ParticleOptions(integrator="rk45")
    with pytest.raises(ValueError, match=r"particles\.cluster_cos: must be < 1"):
        ParticleOptions(cluster_cos=1.0)
    with pytest.raises(ValueError, match=r"run\.particle_integrator"):
        RunOptions(particle_integrator="midpoint")
    # NumPy scalars are checked as their Python values (and kept as given)
    o = ParticleOptions(record_every=np.int64(3), T=np.float64(2.0))
    assert o.record_every == 3 and isinstance(o.record_every, np.int64)


def test_a_field_without_metadata_is_caught():
    """Negative controls: what audit, schema_of and opt refuse."""

    @dataclass(frozen=True)
    class Bad:
        SECTION = "bad"
        good: float = field(default=1.0, metadata=opt("A number.", check=number(0)))
        bare: int = 3

    probs = audit(Bad)
    assert len(probs) == 1 and "Bad.bare: no option metadata" in probs[0]
    with pytest.raises(TypeError, match="Bad.bare: option without metadata"):
        schema_of(Bad)

    @dataclass(frozen=True)
    class Refused:
        x: float = field(default=-1.0, metadata=opt("Positive.", check=number(0)))
        y: float = field(default=1, metadata=opt("An int default the checker makes float.",
                                                 check=number(0)))
        z: int = field(default=0, metadata=opt(" "))

    probs = audit(Refused)
    assert len(probs) == 3
    assert "Refused.x: its checker refuses the default" in probs[0]
    assert "Refused.y: the checker turns the default 1 into 1.0" in probs[1]
    assert "Refused.z: no meaning documented" in probs[2]
    with pytest.raises(ValueError, match="API-only option .* needs a reason"):
        opt("Hidden.", toml=False)

    @dataclass(frozen=True)
    class Auto:
        tau: float = field(default=0.1, metadata=opt("Step.", check=number(0),
                                                     table_default="auto"))

    assert schema_of(Auto)["tau"][0] == "auto" and docs_of(Auto)[0].default == "auto"
    assert audit(Auto) == []
    with pytest.raises(ScenarioError, match=r"Refused\.x: must be >= 0"):
        validate(Refused())


def test_from_table_names_unknown_keys_and_the_known_ones():
    with pytest.raises(ScenarioError, match=r"run\.n_particle: unknown key \(known keys: "
                                            r"\['jko', 'jko_refinement'"):
        from_table(RunOptions, {"n_particle": 10})
    with pytest.raises(ScenarioError, match=r"run\.n_particles: must be >= 10"):
        from_table(RunOptions, {"n_particles": 5})
    with pytest.raises(TypeError, match="table keys that are not options"):
        from_table(PDEOptions, {})


# ----------------------------------------------------------------------------- registries
def test_registry_lookups_refuse_unknown_names():
    reg: Registry = Registry("widget")

    @reg.register
    class Spoke:
        name = "spoke"

    assert list(reg) == ["spoke"] and isinstance(reg["spoke"], Spoke) and "hub" not in reg
    with pytest.raises(UnknownName,
                       match=r"w\.kind: unknown widget 'hub': must be one of \['spoke'\]"):
        reg.get("hub", "w.kind")
    with pytest.raises(ValueError, match="unknown widget"):  # a ValueError and a LookupError
        reg["hub"]
    with pytest.raises(ValueError, match="already registered"):
        reg.register(Spoke)
    check = reg.checker("auto")
    assert check("auto", "k") == "auto" and check("spoke", "k") == "spoke"
    with pytest.raises(ScenarioError, match=r"k: must be one of \['auto', 'spoke'\]"):
        check("hub", "k")

    @reg.register
    class Rim:  # registered later: the same checker accepts it
        name = "rim"

    assert check("rim", "k") == "rim"
    for registry in (LIMITERS, TIME_INTEGRATORS, INTEGRATORS, SCHEDULE_TYPES):
        with pytest.raises(UnknownName, match=f"unknown {registry.concept} 'nope': "):
            registry.get("nope")


def test_schema_choices_derive_from_the_registries():
    assert PDE_SCHEMA["limiter"][1].choices() == LIMITERS.names()
    assert PDE_SCHEMA["time_integrator"][1].choices() == ("auto", *TIME_INTEGRATORS.names())
    assert PARTICLES_SCHEMA["integrator"][1].choices() == INTEGRATORS.names()
    assert dict(INTEGRATOR_ORDER) == {n: i.order() for n, i in INTEGRATORS.items()}
    assert LIMITERS.names() == ("barth_jespersen", "venkatakrishnan", "positivity")
    assert INTEGRATOR_ORDER == {"euler": 1, "rk4": 4, "em": 1, "strang": 2,
                                "strang-heun": 2}


class _FakeFV:
    """The attributes of ``_FV`` a limiter reads."""

    def __init__(self, no: int, rng: np.random.Generator) -> None:
        self.no = no
        self.opts = PDEOptions(order=2, limiter="venkatakrishnan")
        self.hK = rng.uniform(0.05, 0.2, no)
        self.rho_ref = 1.0 / (4 * np.pi)


@pytest.mark.parametrize("name", LIMITERS.names())
def test_each_limiter_gives_a_factor_in_the_unit_interval(name, rng):
    no, q3 = 200, 3
    fv = _FakeFV(no, rng)
    rK = rng.uniform(0.5, 1.5, no)
    rmax = rK + rng.uniform(0.0, 0.3, no)
    rmin = rK - rng.uniform(0.0, 0.3, no)
    delta = rng.normal(scale=0.4, size=(no, q3))
    with np.errstate(divide="ignore", invalid="ignore"):
        phi = LIMITERS[name].phi(delta, rK, rmax, rmin, fv)
    assert phi.shape == (no,) and np.all((phi >= 0) & (phi <= 1))
    if name == "barth_jespersen":  # limited edge values stay within the neighbours' range
        vals = rK[:, None] + phi[:, None] * delta
        tol = 8 * np.finfo(float).eps * rmax.max()  # a few roundings of O(1) numbers
        assert np.all(vals <= rmax[:, None] + tol) and np.all(vals >= rmin[:, None] - tol)
    if name == "positivity":
        np.testing.assert_array_equal(phi, 1.0)


@pytest.mark.parametrize("name", TIME_INTEGRATORS.names())
def test_pde_integrators_have_their_declared_order(name):
    """``dm/dt = -m + sin(t)`` from the Euler stages; the error's log-log slope is order()."""
    integ = TIME_INTEGRATORS[name]
    T = 1.0

    def solve(n: int) -> float:
        dt, t, m = T / n, 0.0, np.array([1.0])
        for _ in range(n):
            def stage(mm, c, t=t, dt=dt):
                return mm + dt * (-mm + np.sin(t + c * dt))
            m = integ.step(m, stage)
            t += dt
        return float(m[0])

    exact = 0.5 * (np.sin(T) - np.cos(T)) + 1.5 * np.exp(-T)
    ns = np.array([20, 40, 80, 160])
    err = np.array([abs(solve(n) - exact) for n in ns])
    rate = -np.polyfit(np.log(ns), np.log(err), 1)[0]
    assert abs(rate - integ.order()) < 0.15, f"{name}: observed order {rate:.2f}, " \
                                              f"declared {integ.order()}"
    calls = []
    integ.step(np.ones(1), lambda mm, c: calls.append(c) or mm)
    # stages() is what the cost estimate charges: the stage calls of one step, counted
    assert integ.stages() == len(calls) == len(integ.nodes), (name, calls)


def test_a_stage_that_breaks_positivity_rejects_the_step():
    for integ in TIME_INTEGRATORS.values():
        assert integ.step(np.ones(2), lambda m, c: None) is None


# ----------------------------------------------------------------------------- schedule types
def _scenario(schedule: dict):
    return parse_scenario({"seed": 1, "tokens": {"n": 6}, "heads": {"H": 2, "value_sign": -1},
                           "schedule": schedule})


@pytest.mark.parametrize("name", [n for n in SCHEDULE_TYPES.names() if n != "layers"])
def test_every_schedule_type_builds_its_class(name):
    table = {"type": name}
    if name == "callable":
        table["function"] = "tests.test_options:decay"
    sch = _scenario(table).build_schedule()
    assert type(sch) is SCHEDULE_TYPES[name].schedule or isinstance(
        sch, SCHEDULE_TYPES[name].schedule)


def test_every_schedule_type_reads_keys_of_the_schedule_table():
    for stype in SCHEDULE_TYPES.values():
        assert set(stype.keys) <= set(SCHEDULE_SCHEMA) - {"type"}, stype.name
    assert SCHEDULE_SCHEMA["type"][1].choices() == SCHEDULE_TYPES.names()


def test_an_unknown_schedule_type_names_the_known_ones():
    with pytest.raises(ScenarioError, match=r"schedule\.type: must be one of \['static', "):
        _scenario({"type": "sawtooth"})
    assert SCHEDULE_TYPES.names() == ("static", "layers", "ou", "oscillating", "relaxed",
                                      "callable")


# ----------------------------------------------------------------------------- engine fallback
def test_a_schedule_without_compiled_loop_warns_and_records_the_engine(rng, caplog):
    x0 = sample_uniform(8, 3, rng)
    heads = Heads.random_symmetric(2, 3, rng)
    attn = Attention("softmax", 1.0)
    call = CallableSchedule(Parametrisation("bilinear", np.full(2, 0.5)), heads.A,
                            lambda th, t: -th)
    with caplog.at_level(logging.INFO, logger="wflow.particles.solver"):
        r = simulate(x0, call, attn, T=0.02, dt=0.01, kernel_backend="numpy")
    warned = [rec for rec in caplog.records if rec.levelno == logging.WARNING]
    assert len(warned) == 1 and "CallableSchedule" in warned[0].getMessage()
    assert r.extra["engine"] == "python" and "CallableSchedule" in r.extra["engine_reason"]
    caplog.clear()
    # negative control: a kernel back-end chosen on purpose falls back with INFO only
    with caplog.at_level(logging.INFO, logger="wflow.particles.solver"):
        r = simulate(x0, heads, attn, T=0.02, dt=0.01, kernel_backend="numpy")
    assert not [rec for rec in caplog.records if rec.levelno >= logging.WARNING]
    assert r.extra["engine"] == "python" and "numpy" in r.extra["engine_reason"]
    r = simulate(x0, heads, attn, T=0.02, dt=0.01, kernel_backend="numpy", engine="python")
    assert r.extra == {**r.extra, "engine": "python", "engine_reason": "engine = 'python' "
                                                                      "requested"}


def test_particle_integrators_declare_the_stages_they_evaluate():
    """``stages()`` (the particle estimate's work per step) equals the field evaluations of
    one step, counted: 1 for Euler (``k1`` given), 4 for RK4 (``k1`` + 3 in ``step``), and
    for the stochastic ones their noisy step's (EM 1; Strang 5: RK4 from the moved state).
    Negative control: an RK4 that declared Euler's one stage is caught by the count."""
    from wflow.attention.heads import Attention, Heads
    from wflow.attention.schedules import Static
    from wflow.particles import integrators as pint

    x = np.eye(3)
    heads = Heads.scalar([1.0], 3)
    sched = Static.of(heads)
    attn = Attention("softmax", 1.0)

    def count(integ) -> int:
        n = [1]  # k1, evaluated by the loop before the step

        class Counting(pint._Kernel):  # a stage asks for the field or the velocity alone
            def evaluate(self, *a, **k):
                n[0] += 1
                return super().evaluate(*a, **k)

            def velocity(self, *a, **k):
                n[0] += 1
                return super().velocity(*a, **k)

        class StillNoise:  # the noise's draws, without moving: only evaluations counted
            def heat(self, y, s, draw=0):
                return y

            def normals(self, draw=0):
                return np.zeros_like(x)

        th = sched.initial_theta()
        args = (x, 0.1, np.zeros_like(x), heads, th, th, th, sched, attn, "transformer",
                Counting())
        if hasattr(integ, "noisy_step"):  # a stochastic integrator: its step with noise
            integ.noisy_step(*args, diffusion=0.1, noise=StillNoise())
        else:
            integ.step(*args)
        return n[0]

    for name, integ in pint.INTEGRATORS.items():
        assert integ.stages() == count(integ), name

    class WrongRK4(pint.RK4):
        def stages(self) -> int:
            return 1

    assert WrongRK4().stages() != count(WrongRK4())
