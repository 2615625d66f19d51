"""The token diffusion ``D`` (THEORY §8): validation names the key; K = 1/(2D) round-trips."""

import math

import pytest

from wflow.attention.diffusion import check_diffusion, coupling_of, diffusion_of
from wflow.infra.schema import ScenarioError


@pytest.mark.parametrize("bad", [-1e-300, -1.0, math.nan, math.inf, -math.inf, "0.1", True, None])
def test_bad_diffusion_names_the_key(bad):
    with pytest.raises(ScenarioError, match=r"^attention\.diffusion: "):
        check_diffusion(bad)


def test_good_diffusion_is_a_float():
    assert check_diffusion(0) == 0.0 and isinstance(check_diffusion(0), float)
    assert check_diffusion(0.25) == 0.25


def test_published_coupling_round_trip():
    # K = 1/(2D) exactly in binary for these powers of two; the round trip is exact.
    assert coupling_of(0.25) == 2.0 and diffusion_of(2.0) == 0.25
    with pytest.raises(ScenarioError):
        coupling_of(0.0)
    with pytest.raises(ScenarioError):
        diffusion_of(-1.0)
