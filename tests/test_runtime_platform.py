"""Platform selection and the guarded fixes: they apply on the CPU runtime and nowhere else, except
the replay-buffer poll, which ``LONGCAT_V1_POLL_INTERVAL`` sets on any device."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import main_ppo_refuses, run_python

from longcat_plugins.runtime import platform


@pytest.mark.parametrize(
    ("env", "accelerator", "active"),
    [
        ({}, False, True),  # no accelerator anywhere: the CPU runtime
        ({}, True, False),  # a GPU node: never claim it, even from a CPU-only actor
        ({"LONGCAT_RUNTIME": "cpu"}, True, True),
        ({"LONGCAT_RUNTIME": "off"}, False, False),
        ({"VERL_PLATFORM": "cpu"}, True, True),
        ({"VERL_PLATFORM": "nvidia"}, False, False),
    ],
)
def test_selection(monkeypatch: pytest.MonkeyPatch, env: dict, accelerator: bool, active: bool) -> None:
    for key in ("LONGCAT_RUNTIME", "VERL_PLATFORM"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    monkeypatch.setattr(platform, "accelerator_present", lambda: accelerator)
    assert platform.cpu_runtime_active() is active


PROBE = """
    import json, torch, verl
    from verl.plugin.platform import get_platform
    from verl.utils import distributed
    from verl.workers.engine.base import EngineRegistry
    import verl.workers.engine
    import verl.trainer.ppo.v1.replay_buffer as replay_buffer
    from longcat_plugins.runtime.fixes import APPLIED
    p = get_platform()
    def poll_interval():  # what verl's trainers get: they build the buffer without poll_interval
        return replay_buffer.ReplayBuffer("sync", None, None, "drop", {}).poll_interval
    try:
        on_device = str(torch.zeros(1).to(verl.utils.device.get_device_id()).device)
    except (AssertionError, RuntimeError) as exc:  # the nvidia fallback on a machine without CUDA
        on_device = type(exc).__name__
    fsdp_devices = sorted(k for k in EngineRegistry._engines["language_model"]["fsdp2"] if isinstance(k, str))
    print(json.dumps({
        "device": p.device_name,
        "resource": p.ray_resource_name(),
        "backend_fixed": getattr(distributed.initialize_global_process_group_ray, "__longcat_fixed__", False),
        "sft_backend_fixed": getattr(distributed.initialize_global_process_group, "__longcat_fixed__", False),
        "fsdp_devices": fsdp_devices,
        "applied": sorted(APPLIED),
        "poll_fixed": getattr(replay_buffer.ReplayBuffer.__init__, "__longcat_fixed__", False),
        "poll_interval": poll_interval(),
        "tensor_on_device": on_device,
    }))
"""


def probe(env: dict[str, str]) -> dict:
    proc = run_python(PROBE, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_cpu_runtime_in_a_fresh_verl_process() -> None:
    out = probe({"LONGCAT_RUNTIME": "cpu"})
    assert (out["device"], out["resource"]) == ("cpu", "GPU")
    assert out["backend_fixed"] and out["sft_backend_fixed"] and "cpu" in out["fsdp_devices"]
    assert {"process_group_backend", "sft_process_group", "engine_registry_cpu", "v1_poll_interval"} <= set(
        out["applied"]
    )
    assert out["poll_fixed"] and out["poll_interval"] == 0.05
    assert out["tensor_on_device"] == "cpu"


def test_fixes_stay_out_when_the_runtime_is_off() -> None:
    out = probe({"LONGCAT_RUNTIME": "off", "VERL_PLATFORM": ""})
    assert out["device"] != "cpu"
    assert (
        not out["backend_fixed"]
        and not out["sft_backend_fixed"]
        and "cpu" not in out["fsdp_devices"]
        and out["applied"] == []
    )
    assert not out["poll_fixed"] and out["poll_interval"] == 2.0, "verl's own default where nothing asks"


def test_the_poll_interval_applies_on_any_device_when_asked() -> None:
    """LONGCAT_V1_POLL_INTERVAL is honoured off the CPU runtime too (the GPU benches set it: with
    verl's 2 s every step's generation wait came in 2 s quanta there), and only that fix lands."""
    off = probe({"LONGCAT_RUNTIME": "off", "VERL_PLATFORM": "", "LONGCAT_V1_POLL_INTERVAL": "0.2"})
    assert off["poll_fixed"] and off["poll_interval"] == 0.2
    assert off["applied"] == ["v1_poll_interval"] and not off["backend_fixed"]
    cpu = probe({"LONGCAT_RUNTIME": "cpu", "LONGCAT_V1_POLL_INTERVAL": "0.5"})
    assert cpu["poll_interval"] == 0.5


@pytest.mark.parametrize("value", ["fast", "-1", "inf", "nan"])
def test_a_bad_poll_interval_names_the_variable(value: str) -> None:
    from longcat_plugins.runtime.fixes import poll_interval_from_env

    with pytest.raises(ValueError, match=f"LONGCAT_V1_POLL_INTERVAL='{value}': not a number of seconds >= 0"):
        poll_interval_from_env(value)
    assert poll_interval_from_env(None) is None and poll_interval_from_env(" ") is None
    assert poll_interval_from_env("0") == 0.0 and poll_interval_from_env("2.5") == 2.5


def test_main_ppo_refuses_a_bad_poll_interval_before_ray(tmp_path: Path) -> None:
    proc = main_ppo_refuses(tmp_path, "cpu_demo", env={"LONGCAT_V1_POLL_INTERVAL": "2s"})
    assert "LONGCAT_V1_POLL_INTERVAL='2s': not a number of seconds >= 0" in proc.stderr
