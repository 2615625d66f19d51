"""The attention kinds: ONE registered object per kind, read by every path.

An attention kind fixes the kernel ``k`` of the scores ``s = β <Q x, K y>`` and whether
the head output is normalised (docs/theory.md §1)::

    f_h(x) = ∫ k(s) V_h y dμ(y) / Z_h(x)   (normalised, Z_h = ∫ k(s) dμ)
    f_h(x) = ∫ k(s) V_h y dμ(y)            (unnormalised)

with the potential ``Φ`` of the energy ``E_h = (1/2β) ∫∫ Φ(s) dμ dμ`` chosen so that
``Φ' = k``; ``Φ''`` enters the Itô drift of the energy under weight noise.

=========  =====  =================  =================  ===============  ==========
name       label  kernel ``k = Φ'``  ``Φ``              ``Φ''``          normalised
=========  =====  =================  =================  ===============  ==========
softmax    SA     ``e^s``            ``e^s``            ``e^s``          yes
usa        USA    ``e^s``            ``e^s``            ``e^s``          no
relu       ReLU   ``max(0, s)``      ``max(0, s)²/2``   ``1_{s>0}``      no
=========  =====  =================  =================  ===============  ==========

Each kind is an :class:`AttentionKind` (frozen) holding its :class:`Kernel`; a kernel
carries ``Φ``, ``Φ'``, ``Φ''`` (NumPy, used by the reference back-end, the energies and
the Itô terms), its compiled code (the integer the numba kernels of
:mod:`wflow.kernels` and :mod:`wflow.particles` branch on: :data:`CODE_EXP`,
:data:`CODE_RELU`; ``None`` for a kernel without compiled code), whether it grows
exponentially (scores are guarded against overflow of ``e^s``) and whether the
spherical-harmonic fast summation applies (exponential kernels only: the expansion is
that of ``e^{<a, y>}``). :data:`KINDS` (re-exported as ``wflow.attention.heads.KINDS``)
is the only list of names; :func:`get_kind` is the only look-up and raises a
``ValueError`` naming the known kinds for any other name.

Where to add a kind
-------------------
A kind with an existing kernel (say a normalised ReLU) is one :func:`_register` line
below: ``_register(AttentionKind("relu_softmax", "ReLU-SA", RELU_KERNEL, normalised=True))``.
Every path picks it up: the NumPy, direct and fast-summation sums, the energies and
slopes, the compiled particle loops (they read ``kind.code`` and ``kind.normalised``),
the equiangular ODE (generic formula from ``k`` and the normalisation), the CLI choices
and the scenario schema (both read :data:`KINDS`).

A kind with a new kernel is a :class:`Kernel` here too (``phi``, ``dphi``, ``d2phi``
in NumPy, ``code=None``, ``exponential`` and ``fastsum`` as they apply) plus its
``_register`` line. Without a compiled code it runs on the NumPy back-end
(``backend="auto"`` plans ``"numpy"``) and the Python particle loop; the direct
back-end and the compiled loops refuse it with a ``ValueError`` that says so. Compiled
code for it is a new code here and one branch in each ``kind``-switch of
:mod:`wflow.kernels._numba` and :mod:`wflow.particles._path_numba`.

Its tests: ``tests/test_kinds.py`` and every kind-parametrised test iterate over
:data:`KINDS` (``tests/conftest.py``), so ``Φ' = k`` and ``Φ''`` against finite
differences, the registry's consistency and the agreement of all back-ends run for the
new kind with no edit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = [
    "Kernel",
    "AttentionKind",
    "EXP_KERNEL",
    "RELU_KERNEL",
    "SOFTMAX",
    "USA",
    "RELU",
    "CODE_EXP",
    "CODE_RELU",
    "KERNELS",
    "REGISTRY",
    "KINDS",
    "get_kind",
]

#: Compiled code of the exponential kernel (the ``kind`` argument of the numba kernels).
CODE_EXP = 0
#: Compiled code of the ReLU kernel.
CODE_RELU = 1


@dataclass(frozen=True)
class Kernel:
    """An attention kernel ``k = Φ'`` with its potential ``Φ``.

    Attributes
    ----------
    name : str
    code : int or None
        Integer the compiled kernels branch on (``None``: no compiled code; NumPy only).
    exponential : bool
        ``k`` grows like ``e^s``: scores are guarded (``β|Qx||Ky| ≤ 700``), ``Φ = k``
        (the potential sums are the normalisers ``Z``).
    fastsum : bool
        The spherical-harmonic fast summation applies (``k(s) = e^s``).
    """

    name: str
    code: int | None
    exponential: bool
    fastsum: bool

    def phi(self, s: np.ndarray) -> np.ndarray:
        """Potential ``Φ(s)`` (elementwise, same shape as ``s``)."""
        raise NotImplementedError

    def dphi(self, s: np.ndarray) -> np.ndarray:
        """Kernel ``k(s) = Φ'(s)``."""
        raise NotImplementedError

    def d2phi(self, s: np.ndarray) -> np.ndarray:
        """``Φ''(s)`` (the Itô terms)."""
        raise NotImplementedError

    def phi_of(self, s: np.ndarray, k: np.ndarray) -> np.ndarray:
        """``Φ(s)`` given ``k = Φ'(s)`` already evaluated (saves a pass); default ``Φ(s)``."""
        return self.phi(s)


