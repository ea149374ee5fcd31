"""The built-in algorithms family (the LongCat-Flash-Thinking objectives); exposed as plugin ``longcat.algorithms`` by :mod:`longcat_plugins.builtins`.

* ``triplet_clip`` (policy loss; first report, "Training Objective"): :mod:`.triplet_clip`
* ``longcat_gspo`` (policy loss; 2601 report §3.3.1): :mod:`.gspo`, verl's ``gspo`` objective with the paper's aggregation and a written-out gradient
* IcePop masking and the truncated IS cap, options of both policy losses: :mod:`.importance`
* ``longcat_grpo`` (advantage estimator; masking and oversampled groups): :mod:`.advantages`, validity rules in :mod:`.validity`
"""

from __future__ import annotations

from longcat_plugins.components import Component


def components() -> list[Component]:
    """The algorithms components this package ships, named by ``module:attr`` so nothing is
    imported until verl's registry (or a caller) uses one."""
    from longcat_plugins.components import AdvantageEstimator, PolicyLoss

    mod = "longcat_plugins.algorithms"
    return [
        PolicyLoss(
            "triplet_clip",
            f"{mod}.triplet_clip:compute_triplet_clip_loss",
            config=f"{mod}.triplet_clip:TripletClipConfig",
            summary="Triplet-clip PPO loss with truncated IS and the constant G·T_max denominator (LongCat-Flash-Thinking).",
        ),
        PolicyLoss(
            "longcat_gspo",
            f"{mod}.gspo:compute_longcat_gspo_loss",
            config=f"{mod}.gspo:LongcatGSPOConfig",
            summary="GSPO with sequence-level aggregation and a capped engine-mismatch IS weight (LongCat-Flash-Thinking-2601).",
        ),
        AdvantageEstimator(
            "longcat_grpo",
            f"{mod}.advantages:compute_longcat_grpo_advantage",
            summary="GRPO outcome advantages with invalid samples masked and oversampled groups kept apart (LongCat).",
        ),
    ]
