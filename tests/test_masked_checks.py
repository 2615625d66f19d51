"""The checks of a masked particle run (THEORY §9): recorded, not judged; refusals.

Under ``attention.mask`` the state's energy terms are those of the unmasked model at the
same tokens; the causal system has no energy of its own, so the chain-rule residual (and
the Itô balance of noisy tokens) is recorded with ``judged: False`` and does not decide
the status. Records that mean nothing under the mask are refused naming the key.
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow import ALiBi, Attention, Heads, simulate
from wflow.infra.schema import ScenarioError
from wflow.particles.loop import MASKED_REASON


def setup():
    """Heads and tokens whose masked Euler run at dt = 0.02 misses the chain tolerance."""
    rng = np.random.default_rng(0)
    Heads.random_symmetric(2, 3, rng, scale=2.0)  # (draws before this case's heads)
    rng.standard_normal((16, 3))
    heads = Heads.random_rank(2, 3, 3, rng, scale=1.5)
    x = rng.standard_normal((16, 3))
    return heads, x / np.linalg.norm(x, axis=1)[:, None]


MASKED = Attention("softmax", 1.0, mask="causal", bias=ALiBi(0.3))


def test_masked_chain_recorded_not_judged():
    """Without a tolerance (``rtol = None``) a masked run judges nothing of its own."""
    heads, x0 = setup()
    res = simulate(x0, heads, MASKED, T=0.2, dt=0.02, integrator="euler", rtol=None)
    chain = res.checks["chain"]
    # the residual alone would make the run inaccurate: it exceeds its tolerance
    assert chain["passed"] is False and chain["value"] > chain["tolerance"], chain
    assert chain["judged"] is False and chain["reason"] == MASKED_REASON
    # no check is judged: the run is completed (not success), naming why and the remedy
    assert res.status == "completed" and MASKED_REASON in res.message
    assert "particles.rtol" in res.message
    # the remedy works: with rtol the step-doubling estimate judges the run
    judged = simulate(x0, heads, MASKED, T=0.2, dt=0.02, integrator="euler", rtol=1e-2)
    assert judged.status in ("success", "inaccurate") and judged.checks["accuracy"]["passed"] \
        == (judged.status == "success")


def test_unmasked_chain_still_judged():
    """Negative control: without the mask the chain check still decides (same heads,
    ``rtol = None``).

    At dt = 0.1 the unmasked Euler run misses its tolerance and ends ``inaccurate``.
    """
    heads, x0 = setup()
    plain = Attention("softmax", 1.0)
    ok = simulate(x0, heads, plain, T=0.2, dt=0.02, integrator="euler", rtol=None)
    assert ok.status == "success" and "judged" not in ok.checks["chain"]
    bad = simulate(x0, heads, plain, T=1.0, dt=0.25, integrator="euler", rtol=None)
    assert "judged" not in bad.checks["chain"]
    assert bad.status == "inaccurate" and "chain-rule" in bad.message, bad.checks


def test_masked_noisy_ito_unjudged_or_refused():
    heads, x0 = setup()
    res = simulate(x0, heads, MASKED, T=0.1, dt=0.02, integrator="em", diffusion=0.1)
    ito = res.checks["ito_balance"]
    assert ito["judged"] is False and ito["reason"] == MASKED_REASON
    assert res.checks["chain"]["judged"] is False
    assert res.status == "completed" and MASKED_REASON in res.message
    with pytest.raises(ScenarioError, match=r"attention\.mask.*ito_balance"):
        simulate(x0, heads, MASKED, T=0.1, dt=0.02, integrator="em", diffusion=0.1,
                 ito_balance=True)
    # control: unmasked on the same (Python) loop, the Itô balance is judged
    plain = simulate(x0, heads, Attention("softmax", 1.0), T=0.1, dt=0.02, integrator="em",
                     diffusion=0.1, engine="python")
    assert plain.checks["ito_balance"]["judged"] is True


def test_masked_entropy_refused():
    heads, x0 = setup()
    with pytest.raises(ScenarioError, match=r"attention\.mask.*entropy"):
        simulate(x0, heads, MASKED, T=0.04, dt=0.02, entropy=True)
    res = simulate(x0, heads, Attention("softmax", 1.0), T=0.04, dt=0.02, entropy=True)
    assert "entropy" in res.history  # control: unmasked, recorded
