"""Gaussianity of a trained transformer's layers fed with Gaussian tokens (docs/theory.md §7).

Study (:func:`gaussianity_study`, :func:`pretrained_gaussianity`): draw ``n`` tokens
``x_i ~ N(m₀, Σ₀)`` — by default the Gaussian moment-matched to the model's embedding-layer
outputs over the vocabulary (``input="embedding"``), or ``N(0, I_d)`` (``"standard"``) —
and feed them as *one* sequence through the encoder (every token attends to every token:
the mean-field particle system). After every sublayer (``attn`` = attention residual before
LN₁, ``ln1``, ``ffn`` = feed-forward residual before LN₂, ``out`` = layer output) it records

* **Mardia** multivariate skewness and kurtosis (:func:`mardia`) of the tokens, in the full
  space (rank-reduced to the support: LayerNorm outputs lie in a hyperplane) and, with
  ``pca_dim = p``, in the span of the top ``p`` principal directions of that stage;
  asymptotic p-values *and* the same statistics of a Gaussian reference sample of the
  same size (the Monte-Carlo null, valid when ``n`` is not ≫ ``d``);
* **W2 to the moment-matched Gaussian** (stage inputs and layer outputs): the exact
  empirical OT distance (POT ``ot.emd2``) between ``n_ot`` tokens and ``n_ot`` samples of
  ``N(m̂, Σ̂)``, next to the distance between two independent samples of ``N(m̂, Σ̂)``
  (the finite-sample floor); their ratio is 1 for Gaussian tokens. (The Bures–Wasserstein
  distance to the *moment-matched* Gaussian is 0 by construction; it is used below to
  compare Gaussians.)
* **moment-map prediction error** (see :mod:`wflow.models.moments`): for every stage, the
  Bures–Wasserstein distance between the Gaussian predicted from the *measured* moments
  of the stage input and the moment-matched Gaussian of the stage output, absolute,
  relative to ``sqrt(tr Σ̂_out)`` and to the distance the stage moved the Gaussian.
  For the attention stage both the discrete map (exact for Gaussian tokens as ``n → ∞``)
  and the moment ODE over unit time are reported. Per layer also the one-layer-ahead
  prediction (the four maps composed from the measured layer-input moments) and the
  open-loop prediction (composed from ``(m₀, Σ₀)`` through all layers so far): Gaussian
  dynamics "accurate for short times" means the open-loop error is small in early layers.
  For scale, ``bw_sampling`` is the Bures–Wasserstein distance between the empirical and
  true moments of an independent ``n``-sample of ``N(m̂, Σ̂)`` (the sampling error of
  moments estimated from ``n`` tokens in ``d`` dimensions). The one-stage predictions start
  from the *measured* input moments of the same tokens, so their sampling errors are
  largely shared with the measured output and the prediction error can lie well below
  ``bw_sampling``; the open-loop prediction does not share them.

Observed on all-MiniLM-L6-v2 (``n = 2000``, input moment-matched to the embeddings, seed 0):
the tokens stay close to Gaussian in layers 0–2 (W2 ratio ≤ 1.01 in the top-16 PCA space,
one-layer Bures–Wasserstein error 11–18 % of ``sqrt(tr Σ̂)``) and become clearly
non-Gaussian in layers 3–5 (PCA-16 Mardia kurtosis z from 19 to ~1000, skewness 17–190×
the Gaussian reference, W2 ratio 1.04–1.7; open-loop error 48 % → 170 %). The attention
moment ODE over unit time blows up (Riccati, docs/theory.md §7) for some layers; the discrete map
is the better description of a residual layer.
"""

from __future__ import annotations

from .report import write_pretrained_report
from .results import PretrainedGaussianity, StageGaussianity
from .statistics import (
    RANK_RTOL,  # noqa: F401 (importable here as before)
    STAGES,
    MardiaStats,
    W2Gap,
    mardia,
    pca_project,
    sample_gaussian,
    w2_to_moment_matched,
    whiten,
)
from .study import gaussianity_study, pretrained_gaussianity

__all__ = [
    "STAGES",
    "MardiaStats",
    "W2Gap",
    "StageGaussianity",
    "PretrainedGaussianity",
    "mardia",
    "whiten",
    "pca_project",
    "w2_to_moment_matched",
    "sample_gaussian",
    "gaussianity_study",
    "pretrained_gaussianity",
    "write_pretrained_report",
]
