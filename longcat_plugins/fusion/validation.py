"""Checks across checkpoints, done before anything is written: every expert must have exactly
the base's tensors with the same shapes and dtypes, and only dtypes we know how to merge."""

from __future__ import annotations

from collections.abc import Sequence

from longcat_plugins.fusion.checkpoint import Checkpoint
from longcat_plugins.fusion.dtypes import COPIED_DTYPES, FLOAT_DTYPES

_DTYPE_HINT = (
    " (verl.model_merger writes bfloat16: convert the base the same way, "
    "e.g. AutoModelForCausalLM.from_pretrained(base, dtype=torch.bfloat16).save_pretrained(...))"
)


def compare(base: Checkpoint, experts: Sequence[Checkpoint], complete: Sequence[bool] | None = None) -> list[str]:
    """Every mismatch between ``base`` and each expert, one line each (empty: compatible).

    ``complete[i]`` (base first, then the experts) is False for a checkpoint of which only some
    shards could be read: its shapes and dtypes are still compared, but a tensor it lacks may sit
    in an unreadable shard, so a missing name is reported only between complete ones (an extra one whenever the base is).
    """
    complete = list(complete) if complete is not None else [True] * (len(experts) + 1)
    problems: list[str] = []
    for name, info in base.tensors.items():
        if info.dtype not in FLOAT_DTYPES and info.dtype not in COPIED_DTYPES:
            problems.append(
                f"{base.label}: tensor {name} has dtype {info.dtype}, which cannot be merged "
                "(quantised checkpoints: dequantise first)"
            )
    for expert, whole in zip(experts, complete[1:], strict=True):
        last_dtype_problem = -1
        missing = [n for n in base.tensors if n not in expert.tensors] if complete[0] and whole else []
        extra = [n for n in expert.tensors if n not in base.tensors] if complete[0] else []
        for name in missing:
            problems.append(f"{expert.label} ({expert.path}): tensor {name} is missing (the base has it)")
        for name in extra:
            problems.append(f"{expert.label} ({expert.path}): tensor {name} is not in the base")
        for name, want in base.tensors.items():
            got = expert.tensors.get(name)
            if got is None:
                continue
            if got.shape != want.shape:
                problems.append(
                    f"{expert.label} ({expert.path}): tensor {name} has shape {list(got.shape)}, "
                    f"the base has {list(want.shape)}"
                )
            if got.dtype != want.dtype:
                last_dtype_problem = len(problems)
                problems.append(
                    f"{expert.label} ({expert.path}): tensor {name} has dtype {got.dtype}, the base has {want.dtype}"
                )
        if last_dtype_problem >= 0:
            problems[last_dtype_problem] += _DTYPE_HINT
    return problems
