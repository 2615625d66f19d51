"""The attention-kind registry (wflow.attention.kinds): derivatives, consistency, dispatch.

* ``Φ' = k`` and ``Φ''`` of every registered kind against central finite differences, with
  the tolerance of the stencil (truncation ``h²/6 |Φ'''|`` plus round-off ``ε|Φ|/h``);
* registry consistency: compiled codes unique, fast summation exactly for ``k = e^s``,
  ``Φ = k`` exactly for the exponential kernels; negative controls for both checks;
* an unknown kind raises ``ValueError`` on every entry point (sums, plans, energies,
  particles, multi-head formulas, CLI), while the same call with a registered kind runs;
* the "where to add a kind" recipe: a kind with an existing kernel (a normalised ReLU)
  registered in one line runs on every path and the paths agree; a kernel without compiled
  code runs on the NumPy back-end and the Python loop, and the compiled paths refuse it.
"""

from __future__ import annotations

import types
from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import pytest

from wflow.attention import heads as heads_mod
from wflow.attention import kinds
from wflow.attention.heads import Attention, Heads
from wflow.attention.kinds import (
    KERNELS,
    KINDS,
    REGISTRY,
    AttentionKind,
    Kernel,
    get_kind,
    register_kind,
    registered_kind,
    unregister_kind,
)
from wflow.geometry.sphere import sample_uniform

from .conftest import EPS, EXTRA_KINDS
from .conftest import KINDS as TEST_KINDS

#: Scores of the finite-difference checks: both signs, away from ReLU's kink at 0.
S_GRID = np.concatenate([-np.geomspace(6.0, 0.05, 25), np.geomspace(0.05, 6.0, 25)])


def _fd_error(f, df, s: np.ndarray) -> float:
    """Largest ``|df(s) − (f(s+h) − f(s−h))/2h|`` in units of the stencil's error bound.

    ``h = ε^{1/3} max(1, |s|)`` balances truncation ``h² |f'''|/6`` and round-off
    ``ε |f| / h``; ``|f'''|`` is bounded by the second difference of ``df`` (the bound is
    taken with a factor 10 for the unknown constants). A value ≤ 1 passes.
    """
    h = EPS ** (1 / 3) * np.maximum(1.0, np.abs(s))
    fd = (f(s + h) - f(s - h)) / (2 * h)
    d3 = np.abs(df(s + h) - 2 * df(s) + df(s - h)) / h**2  # ≈ |f'''|
    scale = np.maximum.reduce([np.abs(f(s + h)), np.abs(f(s - h)), np.abs(df(s)),
                               np.full_like(s, 1e-300)])
    bound = 10 * (h**2 * d3 / 6 + 4 * EPS * scale / h + 4 * EPS * np.abs(df(s)))
    return float(np.max(np.abs(df(s) - fd) / np.maximum(bound, 1e-300)))


def test_conftest_kinds_are_the_registry():
    assert TEST_KINDS == KINDS == tuple(REGISTRY) == heads_mod.KINDS
    assert len(set(KINDS)) == len(KINDS) >= 3
    assert {"softmax", "usa", "relu"} <= set(KINDS)


@pytest.mark.parametrize("kind", TEST_KINDS)
def test_derivatives_match_finite_differences(kind):
    """``Φ' = k`` and ``(Φ')' = Φ''`` to the stencil's accuracy."""
    spec = get_kind(kind)
    e1 = _fd_error(spec.phi, spec.dphi, S_GRID)
    e2 = _fd_error(spec.dphi, spec.d2phi, S_GRID)
    assert e1 <= 1.0, f"{kind}: Φ' differs from the difference quotient of Φ ({e1:.2g} bounds)"
    assert e2 <= 1.0, f"{kind}: Φ'' differs from the difference quotient of Φ' ({e2:.2g} bounds)"
    k = spec.dphi(S_GRID)
    np.testing.assert_array_equal(spec.kernel.phi_of(S_GRID, k), spec.phi(S_GRID))