@dataclass(frozen=True)
class _Exponential(Kernel):
    """``k = Φ = Φ'' = e^s``."""

    def phi(self, s: np.ndarray) -> np.ndarray:  # noqa: D102
        return np.exp(s)

    def dphi(self, s: np.ndarray) -> np.ndarray:  # noqa: D102
        return np.exp(s)

    def d2phi(self, s: np.ndarray) -> np.ndarray:  # noqa: D102
        return np.exp(s)

    def phi_of(self, s: np.ndarray, k: np.ndarray) -> np.ndarray:  # noqa: D102
        return k


@dataclass(frozen=True)
class _ReLU(Kernel):
    """``k = max(0, s)``, ``Φ = max(0, s)²/2``, ``Φ'' = 1_{s>0}``."""

    def phi(self, s: np.ndarray) -> np.ndarray:  # noqa: D102
        k = np.maximum(s, 0.0)
        return 0.5 * k * k

    def dphi(self, s: np.ndarray) -> np.ndarray:  # noqa: D102
        return np.maximum(s, 0.0)

    def d2phi(self, s: np.ndarray) -> np.ndarray:  # noqa: D102
        return (s > 0).astype(float)

    def phi_of(self, s: np.ndarray, k: np.ndarray) -> np.ndarray:  # noqa: D102
        return 0.5 * k * k


#: The exponential kernel ``e^s`` (softmax, USA).
EXP_KERNEL = _Exponential("exp", CODE_EXP, exponential=True, fastsum=True)
#: The ReLU kernel ``max(0, s)``.
RELU_KERNEL = _ReLU("relu", CODE_RELU, exponential=False, fastsum=False)
#: Every kernel, by name.
KERNELS: dict[str, Kernel] = {kern.name: kern for kern in (EXP_KERNEL, RELU_KERNEL)}


@dataclass(frozen=True)
class AttentionKind:
    """One attention kind: its kernel and whether head outputs are normalised.

    Attributes
    ----------
    name : str
        The name used everywhere (``Attention.kind``, TOML ``attention.kind``, ``--kind``).
    label : str
        Short label of the literature (``"SA"``, ``"USA"``, ``"ReLU"``).
    kernel : Kernel
    normalised : bool
        Head outputs divided by ``Z_h`` (softmax); then the effective mobility is
        ``b̂ = (Σ_h w̄_h Z_h)^{-1}``, else ``b̂ ≡ 1``.
    code : int or None
        Compiled kernel code (``kernel.code``).
    exponential : bool
        Kernel ``e^s`` (overflow guard; ``Φ = k``), ``kernel.exponential``.
    fastsum : bool
        Whether the spherical-harmonic fast summation applies (``kernel.fastsum``).
    compiled : bool
        Whether the compiled paths (direct sums, compiled particle loops) run this kind.

    The last four are copied from the kernel at construction (plain attributes: the
    per-call dispatch of small problems stays at a few tens of nanoseconds).
    """

    name: str
    label: str
    kernel: Kernel
    normalised: bool = False
    code: int | None = field(init=False, compare=False)
    exponential: bool = field(init=False, compare=False)
    fastsum: bool = field(init=False, compare=False)
    compiled: bool = field(init=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "code", self.kernel.code)
        object.__setattr__(self, "exponential", self.kernel.exponential)
        object.__setattr__(self, "fastsum", self.kernel.fastsum)
        object.__setattr__(self, "compiled", self.kernel.code is not None)

    def phi(self, s: np.ndarray) -> np.ndarray:
        """``Φ(s)``."""
        return self.kernel.phi(s)

    def dphi(self, s: np.ndarray) -> np.ndarray:
        """``k(s) = Φ'(s)``."""
        return self.kernel.dphi(s)

    def d2phi(self, s: np.ndarray) -> np.ndarray:
        """``Φ''(s)``."""
        return self.kernel.d2phi(s)

    def require_compiled(self, where: str) -> int:
        """The compiled code, or ``ValueError`` naming ``where`` if the kernel has none."""
        if self.code is None:
            raise ValueError(f"{where}: attention kind {self.name!r} (kernel "
                             f"{self.kernel.name!r}) has no compiled kernel; use the NumPy "
                             "back-end / the Python particle loop")
        return self.code


#: name -> kind, in registration order.
REGISTRY: dict[str, AttentionKind] = {}


def _register(kind: AttentionKind) -> AttentionKind:
    if kind.name in REGISTRY:
        raise ValueError(f"attention kind {kind.name!r} registered twice")
    REGISTRY[kind.name] = kind
    return kind


SOFTMAX = _register(AttentionKind("softmax", "SA", EXP_KERNEL, normalised=True))
USA = _register(AttentionKind("usa", "USA", EXP_KERNEL, normalised=False))
RELU = _register(AttentionKind("relu", "ReLU", RELU_KERNEL, normalised=False))

#: Names of the attention kinds (the only list; derived from :data:`REGISTRY`).
KINDS: tuple[str, ...] = tuple(REGISTRY)


def get_kind(kind: str | AttentionKind) -> AttentionKind:
    """The registered :class:`AttentionKind` of a name (a kind object is returned as is).

    Raises
    ------
    ValueError
        Unknown name; the message lists the known kinds.
    """
    try:
        return REGISTRY[kind]
    except (KeyError, TypeError):
        if isinstance(kind, AttentionKind):
            return kind
        raise ValueError(f"attention kind: must be one of {tuple(REGISTRY)}, "
                         f"got {kind!r}") from None
