"""Hydra search-path plugin: every Hydra app in this environment (verl's ``main_ppo``, our
``validate``) can find verl's ``ppo_trainer`` config and our recipes and config groups.

With it no shipped recipe sets ``hydra.searchpath`` (Hydra allows that key only in the
primary config), so a user's recipe can list ours as defaults: ``defaults: [grpo_arithmetic,
{runtime: cpu}, _self_]`` or ``+runtime=cpu``. Both paths are appended, after the app's own.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin


class LongcatSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        search_path.append(provider="verl", path="pkg://verl.trainer.config")
        search_path.append(provider="longcat-plugins", path="pkg://longcat_plugins._configs")