@dataclass(frozen=True)
class _WrongD2(Kernel):
    """A broken kernel for the negative control: ``Φ''`` of the exponential off by 1e-6."""

    def phi(self, s):  # noqa: D102
        return np.exp(s)

    def dphi(self, s):  # noqa: D102
        return np.exp(s)

    def d2phi(self, s):  # noqa: D102
        return np.exp(s) * (1 + 1e-6)


def test_finite_difference_check_catches_a_wrong_derivative():
    bad = _WrongD2("bad", None, exponential=False, fastsum=False)
    assert _fd_error(bad.phi, bad.dphi, S_GRID) <= 1.0
    assert _fd_error(bad.dphi, bad.d2phi, S_GRID) > 1.0


def _registry_errors(kernels: dict[str, Kernel], registry: dict[str, AttentionKind]) -> list[str]:
    """Inconsistencies of a registry (empty: consistent)."""
    bad = []
    codes = [k.code for k in kernels.values() if k.code is not None]
    if len(codes) != len(set(codes)):
        bad.append(f"compiled kernel codes not unique: {codes}")
    s = np.linspace(-3.0, 3.0, 61)
    for kern in kernels.values():
        is_exp = bool(np.array_equal(kern.dphi(s), np.exp(s)))
        if kern.fastsum != is_exp:
            bad.append(f"{kern.name}: fastsum={kern.fastsum} but k = e^s is {is_exp}")
        if kern.fastsum and kern.code is None:
            bad.append(f"{kern.name}: fast summation falls back to compiled direct sums")
        if kern.exponential != bool(np.array_equal(kern.phi(s), kern.dphi(s))):
            bad.append(f"{kern.name}: exponential={kern.exponential} must mean Φ = k")
    for name, spec in registry.items():
        if spec.name != name:
            bad.append(f"{name}: registered under another name ({spec.name})")
        if spec.kernel not in kernels.values():
            bad.append(f"{name}: kernel {spec.kernel.name} not in KERNELS")
    ids = [(spec.code, spec.normalised) for spec in registry.values()]
    if len(ids) != len(set(ids)):
        bad.append(f"two kinds the compiled paths cannot tell apart: {ids}")
    return bad


def test_registry_is_consistent():
    assert _registry_errors(KERNELS, REGISTRY) == []
    codes = {k.code for k in KERNELS.values()} - {None}  # None: NumPy-only kernels
    assert codes == {kinds.CODE_EXP, kinds.CODE_RELU}
    assert [get_kind(k).fastsum for k in ("softmax", "usa", "relu")] == [True, True, False]
    assert [get_kind(k).normalised for k in ("softmax", "usa", "relu")] == [True, False, False]


def test_registry_check_catches_inconsistencies():
    """Negative controls: a duplicated code, a ReLU claiming fast summation, twin kinds."""
    dup = dict(KERNELS, dup=kinds._ReLU("dup", kinds.CODE_EXP, exponential=False,
                                          fastsum=False))
    assert any("codes not unique" in e for e in _registry_errors(dup, REGISTRY))
    fake = kinds._ReLU("relu", kinds.CODE_RELU, exponential=False, fastsum=True)
    assert any("fastsum=True" in e for e in _registry_errors({"relu": fake}, {}))
    twin = dict(REGISTRY, sa2=AttentionKind("sa2", "SA2", kinds.EXP_KERNEL, normalised=True))
    assert any("cannot tell apart" in e for e in _registry_errors(KERNELS, twin))


def test_get_kind_names_the_known_kinds():
    assert get_kind("relu") is REGISTRY["relu"]
    assert get_kind(REGISTRY["usa"]) is REGISTRY["usa"]
    with pytest.raises(ValueError) as exc:
        get_kind("bogus")
    msg = str(exc.value)
    assert "'bogus'" in msg and all(k in msg for k in KINDS)
    # the same definition again is the registered kind (a module imported twice)
    assert REGISTRY.add(AttentionKind("softmax", "SA", kinds.EXP_KERNEL, True)) is kinds.SOFTMAX
    with pytest.raises(ValueError, match="registered twice"):  # a built-in is never replaced
        register_kind(AttentionKind("softmax", "SA2", kinds.EXP_KERNEL, normalised=True))


