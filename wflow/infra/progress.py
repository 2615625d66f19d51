"""Progress bars of long runs (tqdm), written once for every solver.

Solvers are generators; their ``solve_*`` loops wrap them in :func:`progress_bar`, which
returns ``None`` when disabled so that the loop can skip the updates. Every bar shows
tqdm's elapsed time and ETA and, from its first draw (before tqdm has a rate, e.g. a
first step that takes minutes), the run's cost estimate accepted by
:func:`wflow.infra.estimate.check_estimate` (``estimate 3.2 h for run``).
"""

from __future__ import annotations

import sys
from typing import Any

__all__ = ["progress_bar"]


def progress_bar(total: float, enabled: bool | None, *, desc: str, unit: str = "step",
                 rank: int = 0, time_axis: bool = False) -> Any:
    """A tqdm bar over ``total`` units, or ``None`` when disabled.

    Parameters
    ----------
    total : float
        Number of steps (or the final time with ``time_axis``).
    enabled : bool or None
        ``None``: only when stderr is a terminal.
    desc, unit : str
        Label and unit shown by tqdm.
    rank : int
        MPI rank; only rank 0 shows a bar.
    time_axis : bool
        The bar counts model time ``t`` (adaptive steps) and shows ``t = n/total``.
    """
    enabled = (sys.stderr.isatty() if enabled is None else enabled) and rank == 0
    if not enabled:
        return None
    from tqdm import tqdm

    from .estimate import current_estimate, format_seconds

    est = current_estimate()
    post = {} if est is None else {"postfix": f"estimate {format_seconds(est.seconds)} for "
                                              f"{est.what}"}
    if time_axis:
        return tqdm(total=total, desc=desc, unit=unit, leave=False, **post,
                    bar_format="{l_bar}{bar}| t={n:.4g}/{total:.4g} [{elapsed}<{remaining}"
                               "{postfix}]")
    return tqdm(total=total, desc=desc, unit=unit, leave=False, **post)
