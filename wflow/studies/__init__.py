"""Verification studies (``wflow verify <name>``): run → fit → verdict vs theory.

Shared result type, criteria and helpers live in :mod:`wflow.studies.base`.
"""

from .base import Criterion, LogLogFit, StudyResult, fit_loglog, judge, verdict, write_study

__all__ = ["StudyResult", "Criterion", "judge", "verdict", "LogLogFit", "fit_loglog",
           "write_study"]