# ------------------------------------------------------------- unknown kinds raise everywhere
def _entry_points(rng):
    """``name -> call(kind)`` for every public path that takes an attention kind."""
    from wflow import energy
    from wflow.apps.scenario import parse_scenario
    from wflow.kernels import kernel_sums, particle_terms, plan_kernel
    from wflow.multihead import radial_dominance
    from wflow.multihead.equiangular import equiangular_rhs, equiangular_time, solve_equiangular
    from wflow.particles import euler_path, simulate

    x = sample_uniform(12, 3, rng)
    m = np.full(12, 1 / 12)
    hs = Heads.random_symmetric(2, 3, rng, scale=0.5)

    def attn(kind):  # Attention validates its kind itself: bypass it for the deeper paths
        return types.SimpleNamespace(kind=kind, beta=1.0)

    def sums(backend):
        return lambda kind: kernel_sums(x, x, m, hs.Q, hs.K, beta=1.0, kind=kind,
                                        backend=backend, potential=True)

    pts = {f"kernel_sums[{b}]": sums(b) for b in ("numpy", "direct", "auto")}
    pts.update({
        "kernel_sums[fastsum]": lambda kind: kernel_sums(
            sample_uniform(300, 3, rng), x, m, hs.Q, hs.K, beta=1.0, kind=kind,
            backend="fastsum", tol=1e-6),
        "plan_kernel": lambda kind: plan_kernel(x, x, hs.Q, hs.K, beta=1.0, kind=kind),
        "particle_terms": lambda kind: particle_terms(x, m, hs.Q, hs.K, hs.V, hs.w, beta=1.0,
                                                      kind=kind),
        "Attention": lambda kind: Attention(kind, 1.0),
        "energy.evaluate": lambda kind: energy.evaluate(x, hs, attn(kind)),
        "energy.particle_field": lambda kind: energy.particle_field(x, m, hs, attn(kind)),
        "energy.ito_correction": lambda kind: energy.ito_correction(
            x, m, hs, attn(kind), 0.1, symmetric_noise=True),
        "simulate[python]": lambda kind: simulate(x, hs, attn(kind), T=0.02, dt=0.01,
                                                  engine="python"),
        "simulate[compiled]": lambda kind: simulate(x, hs, attn(kind), T=0.02, dt=0.01,
                                                    engine="compiled"),
        "euler_path": lambda kind: euler_path(x, hs, attn(kind), dt=0.01, steps=2),
        "radial_dominance": lambda kind: radial_dominance(x, hs, attn(kind)),
        "equiangular_rhs": lambda kind: equiangular_rhs(0.3, [1.0], 1.0, 5, kind=kind),
        "solve_equiangular": lambda kind: solve_equiangular(0.3, [1.0], 1.0, 5, [0.0, 0.1],
                                                            kind=kind),
        "equiangular_time": lambda kind: equiangular_time(0.3, 0.5, [1.0], 1.0, 5, kind=kind),
        "parse_scenario": lambda kind: parse_scenario({"attention": {"kind": kind}}),
    })
    return pts


ENTRY_POINTS = tuple(_entry_points(np.random.default_rng(0)))


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_unknown_kind_raises_on_every_path(entry, rng):
    call = _entry_points(rng)[entry]
    with pytest.raises(ValueError, match="bogus"):
        call("bogus")
    call("softmax")  # negative control: the same call runs with a registered kind


