"""Reproductions of the field's published experiments, one module per paper.

* :mod:`~wflow.published.td` — the time-dependent Wasserstein gradient flow experiments [TD]
  (tokens, heads, weight schedules and frames, term by term; they live below the engine in
  :mod:`wflow.attention.published`, re-exported here).
* :mod:`~wflow.published.glpr_phase`, :mod:`~wflow.published.castin_ranks`,
  :mod:`~wflow.published.metastable_staircase`,
  :mod:`~wflow.published.lost_in_the_middle`, :mod:`~wflow.published.mun_rosenzweig` — more
  papers' public experiments and claims
  (``wflow reproduce NAME``, docs/reproduce_field.md; :data:`FIELD`), imported on demand.
* :mod:`~wflow.published.staircase_flow` — a variant with a name of its own: the metastable
  staircase's continuous-time limit under a requested ``rtol`` (45–90 adaptive steps per β
  against the published 10⁶), and :func:`~wflow.published.staircase_flow.compare_staircase`
  of its merge times with the published ones.

This package sits above the studies (its reproductions write a ``StudyResult``) and imports
nothing eagerly.
"""

from __future__ import annotations

__all__ = ["FIELD"]

#: Published experiments of other papers of the field, run by their own
#: modules' ``reproduce(out=..., options=...)``: name -> (module, one line).
FIELD: dict[str, tuple[str, str]] = {
    "glpr_phase": ("wflow.published.glpr_phase",
                   "GLPR (β, t) phase diagram of the probability of clustering"),
    "castin_ranks": ("wflow.published.castin_ranks",
                     "Castin et al. ranks of the limit covariance of the softmax moment ODE"),
    "metastable_staircase": ("wflow.published.metastable_staircase",
                             "GKPR energy staircase of 5 tokens on the circle"),
    "lost_in_the_middle": ("wflow.published.lost_in_the_middle", "DGR U-shaped retrieval "
                           "profile, t_crit(β), causal ALiBi particles on the circle"),
    "mun_rosenzweig": ("wflow.published.mun_rosenzweig", "Mun & Rosenzweig noisy transformer "
                       "phase transition: K_#, β*(d), continuous below, discontinuous above"),
}
