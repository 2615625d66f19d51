"""Compiled (numba) row sums: the one source of every attention kernel's inner loop.

Private module: the kernels (:mod:`wflow.kernels._numba`, :mod:`wflow.kernels._causal_numba`)
and the particle time loop (:mod:`wflow.particles._path_numba`, through
:mod:`wflow.kernels.primitives`) all sum a target row with the functions below.

For one target and one head, with scores ``s_j`` (``j < n``), masses ``m_j``, kernel
``k`` (``e^s`` or ``max(0, s)``, the ``kind`` code of :mod:`wflow.attention.kinds`) and
values ``y_j``, a row function returns in one pass over the sources

    Z = Σ_j m_j k(s_j),   Y = Σ_j w_j y_j,   S = Σ_j m_j k(s_j) s_j,   Φ = Σ_j m_j Φ(s_j),

with ``Φ(s) = e^s`` (then ``Φ = Z``, not summed) or ``Φ(s) = k(s)²/2`` (ReLU). Two
programs of the weight ``w_j`` are in use, and each caller keeps its own so that its
numbers stay bit for bit what they were:

* ``scaled``: ``w_j = k(s_j)`` and the caller passes ``m_j y_j`` as values (the kernels'
  direct and causal sums, which scale the values once per call);
* plain: ``w_j = m_j k(s_j)`` with the values ``y_j`` themselves (the particle paths).

Both sum in source order within a row; they agree to rounding (tested in
``tests/test_kernels.py``). Every loop is written once and specialised at compile time:
the kernel is passed as a function (:func:`fexp` or :func:`relu`) and the options are
constants of the inlined call, so each caller compiles exactly the loop it needs (an
accumulator a caller never reads is dropped by the compiler). Everything here is inlined
(``inline="always"``) but :func:`fexp`, which keeps its own fast-math flags. numba caches
each caller against its own file only: after an edit here, delete the cached files
(``__pycache__/*.nbi``, ``*.nbc``) of the callers, or they keep the old loops.

The exponential is evaluated by :func:`fexp`, an inlined branch-free ``2^k · p(r)`` with
a degree-10 polynomial on ``|r| ≤ ln2/2`` (relative error ≤ 3e-15 on ``[-708, 709]``, see
the tests) that LLVM vectorises; libm's ``exp`` is a scalar call and numba without Intel
SVML cannot vectorise it.
"""

from __future__ import annotations

from numba import njit, types
from numba.extending import intrinsic

from ..attention.kinds import CODE_EXP

__all__ = ["FASTMATH", "CHUNK", "fexp", "relu", "row3", "row3_biased", "row3_ito", "row5",
           "weigh", "weigh_chunk", "scores_chunk", "row_chunked", "put_sums"]

#: Fast-math flags: contraction to FMA and reassociation (needed to vectorise the sums).
#: No ``nnan``/``ninf``: NaN and Inf must propagate to the caller's checks.
FASTMATH = {"contract", "reassoc", "nsz", "arcp"}
_FM = FASTMATH
#: Sources per chunk in the chunked kernels (a chunk of scores stays in L1).
CHUNK = 256


def bitcast(src, dst):
    """A numba intrinsic reinterpreting the bits of a ``src`` scalar as a ``dst`` scalar."""

    def impl(typingctx, x):
        sig = dst(src)

        def codegen(context, builder, signature, args):
            return builder.bitcast(args[0], context.get_value_type(dst))

        return sig, codegen

    return intrinsic(impl)


_i64_as_f64 = bitcast(types.int64, types.float64)
_f64_as_i64 = bitcast(types.float64, types.int64)


# Degree-10 polynomial for e^r on |r| <= ln2/2 (Chebyshev interpolant, rel. error 1.6e-15).
_C0 = 1.0000000000000007
_C1 = 1.0000000000000033
_C2 = 0.49999999999981276
_C3 = 0.16666666666591878
_C4 = 0.041666666679511064
_C5 = 0.008333333373313332
_C6 = 0.0013888885644825215
_C7 = 0.00019841185367587414
_C8 = 2.480492104939883e-05
_C9 = 2.763411179587552e-06
_C10 = 2.6395126582526755e-07
_LOG2E = 1.4426950408889634
_LN2_HI = 6.93147180369123816490e-01  # high part of ln 2: k · _LN2_HI is exact for |k| < 2^21
_LN2_LO = 1.90821492927058770002e-10
_SHIFTER = 6755399441055744.0  # 1.5 · 2^52: t = s log2e + it rounds s log2e to an integer
_BIAS64 = 1023 << 52  # the exponent bias, in place


