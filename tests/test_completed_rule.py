"""``success`` needs a judged check, over every combination a user can set (issue 42).

A particle run ends ``success`` only when at least one of its accuracy checks is judged
and within its tolerance, and ``completed`` (reached ``T``, finite) when every check it
records is recorded but not judged (:func:`wflow.status.unjudged_status`). This sweeps
the options that decide which checks a run judges: mask (none, causal), token diffusion
(0, 0.2), ``ito_balance`` (unset, true, false), ``engine`` (auto, python, compiled),
kind (softmax, with the closed-form Laplacian of the energy; relu, without) and weights
(static, noisy Ornstein–Uhlenbeck). For each run that is not refused up front:

* the status is ``success`` exactly when some check is judged (a dict without
  ``judged: False``), ``completed`` exactly when none is, and nothing else (the runs are
  small and well resolved, so a judged check passes); and
  :func:`wflow.particles.loop.unjudged_ahead`, which the command line prints as a note
  before the run, predicts it;
* a ``completed`` run names the reason of each unjudged check and a remedy that is never
  a refused option: running it again with that remedy (``rtol``) is accepted and judged,
  except for noisy weights, where the message says that no estimate applies yet;
* the documented refusals (``ito_balance = true`` with a mask, or with ``engine =
  "compiled"``; a mask with ``engine = "compiled"``) raise before computing, naming the
  key; they are never counted.

Negative control: the same sweep with the rule switched off (the statuses as the runs
set them before ``unjudged_status``) finds the unjudged ``success`` runs this rule is
there to catch.
"""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

import wflow.particles.solver as psolver
from wflow.attention.heads import Attention, Heads
from wflow.attention.mask import Causal
from wflow.attention.schedules import OrnsteinUhlenbeck, Parametrisation, as_schedule
from wflow.infra.accuracy import DEFAULT_RTOL
from wflow.infra.schema import ScenarioError
from wflow.particles import simulate
from wflow.particles.adaptive import DEFAULT_ASIDE
from wflow.particles.loop import unjudged_ahead
from wflow.status import Status

MASKS = (None, "causal")
DIFFUSION = (0.0, 0.2)
ITO = (None, True, False)
ENGINES = ("auto", "python", "compiled")
KINDS = ("softmax", "relu")
WEIGHTS = ("static", "ou")


def _setup(weights: str):
    rng = np.random.default_rng(4)
    x = rng.standard_normal((12, 3))
    x /= np.linalg.norm(x, axis=1)[:, None]
    heads = Heads.random_symmetric(1, 3, rng, scale=0.5)
    if weights == "static":
        return x, heads
    param, th0 = Parametrisation.from_heads(heads, kind="bilinear")
    return x, OrnsteinUhlenbeck(param, th0, np.broadcast_to(np.eye(3), th0.shape), kappa=1.0,
                                sigma0=0.3)


def _run(mask, D, ito, engine, kind, weights, **extra):
    x, sched = _setup(weights)
    attn = Attention(kind, 1.0, mask=None if mask is None else Causal())
    integ = "em" if D > 0 else "euler"
    # rtol = None unless given: the rule for a run without a tolerance (the default rtol's
    # own rule: test_the_default_rtol_judges_or_steps_aside)
    return simulate(x, sched, attn, T=0.02, dt=0.01, integrator=integ, diffusion=D,
                    ito_balance=ito, engine=engine, n_paths=2, seed=3, clusters=False,
                    head_rates=False, **{"rtol": None, **extra})


def _judged(checks: dict) -> bool:
    return any(c.get("judged", True) for c in checks.values() if isinstance(c, dict))


def _sweep():
    outcomes = []
    for mask, D, ito, engine, kind, weights in itertools.product(MASKS, DIFFUSION, ITO,
                                                                  ENGINES, KINDS, WEIGHTS):
        if D == 0 and ito is not None:
            continue  # no effect without token diffusion (tested elsewhere)
        case = (mask, D, ito, engine, kind, weights)
        try:
            res = _run(*case)
        except (ScenarioError, ValueError) as exc:  # a documented refusal, before computing
            outcomes.append((case, None, str(exc)))
            continue
        outcomes.append((case, res, ""))
    return outcomes


@pytest.fixture(scope="module")
def outcomes():
    return _sweep()


