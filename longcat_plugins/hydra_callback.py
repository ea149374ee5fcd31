"""The driver-side gate for the ``longcat:`` section of a stock ``verl.trainer.main_ppo`` run.

Recipes list this callback under ``hydra.callbacks``. Before the task function runs (so before
Ray starts) it validates the whole config, applies the section's selection in the driver, and
exports it as ``LONGCAT_PLUGINS_CONFIG`` so the Ray workers the driver starts (which inherit
its environment) apply the same selection when they import verl.
"""

from __future__ import annotations

import json
import os
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from longcat_plugins.config import SECTION, ConfigError, to_plain, validate_config
from longcat_plugins.host import set_host
from longcat_plugins.selection import ENV_CONFIG


class LongcatCallback(Callback):
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        plain = to_plain(config) or {}
        plain.pop("hydra", None)
        problems, host = validate_config(plain)
        if problems:
            name = (
                config.get("hydra", {}).get("job", {}).get("config_name", "config") if "hydra" in config else "config"
            )
            raise ConfigError(problems, source=f"config {name!r}")
        os.environ[ENV_CONFIG] = json.dumps(plain.get(SECTION) or {})
        set_host(host)
        from longcat_plugins.verl_bridge import bridge

        bridge.sync(host)