@njit(fastmath={"contract"}, cache=True)
def fexp(s):
    """``e^s`` for ``-708 ≤ s ≤ 709`` (inputs below -708 are clamped): ``2^k · p(s - k ln2)``.

    ``k = rint(s / ln 2)`` by the shifter ``t = s log₂e + 1.5 · 2^52`` (its last bits hold
    ``k``; ``t - 1.5 · 2^52`` is ``k`` exactly) and ``2^k`` by moving those bits into the
    exponent field: no rounding or conversion instruction, three fewer vector operations
    per element than ``rint`` and a conversion. Only ``contract`` among the fast-math
    flags (never inlined at numba's level: a caller's ``reassoc`` would fold
    ``t - 1.5 · 2^52`` into ``s log₂e`` and lose the rounding).
    """
    s = max(s, -708.0)
    t = s * _LOG2E + _SHIFTER
    kf = t - _SHIFTER
    r = (s - kf * _LN2_HI) - kf * _LN2_LO
    p = _C10
    p = p * r + _C9
    p = p * r + _C8
    p = p * r + _C7
    p = p * r + _C6
    p = p * r + _C5
    p = p * r + _C4
    p = p * r + _C3
    p = p * r + _C2
    p = p * r + _C1
    p = p * r + _C0
    # the low bits of t are k (two's complement, |k| < 2^51): shifted by 52 they are k · 2^52
    return p * _i64_as_f64((_f64_as_i64(t) << 52) + _BIAS64)


@njit(fastmath=_FM, cache=True, inline="always")
def relu(s):
    """``max(s, 0)``: the ReLU kernel."""
    return max(s, 0.0)


# ------------------------------------------------------------------ rows, d <= 3
@njit(fastmath=_FM, cache=True, inline="always")
def _loop3(kf, a0, a1, a2, k0, k1, k2, y0, y1, y2, m, n, scaled, with_phi, biased, base, br,
           with_ito, xi0, xi1, xi2, nxi, nx, gsq):
    """The source loop of :func:`row3` for the kernel function ``kf`` (see there).

    ``S`` is summed for ``scaled`` values only, ``Φ`` with ``with_phi`` only, the bias with
    ``biased``, the Itô sum with ``with_ito`` (constants of the inlined call: each caller
    compiles the loop it needs).
    """
    z = 0.0
    v0 = 0.0
    v1 = 0.0
    v2 = 0.0
    sm = 0.0
    ph = 0.0
    tt = 0.0
    for j in range(n):
        s = a0 * k0[j] + a1 * k1[j] + a2 * k2[j]
        if biased:
            s = s + (base + br[j])
        kv = kf(s)
        em = kv * m[j]
        w = kv if scaled else em
        z += em
        if scaled:
            sm += em * s
        if with_phi:
            ph += 0.5 * kv * em
        v0 += w * y0[j]
        v1 += w * y1[j]
        v2 += w * y2[j]
        if with_ito:
            g = xi0 * k0[j] + xi1 * k1[j] + xi2 * k2[j]
            tt += em * (nxi * nx[j] + gsq * g * g)
    return z, v0, v1, v2, sm, ph, tt


@njit(fastmath=_FM, cache=True, inline="always")
def _row3(kind, a0, a1, a2, k0, k1, k2, y0, y1, y2, m, n, scaled, biased, base, br, with_ito,
          xi0, xi1, xi2, nxi, nx, gsq):
    if kind == CODE_EXP:
        z, v0, v1, v2, sm, _, tt = _loop3(fexp, a0, a1, a2, k0, k1, k2, y0, y1, y2, m, n,
                                          scaled, False, biased, base, br, with_ito, xi0, xi1,
                                          xi2, nxi, nx, gsq)
        return z, v0, v1, v2, sm, z, tt
    phi = False if scaled else True  # a constant of the call: not a test in the loop
    return _loop3(relu, a0, a1, a2, k0, k1, k2, y0, y1, y2, m, n, scaled, phi, biased, base,
                  br, with_ito, xi0, xi1, xi2, nxi, nx, gsq)


@njit(fastmath=_FM, cache=True, inline="always")
def row3(kind, a0, a1, a2, k0, k1, k2, y0, y1, y2, m, n, scaled):
    """One target row, scores of rank ``≤ 3``: ``(Z, Y_0, Y_1, Y_2, S, Φ, 0)`` (module docstring).

    Scores ``s_j = a_0 k_0[j] + a_1 k_1[j] + a_2 k_2[j]`` over the sources ``j < n``
    (``k_c``, ``y_c``: component rows); masses ``m``; ``kind`` the kernel code;
    ``scaled``: the values ``y_c`` already carry ``m_j`` (``Y = Σ k(s_j) y_j``) and ``S`` is
    summed (the kernels' convention, ReLU ``Φ = S/2`` from it; ``Φ`` returned ``0``), else
    ``Y = Σ m_j k(s_j) y_j`` and ``Φ`` is summed (the particles'; ``S`` returned ``0``).
    ``Φ = Z`` for the exponential. The last entry is the Itô sum of :func:`row3_ito` (zero
    here).
    """
    return _row3(kind, a0, a1, a2, k0, k1, k2, y0, y1, y2, m, n, scaled, False, 0.0, m, False,
                 0.0, 0.0, 0.0, 0.0, m, 0.0)


