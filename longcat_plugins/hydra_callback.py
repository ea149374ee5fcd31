"""The driver-side gate for the ``longcat:`` section of a stock ``verl.trainer.main_ppo`` run.

Recipes list this callback under ``hydra.callbacks``. Before the task function runs (so before
Ray starts) it validates the whole config, applies the section's selection in the driver, and
exports it as ``LONGCAT_PLUGINS_CONFIG`` so the Ray workers the driver starts (which inherit
its environment) apply the same selection when they import verl.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from longcat_plugins.config import SECTION, ConfigError, to_plain, validate_config
from longcat_plugins.host import set_host
from longcat_plugins.selection import ENV_CONFIG


class LongcatCallback(Callback):
    def on_job_start(self, config: DictConfig, **kwargs: Any) -> None:
        task_cfg = copy.deepcopy(config)  # what Hydra hands the task: the config minus its hydra node
        with read_write(task_cfg), open_dict(task_cfg):
            task_cfg.pop("hydra", None)
        plain = to_plain(task_cfg) or {}
        from longcat_plugins.runtime.platform import ENV_RUNTIME, cpu_runtime_active, cpu_runtime_requested

        if OmegaConf.select(task_cfg, "trainer.device", default=None) == "cpu" and cpu_runtime_requested() is None:
            # asked for by config: every Ray worker this driver starts inherits the choice
            os.environ[ENV_RUNTIME] = "cpu"
        problems, host = validate_config(plain, cpu_preflight=cpu_runtime_active())
        if problems:
            # Hydra turns exceptions raised by callbacks into warnings and runs the job anyway;
            # a config that names things wrongly must stop here, before Ray starts.
            name = OmegaConf.select(config, "hydra.job.config_name", default="config")
            print(f"longcat-plugins: {ConfigError(problems, source=f'config {name!r}')}", file=sys.stderr)
            raise SystemExit(2)
        os.environ[ENV_CONFIG] = json.dumps(plain.get(SECTION) or {})
        set_host(host)
        from longcat_plugins.verl_bridge import bridge

        bridge.sync(host)