def test_cli_rejects_an_unknown_kind(tmp_path, capsys, rng):
    from wflow.cli import main

    np.save(tmp_path / "x.npy", sample_uniform(6, 3, rng))
    Heads.random_symmetric(2, 3, rng).save_npz(tmp_path / "h.npz")
    argv = ["heads", "radial-dominance", "--tokens", str(tmp_path / "x.npy"), "--heads",
            str(tmp_path / "h.npz"), "--beta", "1.0", "--kind"]
    assert main(argv + ["bogus"]) == 2
    assert "--kind: unknown attention kind 'bogus'" in capsys.readouterr().err
    assert main(argv + ["usa", "--json"]) == 0  # negative control


# ------------------------------------------------------------------- adding a kind
@pytest.fixture
def register():
    """Register kinds for one test (:func:`register_kind`, undone afterwards)."""
    with ExitStack() as stack:
        yield lambda spec: stack.enter_context(registered_kind(spec))


def test_a_kind_with_an_existing_kernel_runs_on_every_path(register, rng):
    """A normalised ReLU, registered in one line: NumPy, direct and the fused compiled pass
    agree, and so do the Python and compiled particle loops."""
    from wflow.energy import evaluate, particle_field
    from wflow.kernels import kernel_sums
    from wflow.particles import simulate

    spec = register(AttentionKind("relu_sa", "ReLU-SA", kinds.RELU_KERNEL, normalised=True))
    x = sample_uniform(30, 3, rng)
    m = np.full(30, 1 / 30)
    hs = Heads.scalar([1.0, 0.5], 3, w=0.5)  # s_ii = βλ > 0: every normaliser Z > 0
    attn = Attention(spec.name, 1.0)
    ref = kernel_sums(x, x, m, hs.Q, hs.K, beta=1.0, kind=spec.name, backend="numpy",
                      potential=True)
    got = kernel_sums(x, x, m, hs.Q, hs.K, beta=1.0, kind=spec.name, backend="direct",
                      potential=True)
    tol = 64 * x.shape[0] * EPS  # summation of n positive terms in two orders
    for a, b in zip(ref[:3], got[:3], strict=True):
        np.testing.assert_allclose(b, a, rtol=tol, atol=tol * np.max(np.abs(a)))
    fe = evaluate(x, hs, attn, backend="numpy")
    fused, _, _ = particle_field(x, m, hs, attn)
    np.testing.assert_allclose(fused.v, fe.v, rtol=0, atol=tol * np.max(np.abs(fe.v)))
    np.testing.assert_allclose(fused.bhat, fe.bhat, rtol=tol)
    # normalised: b̂ = (Σ w̄ Z)^{-1} ≠ 1 (negative control against the unnormalised ReLU)
    assert np.max(np.abs(fe.bhat - 1.0)) > 1e-3
    kw = {"T": 0.1, "dt": 0.02, "integrator": "rk4", "entropy": False, "head_rates": False}
    rp = simulate(x, hs, attn, engine="python", **kw)
    rc = simulate(x, hs, attn, engine="compiled", **kw)
    assert rp.status == rc.status == "success"
    np.testing.assert_allclose(rc.x, rp.x, rtol=0, atol=1e-12)
    np.testing.assert_allclose(rc.history["E"], rp.history["E"], rtol=1e-12)