@njit(fastmath=_FM, cache=True, inline="always")
def row3_biased(kind, a0, a1, a2, k0, k1, k2, y0, y1, y2, m, n, scaled, base, br):
    """:func:`row3` with the logits ``ℓ_j = s_j + (base + br[j])`` (a causal bias row)."""
    return _row3(kind, a0, a1, a2, k0, k1, k2, y0, y1, y2, m, n, scaled, True, base, br, False,
                 0.0, 0.0, 0.0, 0.0, m, 0.0)


@njit(fastmath=_FM, cache=True, inline="always")
def row3_ito(kind, a0, a1, a2, x0, x1, x2, m, n, xi0, xi1, xi2, nxi, nx, gsq):
    """:func:`row3` of a particle state (``k_c = y_c = x_c``, plain) and its Itô row sum.

    Last entry ``Σ_j m_j k(s_j) (|x_i|² |x_j|² + gsq <x_i, x_j>²)`` with ``x_i = ξ``,
    ``|x_i|² = nxi``, ``|x_j|² = nx[j]`` (``Φ'' = k`` of the exponential kernel).
    """
    return _row3(kind, a0, a1, a2, x0, x1, x2, x0, x1, x2, m, n, False, False, 0.0, m, True,
                 xi0, xi1, xi2, nxi, nx, gsq)


# ------------------------------------------------------------------------ d = 5
@njit(fastmath=_FM, cache=True, inline="always")
def _loop5(kf, a, xi, xT, nx, nxi, m, with_phi, with_ito, gsq):
    """The source loop of :func:`row5` for the kernel function ``kf``."""
    N = m.shape[0]
    x0 = xT[0]
    x1 = xT[1]
    x2 = xT[2]
    x3 = xT[3]
    x4 = xT[4]
    a0 = a[0]
    a1 = a[1]
    a2 = a[2]
    a3 = a[3]
    a4 = a[4]
    b0 = xi[0]
    b1 = xi[1]
    b2 = xi[2]
    b3 = xi[3]
    b4 = xi[4]
    z = 0.0
    y0 = 0.0
    y1 = 0.0
    y2 = 0.0
    y3 = 0.0
    y4 = 0.0
    ph = 0.0
    tt = 0.0
    for j in range(N):
        kv = kf(a0 * x0[j] + a1 * x1[j] + a2 * x2[j] + a3 * x3[j] + a4 * x4[j])
        e = kv * m[j]
        z += e
        if with_phi:
            ph += 0.5 * kv * e
        y0 += e * x0[j]
        y1 += e * x1[j]
        y2 += e * x2[j]
        y3 += e * x3[j]
        y4 += e * x4[j]
        if with_ito:
            g = b0 * x0[j] + b1 * x1[j] + b2 * x2[j] + b3 * x3[j] + b4 * x4[j]
            tt += e * (nxi * nx[j] + gsq * g * g)
    return z, y0, y1, y2, y3, y4, ph, tt


@njit(fastmath=_FM, cache=True, inline="always")
def row5(a, xi, xT, nx, nxi, m, kind, ito, gsq):
    """One target row and head in ``d = 5`` of a particle state, fused in registers.

    As :func:`row3_ito` for ``d = 5`` (values ``x_j``, plain): returns
    ``(Z, Y_0..Y_4, Φ, Itô row sum)`` for ``s_j = a·x_j``; the Itô sum only with ``ito``
    (exponential kernels).
    """
    if kind == CODE_EXP and not ito:
        r = _loop5(fexp, a, xi, xT, nx, nxi, m, False, False, gsq)
    elif kind == CODE_EXP:
        r = _loop5(fexp, a, xi, xT, nx, nxi, m, False, True, gsq)
    else:
        return _loop5(relu, a, xi, xT, nx, nxi, m, True, False, gsq)
    return r[0], r[1], r[2], r[3], r[4], r[5], r[0], r[7]


# ---------------------------------------------------------------- chunked rows
@njit(fastmath=_FM, cache=True, inline="always")
def _weigh(kf, sc, mr, n, sums_s, with_phi):
    z = 0.0
    sm = 0.0
    ph = 0.0
    for j in range(n):
        s = sc[j]
        kv = kf(s)
        em = kv * mr[j]
        z += em
        if sums_s:
            sm += em * s
        if with_phi:
            ph += 0.5 * kv * em
        sc[j] = em
    return z, sm, ph


