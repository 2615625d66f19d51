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
that of ``e^{<a, y>}``). :data:`REGISTRY` is the only registry and :data:`KINDS`
(re-exported as ``wflow.attention.heads.KINDS``) a live view of its names: every reader
(:class:`~wflow.attention.heads.Attention`, the scenario's ``[attention] kind``, the
CLI's ``--kind``, :func:`get_kind`) reads it at call time, so a kind registered at run
time is valid everywhere at once. :func:`get_kind` is the only look-up and raises a
``ValueError`` naming the known kinds for any other name.

Where to add a kind
-------------------
From your own code (no edit of wflow): :func:`register_kind` (undo with
:func:`unregister_kind`, or :func:`registered_kind` for a ``with`` block). A scenario
reaches a kind defined in the user's file with a top-level ``modules = ["my_kinds.py"]``
(imported before anything is validated; ``wflow particles / pde / jko / run``).

* A kind with an existing kernel (say a normalised ReLU):
  ``register_kind(AttentionKind("relu_sa", "ReLU-SA", RELU_KERNEL, normalised=True))``.
  Every path runs it: the NumPy, direct and fast-summation sums, the energies and slopes,
  the compiled particle loops (they read ``kind.code`` and ``kind.normalised``), the
  equiangular ODE (generic formula from ``k`` and the normalisation).
* A kind with a new kernel: a :class:`Kernel` subclass with ``phi``, ``dphi``, ``d2phi``
  in NumPy and ``code=None`` (``exponential`` and ``fastsum`` as they apply). It runs on
  every solver under ``kernel_backend = "auto"``: the plan is the NumPy sums and every
  solver keeps it (particles on the Python engine, the PDE, the JKO, the energies). The
  compiled paths (direct sums, the fused particle pass, the compiled particle loop,
  ``euler_path``) refuse it with one message (:meth:`AttentionKind.not_compiled`, raised
  by :meth:`AttentionKind.require_compiled`), and ``auto`` never picks them for it.
  :func:`register_kind` refuses a new kernel that claims an existing compiled code (the
  numba kernels branch on the code alone: it would run as that kernel).
* Compiled code for a new kernel is a change to wflow: a new code here and one branch in
  each ``kind``-switch of :mod:`wflow.kernels._numba` and
  :mod:`wflow.particles._path_numba`, and its kind registered with
  ``REGISTRY.add(kind, builtin=True)``.

Its tests need no edit: ``tests/test_kinds.py`` and every kind-parametrised test iterate
over :data:`KINDS` (``tests/conftest.py``) with references built from the kind's own
``Φ``, ``Φ'``, ``Φ''`` and ``normalised``; tests of a compiled path skip a kind without
compiled code, saying so. ``WFLOW_TEST_EXTRA_KINDS=poly2,tanh pytest ...`` runs the suite
with two NumPy-only kinds registered (the proof). See
``docs/tutorials/plot_4_own_kind_and_integrator.py`` for a kind and an integrator of a
user's own, end to end.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np

from ..infra.registry import Names, Registry

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
    "register_kind",
    "registered_kind",
    "unregister_kind",
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
        The kernel's name (``"exp"``, ``"relu"``), named in the kernel log and errors.
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

    @property
    def exact_backend(self) -> str:
        """The exact (unapproximated) sums of this kind: ``"direct"`` (compiled) or ``"numpy"``."""
        return "direct" if self.compiled else "numpy"

    def not_compiled(self) -> str | None:
        """Why the compiled paths refuse this kind (``None``: they run it).

        The one message of every compiled path (direct sums, fused particle pass, compiled
        particle loop, :func:`~wflow.particles.euler_path`).
        """
        if self.code is not None:
            return None
        return (f"attention kind {self.name!r} (kernel {self.kernel.name!r}) has no compiled "
                "kernel; use the NumPy back-end / the Python particle loop")

    def require_compiled(self, where: str) -> int:
        """The compiled code, or ``ValueError`` naming ``where`` if the kernel has none."""
        why = self.not_compiled()
        if why is not None:
            raise ValueError(f"{where}: {why}")
        return self.code


def _definition(kind: AttentionKind) -> tuple:
    """What a kind is, independent of the module object that defined it (re-imports)."""
    kern = kind.kernel
    mod = type(kern).__module__
    where = getattr(sys.modules.get(mod), "__file__", None) or mod  # the file, not its name
    return (kind.name, kind.label, kind.normalised, kern.name, kern.code, kern.exponential,
            kern.fastsum, where, type(kern).__qualname__)


def _admit(kind: AttentionKind) -> None:
    """Refuse a kind whose kernel would run as another one (see :func:`register_kind`)."""
    kern = kind.kernel
    if kern.code is not None:
        owner = next((k for k in _kernels().values() if k.code == kern.code), None)
        if owner is not kern:
            raise ValueError(
                f"attention kind {kind.name!r}: kernel {kern.name!r} claims compiled code "
                f"{kern.code}, "
                + (f"which is the code of kernel {owner.name!r}; " if owner is not None
                   else "which no compiled kernel has; ")
                + "a kernel without numba code has code=None (NumPy paths)")
    old = REGISTRY.get(kind.name) if kind.name in REGISTRY else None
    taken = _kernels(without=old).get(kern.name)
    if taken is not None and taken is not kern:
        raise ValueError(f"attention kind {kind.name!r}: kernel name {kern.name!r} is taken "
                         f"by {taken!r}")


#: The attention kinds, by name, in registration order (the only registry of them:
#: :func:`register_kind` / :func:`unregister_kind` edit it; :func:`get_kind` reads it).
REGISTRY: Registry[AttentionKind] = Registry(
    "attention kind", AttentionKind, key="attention.kind",
    same=lambda old, new: _definition(old) == _definition(new), admit=_admit)


def _kernels(without: AttentionKind | None = None) -> dict[str, Kernel]:
    """Kernels by name: the built-in ones and those of the registered kinds (but ``without``)."""
    out = {k.name: k for k in (EXP_KERNEL, RELU_KERNEL)}
    for k in REGISTRY.values():
        if k is not without:
            out.setdefault(k.kernel.name, k.kernel)
    return out


class _KernelView(Mapping[str, Kernel]):
    """Every kernel of a registered kind (and the built-in ones), by name: a live view."""

    def __getitem__(self, name: str) -> Kernel:
        return _kernels()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(_kernels())

    def __len__(self) -> int:
        return len(_kernels())


#: Every kernel of a registered kind, by name (derived from :data:`REGISTRY`, read live).
KERNELS: Mapping[str, Kernel] = _KernelView()


def register_kind(kind: AttentionKind) -> AttentionKind:
    """Register an attention kind at run time; every path reads it from then on.

    The name becomes valid for :class:`~wflow.attention.heads.Attention`, the scenario
    key ``[attention] kind``, the CLI's ``--kind`` and every sum, energy and solver (they
    read :data:`REGISTRY` / :data:`KINDS` at each call). A kernel without compiled code
    (``code=None``) runs on the NumPy back-end and the Python particle loop; the compiled
    paths refuse it (:meth:`AttentionKind.require_compiled`). A kind need not be
    registered to run from the API (``Attention(kind=my_kind)``): registration is how a
    scenario and the command line reach it.

    Registering the same definition again (an equal kind, or the same module re-imported,
    as a scenario's ``modules`` are on each load) returns the registered kind.

    Parameters
    ----------
    kind : AttentionKind

    Returns
    -------
    AttentionKind
        The registered kind.

    Raises
    ------
    TypeError
        ``kind`` is not an :class:`AttentionKind`.
    ValueError
        The name is taken by another definition (a built-in kind is never replaced); the
        kernel claims a compiled code it does not own (the numba kernels branch on the
        code alone, so a new kernel with an existing code would run as that kernel); the
        kernel's name is taken by another kernel.
    """
    if not isinstance(kind, AttentionKind):
        raise TypeError(f"register_kind: expected an AttentionKind, got {type(kind).__name__}")
    return REGISTRY.add(kind)


def unregister_kind(name: str) -> AttentionKind:
    """Remove a kind registered by :func:`register_kind` (and its kernel, if unused).

    Raises ``ValueError`` for a built-in kind or an unknown name.
    """
    get_kind(name)
    return REGISTRY.unregister(name)


@contextmanager
def registered_kind(kind: AttentionKind) -> Iterator[AttentionKind]:
    """Register ``kind`` for the ``with`` block, then unregister it (tests, examples).

    A kind registered before the block stays registered after it.
    """
    was = kind.name in REGISTRY
    spec = register_kind(kind)
    try:
        yield spec
    finally:
        if not was and spec.name in REGISTRY and REGISTRY.get(spec.name) is spec:
            unregister_kind(spec.name)


SOFTMAX = REGISTRY.add(AttentionKind("softmax", "SA", EXP_KERNEL, normalised=True),
                       builtin=True)
USA = REGISTRY.add(AttentionKind("usa", "USA", EXP_KERNEL, normalised=False), builtin=True)
RELU = REGISTRY.add(AttentionKind("relu", "ReLU", RELU_KERNEL, normalised=False), builtin=True)

#: Names of the attention kinds: a live view of :data:`REGISTRY` (the only list).
KINDS: Names = REGISTRY.view()


def get_kind(kind: str | AttentionKind) -> AttentionKind:
    """The :class:`AttentionKind` a value means: a registered name's, or a kind object as is.

    A kind object is accepted unregistered (as ``diffeqsolve`` takes a solver instance).

    Raises
    ------
    ValueError
        Unknown name (:class:`~wflow.infra.registry.UnknownName`, listing the known kinds)
        or neither a name nor an :class:`AttentionKind`
        (:class:`~wflow.infra.registry.WrongMethod`), each naming ``attention.kind``.
    """
    return REGISTRY.resolve(kind)