def test_a_kernel_without_compiled_code_runs_on_the_numpy_paths(register, rng):
    from wflow.energy import evaluate, head_energies
    from wflow.kernels import kernel_sums, particle_terms, plan_kernel
    from wflow.particles import euler_path, simulate

    spec = register(EXTRA_KINDS["poly2"])  # k = 1 + s + s²/2, code=None (tests/conftest.py)
    kern = spec.kernel
    assert _fd_error(kern.phi, kern.dphi, S_GRID) <= 1.0
    assert _fd_error(kern.dphi, kern.d2phi, S_GRID) <= 1.0
    assert not spec.compiled
    x = sample_uniform(20, 3, rng)
    m = np.full(20, 1 / 20)
    hs = Heads.random_symmetric(2, 3, rng, scale=0.5)
    plan = plan_kernel(x, x, hs.Q, hs.K, beta=1.0, kind="poly2")
    assert plan.backend == "numpy" and "no compiled kernel" in plan.reason
    sums = kernel_sums(x, x, m, hs.Q, hs.K, beta=1.0, kind="poly2", potential=True)
    assert sums.info.backend == "numpy"
    s = np.einsum("ia,hab,jb->hij", x, hs.A, x)  # β = 1
    np.testing.assert_allclose(sums.Z, kern.dphi(s) @ m, rtol=64 * 20 * EPS)
    np.testing.assert_allclose(sums.Phi, kern.phi(s) @ m, rtol=64 * 20 * EPS)
    attn = Attention("poly2", 1.0)
    fe = evaluate(x, hs, attn)
    np.testing.assert_allclose(head_energies(fe, m, attn), 0.5 * (kern.phi(s) @ m) @ m,
                               rtol=64 * 20 * EPS)
    for call in (lambda: kernel_sums(x, x, m, hs.Q, hs.K, beta=1.0, kind="poly2",
                                     backend="direct"),
                 lambda: particle_terms(x, m, hs.Q, hs.K, hs.V, hs.w, beta=1.0, kind="poly2"),
                 lambda: euler_path(x, hs, attn, dt=0.01, steps=2),
                 lambda: simulate(x, hs, attn, T=0.02, dt=0.01, engine="compiled")):
        with pytest.raises(ValueError, match="no compiled kernel"):
            call()
    res = simulate(x, hs, attn, T=0.1, dt=0.02, integrator="rk4", head_rates=False)
    assert res.status == "success", res.message


@pytest.mark.parametrize("kind", ["softmax", "usa", "relu"])
def test_equiangular_generic_formula_matches_the_closed_forms(register, kind):
    """A registered copy of a built-in kind takes the generic ``κ = Σ w λ k(βλγ)/N``; it
    equals the built-in closed form (``F`` is a sum of positive terms: a few ulps)."""
    from wflow.multihead.equiangular import equiangular_rhs

    ref = get_kind(kind)
    twin = register(AttentionKind(f"{kind}_copy", "copy", ref.kernel, ref.normalised))
    g = np.linspace(0.01, 0.95, 40)
    lam, w = [0.5, 1.5, 3.0], [0.2, 0.3, 0.5]
    want = equiangular_rhs(g, lam, 2.0, 12, kind=kind, w=w)
    got = equiangular_rhs(g, lam, 2.0, 12, kind=twin.name, w=w)
    np.testing.assert_allclose(got, want, rtol=64 * EPS, atol=0)
    # negative control: the unnormalised twin of softmax is a different ODE
    if ref.normalised:
        other = register(AttentionKind(f"{kind}_unnorm", "u", ref.kernel, False))
        assert np.max(np.abs(equiangular_rhs(g, lam, 2.0, 12, kind=other.name, w=w)
                             / want - 1)) > 0.1


# ------------------------------------------------------------- register_kind: a live registry
def _readers(name: str) -> dict[str, object]:
    """Every reader of the list of kinds, asked about ``name`` (raises if it refuses)."""
    from wflow.apps.scenario import parse_scenario

    return {
        "KINDS": name in KINDS and name in heads_mod.KINDS and KINDS[-1] == name,
        "Attention": Attention(name, 1.0),
        "parse_scenario": parse_scenario({"attention": {"kind": name}}).attention["kind"],
    }


def test_a_kind_registered_at_run_time_is_read_by_every_reader():
    spec = AttentionKind("poly2_sa", "P2-SA", EXTRA_KINDS["poly2"].kernel, normalised=True)
    assert spec.name not in KINDS
    for call in (lambda: Attention(spec.name, 1.0),
                 lambda: _readers(spec.name)["parse_scenario"]):
        with pytest.raises(ValueError, match="poly2_sa"):  # control: unknown before
            call()
    with registered_kind(spec) as got:
        assert got is spec and get_kind("poly2_sa") is spec
        r = _readers(spec.name)
        assert r["KINDS"] and r["parse_scenario"] == "poly2_sa"
        assert tuple(KINDS) == tuple(REGISTRY) and len(KINDS) == len(REGISTRY)
        assert KINDS == list(REGISTRY) and KINDS + ("x",) == (*REGISTRY, "x")
        assert KERNELS[spec.kernel.name] is spec.kernel
    # unregistered on leaving the block: every reader refuses it again
    assert "poly2_sa" not in KINDS and "poly2_sa" not in REGISTRY
    with pytest.raises(ValueError, match="poly2_sa"):
        Attention("poly2_sa", 1.0)


