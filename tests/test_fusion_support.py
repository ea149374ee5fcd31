"""Helpers for the fusion tests (no tests here): small random checkpoints written as real
sharded safetensors directories, and reading them back."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

SHAPES: dict[str, tuple[int, ...]] = {
    "model.embed_tokens.weight": (32, 16),
    "model.layers.0.self_attn.q_proj.weight": (16, 16),
    "model.layers.0.mlp.experts.0.up_proj.weight": (24, 16),
    "model.layers.0.mlp.experts.1.up_proj.weight": (24, 16),
    "model.layers.0.input_layernorm.weight": (16,),
    "model.norm.weight": (16,),
    "lm_head.weight": (32, 16),
}


def save_checkpoint(
    path: Path,
    tensors: dict[str, torch.Tensor],
    shards: int = 1,
    config: dict | None = None,
    extra_files: dict[str, str] | None = None,
) -> Path:
    """Write ``tensors`` as a HF checkpoint: ``model.safetensors`` or ``shards`` files plus the index."""
    path.mkdir(parents=True, exist_ok=True)
    names = list(tensors)
    if shards == 1:
        save_file(tensors, path / "model.safetensors", metadata={"format": "pt"})
    else:
        per = math.ceil(len(names) / shards)
        weight_map = {}
        for i in range(shards):
            file = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
            part = {n: tensors[n] for n in names[i * per : (i + 1) * per]}
            save_file(part, path / file, metadata={"format": "pt"})
            weight_map.update(dict.fromkeys(part, file))
        total = sum(t.numel() * t.element_size() for t in tensors.values())
        index = {"metadata": {"total_size": total}, "weight_map": weight_map}
        (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    (path / "config.json").write_text(json.dumps(config or {"model_type": "toy", "tie_word_embeddings": False}))
    for name, text in (extra_files or {}).items():
        (path / name).write_text(text)
    return path


def random_family(
    n_experts: int = 3,
    shapes: dict[str, tuple[int, ...]] | None = None,
    seed: int = 0,
    delta_scales: list[float] | None = None,
) -> tuple[dict[str, torch.Tensor], list[dict[str, torch.Tensor]]]:
    """A float32 base and experts = base + scale_i * noise (different scales: normalisation matters)."""
    gen = torch.Generator().manual_seed(seed)
    shapes = shapes or SHAPES
    scales = delta_scales or [0.05 * (i + 1) for i in range(n_experts)]
    base = {n: torch.randn(s, generator=gen) for n, s in shapes.items()}
    experts = [
        {n: t + scales[i] * torch.randn(t.shape, generator=gen) for n, t in base.items()} for i in range(n_experts)
    ]
    return base, experts


def write_family(
    root: Path,
    base: dict[str, torch.Tensor],
    experts: list[dict[str, torch.Tensor]],
    shards: int = 2,
    expert_shards: int | None = None,
    dtype: torch.dtype | None = None,
    config: dict | None = None,
) -> tuple[Path, list[Path]]:
    def cast(d: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {n: (t.to(dtype) if dtype is not None and t.is_floating_point() else t) for n, t in d.items()}

    base_dir = save_checkpoint(
        root / "base", cast(base), shards, config, {"tokenizer.json": "{}", "generation_config.json": "{}"}
    )
    dirs = [
        save_checkpoint(root / f"expert{i}", cast(e), expert_shards or shards, config) for i, e in enumerate(experts)
    ]
    return base_dir, dirs


def read_checkpoint(path: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for file in sorted(path.glob("*.safetensors")):
        out.update(load_file(file))
    return out


def leftovers(parent: Path) -> list[str]:
    """Temporary directories the engine may have left beside its target."""
    return sorted(p.name for p in parent.iterdir() if p.name.startswith("."))
