"""verl's TaskRunner in the driver process (``runtime/in_driver.py``)."""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path

import pytest

from longcat_plugins.runtime import in_driver

REPO = Path(__file__).resolve().parents[1]


def test_the_mode_parses_and_a_bad_one_names_the_variable_and_the_choices() -> None:
    assert in_driver.task_runner_mode(None) == "driver" and in_driver.task_runner_mode(" ") == "driver"
    assert in_driver.task_runner_mode("actor") == "actor"
    with pytest.raises(ValueError, match="LONGCAT_TASK_RUNNER: expected one of driver, actor, got 'thread'"):
        in_driver.task_runner_mode("thread")


def test_wrapping_is_idempotent_and_only_verls_entry_module_is_touched(monkeypatch: pytest.MonkeyPatch) -> None:
    def run_ppo(config: object, task_runner_class: object) -> None: ...

    wrapped = in_driver.in_driver(run_ppo)
    assert wrapped is not run_ppo and in_driver.in_driver(wrapped) is wrapped
    # pytest's own __main__ is not verl's main_ppo: install() leaves it alone
    monkeypatch.setitem(sys.modules, "__main__", types.ModuleType("__main__"))
    monkeypatch.delitem(sys.modules, "verl.trainer.main_ppo", raising=False)
    assert in_driver.entry_modules() == []


PROBE = """
import json, os, sys
import ray, torch
os.environ.pop("OMP_NUM_THREADS", None)  # Ray's default for a CPU actor then applies
from omegaconf import OmegaConf
from verl.trainer.main_ppo import run_ppo
from longcat_plugins.runtime import fast_start, in_driver

fast_start.install()
torch.set_num_threads(2)
seen = {}

@ray.remote
class Runner:
    def __init__(self):
        seen["init_pid"] = os.getpid()

    def run(self, config):
        seen.update(run_pid=os.getpid(), threads=torch.get_num_threads(), config=config.marker,
                    env=os.environ.get("LONGCAT_IN_DRIVER_PROBE"))
        if config.marker == "fail":
            raise RuntimeError("the trainer failed")
        return "trained"

config = OmegaConf.create({
    "marker": "ok",
    "actor_rollout_ref": {"rollout": {"full_determinism": False}},
    "reward": {"reward_model": {"enable": False, "rollout": {"full_determinism": False}}},
    "trainer": {"logger": ["console"]},
    "transfer_queue": {"enable": False},
    "global_profiler": {"tool": None},
    "ray_kwargs": {"ray_init": {"num_cpus": 1, "include_dashboard": False, "_temp_dir": sys.argv[1],
                                "runtime_env": {"env_vars": {"LONGCAT_IN_DRIVER_PROBE": "job"}}}},
})
wrapped = in_driver.in_driver(run_ppo)
wrapped(config, Runner)
seen["threads_after"] = torch.get_num_threads()
config.marker = "fail"
try:
    wrapped(config, Runner)
except RuntimeError as exc:
    seen["error"] = str(exc)
seen["driver_pid"] = os.getpid()
print(json.dumps(seen))
ray.shutdown()
"""


@pytest.mark.ray
def test_verls_run_ppo_runs_the_task_runner_here_as_the_actor_would(ray_tmp: Path) -> None:
    """verl's own ``run_ppo`` starts Ray and calls ``Runner.remote().run.remote(config)``: the
    instance is built and run in the driver's process, with the job's ``env_vars`` and the one
    torch thread Ray gives a CPU actor (restored after); the runner's exception reaches the caller
    as itself."""
    from conftest import run_python

    proc = run_python(PROBE, env={"PYTHONPATH": str(REPO), "RAY_ADDRESS": ""}, timeout=240, args=(str(ray_tmp),))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "Runner runs in the driver process" in proc.stdout
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["init_pid"] == seen["run_pid"] == seen["driver_pid"], seen
    assert seen["env"] == "job" and seen["config"] == "fail", seen
    assert seen["threads"] == 1 and seen["threads_after"] == 2, seen
    assert seen["error"] == "the trainer failed", seen


def test_a_bad_task_runner_mode_stops_main_ppo_before_ray(tmp_path: Path) -> None:
    from conftest import main_ppo_refuses

    proc = main_ppo_refuses(tmp_path, "example_plugin", env={"LONGCAT_TASK_RUNNER": "thread"})
    assert "LONGCAT_TASK_RUNNER: expected one of driver, actor, got 'thread'" in proc.stderr
