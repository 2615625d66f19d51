"""Attention heads: parameters ``(Q_h, K_h, V_h, w_h)`` and the attention kind.

Conventions (docs/theory.md §1): head ``h`` has ``Q_h, K_h ∈ R^{k×d}``,
``V_h ∈ R^{d×d}`` and a mixing weight ``w_h >= 0``; its score is
``s_h(x, y) = β <Q_h x, K_h y> = β xᵀ A_h y`` with ``A_h = Q_hᵀ K_h``.
``w_h = 1/H`` is the mean-field average of [TD], ``w_h = 1`` the sum of [MH].

Values of rank ``r`` (a trained transformer's ``r = k = d/H``): ``V_h = W_{O,h} W_{V,h}``
with ``W_{V,h} ∈ R^{r×d}``, ``W_{O,h} ∈ R^{d×r}`` (``Heads(Q, K, None, w, WV=..., WO=...)``).
The kernel sums then accumulate the ``r``-vectors ``W_{V,h} y_j`` and apply ``W_{O,h}`` once
per target (:meth:`Heads.value_factors`, ``values=`` of :func:`wflow.kernels.kernel_sums`):
``O(n² r)`` per head instead of ``O(n² d)``. ``V`` is still the full product (every
consumer of ``heads.V`` sees the same map); heads given by ``V`` are today's, bit for bit.

Builders: scalar heads ``λ_h I``, random symmetric (``D = Z + Zᵀ``) heads,
random heads of rank ``k`` (:meth:`Heads.random_rank`), bilinear heads from matrices
``A_h`` (``Q = I, K = A``), and ``.npz`` files.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np

from .kinds import KINDS, AttentionKind, get_kind  # the registry of wflow.attention.kinds
from .mask import ALiBi, Bias, Causal, check_mask_bias

__all__ = ["Heads", "Attention", "KINDS"]

Kind = Literal["softmax", "usa", "relu"]


@dataclass(frozen=True)
class Attention:
    """Attention kind and inverse temperature.

    Parameters
    ----------
    kind : {"softmax", "usa", "relu"}, a kind registered later, or an AttentionKind
        ``softmax``: ``f_h = ∫ e^{s} V y dμ / ∫ e^{s} dμ``; ``usa``: the same
        without normalisation; ``relu``: ``f_h = ∫ max(0, s) V y dμ``; any name of
        :data:`~wflow.attention.kinds.KINDS` (read at construction:
        :func:`~wflow.attention.kinds.register_kind` adds one), or an
        :class:`~wflow.attention.kinds.AttentionKind` object, registered or not.
    beta : float
        Inverse temperature ``β > 0`` multiplying every score.
    mask : Causal, "causal", "causal_strict", "none" or None
        Token order as part of the model (:mod:`wflow.attention.mask`, THEORY §9): token
        ``i`` (its row in the token array) attends to ``j ≤ i`` (``j < i`` strict) only.
        ``None`` (default): the exchangeable model, bit for bit today's. Keyword only.
    bias : ALiBi, Bias, callable, alibi table or None
        Positional bias ``b(i, j)`` added to every score under the mask
        (:func:`wflow.attention.mask.get_bias`); needs ``mask``. Keyword only.

    A masked attention moves particles only (:func:`wflow.particles.simulate`): the
    causal system is not a gradient flow, and the solvers built on the energy (the
    transformer PDE, JKO, EDI) refuse it (:func:`wflow.attention.mask.refuse_masked`).
    """

    kind: Kind | AttentionKind = "softmax"
    beta: float = 1.0
    mask: Causal | None = field(default=None, kw_only=True)
    bias: ALiBi | Bias | None = field(default=None, kw_only=True)

    def __post_init__(self) -> None:
        get_kind(self.kind)  # a registered name or a kind object, else a ValueError
        if not (np.isfinite(self.beta) and self.beta > 0):
            raise ValueError(f"attention.beta: must be a finite number > 0, got {self.beta!r}")
        mask, bias = check_mask_bias(self.mask, self.bias)  # ScenarioError naming the key
        object.__setattr__(self, "mask", mask)
        object.__setattr__(self, "bias", bias)

    @property
    def masked(self) -> bool:
        """True under a causal mask (token order is part of the model)."""
        return self.mask is not None

    def unmasked(self) -> Attention:
        """The same kind and ``β`` without mask and bias (the exchangeable model)."""
        return self if self.mask is None and self.bias is None else Attention(self.kind,
                                                                              self.beta)


def _as3(a: np.ndarray, name: str) -> np.ndarray:
    arr = np.asarray(a, dtype=np.float64)
    if arr.ndim == 2:
        arr = arr[None]
    if arr.ndim != 3:
        raise ValueError(f"heads.{name}: expected shape (H, rows, cols), got {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"heads.{name}: contains NaN or Inf")
    return arr


@dataclass(frozen=True)
class Heads:
    """Parameters of ``H`` attention heads acting on ``R^d``.

    Attributes
    ----------
    Q, K : (H, k, d) arrays
        Query and key matrices; only ``A_h = Q_hᵀ K_h`` enters the scores.
    V : (H, d, d) array
        Value matrices (``None`` when given by ``WV, WO``: then ``V_h = W_{O,h} W_{V,h}``).
    w : (H,) array
        Mixing weights ``w_h >= 0`` (not necessarily summing to one).
    WV : (H, r, d) array, optional
        Value factors ``W_{V,h}`` of a value of rank ``r`` (keyword; with ``WO``, and
        ``V=None``).
    WO : (H, d, r) array, optional
        Output factors ``W_{O,h}``.
    """

    Q: np.ndarray
    K: np.ndarray
    V: np.ndarray | None
    w: np.ndarray
    WV: np.ndarray | None = field(default=None, kw_only=True, repr=False)
    WO: np.ndarray | None = field(default=None, kw_only=True, repr=False)
    _A: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        Q, K = _as3(self.Q, "Q"), _as3(self.K, "K")
        WV, WO = self._factors(Q.shape)
        V = _as3(self.V, "V") if WV is None else np.matmul(WO, WV)
        H = Q.shape[0]
        w = np.asarray(self.w, dtype=np.float64).reshape(-1)
        if w.size == 1 and H > 1:
            w = np.full(H, float(w[0]))
        if K.shape != Q.shape:
            raise ValueError(f"heads.K: shape {K.shape} must equal heads.Q shape {Q.shape}")
        d = Q.shape[2]
        if V.shape != (H, d, d):
            raise ValueError(f"heads.V: expected shape {(H, d, d)}, got {V.shape}")
        if w.shape != (H,):
            raise ValueError(f"heads.w: expected {H} mixing weights, got shape {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("heads.w: mixing weights must be finite and >= 0")
        if not np.any(w > 0):
            raise ValueError("heads.w: at least one mixing weight must be > 0")
        for name, arr in (("Q", Q), ("K", K), ("V", V), ("w", w), ("WV", WV), ("WO", WO)):
            if arr is not None:
                arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        A = np.einsum("hki,hkj->hij", Q, K)
        A.setflags(write=False)
        object.__setattr__(self, "_A", A)

    def _factors(self, qshape: tuple[int, ...]) -> tuple[np.ndarray | None, np.ndarray | None]:
        """Validated ``(WV, WO)`` (``(None, None)``: a full value ``V``)."""
        if self.WV is None and self.WO is None:
            if self.V is None:
                raise ValueError("heads.V: give V, or the factors WV and WO of a value of "
                                 "rank r")
            return None, None
        if self.WV is None or self.WO is None:
            missing = "WO" if self.WO is None else "WV"
            raise ValueError(f"heads.{missing}: a value of rank r needs both WV (H, r, d) and "
                             "WO (H, d, r)")
        if self.V is not None:
            raise ValueError("heads.V: give either V or its factors WV, WO, not both")
        H, _, d = qshape
        WV, WO = _as3(self.WV, "WV"), _as3(self.WO, "WO")
        r = WV.shape[1]
        if WV.shape != (H, r, d) or r < 1:
            raise ValueError(f"heads.WV: expected shape (H={H}, r, d={d}) with r >= 1, got "
                             f"{WV.shape}")
        if WO.shape != (H, d, r):
            raise ValueError(f"heads.WO: expected shape {(H, d, r)} (rank r = {r} of WV), "
                             f"got {WO.shape}")
        return WV, WO

    # ------------------------------------------------------------------ shape
    @property
    def H(self) -> int:
        """Number of heads."""
        return self.Q.shape[0]

    @property
    def d(self) -> int:
        """Ambient dimension ``d`` (tokens live on ``S^{d-1}``)."""
        return self.Q.shape[2]

    @property
    def k(self) -> int:
        """Query/key dimension."""
        return self.Q.shape[1]

    @property
    def value_rank(self) -> int:
        """Rank ``r`` of the value factors (``d`` for heads given by a full ``V``)."""
        return self.d if self.WV is None else int(self.WV.shape[1])

    def value_factors(self) -> tuple[np.ndarray, np.ndarray] | None:
        """``(WV, WO)`` of shapes ``(H, r, d)``, ``(H, d, r)``, or ``None`` for a full ``V``.

        With the factors, ``Y^V_h(i) = Σ_j m_j k(s_ij) W_{V,h} y_j`` (``values=WV`` of
        :func:`wflow.kernels.kernel_sums`) and the head output is ``W_{O,h} Y^V_h(i)``
        (:meth:`apply_outputs`), equal to ``V_h Y_h(i)``.
        """
        return None if self.WV is None else (self.WV, self.WO)

    def apply_outputs(self, YV: np.ndarray) -> np.ndarray:
        """``W_{O,h} Y^V_h(i)`` for value sums ``YV`` of shape ``(H, M, r)``; shape ``(H, M, d)``.

        For heads given by a full ``V`` (``r = d``) this is ``V_h Y_h(i)``.
        """
        W = self.V if self.WO is None else self.WO
        return np.matmul(YV, np.swapaxes(W, 1, 2))

    @property
    def A(self) -> np.ndarray:
        """Bilinear score matrices ``A_h = Q_hᵀ K_h``, shape ``(H, d, d)``."""
        return self._A

    @property
    def wbar(self) -> np.ndarray:
        """Normalised weights ``w̄_h = w_h / Σ w``."""
        return self.w / self.w.sum()

    def is_symmetric(self, tol: float = 1e-12) -> bool:
        """True if every ``A_h`` is symmetric (relative tolerance ``tol``)."""
        scale = max(1.0, float(np.max(np.abs(self.A))))
        return bool(np.max(np.abs(self.A - np.swapaxes(self.A, 1, 2))) <= tol * scale)

    def value_alignment(self, tol: float = 1e-12) -> int:
        """``+1`` if ``V_h = A_h`` for all heads, ``-1`` if ``V_h = -A_h``, else ``0``.

        ``+1`` is the ascent convention of docs/theory.md §3 (``E`` increases);
        ``-1`` is the descent convention of the published experiments.
        """
        scale = max(1.0, float(np.max(np.abs(self.A))))
        if np.max(np.abs(self.V - self.A)) <= tol * scale:
            return 1
        if np.max(np.abs(self.V + self.A)) <= tol * scale:
            return -1
        return 0

    def select(self, idx: int | slice | np.ndarray) -> Heads:
        """Sub-collection of heads (keeps the mixing weights)."""
        idx = np.atleast_1d(np.arange(self.H)[idx])
        if self.WV is not None:
            return Heads(self.Q[idx], self.K[idx], None, self.w[idx], WV=self.WV[idx],
                         WO=self.WO[idx])
        return Heads(self.Q[idx], self.K[idx], self.V[idx], self.w[idx])

    def with_(self, **changes: np.ndarray) -> Heads:
        """Copy with some of ``Q, K, V, w, WV, WO`` replaced.

        A new ``V`` drops the factors (a full value); new factors drop ``V``.
        """
        if changes.get("V") is not None:
            changes.setdefault("WV", None)
            changes.setdefault("WO", None)
        elif "WV" in changes or "WO" in changes:
            changes["V"] = None
        elif self.WV is not None:
            changes["V"] = None
        return replace(self, **changes)

    # --------------------------------------------------------------- builders
    @classmethod
    def scalar(cls, lambdas: np.ndarray | list[float], d: int, *, w: float | np.ndarray = 1.0,
               value_sign: float = 1.0) -> Heads:
        """Scalar heads ``A_h = λ_h I``, ``V_h = value_sign · λ_h I`` ([MH] §6)."""
        lam = np.atleast_1d(np.asarray(lambdas, dtype=np.float64))
        eye = np.eye(d)
        Q = np.broadcast_to(eye, (lam.size, d, d)).copy()
        K = lam[:, None, None] * eye
        return cls(Q, K, value_sign * K.copy(), np.broadcast_to(np.asarray(w, float), lam.shape))

    @classmethod
    def bilinear(cls, A: np.ndarray, *, V: np.ndarray | None = None, w: float | np.ndarray = 1.0,
                 value_sign: float = 1.0) -> Heads:
        """Heads from score matrices ``A_h`` (``Q_h = I``, ``K_h = A_h``).

        ``V`` defaults to ``value_sign · A`` (value-aligned heads).
        """
        A = _as3(A, "A")
        H, d, _ = A.shape
        if A.shape[1] != A.shape[2]:
            raise ValueError(f"heads.A: score matrices must be square, got {A.shape}")
        Q = np.broadcast_to(np.eye(d), (H, d, d)).copy()
        V = value_sign * A.copy() if V is None else _as3(V, "V")
        return cls(Q, A.copy(), V, np.broadcast_to(np.asarray(w, float), (H,)))

    @classmethod
    def random_symmetric(cls, H: int, d: int, rng: np.random.Generator, *, scale: float = 1.0,
                         w: float | np.ndarray | None = None, value_sign: float = 1.0) -> Heads:
        """Random symmetric heads ``A_h = scale · (Z + Zᵀ)``, ``Z`` standard normal.

        ``w`` defaults to ``1/H`` (the mean-field average of [TD]).
        """
        Z = rng.standard_normal((H, d, d))
        A = scale * (Z + np.swapaxes(Z, 1, 2))
        return cls.bilinear(A, w=1.0 / H if w is None else w, value_sign=value_sign)

    @classmethod
    def random_rank(cls, H: int, d: int, k: int, rng: np.random.Generator, *,
                    scale: float = 1.0, w: float | np.ndarray = 1.0) -> Heads:
        """Random heads of rank ``k`` (a trained transformer's shapes, ``k = d/H`` there).

        ``Q_h, K_h, W_{V,h} ∈ R^{k×d}`` and ``W_{O,h} ∈ R^{d×k}`` with entries
        ``N(0, scale²/d)`` resp. ``N(0, scale²/k)`` (so ``‖A_h‖ ≈ scale²``-ish for
        unit tokens); ``V_h = W_{O,h} W_{V,h}``. ``w`` defaults to 1 per head (the [MH] sum).
        """
        H, d, k = int(H), int(d), int(k)
        if not (H >= 1 and d >= 1 and 1 <= k):
            raise ValueError(f"heads: need H >= 1, d >= 1, k >= 1, got H={H}, d={d}, k={k}")
        sd, sk = scale / np.sqrt(d), scale / np.sqrt(k)
        Q = sd * rng.standard_normal((H, k, d))
        K = sd * rng.standard_normal((H, k, d))
        WV = sd * rng.standard_normal((H, k, d))
        WO = sk * rng.standard_normal((H, d, k))
        return cls(Q, K, None, np.broadcast_to(np.asarray(w, float), (H,)), WV=WV, WO=WO)

    @classmethod
    def from_npz(cls, path: str | Path, *, value_sign: float = 1.0) -> Heads:
        """Load heads from an ``.npz`` archive with arrays ``Q, K, V`` (and optional ``w``).

        With arrays ``WV, WO`` as well (:meth:`save_npz` of heads of rank ``r``), the heads
        keep their rank (``V`` is recomputed as ``W_O W_V``).

        Alternatively the archive may hold ``A`` (and optional ``V``, ``w``) for bilinear
        heads; without ``V``, ``V = value_sign · A`` (``+1`` ascent, ``−1`` descent).
        ``w`` defaults to 1 per head.

        Raises
        ------
        FileNotFoundError
            No such file.
        ValueError
            Not an ``.npz`` archive (e.g. a single-array ``.npy`` file), missing arrays,
            wrong shapes, NaN/Inf; the message names the file and the expected format.
        """
        path = Path(path)
        if not path.is_file():
            raise FileNotFoundError(f"heads file not found: {path}")
        if value_sign not in (1, -1) or isinstance(value_sign, bool):
            raise ValueError(f"value_sign: must be +1 or -1, got {value_sign!r}")
        fmt = ("an .npz archive (numpy.savez) with arrays Q, K, V[, w] or A[, V, w], "
               "each of shape (H, d, d)")
        try:
            z = np.load(path, allow_pickle=False)
        except (ValueError, OSError, EOFError) as exc:
            raise ValueError(f"heads file {path}: not readable by numpy.load ({exc}); "
                             f"expected {fmt}") from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise ValueError(f"heads file {path}: holds a single array of shape "
                             f"{np.shape(z)} (.npy); expected {fmt}, e.g. "
                             "numpy.savez('heads.npz', A=A)")
        with z:
            keys = set(z.files)
            w = z["w"] if "w" in keys else None
            if {"Q", "K", "WV", "WO"} <= keys:
                Q = z["Q"]
                return cls(Q, z["K"], None, np.full(_as3(Q, "Q").shape[0], 1.0) if w is None
                           else w, WV=z["WV"], WO=z["WO"])
            if {"Q", "K", "V"} <= keys:
                Q = z["Q"]
                return cls(Q, z["K"], z["V"], np.full(_as3(Q, "Q").shape[0], 1.0) if w is None
                           else w)
            if "A" in keys:
                return cls.bilinear(z["A"], V=z["V"] if "V" in keys else None,
                                    w=1.0 if w is None else w, value_sign=float(value_sign))
        raise ValueError(f"heads file {path}: needs arrays Q, K, V (or A); found {sorted(keys)}; "
                         f"expected {fmt}")

    def save_npz(self, path: str | Path) -> None:
        """Write ``Q, K, V, w`` (and ``WV, WO`` for a value of rank r) to an ``.npz`` file.

        Readable by :meth:`from_npz`, which keeps the rank.
        """
        if self.WV is not None:
            np.savez(path, Q=self.Q, K=self.K, V=self.V, w=self.w, WV=self.WV, WO=self.WO)
        else:
            np.savez(path, Q=self.Q, K=self.K, V=self.V, w=self.w)
