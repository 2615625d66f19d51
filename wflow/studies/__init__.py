"""Verification studies (``wflow verify <name>``): run → fit → verdict vs theory.

Shared result type and helpers live in :mod:`wflow.studies.base`.
"""

from .base import LogLogFit, StudyResult, fit_loglog, write_study

__all__ = ["StudyResult", "LogLogFit", "fit_loglog", "write_study"]
