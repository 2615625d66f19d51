r"""Stationary states of the noisy model on the full triangulated ``S²`` (``d = 3``).

The stationary equation of the noisy PDE (THEORY §8), ``ρ = exp((2K/β) W*ρ)/Z``, is posed
on the cells of a geodesic icosphere (:func:`wflow.geometry.mesh.icosphere`) with the
quadrature the PDE's interaction uses: the mass ``m_K`` of cell ``K`` sits at its
projected centroid ``x_K = ĉ_K`` (:mod:`wflow.pde.fv`), and the reference measure of the
cell is its normalised spherical area ``σ_K = A_K/4π``
(:func:`wflow.geometry.mesh.dual_geometry`, the entropy weight of the PDE and the JKO).
The discrete free energy and its critical points are

.. math::

    F_K^h(m) = \sum_K m_K\log\frac{m_K}{\sigma_K}
      - \frac{K}{\beta}\sum_{K,L} e^{\beta x_K\cdot x_L} m_K m_L,\qquad
    m_K = \frac{\sigma_K\, e^{u_K}}{\sum_L \sigma_L e^{u_L}},\quad
    u = \frac{2K}{\beta} W m,

``W_{KL} = e^{β x_K·x_L}`` (``(M, M)``, never formed).

**Separable kernel.** By Funk–Hecke and the addition theorem
``e^{β x·y} = Σ_l 4π λ_l Σ_m Y_{lm}(x) Y_{lm}(y)`` (real harmonics orthonormal for the
area, :func:`wflow.geometry.harmonics.real_harmonics`), truncated where
``(2l+1) λ_l/λ_1 < mode_tol`` (``L = 23`` at ``β = 3``, ``33`` at ``β = 8``; the dropped
tail is below ``10^{-18}`` of the kernel, i.e. round-off). So ``W = Φ diag(κ) Φᵀ`` with
``Φ_{Kk} = Y_k(x_K)`` (``(M, R)``) and ``κ_k = 4π λ_{l(k)}``, and the equation becomes a
fixed point for the ``R`` moments ``a = Φᵀ m``:

.. math::

    G(a, K) = a - \Phi^\top m(a, K) = 0,\qquad
    \partial_a G = I - C\,\tfrac{2K}{\beta}\operatorname{diag}\kappa,\quad
    C = \Phi^\top(\operatorname{diag} m - m m^\top)\Phi,

solved by Newton's method with this exact Jacobian. Memory: ``Φ`` is ``8MR`` bytes and the
Jacobian assembly one more ``(M, R)`` temporary; no ``(M, M)`` array is formed.

**Symmetry.** The icosphere is rotated so that an icosahedron vertex is the pole and a
mirror plane is ``y = 0``; the mesh is then invariant under the group ``C_{5v}`` of the
pole. A state invariant under it has moments only on ``Y_{l,m}``, ``m ≡ 0 (mod 5)``,
``cos`` type: ``symmetry="axial"`` keeps those (``R = 70`` at ``L = 23``), which removes
the two rotational near-zero modes of the Jacobian (the mesh breaks the continuum's
rotation invariance only at ``O(h²)``), and its critical points are critical points of
the full ``F_K^h`` (symmetric criticality). ``symmetry="none"`` keeps every harmonic:
non-zonal states and modes (:func:`nonzonal_check`).

**Continuation.** The branch ``z = (a, K/K_#)`` is followed by pseudo-arclength
continuation: tangent predictor ``z_i + Δs τ_i``, Newton corrector on
``[G; τ_i·(z − z_i) − Δs] = 0``. The fold ``K_f^h`` is the root of the tangent's
``K``-component and ``K_c^h`` that of ``ΔF^h = F_K^h(m) − F_K^h(m_0)``, ``m_0`` the
near-uniform state on the same mesh (invariant under the full icosahedral group, a fixed
point by symmetry, exactly uniform only as ``h → 0``), each by Brent's method in the
arclength between two branch points. The uniform state's linear threshold ``K_#^h`` is
where the largest eigenvalue of ``C (2K/β) diag κ`` (the degree-1 triplet, degenerate by
icosahedral symmetry) crosses 1.

Errors are ``O(h²)`` (one-point centroid rule), ``h = √(mean A_K)``;
:func:`mesh_refinement` fits the observed order and Richardson-extrapolates ``K_c``.
"""

from __future__ import annotations

from .checks import DECLARED_ORDER, MeshRefinement, NonzonalCheck, mesh_refinement, nonzonal_check
from .continuation import MeshBranch, MeshPhasePoint, mesh_branch, mesh_phase_point
from .model import MeshModel, MeshOptions, MeshState

__all__ = ["MeshOptions", "MeshModel", "MeshState", "MeshBranch", "MeshPhasePoint",
           "MeshRefinement", "NonzonalCheck", "mesh_branch", "mesh_phase_point",
           "mesh_refinement", "nonzonal_check", "DECLARED_ORDER"]
