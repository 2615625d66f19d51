"""vMF densities: a bad ``kappas`` or ``weights`` is refused with one line naming the key."""

from __future__ import annotations

import numpy as np
import pytest

from wflow.geometry.density import density_values

PTS = np.eye(3)
MEAN = [[0.0, 0.0, 1.0]]


def test_one_kappa_per_mean_or_one_for_all():
    two = [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    a = density_values(PTS, {"type": "vmf", "means": two, "kappas": 3.0}, None, 3)
    b = density_values(PTS, {"type": "vmf", "means": two, "kappas": [3.0, 3.0]}, None, 3)
    assert np.array_equal(a, b)


@pytest.mark.parametrize("spec, key", [
    ({"kappas": [3, 1]}, "density.kappas"),  # two kappas for one mean (issue 42: a numpy
    ({"kappas": [-1.0]}, "density.kappas"),  # broadcast error naming no key before)
    ({"kappas": [float("nan")]}, "density.kappas"),
    ({"weights": [1.0, 2.0]}, "density.weights"),
    ({"weights": [0.0]}, "density.weights"),
])
def test_bad_vmf_input_names_its_key(spec, key):
    with pytest.raises(ValueError, match=rf"^{key}: "):
        density_values(PTS, {"type": "vmf", "means": MEAN, **spec}, None, 3)
