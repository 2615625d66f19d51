"""The words of the negative controls several studies share, said once.

``time-doubled`` (every value matrix ×2: :func:`wflow.studies.helpers.value_scale`) and
``no-mobility`` (the softmax mobility ``1/Z`` dropped: attention kind ``usa``) control the
particle side of a study against its unchanged theory; each study says only who runs the
fault and what stays nominal.
"""

from __future__ import annotations

__all__ = ["time_doubled_fault", "no_mobility_fault"]


def time_doubled_fault(then: str,
                       who: str = "the particle heads have doubled value matrices") -> str:
    """The words of the ``time-doubled`` control: every value matrix ×2.

    Parameters
    ----------
    then : str
        What stays nominal, from ``"while"`` or ``"against"`` on (the theory side).
    who : str
        What runs doubled, with its verb.

    Returns
    -------
    str
        ``"{who} (time runs twice as fast) {then}"``: one description for every study.
    """
    return f"{who} (time runs twice as fast) {then}"


def no_mobility_fault(who: str, then: str = "") -> str:
    """The words of the ``no-mobility`` control: the softmax mobility ``1/Z`` dropped.

    Parameters
    ----------
    who : str
        What drops it, with its verb (``"the particles drop"``).
    then : str
        What stays softmax, from ``"while"`` or ``"against"`` on; ``""``: nothing added.

    Returns
    -------
    str
        One description for every study (unnormalised attention, kind ``usa``, same ``β``).
    """
    words = f"{who} the softmax mobility 1/Z (unnormalised attention, kind 'usa', same β)"
    return f"{words} {then}" if then else words