def test_register_kind_refuses_what_would_run_as_another_kind():
    """A new kernel claiming an existing compiled code (the numba kernels branch on it:
    it would run as e^s), an unknown code, a built-in name, a taken kernel name."""
    poly = EXTRA_KINDS["poly2"].kernel
    claims_exp = type(poly)("poly2_exp", kinds.CODE_EXP, exponential=False, fastsum=False)
    with pytest.raises(ValueError, match="claims compiled code 0, which is the code of "
                                         "kernel 'exp'"):
        register_kind(AttentionKind("p2e", "P2E", claims_exp))
    with pytest.raises(ValueError, match="which no compiled kernel has"):
        register_kind(AttentionKind("p2x", "P2X", type(poly)("poly2_x", 7, exponential=False,
                                                                 fastsum=False)))
    with pytest.raises(ValueError, match="registered twice"):
        register_kind(AttentionKind("relu", "ReLU", poly))
    with pytest.raises(ValueError, match="kernel name 'exp' is taken"):
        register_kind(AttentionKind("p2n", "P2N", type(poly)("exp", None, exponential=False,
                                                                fastsum=False)))
    with pytest.raises(TypeError, match="AttentionKind"):
        register_kind("poly2")
    with pytest.raises(ValueError, match="built-in"):
        unregister_kind("softmax")
    with pytest.raises(ValueError, match="must be one of"):
        unregister_kind("never_registered")
    assert not {"p2e", "p2x", "p2n"} & set(KINDS) and "poly2_exp" not in KERNELS
    # control: an existing compiled kernel under a new kind is accepted
    with registered_kind(AttentionKind("relu_sa2", "R", kinds.RELU_KERNEL, True)) as spec:
        assert spec.compiled and spec.code == kinds.CODE_RELU
    assert KERNELS["relu"] is kinds.RELU_KERNEL  # a built-in kernel stays


USER_MODULE = '''
from dataclasses import dataclass
import numpy as np
from wflow.attention.kinds import AttentionKind, Kernel, register_kind

@dataclass(frozen=True)
class Cubic(Kernel):
    def phi(self, s):
        return s + s**2 / 2 + s**3 / 6 + s**4 / 24
    def dphi(self, s):
        return 1 + s + s**2 / 2 + s**3 / 6
    def d2phi(self, s):
        return 1 + s + s**2 / 2

CUBIC = register_kind(AttentionKind("cubic_LABEL", "C", Cubic("cubic", None, False, False)))
'''


def test_a_module_imported_twice_registers_its_kind_once(tmp_path):
    """A scenario imports its ``modules`` on every load: the same definition re-registers
    (replaced), a different one under the same name is refused."""
    from wflow.infra.callables import load_module

    f = tmp_path / "mykinds.py"
    f.write_text(USER_MODULE.replace("LABEL", "1"))
    try:
        a = load_module("mykinds.py", base_dir=tmp_path).CUBIC
        b = load_module(str(f)).CUBIC
        assert a is not b and a != b  # two classes (two executions of the file) ...
        assert get_kind("cubic_1") is b and list(KINDS).count("cubic_1") == 1  # ... one kind
        g = tmp_path / "other.py"  # negative control: another file, same kind name
        g.write_text(USER_MODULE.replace("LABEL", "1"))
        with pytest.raises(ValueError, match="registered twice"):
            load_module(str(g))
        assert get_kind("cubic_1") is b
    finally:
        unregister_kind("cubic_1")
    assert "cubic_1" not in KINDS and "cubic" not in KERNELS


