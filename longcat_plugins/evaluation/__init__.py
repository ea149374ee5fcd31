"""Evaluation (SPEC V1): the unbiased pass@k / pass^k / avg@k estimators and where they plug into verl.

* :mod:`.passk`: the estimators, plain functions of (n, c, k); no torch, no verl.
* :mod:`.verl_metrics`: the ``reward:passk`` validation metrics, hooked into both verl trainers.

A home of its own rather than ``algorithms/``: that family is what verl *trains with* (losses,
advantages, registered into verl's registries); these estimators only *measure* a policy, in
validation metrics, in ``longcat-plugins eval`` and in the benches.
"""

from __future__ import annotations

from longcat_plugins.components import Component


def components() -> list[Component]:
    """``reward:passk``, shipped by the ``longcat.rewards`` plugin (it scores what rewards produced)."""
    from longcat_plugins.components import ValidationMetric

    mod = "longcat_plugins.evaluation.verl_metrics"
    return [
        ValidationMetric(
            "passk",
            f"{mod}:PassK",
            config=f"{mod}:PassKSettings",
            summary="Unbiased pass@k / pass^k / avg@k of ``val_kwargs.n`` samples per prompt, logged at validation.",
        )
    ]
