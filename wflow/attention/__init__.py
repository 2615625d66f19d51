"""What moves the tokens: attention kinds, head parameters and their time dependence.

* :mod:`~wflow.attention.heads` — :class:`~wflow.attention.heads.Attention` and
  :class:`~wflow.attention.heads.Heads` (``Q, K, V, w``);
* :mod:`~wflow.attention.schedules` — schedules ``θ_h(t)`` (static, OU, oscillating,
  relaxed, layers, callables);
* :mod:`~wflow.attention.published` — the published [TD] experiments' conventions (tokens,
  heads, OU weights, the frames :class:`~wflow.attention.published.PublishedFrames` that the
  compiled particle loop recognises); re-exported by :mod:`wflow.published.td`;
* :mod:`~wflow.attention.diffusion` — the token diffusion ``D`` (THEORY §8), distinct from
  the weights' OU noise.
"""
