"""A local Ray cluster whose prestarted workers verl's actors can use (``runtime/fast_start.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from longcat_plugins.runtime import fast_start

REPO = Path(__file__).resolve().parents[1]


def test_preload_names_parse_and_bad_ones_name_the_variable() -> None:
    assert fast_start.preload_modules(None) == [] and fast_start.preload_modules("0") == []
    assert fast_start.preload_modules("1") == list(fast_start.DEFAULT_PRELOAD)
    assert fast_start.preload_modules(" verl.trainer.main_ppo, json ") == ["verl.trainer.main_ppo", "json"]
    with pytest.raises(ValueError, match="LONGCAT_RAY_PRELOAD: not module names: verl/trainer"):
        fast_start.preload_modules("json,verl/trainer")


def test_only_an_environment_only_runtime_env_travels_through_the_environment() -> None:
    assert fast_start.environment_only(None) == {}
    assert fast_start.environment_only({"env_vars": {"A": 1, "B": "x"}}) == {"A": "1", "B": "x"}
    assert fast_start.environment_only({"env_vars": {"A": "1"}, "pip": ["x"]}) is None
    assert fast_start.environment_only({"nsight": {}}) is None
    # unset fields are no runtime_env of their own
    assert fast_start.environment_only({"env_vars": {"A": "1"}, "working_dir": None, "py_executable": None}) == {
        "A": "1"
    }
    assert fast_start.environment_only({"env_vars": {"A": "1"}, "working_dir": "."}) is None


def test_verls_own_job_runtime_env_travels_through_the_environment() -> None:
    """What verl's ``run_ppo`` hands ``ray.init`` (its defaults, ``working_dir: None`` included,
    merged with a recipe's ``env_vars``) is env_vars only: until this was checked on verl's own
    value, the ``working_dir: None`` it always adds kept every real run off the prestarted workers."""
    from omegaconf import OmegaConf
    from verl.trainer.constants_ppo import get_ppo_ray_runtime_env

    merged = OmegaConf.merge(get_ppo_ray_runtime_env(), {"env_vars": {"LONGCAT_PROBE": "1"}})
    env = fast_start.environment_only(OmegaConf.to_container(OmegaConf.create({"runtime_env": merged}))["runtime_env"])
    assert env is not None and env["LONGCAT_PROBE"] == "1", env


def test_joined_clusters_and_other_runtime_envs_reach_ray_init_unchanged(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[tuple, dict]] = []
    init = fast_start.local_start_through_environment(lambda *a, **k: calls.append((a, k)))
    assert fast_start.local_start_through_environment(init) is init  # idempotent
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("LONGCAT_FAST_START_PROBE", "driver")
    joined = {"address": "10.0.0.1:6379", "runtime_env": {"env_vars": {"LONGCAT_FAST_START_PROBE": "job"}}}
    init(**joined)
    pip = {"runtime_env": {"env_vars": {"LONGCAT_FAST_START_PROBE": "job"}, "pip": ["x"]}}
    init(**pip)
    assert calls == [((), joined), ((), pip)]
    assert fast_start.os.environ["LONGCAT_FAST_START_PROBE"] == "driver", "nothing moved into the environment"
    init(address="local", num_cpus=1, runtime_env={"env_vars": {"LONGCAT_FAST_START_PROBE": "job"}})
    assert calls[-1] == ((), {"address": "local", "num_cpus": 1})
    assert fast_start.os.environ["LONGCAT_FAST_START_PROBE"] == "job", "a runtime_env value wins, as in a worker"


PROBE = """
import json, os, sys, time
import ray
from longcat_plugins.runtime import fast_start

fast_start.install()
ray.init(num_cpus=2, include_dashboard=False, _temp_dir=sys.argv[1],
         runtime_env={"env_vars": {"LONGCAT_FAST_START_PROBE": "job"}})
import psutil

def pooled():  # the raylet's idle Python workers (Ray titles them ray::IDLE): its prestarted ones
    found = set()
    for proc in psutil.Process().children(recursive=True):
        try:
            if "ray::IDLE" in " ".join(proc.cmdline()):
                found.add(proc.pid)
        except psutil.Error:
            continue
    return found

# they come up (and import the preload) while the driver does its own work (in verl: its config)
deadline = time.time() + 120
while not pooled() and time.time() < deadline:
    time.sleep(0.5)
before = pooled()

@ray.remote(num_cpus=1)
class Probe:
    def look(self):
        return {"env": os.environ.get("LONGCAT_FAST_START_PROBE"),
                "preloaded": "xml.dom.minidom" in sys.modules, "pid": os.getpid()}

seen = ray.get(Probe.remote().look.remote())
print(json.dumps(seen | {"prestarted": sorted(before)}))
ray.shutdown()
"""


@pytest.mark.ray
def test_verls_env_vars_reach_an_actor_that_lands_on_a_prestarted_preloaded_worker(ray_tmp: Path) -> None:
    """Through the wrapped ``ray.init`` (a job runtime_env of env_vars only, as verl's ``run_ppo``
    passes): the actor sees the job's variable, runs in a worker process started before the actor
    was asked for (a prestarted one), and that worker imported the ``LONGCAT_RAY_PRELOAD`` module."""
    from conftest import run_python

    proc = run_python(
        PROBE,
        env={"LONGCAT_RAY_PRELOAD": "xml.dom.minidom", "PYTHONPATH": str(REPO), "RAY_ADDRESS": ""},
        timeout=240,
        args=(str(ray_tmp),),
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    seen = json.loads(proc.stdout.strip().splitlines()[-1])
    assert seen["env"] == "job", seen
    assert seen["preloaded"], seen
    assert seen["pid"] in seen["prestarted"], f"the actor got a fresh process, not a prestarted one: {seen}"


def test_a_bad_preload_list_stops_main_ppo_before_ray(tmp_path: Path) -> None:
    from conftest import main_ppo_refuses

    proc = main_ppo_refuses(tmp_path, "example_plugin", env={"LONGCAT_RAY_PRELOAD": "verl/trainer"})
    assert "LONGCAT_RAY_PRELOAD: not module names: verl/trainer" in proc.stderr
