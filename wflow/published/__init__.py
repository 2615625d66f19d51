"""Reproductions of the field's published experiments, one module per paper.

* :mod:`~wflow.published.td` — the time-dependent Wasserstein gradient flow experiments [TD]
  (tokens, heads, weight schedules and frames, term by term; they live below the engine in
  :mod:`wflow.attention.published`, re-exported here).
* :mod:`~wflow.published.glpr_phase`, :mod:`~wflow.published.castin_ranks`,
  :mod:`~wflow.published.metastable_staircase` — three more papers' public experiments
  (``wflow reproduce NAME``, docs/reproduce_field.md), imported on demand.

This package sits above the studies (its reproductions write a ``StudyResult``) and imports
nothing eagerly.
"""
