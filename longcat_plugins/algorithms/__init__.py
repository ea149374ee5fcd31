"""The built-in algorithms family (the LongCat-Flash-Thinking objectives); exposed as plugin ``longcat.algorithms`` by :mod:`longcat_plugins.builtins`.

* ``triplet_clip`` (policy loss; first report, "Training Objective"): :mod:`.triplet_clip`
* ``longcat_gspo`` (policy loss; 2601 report §3.3.1): :mod:`.gspo`, a preset over verl's ``gspo``
* ``longcat_grpo`` (advantage estimator; masking and oversampled groups): :mod:`.advantages`, validity rules in :mod:`.validity`
"""

from __future__ import annotations

from longcat_plugins.components import Component


def components() -> list[Component]:
    """The algorithms components this package ships; the family's modules are imported here, lazily."""
    from longcat_plugins.algorithms.advantages import compute_longcat_grpo_advantage
    from longcat_plugins.algorithms.gspo import LongcatGSPOConfig, compute_longcat_gspo_loss
    from longcat_plugins.algorithms.triplet_clip import TripletClipConfig, compute_triplet_clip_loss
    from longcat_plugins.components import AdvantageEstimator, PolicyLoss

    return [
        PolicyLoss("triplet_clip", compute_triplet_clip_loss, config=TripletClipConfig),
        PolicyLoss("longcat_gspo", compute_longcat_gspo_loss, config=LongcatGSPOConfig),
        AdvantageEstimator("longcat_grpo", compute_longcat_grpo_advantage),
    ]
