r"""Accuracy a user asks for: tolerances, the scaled error norm, and the step-size controller.

The generic machinery of error control, as SciPy's ``solve_ivp`` and diffrax define it
(Hairer, Nørsett & Wanner, *Solving ODEs I*, §II.4; Söderlind 2003 for the PI form). It
names no solver: each solver supplies its local-error estimate (an embedded pair, step
doubling, or a weak-error estimate) and the order ``q`` of that estimate.

* :class:`Tolerance` — ``rtol``/``atol``, validated once;
* :data:`DEFAULT_RTOL` — the ``rtol`` a solver requests when the user sets none
  (``1e-3``), told apart from a user's ``1e-3`` by :func:`is_default`, so that a solver can
  step it aside where none of its estimates applies (and say so) while refusing a
  tolerance the user asked for there;
* :func:`error_norm` — the scaled RMS norm of a local-error estimate,

  .. math::

     \|e\| = \Bigl(\frac{1}{N}\sum_{i=1}^{N}
        \Bigl(\frac{e_i}{\mathrm{atol} + \mathrm{rtol}\,\max(|y^{\mathrm{old}}_i|,
        |y^{\mathrm{new}}_i|)}\Bigr)^2\Bigr)^{1/2},

  a step being acceptable when ``‖e‖ ≤ 1``. Over MPI ranks the sum is
  :func:`exact_sum`: correctly rounded, hence the same bits for every number of ranks;
* :func:`richardson_error` — the step-doubling estimate ``(y_h − y_{h/2,h/2})/(2^q − 1)``
  of the error of the two half steps;
* :class:`StepController` — the PI controller
  ``h_new = h · clip(safety · ‖e_n‖^{−k_I/(q+1)} · (‖e_{n−1}‖/‖e_n‖)^{k_P/(q+1)}, fmin, fmax)``,
  with its accepted/rejected counts.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, ClassVar

import numpy as np

from .options import opt
from .schema import ScenarioError, boolean, number, optional

__all__ = [
    "Tolerance",
    "exact_sum",
    "error_norm",
    "richardson_error",
    "StepController",
    "MIN_RTOL",
    "DEFAULT_RTOL",
    "is_default",
    "rtol_field",
    "atol_field",
    "adaptive_field",
    "error_control_fields",
    "ErrorControlled",
]

#: The smallest ``rtol`` accepted: below ``100 ε`` the error estimate itself (a difference
#: of two solutions, each rounded at ``ε`` per operation over many operations) is rounding
#: noise, and no step size can meet the tolerance.
MIN_RTOL = 100 * float(np.finfo(np.float64).eps)


class DefaultRtol(float):
    """The type of :data:`DEFAULT_RTOL`: a float that remembers it was not asked for.

    It equals ``1e-3`` in every computation, prints and serialises as ``0.001``; only
    :func:`is_default` tells it apart from a user's ``1e-3``.
    """

    __slots__ = ()

    def __repr__(self) -> str:
        return repr(float(self))

    def __reduce__(self) -> tuple:  # pickles (MPI, multiprocessing) as the default itself
        return (_default_rtol, ())


def _default_rtol() -> DefaultRtol:
    return DEFAULT_RTOL


#: The relative tolerance a solver requests when the user sets none: ``1e-3``, as
#: SciPy's ``solve_ivp``. A solver judges its run by its error estimate at this
#: tolerance; where none of its estimates applies (e.g. noisy weights) it steps the
#: default aside, runs as with ``rtol = None`` and records why — a tolerance the user set
#: there is refused instead.
DEFAULT_RTOL = DefaultRtol(1e-3)


def is_default(rtol: Any) -> bool:
    """Whether ``rtol`` is :data:`DEFAULT_RTOL` (the solver's default, not the user's value)."""
    return type(rtol) is DefaultRtol


@dataclass(frozen=True, kw_only=True)
class Tolerance:
    """The requested accuracy of a solve: relative ``rtol`` and absolute ``atol``.

    A step is accepted when :func:`error_norm` of its local-error estimate is ``≤ 1``,
    i.e. each component's error is within ``atol + rtol·|y|`` in the RMS sense.

    Parameters
    ----------
    rtol : float
        Relative tolerance, ``MIN_RTOL ≤ rtol < 1`` (dimensionless). Default ``1e-3``.
    atol : float
        Absolute tolerance, ``≥ 0``, in the units of the state. Default ``1e-6``.
    key : str
        The scenario key prefix named in errors (e.g. ``"particles"`` gives
        ``particles.rtol``).
    """

    rtol: float = 1e-3
    atol: float = 1e-6
    key: str = field(default="", compare=False, repr=False)

    def __post_init__(self) -> None:
        """Refuse a tolerance no computation can meet, naming the key."""
        pre = f"{self.key}." if self.key else ""
        for name, lo in (("rtol", MIN_RTOL), ("atol", 0.0)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float, np.floating)):
                raise ScenarioError(f"{pre}{name}: expected a number, got {v!r}")
            if not math.isfinite(v) or v < lo:
                raise ScenarioError(f"{pre}{name}: must be finite and >= {lo:.3g}, got {v!r}")
        if self.rtol >= 1:
            raise ScenarioError(f"{pre}rtol: must be < 1 (a relative error of 100 %), got "
                                f"{self.rtol!r}")

    def scale(self, y_old: np.ndarray, y_new: np.ndarray) -> np.ndarray:
        """Per-component tolerance ``atol + rtol·max(|y_old|, |y_new|)`` (shape of ``y``)."""
        return self.atol + self.rtol * np.maximum(np.abs(y_old), np.abs(y_new))

    def replace(self, **changes: Any) -> Tolerance:
        """A copy with ``changes`` (validated again)."""
        return dataclasses.replace(self, **changes)

    @classmethod
    def given(cls, key: str, rtol: float | None = None,
              atol: float | None = None) -> Tolerance:
        """The tolerance of a solver's ``rtol``/``atol`` options (``None``: the default).

        Parameters
        ----------
        key : str
            The options' scenario section (named in errors).
        rtol, atol : float or None
            As the class's fields; ``None`` leaves the default (``1e-3``, ``1e-6``).
        """
        kw = {k: v for k, v in (("rtol", rtol), ("atol", atol)) if v is not None}
        return cls(key=key, **kw)


# Exact summation: a double is m·2^e with an integer mantissa |m| < 2^53. Split m into
# m = hi·2^27 + lo with |hi| < 2^26, |lo| < 2^27; the per-exponent sums of hi and of lo are
# sums of integers below 2^27, exact in float64 while a bin holds fewer than 2^26 values
# (sum < 2^53). The bins are then combined as Python integers: the total is exact, and
# its rounding to float64 (Fraction -> float) is correct, so it does not depend on how the
# values are split between ranks or ordered.
_CHUNK = 1 << 26


_rtol_value = optional(number(MIN_RTOL, 1, strict_hi=True))


def _rtol_or_default(v: Any, key: str) -> Any:
    """``rtol``'s checker where the default is :data:`DEFAULT_RTOL`.

    The default is kept as it is (not made a user's ``1e-3``); any other value is
    ``None``/``"none"`` or a number in ``[MIN_RTOL, 1)``.
    """
    return v if is_default(v) else _rtol_value(v, key)


def rtol_field(what: str, *, default: float | None = None) -> Any:
    """The ``rtol`` option of a solver's options dataclass (one declaration for every solver).

    ``None`` or a number in ``[MIN_RTOL, 1)`` (:data:`MIN_RTOL`: below it no step can meet
    the tolerance), keyword-only; ``what`` says what the solver controls with it, and the
    documentation adds that ``None`` (with ``atol`` unset) runs today's steps bit for bit.
    ``default``: ``None``, or :data:`DEFAULT_RTOL` for a solver that judges every run by
    default (``None`` is then set as ``"none"`` in a scenario table).
    """
    if default is not None:
        if not is_default(default):
            raise ValueError("rtol_field: the default is None or DEFAULT_RTOL")
        return field(default=default, kw_only=True, metadata=opt(
            f"{what} Default ``{float(default):g}`` (:data:`wflow.infra.accuracy.DEFAULT_RTOL`): "
            "the run is judged by its error estimate at that tolerance; where no estimate "
            "applies the default steps aside, the run is judged as with ``None`` and "
            "``extra[\"accuracy_default\"]`` says why. ``None`` (``\"none\"`` in a "
            "scenario table; with ``atol`` unset): no accuracy requested, the run alone "
            "(without the estimate's extra work).",
            check=_rtol_or_default, type="float or None"))
    return field(default=None, kw_only=True, metadata=opt(
        f"{what} ``None`` (with ``atol`` unset): no accuracy requested, today's steps, bit "
        "for bit.", check=number(MIN_RTOL, 1, strict_hi=True), type="float or None"))


def atol_field(units: str) -> Any:
    """The ``atol`` option of a solver's options dataclass: ``None`` or ``>= 0`` in ``units``.

    ``None``: :attr:`Tolerance.atol`'s default when ``rtol`` is set.
    """
    return field(default=None, kw_only=True, metadata=opt(
        f"Absolute tolerance ({units}); ``None``: ``{Tolerance().atol:g}`` when ``rtol`` is "
        "set.", check=number(0), type="float or None"))


def adaptive_field(default: bool, what: str) -> Any:
    """The ``adaptive`` option of a solver's options dataclass (``what``: its two meanings)."""
    return field(default=default, kw_only=True, metadata=opt(what, check=boolean))


def error_control_fields(rtol: str, *, atol: str, adaptive: bool,
                         adaptive_what: str, rtol_default: float | None = None,
                         ) -> tuple[Any, Any, Any]:
    """The ``rtol``, ``atol`` and ``adaptive`` options of a solver's options dataclass, together.

    The three always come together (error control by step doubling); a solver says what
    each means for it and unpacks them onto its annotated names::

        rtol: float | None
        atol: float | None
        adaptive: bool
        rtol, atol, adaptive = error_control_fields("...", atol="units", adaptive=True,
                                                    adaptive_what="...")

    Parameters
    ----------
    rtol : str
        What the solver controls with ``rtol`` (:func:`rtol_field`).
    atol : str
        The units of ``atol`` (:func:`atol_field`).
    adaptive : bool
        The default of ``adaptive``.
    adaptive_what : str
        Its two meanings (:func:`adaptive_field`).
    rtol_default : float or None
        ``None``, or :data:`DEFAULT_RTOL` (:func:`rtol_field`).

    Returns
    -------
    tuple
        The three dataclass fields, in the order ``rtol``, ``atol``, ``adaptive``.
    """
    return (rtol_field(rtol, default=rtol_default), atol_field(atol),
            adaptive_field(adaptive, adaptive_what))


class ErrorControlled:
    """Mixin of a solver's options dataclass with :func:`rtol_field` and :func:`atol_field`.

    It gives the options' ``tolerance`` property, its errors naming the options' scenario
    section ``SECTION`` (``jko.rtol``, ``pde.atol``). The fields themselves are declared by
    the dataclass (each solver says what its tolerance controls).
    """

    SECTION: ClassVar[str]
    rtol: float | None
    atol: float | None

    @property
    def tolerance(self) -> Tolerance | None:
        """The requested accuracy (``None``: no error control, today's steps)."""
        if self.rtol is None and self.atol is None:
            return None
        return Tolerance.given(self.SECTION, self.rtol, self.atol)


def _exact_bins(x: np.ndarray) -> dict[int, int]:
    """``{e: Σ m}`` over the finite values ``x = m·2^(e−53)``, as exact integers."""
    out: dict[int, int] = {}
    x = np.ascontiguousarray(x, dtype=np.float64).reshape(-1)
    for start in range(0, x.size, _CHUNK):
        part = x[start:start + _CHUNK]
        part = part[part != 0.0]
        if part.size == 0:
            continue
        m, e = np.frexp(part)  # part = m·2^e, 0.5 ≤ |m| < 1
        mant = np.ldexp(m, 53)  # exact integers, |mant| < 2^53
        hi = np.floor(mant / (1 << 27))
        lo = mant - hi * (1 << 27)
        emin = int(e.min())
        idx = e - emin
        shi = np.bincount(idx, weights=hi)
        slo = np.bincount(idx, weights=lo)
        for k in np.flatnonzero((shi != 0) | (slo != 0)):
            v = (int(shi[k]) << 27) + int(slo[k])
            key = int(k) + emin
            out[key] = out.get(key, 0) + v
    return out


def exact_sum(values: np.ndarray, comm: Any = None) -> float:
    """``Σ values`` over the ranks of ``comm``, correctly rounded to float64.

    The sum is computed exactly (integer mantissas binned by exponent) and rounded once,
    so it is the same number for any split of the values between ranks and any order:
    ``mpirun -n P`` gives the serial bits for every ``P``. Cost ``O(n)`` per rank plus an
    all-gather of at most ~2100 integers.

    Parameters
    ----------
    values : array_like of float64, any shape
        This rank's values; every one finite (a non-finite value returns ``nan`` on every
        rank, after the collective).
    comm : mpi4py communicator or None

    Returns
    -------
    float
        ``Σ`` of all ranks' values, correctly rounded (``nan`` if any value is not finite).
    """
    x = np.asarray(values, dtype=np.float64)
    finite = bool(np.all(np.isfinite(x)))
    bins = _exact_bins(x) if finite else {}
    if comm is not None and comm.Get_size() > 1:
        gathered = comm.allgather((finite, bins))
    else:
        gathered = [(finite, bins)]
    if not all(f for f, _ in gathered):
        return math.nan
    total = Fraction(0)
    merged: dict[int, int] = {}
    for _, b in gathered:
        for k, v in b.items():
            merged[k] = merged.get(k, 0) + v
    for k, v in merged.items():
        total += Fraction(v) * (Fraction(2) ** (k - 53))
    return float(total)


def error_norm(err: np.ndarray, y_old: np.ndarray, y_new: np.ndarray, tol: Tolerance, *,
               comm: Any = None, count: int | None = None) -> float:
    """Scaled RMS norm of a local-error estimate (``≤ 1``: the step meets ``tol``).

    Parameters
    ----------
    err, y_old, y_new : numpy.ndarray, the same shape
        This rank's part of the error estimate and of the states before and after the step.
    tol : Tolerance
    comm : mpi4py communicator or None
        The sum of squares is :func:`exact_sum` over the ranks (the same bits for any ``P``).
    count : int, optional
        The number of components over all ranks (default: summed over the ranks).

    Returns
    -------
    float
        ``sqrt(Σ (err/scale)² / N)``; ``inf`` for a non-finite estimate.
    """
    r = np.asarray(err, dtype=np.float64) / tol.scale(y_old, y_new)
    s = exact_sum(r * r, comm)
    if count is None:
        count = int(exact_sum(np.array([float(r.size)]), comm))
    if not math.isfinite(s):
        return math.inf
    return math.sqrt(s / max(count, 1))


def richardson_error(y_full: np.ndarray, y_halves: np.ndarray, order: int) -> np.ndarray:
    """Step-doubling estimate of the error of two half steps, ``(y_1 − y_½½)/(2^q − 1)``.

    For a method of order ``q``, one step of size ``h`` has local error ``C h^{q+1}`` and
    two of size ``h/2`` have ``2 C (h/2)^{q+1}``; the difference ``y_1 − y_½½`` is
    ``(2^q − 1)`` times the latter, to leading order. The returned array estimates
    ``y_½½ − y(t + h)``.

    Parameters
    ----------
    y_full : numpy.ndarray
        One step of size ``h``.
    y_halves : numpy.ndarray
        Two steps of size ``h/2`` (the solution kept).
    order : int
        The method's order ``q ≥ 1`` (of the quantity compared: the weak order for
        expectations).
    """
    q = int(order)
    if q < 1:
        raise ValueError(f"order must be >= 1, got {order!r}")
    return (np.asarray(y_full) - np.asarray(y_halves)) / (2.0 ** q - 1.0)


@dataclass(kw_only=True)
class StepController:
    r"""PI step-size controller with accepted and rejected counts.

    After a step with error norm :math:`\epsilon_n` (an estimate of order ``q``, i.e. the
    local error scales as ``h^{q+1}``), the next step is

    .. math::

        h_{n+1} = h_n \cdot \min\Bigl(f_{\max}, \max\Bigl(f_{\min},\ s\,
        \epsilon_n^{-k_I/(q+1)} (\epsilon_{n-1}/\epsilon_n)^{k_P/(q+1)}\Bigr)\Bigr),

    and the step is accepted when ``ε_n ≤ 1``. After a rejection ``f_max`` is 1 (never grow
    on the retry). ``k_P = 0`` is the classical I-controller.

    With ``span = T`` (the length of the time interval) the controller bounds the error
    *per unit step* (Shampine): it judges ``ε̃_n = ε_n · T/h_n`` (accepted when ``≤ 1``, the
    exponents then ``1/q``), so the local errors of the accepted steps sum to at most the
    tolerance over ``[0, T]``: the *global* error of a contractive flow is within the
    tolerance, not ``(number of steps) ×`` it. This is what a user asking for ``rtol``
    on the final state expects; ``span=None`` is the classical per-step control.

    Parameters
    ----------
    order : int
        ``q``, the order of the error estimate.
    safety : float
        ``s`` in (0, 1).
    fmin, fmax : float
        Bounds of the step ratio (``0 < fmin < 1 < fmax``).
    k_i, k_p : float
        Integral and proportional gains ``k_I``, ``k_P`` (default 0.7 and 0.4: the PI
        controller of Hairer & Wanner, *Solving ODEs II*, §IV.2, eq. (2.43c)).
    dt_min : float
        A proposal below this is a failure (the tolerance cannot be met).
    span : float or None
        ``T`` for error-per-unit-step control (see above); ``None``: per step.
    """

    order: int
    safety: float = 0.9
    fmin: float = 0.2
    fmax: float = 5.0
    k_i: float = 0.7
    k_p: float = 0.4
    dt_min: float = 1e-12
    span: float | None = None
    accepted: int = 0
    rejected: int = 0
    _prev: float = field(default=1.0, repr=False)
    _just_rejected: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        """Check the controller's constants."""
        if int(self.order) < 1:
            raise ValueError(f"order must be >= 1, got {self.order!r}")
        if not 0 < self.safety < 1:
            raise ValueError(f"safety must be in (0, 1), got {self.safety!r}")
        if self.span is not None and not (math.isfinite(self.span) and self.span > 0):
            raise ValueError(f"span must be finite and > 0, got {self.span!r}")
        if not 0 < self.fmin < 1 < self.fmax:
            raise ValueError(f"need 0 < fmin < 1 < fmax, got {self.fmin!r}, {self.fmax!r}")

    def propose(self, dt: float, err: float) -> tuple[bool, float]:
        """Judge a step of size ``dt`` with error norm ``err``; return ``(accepted, dt_next)``.

        A non-finite ``err`` is a rejection with the smallest ratio ``fmin``.

        Raises
        ------
        FloatingPointError
            When the proposed step falls below ``dt_min`` (the tolerance is out of reach).
        """
        q1 = int(self.order) + 1
        if self.span is not None:
            err = err * float(self.span) / dt
            q1 -= 1
        if not math.isfinite(err):
            ok, factor = False, self.fmin
        else:
            e = max(err, 1e-10)
            factor = self.safety * e ** (-self.k_i / q1) * (self._prev / e) ** (self.k_p / q1)
            ok = err <= 1.0
            fmax = 1.0 if (self._just_rejected or not ok) else self.fmax
            factor = min(fmax, max(self.fmin, factor))
        if ok:
            self.accepted += 1
            self._prev = max(err, 1e-10)
        else:
            self.rejected += 1
        self._just_rejected = not ok
        dt_next = dt * factor
        if dt_next < self.dt_min:
            raise FloatingPointError(
                f"step size {dt_next:.3g} below {self.dt_min:.3g}: the requested tolerance "
                "cannot be met (raise rtol/atol)")
        return ok, dt_next
