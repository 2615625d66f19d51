"""``causal_sums(..., values=W)``: the masked sums of heads with values of rank ``r``.

``Y_h(i) = Σ_{j ≤ i} m_j k(·) W_h x_j`` equals ``W_h`` applied to the full-width sums, for
every back-end (the NumPy and the compiled direct sums at ``d > 3`` accumulate at width
``r``; at ``d ≤ 3`` the fused rows and the fast sum project after), with the causal and the
strict mask and an ALiBi bias; ``Z`` equal to round-off (the value width picks the compiled
path, as in :func:`wflow.kernels.kernel_sums`: ``w + r`` below the BLAS threshold runs the
chunked rows where ``w + d`` ran BLAS blocks). Control: a value factor off by 1e-6 in one
entry is seen.
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow.attention.mask import ALiBi
from wflow.kernels.causal import causal_sums


def _case(d: int, n: int = 300, H: int = 2, k: int = 2, r: int = 2, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    Q = rng.standard_normal((H, k, d)) / np.sqrt(d)
    K = rng.standard_normal((H, k, d)) / np.sqrt(d)
    W = rng.standard_normal((H, r, d))
    return x, np.full(n, 1.0 / n), Q, K, W


@pytest.mark.parametrize("backend, d", [("numpy", 3), ("numpy", 16), ("direct", 3),
                                        ("direct", 16), ("fastsum", 3)])
@pytest.mark.parametrize("mask, bias", [("causal", None), ("causal_strict", None),
                                        ("causal", ALiBi(0.01))])
def test_values_equal_the_projected_full_sums(backend, d, mask, bias):
    x, m, Q, K, W = _case(d)
    kw = dict(beta=1.5, kind="softmax", mask=mask, bias=bias, backend=backend)
    full = causal_sums(x, m, Q, K, **kw)
    at_rank = causal_sums(x, m, Q, K, values=W, **kw)
    ref = np.matmul(full.Y, np.swapaxes(W, 1, 2))
    assert at_rank.Y.shape == (2, x.shape[0], 2)
    # the same sums in another association (W Σ against Σ W): round-off of n terms
    scale = np.abs(ref).max()
    assert np.abs(at_rank.Y - ref).max() <= 1e3 * np.finfo(float).eps * scale
    # Z: the same positive terms, perhaps on another path (BLAS blocks vs chunked rows)
    assert np.abs(at_rank.Z - full.Z).max() <= 2 * x.shape[0] * np.finfo(float).eps * full.Z.max()
    assert "values" in at_rank.info.reason
    # control: one entry of one factor off by 1e-6 is seen
    W2 = W.copy()
    W2[1, 0, 0] += 1e-6
    off = causal_sums(x, m, Q, K, values=W2, **kw)
    assert np.abs(off.Y - ref).max() > 1e3 * np.abs(at_rank.Y - ref).max()


def test_values_of_the_wrong_shape_are_refused():
    x, m, Q, K, W = _case(3)
    with pytest.raises(ValueError):
        causal_sums(x, m, Q, K, beta=1.0, kind="softmax", values=W[:, :, :2])
