r"""The noisy PDE's long-time runs against the stationary branches (``d = 3``).

:func:`wflow.pde.solve_pde` with one USA head ``A = V = I`` at inverse temperature ``β`` and
token diffusion ``D = 1/(2K)`` (:func:`wflow.attention.diffusion.diffusion_of`: the
published coupling ``K``) relaxes to a stationary state of ``F_K``. Two checks:

* :func:`pde_relaxation_check`: above ``K_#`` a perturbed uniform density (a von
  Mises–Fisher law of small concentration) clusters, and its order parameter
  ``|Σ_K m_K ĉ_K|`` at the final time equals the mesh branch's
  (:class:`~wflow.phase.mesh.MeshModel` on the same icosphere) to the mesh error;
* :func:`hysteresis_check`: at one ``K`` between the fold and ``K_#`` (``β > β*``), the
  run from the perturbed uniform density stays uniform and the run from a clustered
  density stays clustered (two states at one ``K``: the hysteresis loop of a K-up /
  K-down sweep); below ``β*`` both runs end uniform.

The PDE's cost is its positivity-limited step (``Δt ∝ h²/D``): a few thousand steps per
unit of ``T`` on 320 cells, so these are the smallest convincing cases (marked slow in
the tests).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field

import numpy as np

from ..attention.diffusion import diffusion_of
from ..attention.heads import Attention, Heads
from ..geometry.mesh import load_mesh
from ..geometry.sphere import normalize
from ..pde import PDEOptions, solve_pde
from .mesh import MeshModel, MeshOptions
from .thresholds import k_sharp, tricritical_beta

logger = logging.getLogger(__name__)

__all__ = ["RelaxationRun", "relax_pde", "PDERelaxationCheck", "pde_relaxation_check",
           "HysteresisCheck", "hysteresis_check", "HysteresisSweep", "hysteresis_sweep"]

#: Order parameter below which a final state counts as uniform: the perturbed start has
#: ``|m| ≈ κ/3 = 0.1`` and the near-uniform states of the mesh ``|m| < 10^{-6}``.
UNIFORM_M = 0.02


@dataclass(frozen=True)
class RelaxationRun:
    """One long-time PDE run and its order parameter.

    Attributes
    ----------
    beta, K, diffusion : float
        Inverse temperature, coupling and the diffusion ``D`` the PDE ran with.
    frequency : int
        Icosphere subdivision (``20 n²`` cells).
    start : str
        ``"uniform"`` (perturbed), ``"clustered"`` or ``"given"`` (a density passed in).
    t, order_parameter : numpy.ndarray
        Save times and ``|Σ m_K ĉ_K|`` there, shape ``(S,)``.
    status : str
        The PDE's status.
    seconds : float
        Wall time.
    final_density : numpy.ndarray
        Cell densities at ``T`` (the mesh's original cell order), shape ``(M,)``.
    """

    beta: float
    K: float
    diffusion: float
    frequency: int
    start: str
    t: np.ndarray = field(repr=False)
    order_parameter: np.ndarray = field(repr=False)
    status: str
    seconds: float
    final_density: np.ndarray = field(repr=False, default_factory=lambda: np.zeros(0))

    @property
    def final(self) -> float:
        """The order parameter at the final time."""
        return float(self.order_parameter[-1])

    @property
    def drift(self) -> float:
        """``|m(T) − m(t_{S−1})|``: how far from stationary the run still is."""
        return float(abs(self.order_parameter[-1] - self.order_parameter[-2]))


def relax_pde(beta: float, K: float, *, frequency: int = 4, start: str = "uniform",
              T: float = 20.0, dt: float = 0.02, diffusion: float | None = None,
              axis: tuple[float, float, float] = (0.3, -0.5, 0.8),
              rho0: np.ndarray | None = None, kick: float = 0.0) -> RelaxationRun:
    """Run the noisy PDE at ``D = 1/(2K)`` (or ``diffusion``) to time ``T``.

    Parameters
    ----------
    beta : float
        Inverse temperature of the USA head ``A = V = I``.
    K : float
        Published coupling; the PDE runs with ``D = diffusion_of(K) = 1/(2K)``.
    frequency : int, keyword-only
        Icosphere subdivision.
    start : {"uniform", "clustered"}, keyword-only
        A von Mises–Fisher law of concentration 0.3 (perturbed uniform) or 10 (clustered).
    T, dt : float, keyword-only
        Final time and the largest step (the PDE limits it further for positivity).
    diffusion : float or None, keyword-only
        Override ``D`` (a wrong convention for negative controls).
    axis : tuple, keyword-only
        Mean direction of the starting law.
    rho0 : numpy.ndarray or None, keyword-only
        Start from these cell densities instead (a previous run's ``final_density``).
    kick : float, keyword-only
        Multiply ``rho0`` by ``exp(kick · x·axis)`` (a degree-1 perturbation of order
        parameter ``≈ kick/3``: the noise a slow ramp of ``K`` carries, without which an
        exactly uniform state could not leave the unstable uniform branch).
    """
    if start not in ("uniform", "clustered"):
        raise ValueError(f"start: expected 'uniform' or 'clustered', got {start!r}")
    D = diffusion_of(K) if diffusion is None else float(diffusion)
    t0 = time.perf_counter()
    sm = load_mesh(f"icosphere:{20 * int(frequency) ** 2}")
    if rho0 is not None:
        start = "given"
        if kick:
            c = normalize(sm.gather_owned(sm.centroids))
            rho0 = np.asarray(rho0, dtype=np.float64) * np.exp(kick * (c @ np.asarray(axis)))
    else:
        rho0 = {"type": "vmf", "means": [list(axis)],
                "kappas": [0.3 if start == "uniform" else 10.0]}
    r = solve_pde(rho0, Heads.bilinear(np.eye(3)), Attention("usa", float(beta)), mesh=sm,
                  options=PDEOptions(T=float(T), dt=float(dt), order=2, n_saves=21,
                                     clusters=False, balance=False, diffusion=D))
    x = normalize(r.centroids)
    m = r.rho * r.areas[None, :]
    op = np.linalg.norm(m @ x, axis=1) / m.sum(axis=1)
    run = RelaxationRun(beta=float(beta), K=float(K), diffusion=D, frequency=int(frequency),
                        start=start, t=np.asarray(r.t), order_parameter=op,
                        status=str(getattr(r.status, "value", r.status)),
                        seconds=time.perf_counter() - t0,
                        final_density=np.asarray(r.rho[-1]).copy())
    logger.info("pde relaxation beta=%g K=%g D=%g n=%d from %s: |m| = %.6f (drift %.1e, "
                "%.1f s)", beta, K, D, frequency, start, run.final, run.drift, run.seconds)
    return run


def _branch_order_parameter(beta: float, K: float, frequency: int) -> tuple[float, float]:
    """``(mesh, zonal)`` order parameters of the upper (clustered) branch at ``K``."""
    from .particles import stable_state

    zs = stable_state(beta, K, 3)
    if zs is None:
        raise ValueError(f"K: {K!r} lies below the stable clustered branch at beta = {beta}")
    model = MeshModel(beta, options=MeshOptions(frequency=frequency))
    st = model.solve(model.zonal_guess(zs.c, K), K)
    return st.order_parameter, float(zs.m)


@dataclass(frozen=True)
class PDERelaxationCheck:
    """The PDE's long-time state against the mesh branch at one ``K > K_#``.

    Attributes
    ----------
    run : RelaxationRun
    mesh_order_parameter, zonal_order_parameter : float
        The branch's order parameter at ``K`` on the same icosphere and in the zonal
        reduction.
    tol : float
        ``h²`` (the ``O(h²)`` mesh error; measured ``|PDE − zonal| ≈ 2·10^{-4}`` at
        ``β = 4``, ``n = 4``, ``h² = 0.039``).
    """

    run: RelaxationRun
    mesh_order_parameter: float
    zonal_order_parameter: float
    tol: float

    @property
    def passed(self) -> bool:
        """The run is stationary and its order parameter is the branch's to ``tol``."""
        return bool(self.run.drift <= 1e-6
                    and abs(self.run.final - self.mesh_order_parameter) <= self.tol
                    and abs(self.run.final - self.zonal_order_parameter) <= self.tol)


def pde_relaxation_check(beta: float = 4.0, K: float = 0.45, *, frequency: int = 4,
                         T: float = 15.0, diffusion: float | None = None
                         ) -> PDERelaxationCheck:
    """Run the PDE from a perturbed uniform density at ``K > K_#`` and compare (module doc).

    ``diffusion`` overrides ``D = 1/(2K)`` (a convention off by 2 must fail the check).
    """
    if K <= k_sharp(beta, 3):
        raise ValueError(f"K: expected K > K_# = {k_sharp(beta, 3):.6g}, got {K!r}")
    run = relax_pde(beta, K, frequency=frequency, T=T, diffusion=diffusion)
    mesh_m, zonal_m = _branch_order_parameter(beta, K, frequency)
    h2 = 4.0 * np.pi / (20 * frequency ** 2)
    return PDERelaxationCheck(run=run, mesh_order_parameter=mesh_m,
                              zonal_order_parameter=zonal_m, tol=float(h2))


@dataclass(frozen=True)
class HysteresisCheck:
    """Runs from a perturbed uniform and from a clustered density at one ``K``.

    Attributes
    ----------
    beta, K : float
    up, down : RelaxationRun
        From the perturbed uniform density (the K-up side) and from the clustered one
        (the K-down side).
    discontinuous : bool
        ``β > β*(3)``.
    branch_order_parameter : float
        The mesh branch's at ``K`` (``nan`` below ``β*`` or ``K_f``).
    tol : float
        ``h²``, as :class:`PDERelaxationCheck`.
    """

    beta: float
    K: float
    up: RelaxationRun
    down: RelaxationRun
    discontinuous: bool
    branch_order_parameter: float
    tol: float

    @property
    def hysteresis(self) -> bool:
        """Two different final states at one ``K``."""
        return bool(self.up.final < UNIFORM_M and self.down.final > UNIFORM_M)

    @property
    def passed(self) -> bool:
        """Hysteresis (clustered state on the branch) iff ``β > β*``; else both uniform."""
        if self.discontinuous:
            return bool(self.hysteresis and abs(self.down.final - self.branch_order_parameter)
                        <= self.tol)
        return bool(self.up.final < UNIFORM_M and self.down.final < UNIFORM_M)


def hysteresis_check(beta: float, K_ratio: float = 0.9, *, frequency: int = 4,
                     T: float = 20.0, diffusion_factor: float = 1.0) -> HysteresisCheck:
    """The two runs at ``K = K_ratio · K_#(β)`` (module docstring).

    ``diffusion_factor`` scales ``D = 1/(2K)`` (a negative control: by ``0.5`` the
    convention ``K = 1/D`` puts ``K`` above ``K_#`` and the uniform start clusters).
    """
    K = float(K_ratio) * k_sharp(beta, 3)
    D = diffusion_of(K) * float(diffusion_factor)
    up = relax_pde(beta, K, frequency=frequency, start="uniform", T=T, diffusion=D)
    down = relax_pde(beta, K, frequency=frequency, start="clustered", T=T, diffusion=D)
    disc = bool(beta > tricritical_beta(3))
    m_branch = float("nan")
    if disc:
        try:
            m_branch = _branch_order_parameter(beta, K, frequency)[0]
        except ValueError:  # K below the fold: no clustered branch
            pass
    return HysteresisCheck(beta=float(beta), K=K, up=up, down=down, discontinuous=disc,
                           branch_order_parameter=m_branch,
                           tol=float(4.0 * np.pi / (20 * frequency ** 2)))


@dataclass(frozen=True)
class HysteresisSweep:
    """A K-up then K-down sweep of PDE runs, each started from the previous final state.

    Attributes
    ----------
    beta : float
    K : numpy.ndarray
        The couplings, ascending, shape ``(k,)``.
    up, down : numpy.ndarray
        Final order parameters of the up sweep (from a perturbed uniform density) and of the
        down sweep (from the up sweep's top state), at each ``K``, shape ``(k,)``.
    k_fold, k_sharp : float
        The zonal fold (``nan`` below ``β*``) and ``K_#``.
    discontinuous : bool
        ``β > β*(3)``.
    seconds : float
    """

    beta: float
    K: np.ndarray
    up: np.ndarray
    down: np.ndarray
    k_fold: float
    k_sharp: float
    discontinuous: bool
    seconds: float

    @property
    def bistable(self) -> np.ndarray:
        """Where the two sweeps end in different states (uniform up, clustered down)."""
        return (self.up < UNIFORM_M) & (self.down > UNIFORM_M)

    @property
    def passed(self) -> bool:
        """Above ``β*``: a loop, only inside ``(K_f, K_#)``; below: no loop at all."""
        if not self.discontinuous:
            return bool(not np.any(self.bistable))
        inside = (self.K > self.k_fold) & (self.K < self.k_sharp)
        return bool(np.any(self.bistable) and not np.any(self.bistable & ~inside))


def hysteresis_sweep(beta: float, ratios: tuple[float, ...] = (0.7, 0.85, 1.3), *,
                     frequency: int = 4, T: float = 25.0) -> HysteresisSweep:
    """Sweep ``K = r K_#`` up (from a perturbed uniform density) and back down.

    Each run starts from the previous run's final density, so the sweep carries its state
    as a slow ramp of ``K`` would; the down sweep starts from the top of the up sweep. The
    up steps add a degree-1 kick of 0.1 (``|m| ≈ 0.03``: see :func:`relax_pde`).
    """
    from .branch import phase_point

    t0 = time.perf_counter()
    ks = k_sharp(beta, 3)
    K = np.sort(np.asarray(ratios, dtype=np.float64)) * ks
    up, down = np.empty(K.size), np.empty(K.size)
    rho = None
    for i, k in enumerate(K):
        run = relax_pde(beta, float(k), frequency=frequency, T=T, rho0=rho,
                        kick=0.0 if rho is None else 0.1)
        up[i], rho = run.final, run.final_density
    down[-1] = up[-1]
    for i in range(K.size - 2, -1, -1):
        run = relax_pde(beta, float(K[i]), frequency=frequency, T=T, rho0=rho)
        down[i], rho = run.final, run.final_density
    disc = bool(beta > tricritical_beta(3))
    kf = phase_point(beta, 3).k_fold if disc else float("nan")
    res = HysteresisSweep(beta=float(beta), K=K, up=up, down=down, k_fold=float(kf),
                          k_sharp=float(ks), discontinuous=disc,
                          seconds=time.perf_counter() - t0)
    logger.info("hysteresis sweep beta=%g: K/K_# %s up %s down %s", beta, K / ks, up, down)
    return res
