"""The driver-side gate for the ``longcat:`` section of a stock ``verl.trainer.main_ppo`` run.

Recipes list this callback under ``hydra.callbacks``. Before the task function runs (so before
Ray starts) it validates the whole config, applies the section's selection in the driver, and
exports it as ``LONGCAT_PLUGINS_CONFIG`` so the Ray workers apply the same selection when they
import verl. Workers of a cluster this driver starts inherit its environment; workers on nodes
started by ``ray start`` (a multi-node cluster joined with ``ray_kwargs.ray_init.address``) do
not, so when the run joins a cluster the driver's ``LONGCAT_*`` variables also go into the job's
``runtime_env`` through Ray's ``RAY_RUNTIME_ENV_HOOK`` (:func:`runtime_env_hook`).
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, open_dict, read_write

from longcat_plugins.config import SECTION, ConfigError, to_plain, validate_config
from longcat_plugins.host import set_host
from longcat_plugins.selection import ENV_CONFIG

#: Ray calls the function this names on the ``runtime_env`` given to ``ray.init``
RAY_HOOK = "RAY_RUNTIME_ENV_HOOK"
HOOK_PATH = f"{__name__}.runtime_env_hook"
#: a hook that was set before ours, called first
ENV_PREVIOUS_HOOK = "LONGCAT_PREVIOUS_RAY_RUNTIME_ENV_HOOK"
ENV_PREFIX = "LONGCAT_"
#: where the launcher (``runtime/launch.py``) asks verl's loggers to write, read in the TaskRunner
LOGGER_VARS = ("VERL_FILE_LOGGER_PATH", "TENSORBOARD_DIR", "WANDB_DIR")


def runtime_env_hook(runtime_env: dict[str, Any] | None) -> dict[str, Any]:
    """The job's ``runtime_env`` plus every ``LONGCAT_*`` variable of the driver (and the
    ``LOGGER_VARS`` it has) in its ``env_vars`` (a value the runtime_env already sets wins), so
    workers on every node of the cluster see the driver's selection, runtime, traces and logger
    paths."""
    previous = os.environ.get(ENV_PREVIOUS_HOOK)
    if previous:
        module, _, attr = previous.rpartition(".")
        runtime_env = getattr(importlib.import_module(module), attr)(runtime_env)
    merged = dict(runtime_env or {})
    ours = {
        k: v for k, v in os.environ.items() if (k.startswith(ENV_PREFIX) and k != ENV_PREVIOUS_HOOK) or k in LOGGER_VARS
    }
    merged["env_vars"] = {**ours, **dict(merged.get("env_vars") or {})}
    return merged


def install_runtime_env_hook() -> None:
    """Point ``RAY_RUNTIME_ENV_HOOK`` at :func:`runtime_env_hook`, keeping a previous hook."""
    current = os.environ.get(RAY_HOOK)
    if current == HOOK_PATH:
        return
    if current:
        os.environ[ENV_PREVIOUS_HOOK] = current
    os.environ[RAY_HOOK] = HOOK_PATH


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
        from longcat_plugins.runtime import fast_start, in_driver
        from longcat_plugins.runtime.fixes import ENV_POLL, poll_interval_from_env
        from longcat_plugins.runtime.servers_ahead import ENV_HF_SERVERS, hf_servers_mode
        from longcat_plugins.schedulers.agent_loops_ahead import ENV_AGENT_LOOPS, agent_loops_mode

        try:  # the environment every Ray worker inherits: a bad value stops here, not in a worker
            fast_start.preload_modules(os.environ.get(fast_start.ENV_PRELOAD))
            in_driver.task_runner_mode(os.environ.get(in_driver.ENV_TASK_RUNNER))
            agent_loops_mode(os.environ.get(ENV_AGENT_LOOPS))
            hf_servers_mode(os.environ.get(ENV_HF_SERVERS))
            poll_interval_from_env(os.environ.get(ENV_POLL))
        except ValueError as exc:
            print(f"longcat-plugins: {exc}", file=sys.stderr)
            raise SystemExit(2) from exc
        problems, host = validate_config(plain, cpu_preflight=cpu_runtime_active())
        if problems:
            # Hydra turns exceptions raised by callbacks into warnings and runs the job anyway;
            # a config that names things wrongly must stop here, before Ray starts.
            name = OmegaConf.select(config, "hydra.job.config_name", default="config")
            print(f"longcat-plugins: {ConfigError(problems, source=f'config {name!r}')}", file=sys.stderr)
            raise SystemExit(2)
        os.environ[ENV_CONFIG] = json.dumps(plain.get(SECTION) or {})
        from longcat_plugins.runtime.preflight import joins_cluster

        if joins_cluster(plain):
            # only then: a job runtime_env with env_vars keeps Ray from reusing its prestarted
            # workers, and workers of a cluster this driver starts inherit its environment anyway
            install_runtime_env_hook()
        else:
            # the cluster this driver starts: verl's env_vars travel through that environment too,
            # and the TaskRunner can run in this process, which has imported verl already
            fast_start.install()
            in_driver.install()
        set_host(host)
        from longcat_plugins.verl_bridge import bridge

        bridge.sync(host)
