"""The particle path's compiled sums are the kernels' sums (one source: ``wflow.kernels._rows``).

The compiled time loop (:mod:`wflow.particles._path_numba`) sums each token's row with the
row functions of :mod:`wflow.kernels._rows` (``row3``, ``row5``, ``weigh_chunk``) inside its
fused state evaluation. Here one state evaluation (``state_ser``) is compared with
:func:`wflow.kernels.kernel_sums` at the same tokens (``Q = I``, ``K = A``): the energies
``E_h = Σ_i m_i Φ_h(x_i)``, the gradients ``∂E_h/∂A_h = ½ Σ_i m_i x_i Y_h(x_i)ᵀ`` and the
velocity ``P_x Σ_h w_h V_h Y_h / Z_h`` (``Y_h`` unnormalised for ReLU), for ``d = 2, 3``
(``row3``), ``d = 5`` (``row5``) and ``d = 6`` (chunked rows), symmetric and general heads.
The path weighs values by ``m_j k(s)`` where the kernels scale them by ``m_j`` first, so
the two agree to rounding (``RTOL``), not bit for bit. Negative control: a 1e-9 change of
one mass is seen.
"""

from __future__ import annotations

import numpy as np
import pytest

from wflow.attention.kinds import get_kind
from wflow.kernels import kernel_sums

#: Agreement of the two summation orders (a few hundred terms, relative to each scale).
RTOL = 1e-13


def _state(x, m, A, V, w, beta, kind):
    """One full state evaluation of the compiled path: ``(E_h, ∂E_h/∂A_h, vel (n, d))``."""
    from wflow.particles import _path_numba as pn

    n, d = x.shape
    H = A.shape[0]
    D = 3 if d <= 3 else d
    npad = -(-n // 8) * 8
    xT = np.zeros((D, npad))
    xT[:d, :n] = x.T
    A_ = np.zeros((H, D, D))
    A_[:, :d, :d] = A
    V_ = np.zeros((H, D, D))
    V_[:, :d, :d] = V
    nx = np.zeros(npad)
    nx[:n] = np.einsum("ij,ij->i", x, x)
    BUF, PE, PG, PI, PT = pn._workspace(H, D, n)
    vel = np.zeros((D, npad))
    spec = get_kind(kind)
    sym = bool(np.allclose(A, np.swapaxes(A, 1, 2)))
    nblk = (n + pn.PROWS - 1) // pn.PROWS
    Qm = np.zeros((H, 0, D))
    pn.state_ser(nblk, True, False, 0.0, xT, nx, A_, V_, Qm, Qm, w, w / w.sum(), m, beta,
                 spec.require_compiled("test"), spec.normalised, sym, False, vel, PE, PG, PI,
                 PT, BUF)
    Eh = PE.sum(axis=0)
    Gm = PG.sum(axis=0)[:, :d, :d]
    return Eh, Gm, vel[:d, :n].T


def _reference(x, m, A, V, w, beta, kind):
    """The same quantities from :func:`kernel_sums` (``Q = I``, ``K = A``)."""
    n, d = x.shape
    H = A.shape[0]
    Q = np.broadcast_to(np.eye(d), (H, d, d))
    ks = kernel_sums(x, x, m, Q, A, beta=beta, kind=kind, potential=True, backend="direct")
    Eh = ks.Phi @ m
    Gm = 0.5 * np.einsum("i,ia,hib->hab", m, x, ks.Y)
    Y = ks.Y / ks.Z[:, :, None] if get_kind(kind).normalised else ks.Y
    f = np.einsum("h,hab,hib->ia", w, V, Y)
    vel = f - np.einsum("ia,ia->i", x, f)[:, None] * x
    return Eh, Gm, vel


def _err(got, ref) -> float:
    return max(float(np.max(np.abs(g - r)) / np.max(np.abs(r))) for g, r in zip(got, ref,
                                                                                strict=True))


def _case(d, symmetric, seed=0):
    rng = np.random.default_rng(seed)
    n, H = 203, 3  # not a multiple of the row blocks
    x = rng.normal(size=(n, d))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    m = rng.uniform(0.5, 1.5, n) / n
    A = rng.normal(size=(H, d, d)) / np.sqrt(d)
    if symmetric:
        A = A + np.swapaxes(A, 1, 2)
    V = rng.normal(size=(H, d, d))
    w = rng.uniform(0.3, 1.0, H)
    return x, m, A, V, w


@pytest.mark.parametrize("d", [2, 3, 5, 6])  # row3 (padded), row3, row5, chunked rows
@pytest.mark.parametrize("kind", ["softmax", "usa", "relu"])
@pytest.mark.parametrize("symmetric", [True, False])
def test_path_state_sums_equal_kernel_sums(d, kind, symmetric):
    x, m, A, V, w = _case(d, symmetric)
    got = _state(x, m, A, V, w, 1.3, kind)
    ref = _reference(x, m, A, V, w, 1.3, kind)
    err = _err(got, ref)
    assert err <= RTOL, f"d={d} {kind}: {err:.1e}"


def test_the_comparison_sees_a_small_fault():
    x, m, A, V, w = _case(3, True, seed=1)
    got = _state(x, m, A, V, w, 1.3, "softmax")
    m2 = m.copy()
    m2[17] *= 1 + 1e-9
    ref = _reference(x, m2, A, V, w, 1.3, "softmax")
    assert _err(got, ref) > 10 * RTOL
