r"""The causal mask and the positional bias: token order as part of the model (THEORY §9).

In a decoder the tokens carry positions ``i = 0..n−1`` (their index in the array, the
order in which every solver keeps them) and token ``i`` attends to ``j ≤ i`` only
(``j < i`` with ``strict``), with an optional positional bias ``b(i, j)`` added to the
score. For a head ``h`` with score ``s_h(x, y) = β⟨Q_h x, K_h y⟩`` and kernel ``k`` of the
attention kind, the logit of the pair is ``ℓ_ij = s_h(x_i, x_j) + b(i, j)``; the softmax
head output is

.. math::

    f_h(x_i) = \frac{\sum_{j \le i} e^{s_h(x_i, x_j) + b(i, j)}\, V_h x_j}
                    {\sum_{j \le i} e^{s_h(x_i, x_j) + b(i, j)}},

and every other kind applies its kernel to the logit the same way (``k(ℓ_ij)``; the
unnormalised kinds drop the denominator). Masses ``m_j`` weigh the sources as in the
non-causal sums (``1/n`` for tokens).

Objects (frozen, compared by value):

* :class:`Causal` — the mask (``strict=False``: ``j ≤ i``; ``strict=True``: ``j < i``, the
  first token then attends to nothing and its softmax output is undefined: its sums are 0);
* :class:`ALiBi` — the bias ``b(i, j) = −slope · (i − j)`` (``≤ 0`` under the mask). The
  published model of Duerinckx–Geshkovski–Rossi (``borjanG/2026-lost-in-the-middle``)
  writes the weight ``e^{−(λ/n)(j−k)}``: ``slope = λ/n`` (:meth:`ALiBi.from_dgr`). Their
  model normalises by the positions alone (:mod:`wflow.published.lost_in_the_middle`);
  here the bias enters the content softmax above;
* :class:`Bias` — a user's vectorised ``b(i, j)``: called with integer arrays ``i`` (rows)
  and ``j`` (columns) that broadcast to a block, returning finite floats of that shape.

``mask=None`` (and ``bias=None``) is the non-causal model of today, bit for bit: the sums
are those of :func:`wflow.kernels.kernel_sums`. A bias needs the mask (positions have a
meaning only in a decoder here). :func:`get_mask` and :func:`get_bias` turn the
scenario's values (``attention.mask``, ``attention.bias``) into these objects, raising
:class:`~wflow.infra.schema.ScenarioError` naming the key.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..infra.schema import ScenarioError

__all__ = ["Causal", "ALiBi", "Bias", "MASKS", "get_mask", "get_bias", "check_mask_bias",
           "refuse_masked"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True, kw_only=True)
class Causal:
    """The causal mask: token ``i`` attends to ``j ≤ i`` (``j < i`` when ``strict``).

    Parameters
    ----------
    strict : bool
        ``False`` (default): ``j ≤ i`` (the decoder of Karagodin–Polyanskiy–Rigollet);
        ``True``: ``j < i`` (the published ALiBi circle model; token 0 attends to nothing).
    """

    strict: bool = False

    @property
    def name(self) -> str:
        """``"causal"`` or ``"causal_strict"`` (the scenario value)."""
        return "causal_strict" if self.strict else "causal"

    @property
    def shift(self) -> int:
        """``1`` for ``j ≤ i``, ``0`` for ``j < i``: token ``i`` sees ``j < i + shift``."""
        return 0 if self.strict else 1

    def allowed(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """Boolean ``j ≤ i`` (resp. ``j < i``), broadcast over integer arrays ``i, j``."""
        i = np.asarray(i)
        j = np.asarray(j)
        return (j < i + self.shift)

    def count(self, i: np.ndarray | int, n: int) -> np.ndarray:
        """Number of sources ``j ∈ [0, n)`` token ``i`` attends to: ``clip(i + shift, 0, n)``."""
        return np.clip(np.asarray(i) + self.shift, 0, n)


@dataclass(frozen=True)
class ALiBi:
    """ALiBi positional bias ``b(i, j) = −slope · (i − j)`` (attention with linear biases).

    Parameters
    ----------
    slope : float
        ``≥ 0`` (per position; dimensionless). Under the causal mask ``b ≤ 0``: a source
        ``i − j`` positions back is damped by ``e^{−slope (i − j)}``. [DGR]'s ``λ`` over
        ``n`` tokens is ``slope = λ/n`` (:meth:`from_dgr`).
    """

    slope: float

    def __post_init__(self) -> None:
        s = self.slope
        if isinstance(s, bool) or not isinstance(s, (int, float, np.floating, np.integer)):
            raise ScenarioError(f"attention.bias.slope: expected a number, got {s!r}")
        if not (math.isfinite(float(s)) and float(s) >= 0):
            raise ScenarioError(f"attention.bias.slope: must be finite and >= 0, got {s!r}")
        object.__setattr__(self, "slope", float(s))

    @classmethod
    def from_dgr(cls, lam: float, n: int) -> ALiBi:
        """The bias of [DGR]'s weights ``e^{−(λ/n)(j−k)}``: ``slope = λ/n``."""
        if int(n) < 1:
            raise ScenarioError(f"attention.bias.n: must be >= 1, got {n!r}")
        return cls(float(lam) / int(n))

    def __call__(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """``b(i, j) = −slope (i − j)`` (float64, broadcast)."""
        return -self.slope * (np.asarray(i, dtype=np.float64) - np.asarray(j, dtype=np.float64))


@dataclass(frozen=True)
class Bias:
    """A user's positional bias ``b(i, j)``, vectorised.

    Parameters
    ----------
    fn : callable
        ``fn(i, j)`` with integer arrays ``i`` of shape ``(r, 1)`` and ``j`` of shape
        ``(1, c)`` (global 0-based positions) returning a float array of shape ``(r, c)``
        (or broadcastable to it); every value must be finite (use the mask, not ``−inf``,
        to remove pairs).
    name : str
        A label for logs and outputs.
    """

    fn: Callable[[np.ndarray, np.ndarray], Any]
    name: str = "callable"

    def __post_init__(self) -> None:
        if not callable(self.fn):
            raise ScenarioError(f"attention.bias: expected a callable b(i, j), got {self.fn!r}")

    def __call__(self, i: np.ndarray, j: np.ndarray) -> np.ndarray:
        """``b(i, j)`` as a finite float64 array of the broadcast shape (else ``ScenarioError``)."""
        i = np.asarray(i)
        j = np.asarray(j)
        shape = np.broadcast_shapes(i.shape, j.shape)
        out = np.asarray(self.fn(i, j), dtype=np.float64)
        try:
            out = np.broadcast_to(out, shape)
        except ValueError:
            raise ScenarioError(f"attention.bias: b(i, j) returned shape {out.shape}, "
                                f"expected {shape}") from None
        if not np.all(np.isfinite(out)):
            raise ScenarioError("attention.bias: b(i, j) returned NaN or Inf "
                                "(mask pairs with the mask, not with -inf)")
        return out


#: The scenario values of ``attention.mask`` and their objects (``"none"``: no mask).
MASKS: dict[str, Causal | None] = {
    "none": None,
    "causal": Causal(strict=False),
    "causal_strict": Causal(strict=True),
}


def get_mask(value: Any, key: str = "attention.mask") -> Causal | None:
    """The mask object of a scenario value (``None``, a name of :data:`MASKS`, a :class:`Causal`).

    Raises
    ------
    ScenarioError
        Unknown value; the message names ``key`` and the known values.
    """
    if value is None or isinstance(value, Causal):
        return value
    if isinstance(value, str) and value in MASKS:
        return MASKS[value]
    raise ScenarioError(f"{key}: must be one of {list(MASKS)} or a Causal mask, got {value!r}")


def get_bias(value: Any, key: str = "attention.bias") -> ALiBi | Bias | None:
    """The bias object of a scenario value.

    Accepts ``None`` / ``"none"``, an :class:`ALiBi` or :class:`Bias`, a callable
    (wrapped in :class:`Bias`), or a table ``{"type": "alibi", "slope": s}`` /
    ``{"type": "alibi", "lam": λ, "n": n}`` ([DGR]'s ``λ/n``).

    Raises
    ------
    ScenarioError
        Anything else; the message names ``key``.
    """
    if value is None or (isinstance(value, str) and value == "none"):
        return None
    if isinstance(value, (ALiBi, Bias)):
        return value
    if isinstance(value, Mapping):
        kind = value.get("type")
        if kind != "alibi":
            raise ScenarioError(f"{key}.type: must be 'alibi', got {kind!r}")
        extra = set(value) - {"type", "slope", "lam", "n"}
        if extra:
            raise ScenarioError(f"{key}: unknown keys {sorted(extra)}")
        if "slope" in value and ("lam" in value or "n" in value):
            raise ScenarioError(f"{key}: give either slope or (lam, n), not both")
        if "slope" in value:
            return _alibi(value["slope"], f"{key}.slope")
        if "lam" in value and "n" in value:
            n = value["n"]
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ScenarioError(f"{key}.n: must be an integer >= 1, got {n!r}")
            return _alibi(value["lam"] / n if isinstance(value["lam"], (int, float))
                          and not isinstance(value["lam"], bool) else value["lam"],
                          f"{key}.lam")
        raise ScenarioError(f"{key}: an alibi bias needs slope, or lam and n")
    if callable(value):
        return Bias(value)
    raise ScenarioError(f"{key}: expected none, an alibi table, ALiBi, Bias or a callable "
                        f"b(i, j), got {value!r}")


def _alibi(slope: Any, key: str) -> ALiBi:
    try:
        return ALiBi(slope)
    except ScenarioError as exc:
        raise ScenarioError(str(exc).replace("attention.bias.slope", key)) from None


def check_mask_bias(mask: Any, bias: Any) -> tuple[Causal | None, ALiBi | Bias | None]:
    """Validated ``(mask, bias)``; a bias without the causal mask is refused (``ScenarioError``)."""
    mk = get_mask(mask)
    bs = get_bias(bias)
    if bs is not None and mk is None:
        raise ScenarioError("attention.bias: a positional bias needs attention.mask = "
                            "'causal' (positions are defined by the decoder's order)")
    return mk, bs


def refuse_masked(attn: Any, where: str) -> None:
    """Refuse a masked attention where the model must be exchangeable (a gradient flow).

    The causal system (THEORY §9) has no energy identity: no first variation, no JKO step,
    no EDI, no transformer PDE on one density. A solver built on them calls this first.

    Parameters
    ----------
    attn : Attention (or any object with ``mask`` and ``bias`` attributes)
        The attention of the run; ``mask = None`` and ``bias = None`` pass.
    where : str
        What refuses (e.g. ``"the transformer PDE"``), for the message.

    Raises
    ------
    ScenarioError
        Naming ``attention.mask`` (or ``attention.bias``) and why.
    """
    mask = getattr(attn, "mask", None)
    bias = getattr(attn, "bias", None)
    if mask is None and bias is None:
        return
    key, val = ("attention.mask", mask.name) if mask is not None else ("attention.bias", bias)
    raise ScenarioError(f"{key}: {where} needs the exchangeable model (attention.mask = "
                        f"'none'), got {val!r}: the causal system is not a gradient flow (no "
                        "energy, first variation, JKO step or EDI); run it as particles")
