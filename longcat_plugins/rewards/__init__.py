"""The built-in rewards family (see SPEC.md); exposed as plugin ``longcat.rewards`` by :mod:`longcat_plugins.builtins`."""

from __future__ import annotations

from longcat_plugins.components import Component


def components() -> list[Component]:
    """The rewards components this package ships; the family's modules are imported here, lazily."""
    from longcat_plugins.components import RewardFunction
    from longcat_plugins.rewards import arithmetic

    return [RewardFunction("arithmetic", arithmetic.compute_score)]