def test_compiled_paths_refuse_a_numpy_kind_with_one_message(register, rng):
    """Every compiled path refuses a kind without compiled code with the kind's one message
    (:meth:`AttentionKind.not_compiled`), and ``auto`` never picks one of them for it."""
    from wflow.energy import particle_field
    from wflow.kernels import kernel_sums, particle_terms, plan_kernel
    from wflow.particles import ParticleOptions, compiled_support, euler_path, simulate

    spec = register(EXTRA_KINDS["poly2"])
    msg = spec.not_compiled()
    assert msg is not None and get_kind("softmax").not_compiled() is None
    x = sample_uniform(16, 3, rng)
    m = np.full(16, 1 / 16)
    hs = Heads.random_symmetric(1, 3, rng, scale=0.5)
    attn = Attention(spec.name, 1.0)
    calls = {
        "kernel_sums[direct]": lambda: kernel_sums(x, x, m, hs.Q, hs.K, beta=1.0,
                                                   kind=spec.name, backend="direct"),
        "plan_kernel[direct]": lambda: plan_kernel(x, x, hs.Q, hs.K, beta=1.0,
                                                   kind=spec.name, backend="direct"),
        "particle_terms": lambda: particle_terms(x, m, hs.Q, hs.K, hs.V, hs.w, beta=1.0,
                                                 kind=spec.name),
        "particle_field": lambda: particle_field(x, m, hs, attn),
        "euler_path": lambda: euler_path(x, hs, attn, dt=0.01, steps=2),
        "simulate[compiled]": lambda: simulate(x, hs, attn, T=0.02, dt=0.01,
                                               engine="compiled"),
    }
    for name, call in calls.items():
        with pytest.raises(ValueError) as exc:
            call()
        assert str(exc.value).endswith(msg), f"{name}: {exc.value}"
    # auto: the NumPy sums and the Python loop, recorded
    assert plan_kernel(x, x, hs.Q, hs.K, beta=1.0, kind=spec.name).backend == "numpy"
    assert compiled_support(x, hs, attn, ParticleOptions()) == msg
    res = simulate(x, hs, attn, T=0.04, dt=0.02, head_rates=False)
    assert res.status == "success" and res.extra["engine"] == "python"
    assert res.extra["engine_reason"] == msg
    assert set(res.extra["kernel"]["calls"]) == {"numpy"}, res.extra["kernel"]
    # negative control: a compiled kind under auto does take the compiled loop
    r2 = simulate(x, hs, Attention("usa", 1.0), T=0.04, dt=0.02, head_rates=False)
    assert r2.extra["engine"] == "compiled"


def test_the_kind_parametrised_suite_runs_for_new_numpy_kinds():
    """The proof that a new kernel needs no test edit: the kind-parametrised tests, run in
    a subprocess with two NumPy-only kinds registered (``WFLOW_TEST_EXTRA_KINDS``), pass
    or skip with the stated reason (the compiled paths), and none fails."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    files = [f"tests/{f}" for f in ("test_kinds.py", "test_kernels.py", "test_energy.py",
                                     "test_particles.py", "test_jko.py", "test_multihead.py")]
    env = dict(os.environ, WFLOW_TEST_EXTRA_KINDS="poly2,tanh", PYTHONPATH=str(root))
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                        "-rs", "-k", "(poly2 or tanh) and not parametrised_suite", *files],
                       cwd=root, env=env, capture_output=True, text=True, timeout=900)
    tail = r.stdout[-3000:]
    assert r.returncode == 0, tail
    last = tail.strip().splitlines()[-1]
    assert "passed" in last and "failed" not in last and "error" not in last, last
    skips = [ln for ln in r.stdout.splitlines() if ln.startswith("SKIPPED")]
    assert skips and all("no compiled kernel (code=None)" in ln for ln in skips), skips
