"""The built-in plugins, one per family, each declared as an entry point of the group
``longcat_plugins`` in our own pyproject: built-ins take the same discovery path as any
third-party plugin (and can be disabled the same way, e.g. ``LONGCAT_PLUGINS_DISABLE=longcat.fusion``).
"""

from __future__ import annotations

import importlib
from types import SimpleNamespace

from longcat_plugins.components import Component
from longcat_plugins.hookspecs import hookimpl


def _family_plugin(hook_name: str, package: str) -> SimpleNamespace:
    @hookimpl(specname=hook_name)
    def impl() -> list[Component]:
        return importlib.import_module(package).components()

    impl.__name__ = impl.__qualname__ = hook_name
    return SimpleNamespace(**{hook_name: impl}, __name__=f"{__name__}:{package.rsplit('.', 1)[-1]}")


algorithms = _family_plugin("register_algorithms", "longcat_plugins.algorithms")
schedulers = _family_plugin("register_schedulers", "longcat_plugins.schedulers")
rewards = _family_plugin("register_rewards", "longcat_plugins.rewards")
environments = _family_plugin("register_environments", "longcat_plugins.environments")
fusion = _family_plugin("register_fusion_methods", "longcat_plugins.fusion")
