"""Options of the JKO scheme and the ``[jko]`` table of a scenario.

:class:`JKOOptions` are the keyword-only options of :func:`wflow.jko.solve_jko`;
:data:`JKO_SCHEMA` is the TOML schema of ``[jko]`` (the same keys and defaults plus
``mesh`` and ``compare_pde``), validated once by :func:`jko_table_from_dict` into a typed
:class:`JKOTable` (its step rule :class:`FixedTau` or :class:`AutoSteps`), with errors
``jko.<key>: ...``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import MISSING, dataclass, field, fields, replace
from typing import Any, Literal

from ..attention.diffusion import DIFFUSION_KEY, diffusion_field
from ..infra.accuracy import ErrorControlled, error_control_fields
from ..infra.options import Extra, documented, inapplicable, keys_of, opt, schema_of, validate
from ..infra.schema import ScenarioError, Spec, boolean, choice, number, string, take
from .schemes import SCHEMES, JKOScheme  # discretisations of the step (the registry)

__all__ = [
    "TAU_CELLS",
    "TAU_CELLS_FV",
    "auto_tau",
    "auto_steps_bound",
    "DIFFUSIVE_SPREAD",
    "MOBILITY_MEANS",
    "OT_METHODS",
    "INNER_SOLVERS",
    "SCHEMES",
    "FV_ENERGY",
    "FV_HAMILTONIANS",
    "LOCK_FRACTION",
    "JKOWarning",
    "JKOOptions",
    "JKO_SCHEMA",
    "JKO_SPEC",
    "FixedTau",
    "AutoSteps",
    "StepRule",
    "JKOTable",
    "jko_table_from_dict",
    "check_applicable",
    "check_diffusion_scheme",
    "check_tolerance_scheme",
    "CROSSCHECK_SCHEME",
]

logger = logging.getLogger(__name__)


#: Symmetric means ``b̂_ij`` of the endpoint mobilities.
MOBILITY_MEANS = ("conformal", "arithmetic", "geometric", "harmonic")
#: OT back-ends: exact (network simplex) or entropic (log-domain Sinkhorn).
OT_METHODS = ("emd", "sinkhorn")
#: Inner solvers of the outer minimisation over ν.
INNER_SOLVERS = ("gcg", "mirror")
#: Treatments of the energy in the FV step: CCP to a tolerance, or one linearisation.
FV_ENERGY = ("implicit", "lagged")
#: Hamiltonians of the FV step (see :mod:`wflow.jko.fv`).
FV_HAMILTONIANS = ("pointwise", "discrete")
#: A step that moves less than this fraction of the first-order predicted transport
#: ``τ² ½(|∂E|²_k + |∂E|²_{k+1})`` (in ``W²_{b̂}``) counts as *locked* (partial locking of
#: the OT scheme; the exact step moves ``1 + O(τ)`` of it). Measured for the
#: OT scheme on 20 480 cells at τ = 0.1: 0.39–0.41 of the exact step's W² from step 2 on
#: (the FV step moves 1.0–1.55 of the prediction for τ|v|max/h ∈ [0.05, 5], measured in
#: tests/test_jko_fv.py on 20 480 cells).
LOCK_FRACTION = 0.5


#: Cells a step should cross: the automatic step has ``τ |v|_max ≈ 3h`` (OT scheme, off
#: its locking plateau).
TAU_CELLS = 3.0
#: ... and for the FV scheme, which does not lock and accepts any ``τ``: the same rule, so
#: that the main job's ``τ/h`` table keeps its levels (measured: 720 cells, one softmax
#: head ``A = 2I``, τ = 0.4: summed EDI residual 0.106 for FV, first order in ``τ``).
TAU_CELLS_FV = 3.0


#: The scheme the main job also runs as its cross-check (``check_applicable(crosscheck=True)``).
CROSSCHECK_SCHEME = "ot"


class JKOWarning(UserWarning):
    """An inner solve missed its tolerance, or steps locked (the run is kept and reported)."""


#: The heat kernel's mean squared displacement on a surface is ``DIFFUSIVE_SPREAD · D t``
#: (``2 × dimension``, the dimension of ``S²`` being 2; :func:`auto_tau`).
DIFFUSIVE_SPREAD = 4.0


def _diffusive_steps(T: float, h: float, diffusion: float, cells: float) -> float:
    """``T · 4D/(cells·h)²``: the steps that keep the diffusive spread ``√(4Dτ)`` at ``cells·h``."""
    return T * DIFFUSIVE_SPREAD * diffusion / (cells * h) ** 2


def auto_tau(T: float, h: float, vmax: float, *, cells: float = TAU_CELLS,
             diffusion: float = 0.0) -> float:
    """The automatic JKO step: ``τ = T/N``, ``N = max(1, round(T |v|_max / (cells · h)))``.

    The number of steps dividing ``T`` nearest to ``τ |v|_max = cells · h`` (``h`` the
    mean cell size ``√(mean |K|)``, ``|v|_max`` the largest surrogate speed at ``t = 0``):
    ``τ|v|_max/h`` lies in ``[2.25, 3.75]`` for ``N >= 2`` (``cells = 3``) and is at least
    1.5 when ``N = 1`` follows from rounding. Reason (:mod:`wflow.jko.solver`,
    "Limitations"): on a fixed mesh the exact JKO step locks when ``τ |v| <~ h/2`` —
    moving mass by one cell costs ``h²/2τ`` per unit mass and gains only ``h |∇ψ|`` — and
    agrees with the PDE at first order in ``τ`` once ``τ |v|_max >~ 3h``. Under joint
    refinement ``h ∝ τ`` the JKO-vs-PDE distance then shrinks at first order (measured on
    the main job's default: 0.39, 0.26, 0.19 for τ = 1, 2/3, 1/2).

    **Token diffusion** ``D > 0`` moves mass too, by the heat flow: in a step ``τ`` the
    heat kernel of the surface spreads it by ``√(4Dτ)`` (mean squared displacement
    ``2·dim·Dτ``, ``dim = 2``), whatever the drift. The same resolution asks
    ``√(4Dτ) <~ cells · h``, i.e. ``τ <~ τ_D = (cells·h)²/(4D)``, the diffusive time scale
    of ``cells`` cells. The two rates add (the Fokker–Planck velocity is
    ``v − D∇log ρ``; neither may cross more than ``cells`` cells in a step)::

        N = max(1, round(T |v|_max/(cells·h) + T·4D/(cells·h)²)).

    With ``|v|_max = 0`` (a uniform start) the diffusive term alone sets the step, where
    the noiseless rule would take one step of ``T``. The FV step's entropy sub-step is
    implicit, so this is an accuracy rule, not a stability bound. ``D = 0``: the
    noiseless rule, bit for bit.
    """
    if not (T > 0 and h > 0 and math.isfinite(vmax) and vmax >= 0):
        raise ValueError(f"auto_tau: needs T > 0, h > 0 and a finite speed, got T = {T!r}, "
                         f"h = {h!r}, |v|_max = {vmax!r}")
    if not (math.isfinite(diffusion) and diffusion >= 0):
        raise ValueError(f"auto_tau: needs a finite diffusion D >= 0, got {diffusion!r}")
    if diffusion > 0:
        n = max(1, math.floor(T * vmax / (cells * h) + _diffusive_steps(T, h, diffusion, cells)
                              + 0.5))
    else:
        n = max(1, math.floor(T * vmax / (cells * h) + 0.5))
    return T / n


def auto_steps_bound(T: float, cells: int, *, per_step: float = TAU_CELLS,
                     diffusion: float = 0.0) -> int:
    """The most steps :func:`auto_tau` takes on a sphere mesh of ``cells`` cells, before any runs.

    ``N = max(1, ⌈T / (per_step · h)⌉)`` with ``h = √(4π / cells)`` (the mean cell size of
    the unit sphere) and ``|v|_max <= 1``: the step count the cost estimates use while
    ``tau = "auto"`` is not yet resolved on the mesh (:func:`auto_tau` rounds
    ``T |v|_max / (per_step · h)``, at most this for unit speeds). With token diffusion
    ``D > 0`` the diffusive steps ``T·4D/(per_step·h)²`` are added, as :func:`auto_tau` does.
    """
    h = math.sqrt(4 * math.pi / max(cells, 1))
    if diffusion > 0:
        return max(1, math.ceil(T / (per_step * h)
                                + _diffusive_steps(T, h, diffusion, per_step)))
    return max(1, math.ceil(T / (per_step * h)))


def _auto_or(check: Callable[[Any, str], Any], expected: str) -> Callable[[Any, str], Any]:
    """Validator of a key that is ``"auto"`` or passes ``check`` (``expected``: its words)."""

    def validate(v: Any, key: str) -> Any:
        if v == "auto":
            return v
        if isinstance(v, str):
            raise ScenarioError(f"{key}: expected {expected} or \"auto\", got {v!r}")
        return check(v, key)

    return validate


_tau = _auto_or(number(0, strict_lo=True), "a number > 0")
_substeps = _auto_or(number(1, integer=True), "an integer >= 1")


_MESH_DOC = ("Sphere mesh (default: ``[pde] mesh`` or the shipped default): a path relative to "
             "the scenario, a shipped file name, or ``\"icosphere:N\"`` / ``\"gmsh:N\"``.")


def _pos(doc: str, **kw: Any) -> dict:
    return opt(doc, check=number(0, strict_lo=True), **kw)


def _int1(doc: str, **kw: Any) -> dict:
    return opt(doc, check=number(1, integer=True), **kw)


#: Where an option has an effect (``opt(..., applies=...)``): the FV step only, the OT step
#: only, the entropic OT step only. Options without it act in both schemes.
_FV = {"scheme": ("fv",)}
_OT = {"scheme": ("ot",)}
_SINKHORN = {"scheme": ("ot",), "ot": ("sinkhorn",)}


@documented
@dataclass(frozen=True)
class JKOOptions(ErrorControlled):
    """Options of the JKO scheme (keyword-only in the API)."""

    SECTION = "jko"
    TABLE_EXTRAS = {
        "mesh": Extra(None, string, _MESH_DOC, "str"),
        "compare_pde": Extra(False, boolean, "Also solve the PDE with the surrogate velocity and "
                             "the run's token diffusion, and record ``W_2`` JKO vs PDE at "
                             "every ``t_k``.", "bool"),
    }

    T: float = field(default=1.0, metadata=opt(
        "Final time (a multiple of ``tau`` up to 1e-9 relative); the table's default is "
        "``[pde] T`` (or 1).", check=number(0, strict_lo=True), table_default=None))
    tau: float = field(default=0.1, metadata=opt(
        "Step size ``τ``; the table's default ``\"auto\"`` is chosen from the mesh by the "
        "scenario jobs (:func:`auto_tau`).", check=_tau, table_default="auto",
        type="float or \"auto\""))
    scheme: Literal["auto", "fv", "ot"] | JKOScheme = field(default="auto", metadata=opt(
        "``\"auto\"``: ``\"fv\"`` when the mesh connectivity is given (``mesh=`` of "
        ":func:`~wflow.jko.solve_jko`; the scenario jobs always give it), else ``\"ot\"``. "
        "``\"fv\"``: the finite-volume Benamou–Brenier step (:mod:`wflow.jko.fv`; no "
        "locking, no empty cells). ``\"ot\"``: discrete OT between cell measures with POT "
        "(exact or entropic); it *locks* when ``τ|v|_max <~ h/2`` and moves mass in "
        "whole-cell jumps (:mod:`wflow.jko.solver`, \"Limitations\").",
        check=SCHEMES.checker()))
    substeps: int | str = field(default=1, metadata=opt(
        "FV: pseudo-time substeps ``n_s`` of the transport; ``\"auto\"``: ``⌈τ|v|_max/h⌉`` "
        "(each substep moves at most one cell).", check=_substeps,
        type="int or \"auto\"", applies=_FV))
    energy: Literal["implicit", "lagged"] = field(default="implicit", metadata=opt(
        "FV: the energy linearised at the new iterate and iterated (CCP) or linearised once "
        "at ``μ_k``.", check=choice(*FV_ENERGY), applies=_FV))
    hamiltonian: Literal["pointwise", "discrete"] = field(default="pointwise", metadata=opt(
        "FV: the Hamilton–Jacobi term from the exact gradient of ``ψ`` (consistent) or from "
        "the discrete HJ equations (the exact KKT of the variational scheme; its upwind "
        "Hamiltonian is inconsistent on triangles, see :mod:`wflow.jko.fv`).",
        check=choice(*FV_HAMILTONIANS), applies=_FV))
    ccp_tol: float = field(default=1e-8, metadata=_pos(
        "FV: stop the CCP when ``‖m_{j+1} − m_j‖₁ <= ccp_tol ‖m_{j+1} − m^k‖₁``.", applies=_FV))
    ccp_max: int = field(default=100, metadata=_int1("FV: most CCP iterations per step.",
                                                             applies=_FV))
    lock_fraction: float = field(default=LOCK_FRACTION, metadata=opt(
        "A step moving less than this fraction of the first-order predicted ``W²`` counts "
        "as locked (both schemes; :data:`LOCK_FRACTION`).",
        check=number(0, 1, strict_lo=True, strict_hi=True)))
    ot: Literal["emd", "sinkhorn"] = field(default="emd", metadata=opt(
        "OT: exact transport or entropic (``OT_ε`` relative to ``μ_k ⊗ α``).",
        check=choice(*OT_METHODS), applies=_OT))
    inner: Literal["gcg", "mirror"] = field(default="gcg", metadata=opt(
        "OT: generalised conditional gradient on plans or exponentiated gradient on ``ν`` "
        "with POT potentials.", check=choice(*INNER_SOLVERS), applies=_OT))
    eps: float | None = field(default=None, metadata=opt(
        "OT, entropic: ``ε`` in cost units (rad²/mobility); default "
        "``eps_scale · τ^eps_power``.", check=number(0, strict_lo=True), applies=_SINKHORN))
    eps_scale: float = field(default=1.0, metadata=_pos(
        "OT, entropic: default rule ``ε = eps_scale · τ^eps_power``.", applies=_SINKHORN))
    eps_power: float = field(default=2.0, metadata=opt(
        "OT, entropic: ``eps_power > 1`` keeps ``ε = o(τ)`` (no spurious diffusion).",
        check=number(1, strict_lo=True), applies=_SINKHORN))
    mobility_mean: str = field(default="conformal", metadata=opt(
        "OT: symmetric mean ``b̂_ij`` of the endpoint mobilities in the cost.",
        check=choice(*MOBILITY_MEANS)))
    gap_rtol: float = field(default=1e-6, metadata=_pos(
        "OT: stop when ``gap <= gap_rtol · scale``, ``scale = max(τ|∂E|²(μ_k), 1e-12|E|)``.",
        applies=_OT))
    max_inner: int = field(default=500, metadata=_int1(
        "OT: inner iterations before giving up (status ``\"not_converged\"`` + warning).",
        applies=_OT))
    warm_start: bool = field(default=True, metadata=opt(
        "OT: reuse the candidate-pair cache (GCG) or the OT potentials (mirror, verify) "
        "across inner iterations and steps.", check=boolean, applies=_OT))
    verify: bool | None = field(default=None, metadata=opt(
        "Cross-check each step with POT (``None``: exact steps when ``M <= "
        "verify_max_cells``); FV: the POT referee, exact ``W²_{b̂}`` between consecutive "
        "iterates (dense up to ``dense_ot_max_cells``, certified sparse beyond).",
        check=boolean))
    verify_max_cells: int = field(default=2500, metadata=_int1(
        "Cap of the POT cross-checks (dense ``M × M`` cost: 2 500 cells = 50 MB)."))
    neighbourhood: bool = field(default=True, metadata=opt(
        "OT: restrict candidate targets to the proved radius; ``False`` scans all ``M²`` "
        "pairs (validation).", check=boolean, applies=_OT))
    max_pairs: int = field(default=50_000_000, metadata=_int1(
        "OT: largest candidate list kept in memory (24 bytes a pair); above it the rows are "
        "rescanned in blocks at every oracle call.", applies=_OT))
    dense_ot_max_cells: int = field(default=6000, metadata=_int1(
        "OT: dense POT problems (``M × M`` cost) only up to this size; sparse ``ot.emd`` on "
        "the candidate graph beyond."))
    sinkhorn_max_iter: int = field(default=20_000, metadata=_int1(
        "OT, entropic: log-domain Sinkhorn iterations (POT ``numItermax``).",
        applies=_SINKHORN))
    sinkhorn_tol: float = field(default=1e-9, metadata=_pos(
        "OT, entropic: Sinkhorn stopping threshold (POT ``stopThr``).", applies=_SINKHORN))
    emd_max_iter: int = field(default=10_000_000, metadata=_int1(
        "OT, exact: network-simplex iteration limit."))
    diffusion: float = diffusion_field(
        "Token diffusion ``D >= 0`` (:mod:`wflow.attention.diffusion`): the entropy "
        "``D Σ_K m_K log(m_K/σ(K))`` in the FV step (Jordan–Kinderlehrer–Otto's scheme, "
        ":func:`wflow.jko.fv.fv_step`) and its free-energy EDI per step; the OT scheme "
        "refuses ``D > 0``. ``0``: today's scheme, bit for bit.")
    rtol: float | None
    atol: float | None
    adaptive: bool
    rtol, atol, adaptive = error_control_fields(
        "Relative tolerance of the cell densities at ``T`` (error control by step "
        "doubling, :mod:`wflow.jko.accuracy`): each step ``τ`` is judged against two steps "
        "``τ/2``, and the local errors are kept within ``rtol`` per unit time so that the "
        "error at ``T`` meets it. The first and largest step is ``tau``. Schemes that "
        "declare ``error_control`` only (the FV step; the OT step locks at small ``τ``).",
        atol="units of ``ρ``, per steradian", adaptive=True, adaptive_what=(
        "With ``rtol``/``atol``: choose each step by the error controller; ``False`` takes "
        "the steps ``tau`` and judges the run by the same estimate (the run repeated at "
        "``tau/2``; status ``inaccurate`` with the ``tau`` that would meet the tolerance)."))
    progress: bool | None = field(default=None, metadata=opt(
        "tqdm progress bar (``None``: only on a terminal).", toml=False,
        reason="the command line's ``--progress``"))

    def __post_init__(self) -> None:
        if isinstance(self.tau, str):
            raise ValueError(f"jko.tau: must be a number > 0 in the API (\"auto\" is resolved "
                             f"by the scenario jobs, auto_tau), got {self.tau!r}")
        validate(self)
        n = self.T / self.tau
        if abs(n - round(n)) > 1e-9 * max(1.0, n) or round(n) < 1:
            raise ValueError(f"jko.T: must be a positive multiple of jko.tau = {self.tau!r}, "
                             f"got T = {self.T!r} (T/τ = {n:.6g})")

    @property
    def steps(self) -> int:
        """Number of JKO steps ``T/τ`` (with error control: of the largest step ``τ``)."""
        return int(round(self.T / self.tau))

    @property
    def epsilon(self) -> float:
        """Entropic ``ε`` (0 for exact transport)."""
        if self.ot == "emd":
            return 0.0
        return float(self.eps) if self.eps is not None else \
            float(self.eps_scale * self.tau ** self.eps_power)


#: The ``[jko]`` table: ``key -> (default, checker)`` (derived from :class:`JKOOptions`).
JKO_SCHEMA: Spec = schema_of(JKOOptions)

#: Keys of the ``[jko]`` scenario table (see :func:`jko_table_from_dict`).
JKO_SPEC = keys_of(JKOOptions)


def check_applicable(opts: JKOOptions, given: Iterable[str], *, crosscheck: bool = False,
                     label: str = "jko.{}", warn: bool = True) -> None:
    """Refuse (or warn about) options given where they have no effect.

    Which options act in which scheme is declared once, in the fields' metadata
    (``opt(..., applies=...)``: the FV step's ``substeps``, ``energy``, ``hamiltonian``,
    ``ccp_tol``, ``ccp_max``; the OT step's ``ot``, ``inner``, ``gap_rtol``, …; the
    entropic OT step's ``eps``, ``eps_scale``, …). ``scheme = "auto"`` counts as
    ``"fv"``: the scenario jobs always give the mesh. ``crosscheck``: the caller also
    runs the table with ``scheme = "ot"`` (the main job's OT cross-check), so an OT
    option applies there. A given option that applies nowhere raises
    :class:`~wflow.infra.schema.ScenarioError` (exit status 2, one line naming the key)
    when its value differs from the default, and is logged as a WARNING when it equals
    it (nothing would change). ``label`` formats the key in the message (``"--{}"`` for
    a command-line flag). ``warn=False``: refuse only (the scenario's load, whose command
    may not run the table; the job that runs it warns).
    """
    chosen = SCHEMES.resolve(opts.scheme, label.format("scheme"))
    ran = chosen.resolve(mesh_given=True)
    vals = {f.name: getattr(opts, f.name) for f in fields(opts)}
    bad = inapplicable(JKOOptions, {**vals, "scheme": ran.name}, given)
    cross = SCHEMES.get(CROSSCHECK_SCHEME) if crosscheck else None
    if cross is not None and cross is not ran:
        also = inapplicable(JKOOptions, {**vals, "scheme": cross.name}, given)
        bad = {k: v for k, v in bad.items() if k in also}
    defaults = {f.name: f.default for f in fields(JKOOptions) if f.default is not MISSING}
    why = f" ({chosen.name!r} is {ran.name!r} on a mesh)" if ran is not chosen else ""
    check_tolerance_scheme(opts, mesh_given=True, label=label)
    for key, cond in bad.items():
        line = (f"{label.format(key)}: applies only with {cond}, and this run's scheme is "
                f"{ran.name!r}{why}")
        if vals[key] != defaults.get(key):
            raise ScenarioError(f"{line}: it would be ignored; remove it or set the scheme "
                                f"(jko.scheme, --scheme)")
        if warn:
            logger.warning("%s; its value %r (the default) has no effect", line, vals[key])


def check_tolerance_scheme(opts: JKOOptions, *, mesh_given: bool = True,
                           label: str = "jko.{}") -> None:
    """Refuse ``rtol``/``atol`` with a scheme whose step has no error estimate.

    Step doubling needs a step that is a smooth function of ``τ``: the scheme declares it
    (:attr:`~wflow.jko.schemes.JKOScheme.error_control`; the FV step). The OT step locks
    when ``τ|v| <~ h/2``, so a shrinking step would read as zero error. Raises
    :class:`~wflow.infra.schema.ScenarioError` naming the key (exit status 2).
    """
    if opts.tolerance is None:
        return
    scheme = SCHEMES.resolve(opts.scheme).resolve(mesh_given=mesh_given)
    if not scheme.error_control:
        key = "rtol" if opts.rtol is not None else "atol"
        raise ScenarioError(
            f"{label.format(key)}: error control needs a scheme whose step is smooth in τ; "
            f"the JKO scheme {scheme.name!r} has no step-doubling estimate (the OT step "
            "locks when τ|v| <~ h/2); use jko.scheme = 'fv' or leave rtol/atol unset")


def check_diffusion_scheme(opts: JKOOptions, *, mesh_given: bool = True,
                           key: str = DIFFUSION_KEY) -> None:
    """Refuse token diffusion ``D > 0`` in a scheme without an entropy step (``"ot"``).

    The scheme runs ``D`` when it declares ``entropy = True`` (the FV step,
    :class:`wflow.jko.steppers.FVScheme`); ``scheme = "auto"`` resolves as the solver does
    (``"fv"`` with a mesh). Raises :class:`~wflow.infra.schema.ScenarioError` naming
    ``key`` (``attention.diffusion``; a command's ``--diffusion``; exit status 2), before
    anything is computed.
    """
    if not opts.diffusion > 0:
        return
    scheme = SCHEMES.resolve(opts.scheme).resolve(mesh_given=mesh_given)
    if not getattr(scheme, "entropy", False):
        raise ScenarioError(
            f"{key}: token diffusion D = {opts.diffusion:g} has no effect in the "
            f"JKO scheme {scheme.name!r} (no entropy step); use jko.scheme = 'fv' (--scheme "
            f"fv, with the mesh) or D = 0")


@dataclass(frozen=True)
class FixedTau:
    """The step rule ``τ`` given: ``T/τ`` steps (``T`` a multiple of ``τ``)."""

    tau: float

    def steps_bound(self, T: float, cells: int, diffusion: float = 0.0) -> int:
        """The steps of the run: ``T/τ`` (whatever the mesh and ``D``)."""
        return int(round(T / self.tau))

    def describe(self) -> str:
        """The rule in words."""
        return f"tau = {self.tau:g} (given)"


@dataclass(frozen=True)
class AutoSteps:
    """The step rule ``tau = "auto"``: ``τ|v|_max/h ≈ cells_per_step``, resolved on the mesh.

    ``τ = T/N``, ``N = max(1, round(T |v|_max / (cells_per_step · h)))`` (:func:`auto_tau`),
    once the mesh (``h``) and the initial speed (``|v|_max``) are known; before that, the
    cost estimates use :func:`auto_steps_bound`.
    """

    cells_per_step: float = TAU_CELLS

    def steps_bound(self, T: float, cells: int, diffusion: float = 0.0) -> int:
        """The most steps the rule takes on ``cells`` cells (:func:`auto_steps_bound`)."""
        return auto_steps_bound(T, cells, per_step=self.cells_per_step, diffusion=diffusion)

    def describe(self) -> str:
        """The rule in words."""
        return f"tau = T/N, N = round(T |v|max / ({self.cells_per_step:g} h)) (auto)"


#: How ``τ`` is chosen: given (:class:`FixedTau`) or from the mesh (:class:`AutoSteps`).
StepRule = FixedTau | AutoSteps


@dataclass(frozen=True, kw_only=True)
class JKOTable:
    """The ``[jko]`` table of a scenario, validated once (:func:`jko_table_from_dict`).

    Attributes
    ----------
    mesh : str
        The mesh spec (``[jko] mesh``, else ``[pde] mesh``, else ``"default"``).
    T : float
        Final time (``[jko] T``, else ``[pde] T``, else 1).
    step : StepRule
        ``τ`` given (:class:`FixedTau`) or chosen on the mesh (:class:`AutoSteps`).
    settings : dict
        Every other option of :class:`JKOOptions` (validated values, defaults filled in).
    given : frozenset of str
        The keys the table sets (their applicability is checked against the scheme run).
    compare_pde : bool
        Also solve the PDE with the surrogate velocity and record ``W₂`` JKO vs PDE.
    eps_auto : bool
        ``ε`` chosen on the mesh with ``ot = "sinkhorn"`` (the table's ``tau = "auto"``
        without ``eps``; kept when a caller then gives ``τ``).
    """

    mesh: str = "default"
    T: float = 1.0
    step: StepRule = AutoSteps()
    settings: dict = field(default_factory=dict)
    given: frozenset = frozenset()
    compare_pde: bool = False
    eps_auto: bool = False

    def options(self, tau: float, **changes: Any) -> JKOOptions:
        """:class:`JKOOptions` with the step ``tau`` (the rule resolved) and ``changes``."""
        return JKOOptions(**{**self.settings, "T": self.T, "tau": float(tau), **changes})

    def steps_bound(self, cells: int) -> int:
        """The steps of the run on ``cells`` cells (``tau = "auto"``: the most, with ``D``)."""
        return self.step.steps_bound(self.T, cells, self.diffusion)

    @property
    def diffusion(self) -> float:
        """The token diffusion ``D`` the table runs with (0 unless a job set it)."""
        return float(self.settings.get("diffusion") or 0.0)

    def unresolved_options(self, **changes: Any) -> JKOOptions:
        """The options the checks run on before the mesh resolves the step rule.

        ``τ`` given, else one step ``τ = T`` (only the checks of the options and of the
        scheme's input read them; a run takes :func:`~wflow.jko.spec.resolve_step`'s).
        """
        tau = self.step.tau if isinstance(self.step, FixedTau) else self.T
        return self.options(tau, **changes)

    def check(self, *, crosscheck: bool = False, warn: bool = True) -> JKOTable:
        """Check the options together (``T`` a multiple of ``τ``, the keys' applicability).

        The options' own checks run on :meth:`JKOTable.unresolved_options`. Returns ``self``.
        """
        check_applicable(self.unresolved_options(), self.given, crosscheck=crosscheck,
                         warn=warn)
        return self

    def with_(self, *, T: float | None = None, tau: float | None = None,
              mesh: str | None = None, label: str = "--{}", **changes: Any) -> JKOTable:
        """The table with a command line's overrides (``None``: kept), checked again.

        ``tau`` makes the rule :class:`FixedTau`; ``changes`` are options (``scheme``,
        ``ot``, …): one that has no effect in the scheme run is refused
        (:func:`check_applicable`, keys named by ``label``, ``"--{}"``: a flag).
        """
        changes = {k: v for k, v in changes.items() if v is not None}
        for key, v in changes.items():  # each value checked under its own name (a flag)
            check = JKO_SCHEMA.get(key, (None, None))[1]
            if check is not None:
                changes[key] = check(v, label.format(key))
        new = replace(self, T=self.T if T is None else float(T),
                      step=self.step if tau is None else FixedTau(float(tau)),
                      mesh=self.mesh if mesh is None else str(mesh),
                      settings={**self.settings, **changes})
        new.check()
        flags = set(changes) | {k for k, v in (("T", T), ("tau", tau)) if v is not None}
        if flags:
            check_applicable(new.unresolved_options(), flags, label=label)
        return new


def jko_table_from_dict(d: Mapping[str, Any] | None, *, T: float | None = None,
                        mesh: str | None = None, scheme: str | None = None,
                        crosscheck: bool = False, warn: bool = True) -> JKOTable:
    """Validate a ``[jko]`` table: the one parser of it, returning a :class:`JKOTable`.

    Keys (defaults): ``mesh`` (default: ``[pde] mesh`` or the shipped default),
    ``T`` (default: ``[pde] T`` or 1), ``scheme = "auto" | "fv" | "ot"``, ``substeps = 1``
    (or ``"auto"``), ``energy = "implicit" | "lagged"``,
    ``hamiltonian = "pointwise" | "discrete"``, ``ccp_tol = 1e-8``, ``ccp_max = 100``,
    ``lock_fraction = 0.5``, ``tau = "auto"`` (:class:`AutoSteps`: chosen from the mesh by
    the scenario jobs, :func:`auto_tau`) or a number (:class:`FixedTau`),
    ``ot = "emd" | "sinkhorn"``, ``inner = "gcg" | "mirror"``, ``eps`` (default
    ``eps_scale · tau^eps_power``; with ``tau = "auto"`` and ``ot = "sinkhorn"``:
    ``h²/min b̂``, the Gibbs kernel of width ``√(ε b̂)`` spans a cell), ``eps_scale = 1``,
    ``eps_power = 2``, ``mobility_mean = "conformal"``, ``gap_rtol = 1e-6``,
    ``max_inner = 500``, ``warm_start = true``, ``verify`` (default: when the mesh has <=
    ``verify_max_cells = 2500`` cells), ``neighbourhood = true``, ``compare_pde = false``
    (also solve the PDE with the surrogate velocity and record ``W_2`` JKO vs PDE at every
    ``t_k``). Errors name the key (``jko.<key>: ...``). ``scheme``: the scheme the caller
    runs instead of the table's (a command line's ``--scheme``); a key of the table that
    has no effect in it is refused or warned about (:func:`check_applicable`, with
    ``crosscheck`` and ``warn``).
    """
    vals = take(d or {}, JKO_SCHEMA, "jko")
    mesh_spec = vals.pop("mesh") or mesh or "default"
    Tv = vals.pop("T")
    tau = vals.pop("tau")
    compare = vals.pop("compare_pde")
    if scheme is not None:
        vals["scheme"] = scheme
    table = JKOTable(mesh=mesh_spec,
                     T=float(Tv if Tv is not None else (T if T is not None else 1.0)),
                     step=AutoSteps() if tau == "auto" else FixedTau(float(tau)),
                     settings=vals, given=frozenset(d or {}), compare_pde=bool(compare),
                     eps_auto=tau == "auto" and vals["eps"] is None)
    return table.check(crosscheck=crosscheck, warn=warn)
