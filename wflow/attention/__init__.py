"""What moves the tokens: attention kinds, head parameters and their time dependence.

* :mod:`~wflow.attention.heads` — :class:`~wflow.attention.heads.Attention` and
  :class:`~wflow.attention.heads.Heads` (``Q, K, V, w``);
* :mod:`~wflow.attention.schedules` — schedules ``θ_h(t)`` (static, OU, oscillating,
  relaxed, layers, callables).
"""
