"""Public compiled building blocks of :mod:`wflow.kernels` for other packages' numba code.

The compiled particle loops (:mod:`wflow.particles.compiled`,
:mod:`wflow.particles._path_numba`) are built from the same primitives as the kernel
back-ends, so that both sum in the same order and agree bit for bit:

* :data:`FASTMATH` — the fast-math flags of every reduction (contraction, reassociation;
  no ``nnan``/``ninf``, so NaN and Inf reach the callers' checks);
* :data:`CHUNK` — sources per chunk of the chunked kernels (a chunk of scores stays in L1);
* :func:`fexp` — the vectorisable ``e^s`` (relative error ≤ 3e-15 on ``[-708, 709]``);
* :func:`row3`, :func:`row3_ito`, :func:`row5` — one target row for ``d ≤ 3`` (with the
  Itô row sum) and ``d = 5``: ``Z, Y, S, Φ`` for a kernel code
  (:data:`wflow.attention.kinds.CODE_EXP`, :data:`~wflow.attention.kinds.CODE_RELU`), the
  same row loop as the kernels' direct and causal sums;
* :func:`scores_chunk`, :func:`weigh_chunk` — a chunk of scores and its weighted sums (the
  chunked kernels of any width);
* :func:`euler_path` — calls the compiled explicit-Euler loop for static heads in ``d ≤ 3``
  (from Python; wrapped by :func:`wflow.particles.euler_path`).

The thread and memory helpers (:func:`~wflow.kernels.threads`, :func:`~wflow.kernels.team`,
:func:`~wflow.kernels.pair_once`, :func:`~wflow.kernels.raise_bound`,
:func:`~wflow.kernels.aligned`, :func:`~wflow.kernels.aligned_empty`,
:func:`~wflow.kernels.particle_heads3`) are public names of :mod:`wflow.kernels` itself.
The numba functions live in the private :mod:`wflow.kernels._rows` (the row loops) and
:mod:`wflow.kernels._numba` (numba caches each function against its own file); this module
only names them publicly.
"""

from __future__ import annotations

from . import _numba
from ._rows import CHUNK, FASTMATH, fexp, row3, row3_ito, row5, scores_chunk, weigh_chunk

__all__ = ["FASTMATH", "CHUNK", "fexp", "row3", "row3_ito", "row5", "scores_chunk",
           "weigh_chunk", "euler_path"]


def euler_path(xT, A, V, w, wbar, m, beta, kind, soft, sym, pair_once, surrogate, dt,
               save_every, out, saved) -> int:
    """The compiled Euler loop of :mod:`wflow.kernels._numba` (see ``_numba.euler_path``).

    Called from Python (looked up at call time). Arguments: tokens ``xT`` (3, n) updated in
    place, heads ``A, V`` (H, 3, 3), weights ``w, wbar`` (H,), masses ``m`` (n,), ``beta``,
    the kernel code ``kind`` and ``soft`` (normalised) of the attention kind, ``sym``,
    ``pair_once``, ``surrogate``, the step ``dt``, ``save_every``, and the outputs ``out``
    (5, S+1) and ``saved``. Returns the number of steps recorded.
    """
    return _numba.euler_path(xT, A, V, w, wbar, m, beta, kind, soft, sym, pair_once,
                             surrogate, dt, save_every, out, saved)
