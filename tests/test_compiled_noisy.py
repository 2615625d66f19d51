"""The compiled loop's noisy integrators equal the Python loop (token diffusion, THEORY §8).

``em``, ``strang`` and ``strang-heun`` run compiled (``engine="compiled"``): the keyed
token noise is drawn in Python by the same streams as the Python loop
(:class:`wflow.particles.noise.TokenNoise`: the normals of ``em``, the two heat-kernel
increments ``(ξ, θ)`` of the splittings), block by block, and applied in the compiled
step. Every schedule kind × both splittings × ``D ∈ {0, 0.3}``, token-noise replicates
(several paths with deterministic weights) and noisy weights with one token stream per
path, ``d ∈ {2, 3, 5}``: tokens, weights, every recorded diagnostic, the per-step
integrands and the balances agree to 1e-12 of their scale (only the attention sums'
order differs; :data:`tests.test_compiled.RTOL`). The Itô balance is the Python loop's
(it records the Laplacian of the energy): the compiled run says it is not judged, and
ends ``completed`` (no accuracy check judged).
Negative controls: ``D`` off by 1e-9 relative and another seed are caught by the same
comparison; a user's subclass of a splitting has no compiled step and is refused.
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow.attention.heads import Attention
from wflow.geometry.sphere import sample_uniform
from wflow.particles import simulate
from wflow.particles.integrators import StrangHeun

from .test_compiled import KINDS, RTOL, make_schedule

#: Keys the Python loop adds for the Itô balance of token diffusion (Laplacian recorded).
_ITO_ONLY = {"qv", "cv", "lap", "kappa", "ito_qv", "ito_cv", "ito_tokens", "ito_residual_cv",
             "ito_residual"}


def assert_same_noisy_run(rc, rp, *, rtol: float = RTOL) -> None:
    """Every array the two loops both record agrees to ``rtol`` times its scale.

    Statuses: with token diffusion the compiled run judges no check (``completed``), the
    Python run judges the Itô balance where it applies (``success``; noisy weights:
    recorded, not judged, ``completed`` too); without, both ``success``.
    """
    noisy = "ito_balance" in rc.checks
    assert rc.status == ("completed" if noisy else "success"), rc.message
    judged = rp.checks.get("ito_balance", {}).get("judged", not noisy)
    assert rp.status == ("success" if judged else "completed"), rp.message
    assert rc.extra["engine"] == "compiled" and rp.extra["engine"] == "python"
    assert rc.sign == rp.sign and rc.order == rp.order
    np.testing.assert_array_equal(rc.t, rp.t)
    for mine, theirs, what in ((rc.history, rp.history, "history"),
                               (rc.steps, rp.steps, "steps"),
                               (rc.balance, rp.balance, "balance")):
        assert set(mine) == set(theirs) - _ITO_ONLY, what
        for key in mine:
            a, b = np.asarray(mine[key], float), np.asarray(theirs[key], float)
            assert a.shape == b.shape, (what, key)
            scale = max(float(np.max(np.abs(b), initial=0.0)), 1.0)
            np.testing.assert_allclose(a, b, rtol=0, atol=rtol * scale, err_msg=f"{what}[{key}]")
    for a, b, what in ((rc.x, rp.x, "x"), (rc.theta, rp.theta, "theta"),
                       (rc.trajectory, rp.trajectory, "trajectory")):
        assert (a is None) == (b is None), what
        if a is not None:
            np.testing.assert_allclose(a, b, rtol=0, atol=rtol, err_msg=what)
    if "ito_balance" in rc.checks:
        assert rc.checks["ito_balance"]["judged"] is False


def both(x0, sched, attn, **kw):
    kw.setdefault("rtol", None)  # the run alone: the engines are compared, not judged
    return (simulate(x0, sched, attn, engine="compiled", **kw),
            simulate(x0, sched, attn, engine="python", **kw))


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("integrator", ["strang", "strang-heun"])
@pytest.mark.parametrize("diffusion", [0.0, 0.3])
def test_compiled_splittings_equal_python_every_schedule(rng, kind, integrator, diffusion):
    sched = make_schedule(kind, rng, H=3, d=3, symmetric=True)
    x0 = sample_uniform(37, 3, rng)
    rc, rp = both(x0, sched, Attention("softmax", 1.1), T=0.3, dt=0.0125,
                  integrator=integrator, diffusion=diffusion, record_every=3, n_paths=3,
                  seed=7, save_trajectory=True, clusters=True, head_rates=True)
    assert_same_noisy_run(rc, rp)
    if diffusion > 0:  # replicates (deterministic weights) or weight paths: 3 paths each
        assert rc.x.shape[0] == 3 and np.ptp(rc.history["E"][:, -1]) > 0


@pytest.mark.parametrize("integrator", ["em", "strang", "strang-heun"])
@pytest.mark.parametrize("kind,d,symmetric", [("static", 2, False), ("ou_plain", 2, False),
                                               ("layers", 2, False), ("static", 5, True),
                                               ("ou_sym", 5, True)])
def test_compiled_noisy_general_heads_and_d5(rng, integrator, kind, d, symmetric):
    sched = make_schedule(kind, rng, H=2, d=d, symmetric=symmetric)
    x0 = sample_uniform(31, d, rng)
    rc, rp = both(x0, sched, Attention("softmax", 0.9), T=0.2, dt=0.02,
                  integrator=integrator, diffusion=0.4, n_paths=2, seed=3, head_rates=False)
    assert_same_noisy_run(rc, rp)


def test_the_comparison_catches_noise_faults(rng):
    """``D`` changed by 1e-9 relative, or another seed, in the compiled run: caught."""
    sched = make_schedule("static", rng, H=2, d=3, symmetric=True)
    x0 = sample_uniform(30, 3, rng)
    attn = Attention("softmax", 1.0)
    kw = dict(T=0.1, dt=0.0125, integrator="strang-heun", diffusion=0.3, seed=5, rtol=None)
    rp = simulate(x0, sched, attn, engine="python", **kw)
    assert_same_noisy_run(simulate(x0, sched, attn, engine="compiled", **kw), rp)
    for change in ({"diffusion": 0.3 * (1 + 1e-9)}, {"seed": 6}):
        rc = simulate(x0, sched, attn, engine="compiled", **{**kw, **change})
        with pytest.raises(AssertionError):
            assert_same_noisy_run(rc, rp)


def test_a_users_splitting_has_no_compiled_step(rng):
    """A subclass of a built-in splitting runs on the Python loop; ``compiled`` refuses it."""

    class MyHeun(StrangHeun):
        name = "my-heun"

    sched = make_schedule("static", rng, H=2, d=3, symmetric=True)
    x0 = sample_uniform(20, 3, rng)
    kw = dict(T=0.05, dt=0.025, integrator=MyHeun(), diffusion=0.2, seed=1, rtol=None)
    with pytest.raises(ValueError, match="has no compiled code"):
        simulate(x0, sched, Attention("softmax", 1.0), engine="compiled", **kw)
    r = simulate(x0, sched, Attention("softmax", 1.0), **kw)
    assert r.status == "success" and r.extra["engine"] == "python"


def test_noiseless_splittings_take_their_deterministic_steps(rng):
    """``D = 0``: compiled ``strang`` is RK4's step bit for bit (as in the Python loop, no
    evaluation at ``B_0(x) = x`` again); ``strang-heun`` is two Heun half steps, another
    second-order scheme (the control: it differs from RK4 by far more than round-off)."""
    sched = make_schedule("oscillating", rng, H=2, d=3, symmetric=True)
    x0 = sample_uniform(25, 3, rng)
    kw = dict(T=0.2, dt=0.02, engine="compiled", head_rates=False)
    at = Attention("softmax", 1.0)
    rk4 = simulate(x0, sched, at, integrator="rk4", **kw)
    st = simulate(x0, sched, at, integrator="strang", diffusion=0.0, **kw)
    sh = simulate(x0, sched, at, integrator="strang-heun", diffusion=0.0, **kw)
    assert np.array_equal(st.x, rk4.x) and np.array_equal(st.history["E"], rk4.history["E"])
    assert np.max(np.abs(sh.x - rk4.x)) > 1e-8
