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
    """The fusion components this package ships, named by ``module:attr`` so ``list`` and a
    ``fuse`` start import nothing heavy; each config schema comes from the method's signature."""
    from longcat_plugins.components import FusionMethod

    mod = "longcat_plugins.fusion.methods"
    return [
        FusionMethod(
            "longcat",
            f"{mod}:longcat",
            summary="LongCat-Flash-Thinking fusion: normalised task vectors, DARE drop with rescale, SCE-style sign erase.",
        ),
        FusionMethod(
            "task_arithmetic", f"{mod}:task_arithmetic", summary="Task arithmetic: θ_base + scale · Σ_i w_i δ_i."
        ),
        FusionMethod(
            "ties",
            f"{mod}:ties",
            summary="TIES-merging: trim each δ_i to its top-``density`` magnitudes, elect signs, disjoint (weighted) mean.",
        ),
        FusionMethod(
            "dare_linear",
            f"{mod}:dare_linear",
            summary="DARE with a weighted sum: drop each δ_i element with probability 1 − density, rescale the rest, add.",
        ),
        FusionMethod(
            "dare_ties",
            f"{mod}:dare_ties",
            summary="DARE then TIES' sign election: drop and rescale each δ_i, weight, keep the entries that agree with the majority.",
        ),
        FusionMethod(
            "breadcrumbs",
            f"{mod}:breadcrumbs",
            summary="Model Breadcrumbs: drop each δ_i's largest outliers and its smallest entries, keep the band between, add.",
        ),
        FusionMethod(
            "sce",
            f"{mod}:sce",
            summary="SCE (FuseChat): select the elements where the experts vary most, weight experts by their squared deltas, erase minority signs.",
        ),
    ]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
