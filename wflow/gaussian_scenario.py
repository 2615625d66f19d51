"""Moved to :mod:`wflow.gaussian.options`; kept so existing imports work."""

from .gaussian.options import *  # noqa: F403
from .gaussian.options import __all__  # noqa: F401
