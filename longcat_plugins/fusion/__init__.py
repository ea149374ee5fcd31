"""The built-in fusion family (domain-expert fusion, [LFT] "Model Fusion"); exposed as plugin ``longcat.fusion`` by :mod:`longcat_plugins.builtins`.

Python API (imported lazily, so the host's discovery stays cheap)::

    from longcat_plugins.fusion import fuse
    report = fuse("sft", [("math_rl", 1.0), ("code_rl", 1.0)], "fused", method="longcat",
                  params={"drop_rate": 0.5}, seed=0)
"""

from __future__ import annotations

from typing import Any

from longcat_plugins.components import Component

_LAZY = {
    "fuse": "longcat_plugins.fusion.engine",
    "Expert": "longcat_plugins.fusion.engine",
    "FusionReport": "longcat_plugins.fusion.engine",
    "ProgressEvent": "longcat_plugins.fusion.engine",
    "FusionError": "longcat_plugins.fusion.errors",
    "CheckpointError": "longcat_plugins.fusion.errors",
    "MismatchError": "longcat_plugins.fusion.errors",
    "OutputError": "longcat_plugins.fusion.errors",
    "InputError": "longcat_plugins.fusion.errors",
    "TensorContext": "longcat_plugins.fusion.contract",
    "ParamError": "longcat_plugins.fusion.contract",
    "uses_global_norms": "longcat_plugins.fusion.contract",
    "reports_delta_norms": "longcat_plugins.fusion.contract",
    "load_config": "longcat_plugins.fusion.spec",
    "run_config": "longcat_plugins.fusion.spec",
}

__all__ = ["components", *_LAZY]


def components() -> list[Component]:
    """The fusion components this package ships; the family's modules are imported here, lazily."""
    from longcat_plugins.components import FusionMethod
    from longcat_plugins.fusion import methods

    return [
        FusionMethod("longcat", methods.longcat),
        FusionMethod("task_arithmetic", methods.task_arithmetic),
        FusionMethod("ties", methods.ties),
    ]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
