"""Discretisations of the JKO step as objects: the registry of ``jko.scheme``.

A :class:`JKOScheme` carries everything the solver asks of a discretisation of one
minimising-movement step (docs/theory.md §4): where its unknowns live
(:attr:`~JKOScheme.on_dual`: the circumcentres of the mesh's dual, or the given cell
centroids), how many cells the automatic step crosses (:attr:`~JKOScheme.tau_cells`),
how it steps (:meth:`~JKOScheme.prepare`, :meth:`~JKOScheme.step`) and how its failures
read. :data:`SCHEMES` is the only list of them (the ``[jko] scheme`` choices, the
``--scheme`` flag): ``"auto"`` (:class:`AutoScheme`, here), ``"fv"`` (the finite-volume
Benamou–Brenier step) and ``"ot"`` (discrete OT with POT), the last two defined with their
numerics in :mod:`wflow.jko.steppers` (this module sits below :mod:`wflow.jko.options`, which
reads the registry, and so imports none of the steps).

Wherever a scheme name is accepted (``JKOOptions(scheme=...)``), a :class:`JKOScheme`
object is too, registered or not, as ``diffrax.diffeqsolve`` takes a solver instance;
registering one (``SCHEMES.register``) is how a scenario reaches it by name.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..infra.registry import Method, Registry

__all__ = ["JKOScheme", "AutoScheme", "SCHEMES"]


class JKOScheme(Method):
    """One discretisation of the JKO step ``μ_{k+1} ∈ argmin (1/2τ) W²_{b̂}(μ_k, ·) − s E``.

    Its ``name`` is the value of ``jko.scheme``.

    Attributes
    ----------
    tau_cells : float
        Cells a step crosses under the automatic step: ``τ |v|_max ≈ tau_cells · h``
        (:func:`wflow.jko.options.auto_tau`).
    on_dual : bool
        The step runs on the circumcentric dual of the mesh (``mesh=`` is required, the
        masses sit at the circumcentres).
    gradient_backend : str or None
        Kernel back-end of the energy gradient in the solver's minimality check
        (``None``: the default of :func:`wflow.jko.energy.energy_gradient`).
    empty_cells_fail : bool
        An empty cell is impossible for this step: one fails the run.
    lock_advice : str
        The end of the warning about locked steps (what to change).
    error_control : bool
        The step is a smooth function of ``τ``, so that one step against two half steps
        estimates its error (``jko.rtol``/``atol``, :mod:`wflow.jko.accuracy`). ``False``
        for a step that locks on a fixed mesh (the OT step): it is refused there.
    candidate_pairs : bool
        The step searches transport plans over candidate cell pairs: its cost is the OT
        step's (``O(M²)`` pairs per inner iteration, :func:`wflow.jko.estimate.estimate_jko`),
        not the finite-volume step's (``O(M)`` per step).
    """

    tau_cells: float = 3.0
    on_dual: bool = False
    gradient_backend: str | None = None
    empty_cells_fail: bool = False
    lock_advice: str = ""
    error_control: bool = False
    candidate_pairs: bool = False

    def order(self) -> int:
        """Order of the step in ``τ`` (the Richardson estimate's ``q``): 1, minimising movement."""
        return 1

    def resolve(self, mesh_given: bool) -> JKOScheme:
        """The scheme that runs (``auto`` picks one from whether the mesh is given)."""
        return self

    def prepare(self, x: np.ndarray, a: np.ndarray, m: np.ndarray, dual: Any, heads: Any,
                attn: Any, opts: Any) -> Any:
        """Per-run state of the step (geometry, substeps), given the initial state.

        ``x (M, 3)``: unit cell points (the dual's circumcentres when ``on_dual``),
        ``a (M,)``: areas, ``m (M,)``: masses (summing to one), ``dual``: the
        :class:`~wflow.geometry.mesh.dual.DualGeometry` or ``None``.
        """
        raise NotImplementedError

    def step(self, run: Any, m: np.ndarray, heads: Any, attn: Any, opts: Any, *, fe: Any,
             sign: int, bhat: np.ndarray, slope2: float, energy: float
             ) -> tuple[np.ndarray, Any]:
        """One step from masses ``m``: ``(m_new (M,), JKOStepInfo)``.

        ``fe``: the field at ``(μ_k, t_{k+1})``, ``bhat (M,)``: the step's mobility,
        ``slope2``, ``energy``: ``|∂E|²`` and ``E`` there, ``sign``: ``+1`` ascent.
        """
        raise NotImplementedError

    def unconverged(self, k: int, t: float, tau: float, info: Any, opts: Any) -> str:
        """The warning of step ``k`` (ending at ``t``) whose inner solve missed its tolerance."""
        return (f"jko: step {k} (t = {t:.6g}) stopped after {info.inner_iters} inner "
                f"iterations with relative gap {info.gap_rel:.2e}")

    def history(self, info: Any) -> dict[str, float]:
        """Columns of this scheme's own in the run's history (``info`` ``None``: ``t_0``)."""
        return {}


#: The JKO schemes, by name (``JKOOptions.scheme``, ``[jko] scheme``, ``--scheme``).
SCHEMES: Registry[JKOScheme] = Registry("JKO scheme", JKOScheme, key="jko.scheme")


@SCHEMES.register
class AutoScheme(JKOScheme):
    """``"auto"``: ``"fv"`` where the mesh connectivity is given, else ``"ot"``."""

    name = "auto"

    def resolve(self, mesh_given: bool) -> JKOScheme:  # noqa: D102
        return SCHEMES.get("fv" if mesh_given else "ot")
