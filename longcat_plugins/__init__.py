"""longcat-plugins: the LongCat-Flash-Thinking RL system as verl plugins.

Public API: the ``hookimpl`` marker, the component descriptors, the process-wide host, and
``settings_for`` (how a component reads its ``longcat.settings``). Importing this package
never imports verl.
"""

from longcat_plugins.components import (
    AdvantageEstimator,
    AgentLoop,
    Component,
    Family,
    FusionMethod,
    PolicyLoss,
    RewardFunction,
    RewardManager,
    Sampler,
    SchedulePolicy,
    Tool,
    Trainer,
    ValidationMetric,
)
from longcat_plugins.hookspecs import hookimpl
from longcat_plugins.host import Host, get_host, settings_for

__version__ = "0.1.0"

__all__ = [
    "__version__",
    "hookimpl",
    "get_host",
    "settings_for",
    "Host",
    "Family",
    "Component",
    "PolicyLoss",
    "AdvantageEstimator",
    "RewardManager",
    "RewardFunction",
    "ValidationMetric",
    "AgentLoop",
    "Tool",
    "Trainer",
    "Sampler",
    "SchedulePolicy",
    "FusionMethod",
]
