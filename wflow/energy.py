"""Energies, first variations, mobilities, slopes and velocities (docs/theory.md §1, §3).

Everything here is computed from one call of :func:`wflow.kernels.kernel_sums`.

Conventions
-----------
* Head energy ``E_h[μ] = (1/2β) ∫∫ Φ(β xᵀA_h y) dμ dμ`` with ``Φ = e^s`` for
  softmax/USA and ``Φ = max(0, s)²/2`` for ReLU (so that ``Φ' = k``, the
  attention kernel); total ``E = Σ_h w_h E_h``. ``Φ``, ``Φ'``, ``Φ''`` and the
  normalisation are those of the registered kind (:mod:`wflow.attention.kinds`).
* First variation ``ψ_h = δE_h/δμ``; its ambient gradient is
  ``∇ψ_h(x) = ½ [A_h Y_h(x) + A_hᵀ Y'_h(x)]`` with ``Y'`` the sum with the roles of
  ``Q`` and ``K`` swapped (``= A_h Y_h`` for symmetric ``A_h``); ``ψ = Σ_h w_h ψ_h``.
* Head outputs ``f_h = V_h Y_h / Z_h`` (normalised kinds: softmax) or ``V_h Y_h``
  (USA, ReLU).
* Transformer velocity ``v = P_x Σ_h w_h f_h``.
* Mobilities: softmax ``m_h = 1/Z_h``, effective ``b̂ = (Σ_h w̄_h Z_h)^{-1}``
  (harmonic mean of the ``m_h``); USA and ReLU have ``b̂ ≡ 1``.
* Surrogate (effective-mobility) velocity ``v̂ = b̂ P_x Σ_h w_h V_h Y_h``; for
  value-aligned heads (``V_h = ±A_h`` symmetric) it equals ``± b̂ P∇ψ`` and is an
  exact weighted-Wasserstein gradient flow. For one softmax head ``v̂ = v``.
* Three slope-type quantities, named apart:
  ``slope2 = |∂E|² = ∫ b̂ |P∇ψ|² dμ`` (metric slope),
  ``speed2 = |μ'|²_b̂ = ∫ |v|²/b̂ dμ`` (metric speed of the velocity used),
  ``G2 = ∫ |v|² HM_h(Z_h) dμ`` (the published reference engine's record, with
  ``HM_h(Z_h) = (Σ_h w̄_h / Z_h)^{-1}``; ``= ∫|v|²`` for USA/ReLU).
  For one softmax head all three coincide along the flow.
* ``power = ∫ <∇ψ, v> dμ`` is ``dE/dt`` for static heads (chain rule, any flow).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np

from .attention.heads import Attention, Heads
from .attention.kinds import get_kind
from .attention.mask import refuse_masked
from .geometry.sphere import project_tangent
from .infra.parallel import collective_check
from .kernels import DEFAULT_TOL, KernelLog, kernel_sums

__all__ = [
    "FieldEval",
    "evaluate",
    "field_from_sums",
    "particle_field",
    "head_energies",
    "energy_gradient_A",
    "dE_dt_weights",
    "slope_terms",
    "SlopeTerms",
    "ito_correction",
]


class FieldEval(NamedTuple):
    """Everything the solvers need at a set of targets for one measure.

    Shapes: ``H`` heads, ``M`` targets, ``d`` dimension.

    Attributes
    ----------
    Z : (H, M)  normalisers ``Z_h``.
    Y : (H, M, d) or None  ``Σ_j m_j k(s_ij) y_j``; ``None`` where the heads were evaluated
        at their rank (values of rank ``r``: the full-width sums are not formed, see
        :func:`field_from_sums`).
    Phi : (H, M) or None  potential sums ``Σ_j m_j Φ(s_ij)`` (``ψ_h = Phi_h / β`` for
        symmetric ``A``); ``None`` under a causal mask (no energy).
    f : (H, M, d)  head outputs ``f_h``.
    grad_psi : (H, M, d) or None  ambient ``∇ψ_h``; ``None`` under a causal mask (no
        first variation).
    v : (M, d)  transformer velocity.
    vhat : (M, d)  surrogate velocity.
    bhat : (M,)  effective mobility.
    hmZ : (M,)  weighted harmonic mean of the ``Z_h``.
    """

    Z: np.ndarray
    Y: np.ndarray | None
    Phi: np.ndarray | None
    f: np.ndarray
    grad_psi: np.ndarray | None
    v: np.ndarray
    vhat: np.ndarray
    bhat: np.ndarray
    hmZ: np.ndarray


def evaluate(
    x: np.ndarray,
    heads: Heads,
    attn: Attention,
    *,
    y: np.ndarray | None = None,
    m: np.ndarray | None = None,
    backend: str = "auto",
    tol: float = DEFAULT_TOL,
    log: KernelLog | None = None,
    gradient: bool = True,
    dtype: str = "float64",
) -> FieldEval:
    """Evaluate sums, head outputs, velocities and mobilities at targets ``x``.

    Parameters
    ----------
    x : (M, d) array
        Targets on the sphere.
    heads, attn
        Head parameters and attention kind / ``β``. Heads with values of rank ``r``
        (:meth:`~wflow.attention.heads.Heads.value_factors`) are summed at their rank
        (:func:`field_from_sums`). A masked attention (``attn.mask``, THEORY §9) needs
        the tokens themselves in order (``y=None``): token ``i`` is row ``i`` of ``x``; the
        field is that of :func:`wflow.kernels.causal.causal_sums` (no ``Phi``, no
        ``grad_psi``: the causal system has no energy).
    y : (N, d) array, optional
        Sources (default: ``x``, the particle case).
    m : (N,) array, optional
        Source masses (default: ``1/N`` each).
    backend, tol
        Kernel back-end and fast-summation tolerance (:func:`wflow.kernels.kernel_sums`).
    log : KernelLog, optional
        Records which back-end ran and its error estimate (for ``summary.json``).
    gradient : bool
        Also form ``∇ψ`` (default). ``False``: ``grad_psi = None`` and no swapped sums (a
        stage of an integrator needs the velocity only); ``v`` is the same bit for bit
        for heads given by a full ``V``.
    dtype : {"float64", "float32"}
        Precision of the scores and kernel values (:func:`wflow.kernels.kernel_sums`:
        ``"float32"`` runs the direct sums by tiles with a shifted float32 exponential, the
        sums accumulated and returned in float64, relative error about
        :func:`wflow.kernels.sums.err_float32`, in ``log``); ``"float64"``: today's.

    Raises
    ------
    ScenarioError
        A masked attention with sources ``y`` other than the tokens (naming
        ``attention.mask``).
    """
    if getattr(attn, "mask", None) is not None:
        if dtype != "float64":
            raise ValueError(f"dtype: the causal sums are float64 only, got {dtype!r}")
        if y is not None:
            refuse_masked(attn, "a field at targets other than the tokens (a mesh, "
                                "quadrature points)")
        return masked_field(x, heads, attn, m=m, backend=backend, tol=tol, log=log)
    y = x if y is None else y
    m = np.full(y.shape[0], 1.0 / y.shape[0]) if m is None else m
    kw = {"beta": attn.beta, "kind": attn.kind, "backend": backend, "tol": tol}
    if dtype != "float64":  # (the keyword only where asked: float64 is today's call)
        kw["dtype"] = dtype

    def sums(Q: np.ndarray, K: np.ndarray, potential: bool,
             values: np.ndarray | None = None):
        return kernel_sums(x, y, m, Q, K, potential=potential, values=values, **kw)

    return field_from_sums(x, heads, attn, sums, log=log, gradient=gradient)


def masked_field(x: np.ndarray, heads: Heads, attn: Attention, *, m: np.ndarray | None,
                  backend: str, tol: float, log: KernelLog | None,
                  comm: Any = None) -> FieldEval:
    """The field of tokens in order under ``attn.mask`` (serial, or split over ``comm``)."""
    from .kernels.causal import causal_sums

    n_loc = x.shape[0]
    if comm is None:
        n, offset = n_loc, 0
    else:
        counts = comm.allgather(n_loc)
        n, offset = int(sum(counts)), int(sum(counts[: comm.Get_rank()]))
    m = np.full(n_loc, 1.0 / max(n, 1)) if m is None else m
    # rows that attend to nothing (the first token under a strict mask): no head output
    empty = attn.mask.count(offset + np.arange(n_loc), n) == 0

    def sums(Q: np.ndarray, K: np.ndarray, potential: bool,
             values: np.ndarray | None = None):
        vkw = {} if values is None else {"values": values}
        return causal_sums(x, m, Q, K, beta=attn.beta, kind=attn.kind, mask=attn.mask,
                           bias=attn.bias, potential=potential, backend=backend, tol=tol,
                           comm=comm, **vkw)

    guard = None if comm is None else (lambda fn: collective_check(comm, fn))
    return field_from_sums(x, heads, attn, sums, log=log, guard=guard, empty=empty)


def _at_rank(heads: Heads, grad: bool) -> bool:
    """Whether the heads' sums are cheaper at their rank than at full width ``d``.

    At rank: the value factors ``W_V`` (width ``r``) and, for ``∇ψ``, the keys ``K``
    (width ``k``) are accumulated, ``r (+ k) < d``; else the full-width ``Y`` serves both.
    """
    if heads.value_factors() is None:
        return False
    return heads.value_rank + (heads.k if grad else 0) < heads.d


def field_from_sums(x: np.ndarray, heads: Heads, attn: Attention, sums, *,
                    log: KernelLog | None = None, guard=None,
                    empty: np.ndarray | None = None, gradient: bool = True) -> FieldEval:
    r"""The :class:`FieldEval` at targets ``x`` from a function giving the kernel sums.

    ``sums(Q, K, potential, values=None)`` returns :class:`wflow.kernels.KernelSums` at
    ``x`` for the heads ``(Q, K)`` (:func:`evaluate`: :func:`wflow.kernels.kernel_sums`
    over the sources; a particle system split over MPI ranks: the sums over every rank's
    tokens); with ``values`` ``(H, w, d)`` its ``Y`` is ``Σ_j m_j k(s_ij) W_h y_j``, shape
    ``(H, M, w)``. ``guard(fn)`` runs the head outputs ``fn()`` (which raise
    ``FloatingPointError`` on an underflowed normaliser; split over ranks: raised on every
    rank), default ``fn()``.

    Heads with values of rank ``r`` (``V_h = W_{O,h} W_{V,h}``) whose factored sums are
    narrower than ``d`` (:func:`_at_rank`) are summed at their rank, ``O(M N (r + k))`` per
    head instead of ``O(M N d)``, with one call of width ``r + k``:

    .. math::

        f_h = W_{O,h} \sum_j m_j k(s_{ij}) W_{V,h} y_j \,[/ Z_h], \qquad
        A_h Y_h = Q_h^\top \sum_j m_j k(s_{ij}) K_h y_j,

    and, for non-symmetric heads, ``A_hᵀ Y'_h = K_hᵀ Σ_j m_j k(s'_ij) Q_h y_j`` from the
    swapped sums (values ``Q``); ``Y`` is then ``None``. Every other head is today's
    computation, bit for bit. ``gradient=False``: no ``∇ψ`` (``grad_psi = None``, no
    swapped sums; heads at their rank accumulate ``W_V`` alone, width ``r``).

    Under a causal mask (``attn.mask``) only ``Z`` and the value sums are formed:
    ``Phi = grad_psi = None``. ``empty`` (``(M,)`` bool): rows that attend to no source
    (the first token under a strict mask, ``Z = 0``); their head outputs are defined as
    0 (so their velocity is 0, the token does not move) and their ``b̂ = HM(Z) = 1``.
    """
    energy = getattr(attn, "mask", None) is None  # potential sums: the exchangeable model
    grad = energy and gradient
    rank = _at_rank(heads, grad)
    if rank:
        WV, _ = heads.value_factors()
        r = heads.value_rank
        s = sums(heads.Q, heads.K, energy, np.concatenate([WV, heads.K], axis=1) if grad
                 else WV)
    else:
        s = sums(heads.Q, heads.K, energy)
    if log is not None:
        log.add(s.info)
    Z = s.Z
    grad_psi = None
    if rank:
        Y = None
        VY = heads.apply_outputs(s.Y[:, :, :r])
        if grad:
            AY = np.matmul(s.Y[:, :, r:], heads.Q)  # Q_hᵀ (Σ k K_h y), row-wise
    else:
        Y = s.Y
        VY = None
        if grad:
            AY = np.einsum("hij,hmj->hmi", heads.A, Y)
    if grad:
        if heads.is_symmetric():
            grad_psi = AY
        else:
            swapped = (sums(heads.K, heads.Q, False, heads.Q) if rank
                       else sums(heads.K, heads.Q, False))
            if log is not None:
                log.add(swapped.info)
            if rank:
                grad_psi = 0.5 * (AY + np.matmul(swapped.Y, heads.K))
            else:
                grad_psi = 0.5 * (AY + np.einsum("hji,hmj->hmi", heads.A, swapped.Y))

    def outputs():
        return _head_outputs(Z, Y, heads, attn, VY=VY, empty=empty)

    VY, f, bhat, hmZ = outputs() if guard is None else guard(outputs)
    w = heads.w
    v = project_tangent(x, np.einsum("h,hmd->md", w, f))
    vhat = project_tangent(x, bhat[:, None] * np.einsum("h,hmd->md", w, VY))
    return FieldEval(Z, Y, s.Phi if energy else None, f, grad_psi, v, vhat, bhat, hmZ)


def _head_outputs(Z: np.ndarray, Y: np.ndarray | None, heads: Heads, attn: Attention, *,
                  VY: np.ndarray | None = None, empty: np.ndarray | None = None,
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """``(V_h Y_h, f_h, b̂, HM(Z))`` from the sums (``f_h = V_h Y_h / Z_h``: normalised kinds).

    ``VY``: ``V_h Y_h`` already formed (heads at their rank); ``empty``: rows that attend
    to nothing (``f = 0``, ``b̂ = HM(Z) = 1``).
    """
    if VY is None:
        VY = np.einsum("hij,hmj->hmi", heads.V, Y)
    M = Z.shape[1]
    if not get_kind(attn.kind).normalised:
        return VY, VY, np.ones(M), np.ones(M)
    if empty is not None and np.any(empty):
        Zs = np.where(empty[None, :], 1.0, Z)  # VY = 0 there: f = 0
        if np.any(Zs <= 0):
            raise FloatingPointError("softmax normaliser underflowed to 0; lower "
                                     "attention.beta")
        wb = heads.wbar
        bhat = np.where(empty, 1.0, 1.0 / np.einsum("h,hm->m", wb, Zs))
        hmZ = np.where(empty, 1.0, 1.0 / np.einsum("h,hm->m", wb, 1.0 / Zs))
        return VY, VY / Zs[:, :, None], bhat, hmZ
    if np.any(Z <= 0):
        raise FloatingPointError("softmax normaliser underflowed to 0; lower attention.beta")
    wb = heads.wbar
    return (VY, VY / Z[:, :, None], 1.0 / np.einsum("h,hm->m", wb, Z),
            1.0 / np.einsum("h,hm->m", wb, 1.0 / Z))


def particle_field(x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention, *,
                   flow: str = "transformer", log: KernelLog | None = None,
                   backend: str = "auto") -> tuple[FieldEval, SlopeTerms, float]:
    """:func:`evaluate`, :func:`slope_terms` and the energy of a particle state in one pass.

    Targets = sources ``x`` (``d ≤ 3``) with masses ``m``, direct sums: the fused
    :func:`wflow.kernels.particle_terms` (pairs counted once for symmetric heads), equal
    to the three separate calls to 1e-12 (tested). Returns ``(field, slope terms of the
    flow's velocity, E = Σ_h w_h E_h)``. ``log`` records the call as a direct sum with
    ``backend`` as the requested back-end.
    """
    from .kernels import KernelInfo, particle_terms, threads

    refuse_masked(attn, "the fused particle pass (energy and slope terms)")
    pt = particle_terms(x, m, heads.Q, heads.K, heads.V, heads.w, beta=attn.beta,
                        kind=attn.kind, flow=flow)
    if log is not None:
        n = x.shape[0]
        log.add(KernelInfo("direct", backend, "fused particle step (d <= 3, direct sums)",
                           max(n, 1) * float(np.finfo(np.float64).eps), DEFAULT_TOL, (),
                           threads(), n * n * heads.H))
    VY, f, bhat, hmZ = _head_outputs(pt.Z, pt.Y, heads, attn)
    field_ = FieldEval(pt.Z, pt.Y, pt.Phi, f, pt.grad_psi, pt.v, pt.vhat, bhat, hmZ)
    st = SlopeTerms(pt.power, pt.slope2, pt.speed2, pt.G2, pt.power_heads)
    return field_, st, pt.E


def head_energies(field: FieldEval, m_targets: np.ndarray, attn: Attention) -> np.ndarray:
    """Per-head energies ``E_h = (1/2β) Σ_i m_i Φ_h(x_i)`` (targets = sources), shape ``(H,)``.

    Refused (``ScenarioError`` naming ``attention.mask``) for a masked field
    (``field.Phi is None``): the causal system has no energy. (The particle solver's state
    under a mask carries the exchangeable model's field, whose energy this is.)
    """
    if field.Phi is None:
        refuse_masked(attn, "the energy")
        raise ValueError("head_energies: the field has no potential sums (Phi is None)")
    return field.Phi @ m_targets / (2.0 * attn.beta)


def energy_gradient_A(x: np.ndarray, m: np.ndarray, field: FieldEval) -> np.ndarray:
    """``∂E_h/∂A_h = ½ Σ_i m_i x_i Y_h(x_i)ᵀ``, shape ``(H, d, d)`` (targets = sources).

    From ``∂s/∂A = β x yᵀ`` and ``Φ' = k``: ``∂E_h/∂A = ½ ∫∫ k(s) x yᵀ dμ dμ``. Needs the
    full-width sums ``field.Y`` (a field of heads evaluated at their rank has none).
    """
    if field.Y is None:
        raise ValueError("energy_gradient_A: the field holds no full-width sums Y (heads "
                         "with values of rank r were evaluated at their rank); evaluate "
                         "heads given by a full V for dE/dA")
    return 0.5 * np.einsum("m,mi,hmj->hij", m, x, field.Y)


def dE_dt_weights(
    x: np.ndarray,
    m: np.ndarray,
    field: FieldEval,
    heads: Heads,
    A_dot: np.ndarray,
    attn: Attention,
    w_dot: np.ndarray | None = None,
) -> float:
    """``∂_t E = Σ_h w_h <∂E_h/∂A_h, Ȧ_h>_F (+ Σ_h ẇ_h E_h)``: energy change through the weights."""
    refuse_masked(attn, "the energy's rate dE/dt")
    G = energy_gradient_A(x, m, field)
    val = float(np.einsum("h,hij,hij->", heads.w, G, A_dot))
    if w_dot is not None:
        val += float(np.dot(w_dot, head_energies(field, m, attn)))
    return val


class SlopeTerms(NamedTuple):
    """Slope-type scalars of one state (see module docstring for the conventions)."""

    power: float
    slope2: float
    speed2: float
    G2: float
    power_heads: np.ndarray  # (H,) dE_h/dt = ∫<∇ψ_h, v> dμ


def slope_terms(x: np.ndarray, m: np.ndarray, field: FieldEval, heads: Heads,
                velocity: np.ndarray) -> SlopeTerms:
    """Power, metric slope, metric speed and ``G²`` of ``velocity`` at the state ``(x, m)``.

    ``field`` must carry the first variation (a field of the exchangeable model: a
    masked field has ``grad_psi = None`` and raises ``ValueError``).
    """
    if field.grad_psi is None:
        raise ValueError("slope_terms: the field has no first variation (a causal mask: "
                         "no energy); pass the field of the unmasked attention")
    gpsi = np.einsum("h,hmd->md", heads.w, field.grad_psi)
    pg = project_tangent(x, gpsi)
    v2 = np.sum(velocity * velocity, axis=1)
    power_heads = np.einsum("m,hmd,md->h", m, field.grad_psi, velocity)
    return SlopeTerms(
        power=float(np.dot(m, np.sum(gpsi * velocity, axis=1))),
        slope2=float(np.dot(m, field.bhat * np.sum(pg * pg, axis=1))),
        speed2=float(np.dot(m, v2 / field.bhat)),
        G2=float(np.dot(m, v2 * field.hmZ)),
        power_heads=power_heads,
    )


def ito_correction(x: np.ndarray, m: np.ndarray, heads: Heads, attn: Attention,
                   sigma: float, *, symmetric_noise: bool) -> float:
    """Itô drift of ``E`` for isotropic noise on the score matrices ``dA_h = … + σ dW``.

    ``½ Σ_h w_h Σ ∂²E_h/∂A∂A : C`` with ``∂²E_h/∂A_ab∂A_cd = (β/2)∫∫Φ''(s) x_a y_b x_c y_d``
    and noise covariance ``C = σ² δ_ac δ_bd`` (plain) or
    ``σ²(δ_ac δ_bd + δ_ad δ_bc)/2`` (symmetric noise ``(Z + Zᵀ)/2``) per unit time:

    * plain: ``σ² β/4 Σ_h w_h ∫∫ Φ''(s) |x|²|y|² dμ dμ``;
    * symmetric: ``σ² β/8 Σ_h w_h ∫∫ Φ''(s) (|x|²|y|² + <x, y>²) dμ dμ``.

    ``Φ'' = e^s`` for exponential kernels, ``1_{s>0}`` for ReLU (the kind's
    :meth:`~wflow.attention.kinds.AttentionKind.d2phi`). Direct ``O(H n²)`` sum in blocks
    (needed only when ``σ > 0``).
    """
    refuse_masked(attn, "the Itô term of the energy")
    spec = get_kind(attn.kind)
    if sigma == 0:
        return 0.0
    A = heads.A
    total = 0.0
    n = x.shape[0]
    B = max(1, (1 << 22) // n)
    nx = np.sum(x * x, axis=1)
    for h in range(heads.H):
        Ax = x @ A[h].T  # rows: A y_j  (so s_ij = β x_i·A y_j)
        acc = 0.0
        for i0 in range(0, n, B):
            xi = x[i0:i0 + B]
            s = attn.beta * (xi @ Ax.T)
            phi2 = spec.d2phi(s)
            geo = nx[i0:i0 + B, None] * nx[None, :]
            if symmetric_noise:
                geo = geo + (xi @ x.T) ** 2
            acc += float(m[i0:i0 + B] @ (phi2 * geo) @ m)
        total += heads.w[h] * acc
    factor = 0.125 if symmetric_noise else 0.25
    return factor * sigma**2 * attn.beta * total
