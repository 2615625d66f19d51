"""Moved to :mod:`wflow.gaussian.reach`; kept so existing imports work."""

from .gaussian.reach import (
    ReachPhase,
    ReachPlan,
    ReachResult,
    plan_controls,
    principal_rotation,
    reach,
)

__all__ = ["ReachPhase", "ReachPlan", "ReachResult", "plan_controls", "reach",
           "principal_rotation"]
