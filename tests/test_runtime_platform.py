"""Platform selection and the guarded fixes: they apply on the CPU runtime and nowhere else."""

from __future__ import annotations

import json

import pytest
from conftest import run_python

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
    assert out["poll_fixed"]
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
    assert not out["poll_fixed"]