def test_success_exactly_when_a_check_is_judged(outcomes):
    ran = [(c, r) for c, r, _ in outcomes if r is not None]
    assert len(ran) >= 40
    seen = set()
    for case, res in ran:
        judged = _judged(res.checks)
        # the prediction before the run (the command line's note) is the outcome
        mask, _D, _ito, _engine, kind, weights = case
        attn = Attention(kind, 1.0, mask=None if mask is None else Causal())
        sched = as_schedule(_setup(weights)[1])
        assert (unjudged_ahead(res.options, attn, sched) is None) == judged, case
        assert res.status == (Status.SUCCESS if judged else Status.COMPLETED), (case, res.message)
        seen.add(res.status)
        if not judged:
            for name, chk in res.checks.items():
                if isinstance(chk, dict):
                    assert f"{name}: {chk['reason']}" in res.message, (case, res.message)
    assert seen == {Status.SUCCESS, Status.COMPLETED}


def test_refusals_are_the_documented_ones(outcomes):
    refused = [(c, why) for c, r, why in outcomes if r is None]
    kinds = set()
    for (mask, D, ito, engine, _kind, _w), why in refused:
        if engine == "compiled" and mask is not None and ito is not True:
            assert "particles.engine" in why and "causal mask" in why, why  # Python sums
            kinds.add("compiled mask")
            continue
        assert ito is True and D > 0, (mask, D, ito, engine, why)
        if mask is not None:  # refused by the mask before the engine is chosen
            assert "attention.mask" in why and "ito_balance" in why, why
            kinds.add("mask ito")
        else:
            assert engine == "compiled" and "particles.engine" in why, why
            kinds.add("compiled ito")
    assert kinds == {"compiled mask", "mask ito", "compiled ito"}  # each one reached


def test_the_remedy_is_accepted_and_judges(outcomes):
    """Every ``completed`` run's remedy: with ``rtol`` the run is judged (``success``,
    ``inaccurate`` or ``inconclusive``), never refused; noisy weights say none applies."""
    done = {}
    for case, res, _ in outcomes:
        if res is None or res.status != Status.COMPLETED:
            continue
        mask, D, ito, engine, kind, weights = case
        if weights == "ou":
            assert "particles.rtol is refused" in res.message, case
            continue
        assert "set particles.rtol" in res.message, case
        key = (mask, D, kind)  # the remedy's run depends on these alone
        if key in done:
            continue
        judged = _run(mask, D, None, "auto", kind, weights, rtol=0.05)
        assert judged.status in (Status.SUCCESS, Status.INACCURATE, Status.INCONCLUSIVE)
        assert "accuracy" in judged.checks and _judged(judged.checks)
        done[key] = judged.status
    assert len(done) >= 3


def test_without_the_rule_unjudged_runs_said_success(monkeypatch):
    """Negative control: with ``unjudged_status`` bypassed, the sweep's unjudged runs end
    ``success`` (what the rule catches): at least the masked, the compiled noisy and the
    noisy-weight cases."""
    monkeypatch.setattr(psolver, "unjudged_status", lambda status, message, checks, **_:
                        (status, message))
    bad = [case for case, res, _ in _sweep()
           if res is not None and res.status == Status.SUCCESS and not _judged(res.checks)]
    assert {c[0] for c in bad} == {None, "causal"}  # masked runs and unmasked noisy runs
    assert any(c[3] == "compiled" and c[1] > 0 for c in bad)
    assert any(c[5] == "ou" and c[1] > 0 for c in bad)


@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("D", DIFFUSION)
@pytest.mark.parametrize("weights", WEIGHTS)
def test_the_default_rtol_judges_or_steps_aside(mask, D, weights):
    """The default ``rtol`` judges a deterministic run by step doubling, masked or not
    (no run is ``completed`` for want of a check); with token diffusion or noisy weights
    it steps aside, says why in ``extra["accuracy_default"]``, and the run is exactly the
    ``rtol = None`` run with its status (control). The prediction before the run holds."""
    default = _run(mask, D, None, "auto", "softmax", weights, rtol=DEFAULT_RTOL)
    bare = _run(mask, D, None, "auto", "softmax", weights)
    attn = Attention("softmax", 1.0, mask=None if mask is None else Causal())
    sched = as_schedule(_setup(weights)[1])
    if D == 0 and weights == "static":
        assert default.checks["accuracy"]["rtol"] == 1e-3, default.checks
        assert "accuracy_default" not in default.extra
        assert default.status in (Status.SUCCESS, Status.INACCURATE), default.message
        assert unjudged_ahead(default.options, attn, sched) is None
        assert "accuracy" not in bare.checks
    else:
        assert default.extra["accuracy_default"].startswith(DEFAULT_ASIDE), default.extra
        assert "accuracy" not in default.checks and default.status == bare.status
        np.testing.assert_array_equal(default.x, bare.x)
        assert (unjudged_ahead(replace(bare.options, rtol=DEFAULT_RTOL), attn, sched)
                is None) == (default.status != Status.COMPLETED)