@njit(fastmath=_FM, cache=True, inline="always")
def weigh(sc, mr, n, kind, sums_s):
    """In place ``sc[j] ← m_j k(sc[j])`` (``j < n``); returns ``(Z, S, Φ)`` of these sources.

    ``Z = Σ m_j k(s_j)``; with ``sums_s`` (a constant: the kernels) ``S = Σ m_j k(s_j) s_j``,
    else (the particles) ``Φ = Σ m_j k(s_j)²/2`` (ReLU; ``Z`` for the exponential), the
    other returned ``0``. The shared inner loop of the chunked kernels.
    """
    if kind == CODE_EXP:
        z, sm, _ = _weigh(fexp, sc, mr, n, sums_s, False)
        return z, sm, z
    phi = False if sums_s else True  # a constant of the call: not a test in the loop
    return _weigh(relu, sc, mr, n, sums_s, phi)


@njit(fastmath=_FM, cache=True, inline="always")
def weigh_chunk(sc, mr, yT, j0, n, kind, yacc, sums_s):
    """A chunk of sources ``j0 ≤ j < j0 + n``: :func:`weigh`, then ``yacc += Σ_j sc_j y_j``.

    ``sc`` (n,) scores in, ``m_j k(s_j)`` out; ``yT`` (d, N) sources, transposed; ``yacc``
    (d,); ``sums_s`` as in :func:`weigh`. Returns ``(Z, S, Φ)`` of the chunk. The inner step
    of every chunked kernel (``_numba.direct_generic``, ``_causal_numba.causal_rows_generic``,
    the particle path's states in ``d ≠ 3, 5``).
    """
    dz, dsm, dph = weigh(sc, mr, n, kind, sums_s)
    for c in range(yT.shape[0]):
        yr = yT[c, j0:j0 + n]
        acc = 0.0
        for j in range(n):
            acc += sc[j] * yr[j]
        yacc[c] += acc
    return dz, dsm, dph


@njit(fastmath=_FM, cache=True, inline="always")
def _scores(a, kT, j0, n, sc, biased, base, br):
    if biased:  # from the bias, then every component
        rb = br[j0:j0 + n]
        for j in range(n):
            sc[j] = base + rb[j]
        c0 = 0
    else:
        r = kT[0, j0:j0 + n]
        a0 = a[0]
        for j in range(n):
            sc[j] = a0 * r[j]
        c0 = 1
    for c in range(c0, a.shape[0]):
        r = kT[c, j0:j0 + n]
        ac = a[c]
        for j in range(n):
            sc[j] += ac * r[j]


@njit(fastmath=_FM, cache=True, inline="always")
def scores_chunk(a, kT, j0, n, sc):
    """``sc[j] = Σ_c a_c kT[c, j0 + j]`` for ``j < n`` (component by component, vectorised)."""
    _scores(a, kT, j0, n, sc, False, 0.0, sc)


@njit(fastmath=_FM, cache=True, inline="always")
def row_chunked(kind, a, kT, yT, m, N, sc, yacc, biased, base, br):
    """One target row of any score width by chunks of :data:`CHUNK` sources: ``(Z, S)``.

    Scores ``s_j = Σ_c a_c kT[c, j]`` (``a`` (w,), ``kT`` (w, N)), with ``biased`` the logits
    ``ℓ_j = (base + br[j]) + Σ_c a_c kT[c, j]``; ``Y = Σ_j m_j k(ℓ_j) y_j`` into ``yacc``
    (d,) (``yT`` (d, N)); ``sc`` a scratch of :data:`CHUNK`. Each chunk is summed by
    :func:`weigh_chunk`, the chunks' sums added in order.
    """
    z = 0.0
    sm = 0.0
    yacc[:] = 0.0
    for j0 in range(0, N, CHUNK):
        n = min(N, j0 + CHUNK) - j0
        _scores(a, kT, j0, n, sc, biased, base, br)
        dz, dsm, _ = weigh_chunk(sc, m[j0:j0 + n], yT, j0, n, kind, yacc, True)
        z += dz
        sm += dsm
    return z, sm


@njit(fastmath=_FM, cache=True, inline="always")
def put_sums(i, z, sm, kind, want_s, Z, P, S):
    """Store a row's ``Z[i] = z``, ``P[i] = sm/2`` (ReLU: ``Φ = ½ Σ m k ℓ``), ``S[i] = sm``.

    ``i``: an index of the outputs (``(h, i)`` for ``(H, M)`` arrays).
    ``P`` is written for the ReLU kernel only (``Φ = Z`` for the exponential), ``S`` with
    ``want_s``.
    """
    Z[i] = z
    if kind != CODE_EXP:
        P[i] = 0.5 * sm
    if want_s:
        S[i] = sm
