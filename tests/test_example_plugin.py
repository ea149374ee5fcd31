"""The third-party example, pip-installed: listed, enabled from YAML, registered in verl, and
resolvable inside a real Ray worker that never imported longcat_plugins itself."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import EXAMPLE, REPO, run_cli, run_python

pytestmark = pytest.mark.usefixtures("example_plugin_installed")


def test_listed_with_its_distribution() -> None:
    data = json.loads(run_cli("list", "--json").stdout)
    [plugin] = [p for p in data["plugins"] if p["name"] == "example"]
    assert plugin["distribution"] == "longcat-example-plugin" and plugin["status"] == "active"
    assert plugin["components"][0]["target"] == "longcat_example_plugin.compute_truncated_reinforce"


def test_in_verl_registry_without_importing_longcat_plugins() -> None:
    proc = run_python(
        """
        import verl
        from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY, get_policy_loss_fn
        print(get_policy_loss_fn("truncated_reinforce").__module__)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "longcat_example_plugin"


RAY_PROBE = """
    import json, os, sys, tempfile
    import ray

    @ray.remote
    def probe():
        import sys
        clean = "verl" not in sys.modules and "longcat_plugins" not in sys.modules
        from verl.trainer.ppo.core_algos import get_policy_loss_fn
        try:
            fn = get_policy_loss_fn("truncated_reinforce").__module__
        except ValueError as exc:
            fn = "missing: " + str(exc)[:60]
        return {"clean_before": clean, "fn": fn, "pid": os.getpid()}

    tmp = tempfile.mkdtemp(prefix="lcray", dir="/tmp")
    ray.init(num_cpus=1, include_dashboard=False, _temp_dir=tmp, log_to_driver=False)
    try:
        out = ray.get(probe.remote())
        out["driver_pid"] = os.getpid()
        print(json.dumps(out))
    finally:
        ray.shutdown()
        import shutil
        shutil.rmtree(tmp, ignore_errors=True)
"""


@pytest.mark.ray
def test_resolvable_in_a_ray_worker() -> None:
    proc = run_python(RAY_PROBE)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["pid"] != out["driver_pid"]
    assert out["clean_before"], "the worker had verl or longcat_plugins imported before the probe"
    assert out["fn"] == "longcat_example_plugin"


@pytest.mark.ray
def test_yaml_disable_reaches_ray_workers(tmp_path) -> None:
    """The Hydra callback applies `longcat.disable` in the driver and exports it to workers."""
    code = f"""
        import os
        from hydra import compose, initialize_config_dir
        from longcat_plugins.hydra_callback import LongcatCallback
        with initialize_config_dir(config_dir={str(REPO / "configs")!r}, version_base=None):
            cfg = compose(
                config_name="example_plugin",
                overrides=["longcat.disable=[example]", "actor_rollout_ref.actor.policy_loss.loss_mode=vanilla"],
                return_hydra_config=True,
            )
        LongcatCallback().on_job_start(config=cfg, task_function=None)
        from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
        assert "truncated_reinforce" not in POLICY_LOSS_REGISTRY, "driver kept a disabled component"
    """
    import textwrap

    # as on a GPU driver: this is about the selection, not the CPU runtime's preflight
    proc = run_python(textwrap.dedent(code) + textwrap.dedent(RAY_PROBE), env={"LONGCAT_RUNTIME": "off"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["clean_before"] and out["fn"].startswith("missing"), out


def test_stock_main_ppo_stops_on_a_bad_name_before_ray(tmp_path) -> None:
    from conftest import main_ppo_refuses

    proc = main_ppo_refuses(
        tmp_path, "example_plugin", "actor_rollout_ref.actor.policy_loss.loss_mode=truncated_reinfrce"
    )
    assert "did you mean 'truncated_reinforce'" in proc.stderr


def test_plugin_authors_fixtures_run_the_examples_own_tests() -> None:
    """The example's tests use `longcat_host` from our pytest11 plugin: run them like a third party."""
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(EXAMPLE / "tests")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=EXAMPLE,
    )
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert "2 passed" in proc.stdout


def test_the_selection_reaches_workers_on_nodes_the_driver_did_not_start(
    fake_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A multi-node cluster's workers do not inherit the driver's environment: the callback puts
    the driver's LONGCAT_* variables into the job's runtime_env through Ray's RAY_RUNTIME_ENV_HOOK,
    keeping (and first calling) a hook that was already set."""
    from ray._common.utils import load_class  # what ray.init calls the hook with

    from longcat_plugins import hydra_callback as hc

    (fake_site / "prior_hook.py").write_text("def hook(env):\n    return {**(env or {}), 'pip': ['x']}\n")
    for name in (hc.ENV_PREVIOUS_HOOK, hc.RAY_HOOK):  # restored to absent afterwards
        monkeypatch.setenv(name, "x")
        monkeypatch.delenv(name)
    monkeypatch.setenv(hc.RAY_HOOK, "prior_hook.hook")
    monkeypatch.setenv("LONGCAT_PLUGINS_CONFIG", '{"disable": ["example"]}')
    monkeypatch.setenv("LONGCAT_RUNTIME", "cpu")
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", "/run/metrics.jsonl")
    hc.install_runtime_env_hook()
    hc.install_runtime_env_hook()  # idempotent: the previous hook is still the user's
    assert os.environ[hc.RAY_HOOK] == hc.HOOK_PATH and os.environ[hc.ENV_PREVIOUS_HOOK] == "prior_hook.hook"
    env = load_class(os.environ[hc.RAY_HOOK])({"env_vars": {"LONGCAT_RUNTIME": "off", "TOKENIZERS_PARALLELISM": "1"}})
    assert env["pip"] == ["x"], "the previous hook ran"
    assert env["env_vars"]["LONGCAT_PLUGINS_CONFIG"] == '{"disable": ["example"]}'
    assert env["env_vars"]["LONGCAT_RUNTIME"] == "off", "a value the runtime_env sets wins"
    assert env["env_vars"]["TOKENIZERS_PARALLELISM"] == "1"
    assert env["env_vars"]["VERL_FILE_LOGGER_PATH"] == "/run/metrics.jsonl", "verl's file logger writes where asked"
    assert hc.ENV_PREVIOUS_HOOK not in env["env_vars"]
