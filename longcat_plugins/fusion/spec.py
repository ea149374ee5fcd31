"""The fuse YAML: its typed schema, loading with key-path errors, and running it.

    base: outputs/sft                  # the checkpoint every expert was trained from
    experts:
      - {path: outputs/experts/math, weight: 1.0, name: math}
      - {path: outputs/experts/code, weight: 1.0}
    method: longcat                    # built-in (longcat, task_arithmetic, ties) or a plugin's
    params: {normalize: global, drop_rate: 0.5, erase: true}
    output: outputs/fused
    seed: 0

Relative paths are relative to the working directory, as for verl and mergekit.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from longcat_plugins.config import ConfigError, ConfigProblem, check_mapping

if TYPE_CHECKING:
    from longcat_plugins.fusion.engine import FusionReport, ProgressEvent
    from longcat_plugins.host import Host


@dataclass
class ExpertEntry:
    """One expert in the fuse YAML."""

    path: str
    weight: float = 1.0
    name: str = ""


@dataclass
class FuseConfig:
    """Schema of the fuse YAML."""

    base: str
    experts: list[ExpertEntry]
    output: str
    method: str = "longcat"
    params: dict[str, Any] = field(default_factory=dict)
    seed: int = 0


def parse_config(data: Any, source: str = "fuse config") -> FuseConfig:
    """``data`` (plain YAML data) as a :class:`FuseConfig`; :class:`ConfigError` lists every problem by key path."""
    if not isinstance(data, dict):
        raise ConfigError([ConfigProblem("(top level)", f"expected a mapping, got {type(data).__name__}")], source)
    if "params" in data and data["params"] is None:  # `params:` with nothing under it
        data = {**data, "params": {}}
    problems = [ConfigProblem(p.path.lstrip("."), p.message) for p in check_mapping(data, FuseConfig, "")]
    experts = data.get("experts")
    if isinstance(experts, list):
        if not experts:
            problems.append(ConfigProblem("experts", "at least one expert is required"))
        for i, entry in enumerate(experts):
            weight = entry.get("weight", 1.0) if isinstance(entry, dict) else None
            if isinstance(weight, int | float) and not isinstance(weight, bool) and not math.isfinite(weight):
                problems.append(ConfigProblem(f"experts[{i}].weight", f"must be a finite number, got {weight}"))
    if problems:
        raise ConfigError(problems, source)
    cfg = FuseConfig(**{**data, "experts": [ExpertEntry(**e) for e in data["experts"]]})
    cfg.params = dict(cfg.params or {})
    return cfg


def load_config(path: str | os.PathLike[str]) -> FuseConfig:
    """Read and check a fuse YAML file."""
    import yaml

    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text())
    except OSError as exc:
        raise ConfigError([ConfigProblem(str(file), f"cannot read: {exc.strerror or exc}")], str(file)) from None
    except yaml.YAMLError as exc:
        raise ConfigError([ConfigProblem(str(file), f"invalid YAML: {exc}")], str(file)) from None
    return parse_config(data, str(file))


def run_config(
    cfg: FuseConfig,
    *,
    source: str = "fuse config",
    output: str | None = None,
    overwrite: bool = False,
    host: Host | None = None,
    progress: Callable[[ProgressEvent], None] | None = None,
    dry_run: bool = False,
    prefetch: bool = True,
) -> FusionReport:
    """Run a parsed fuse config; an unknown method or bad params are reported at their key path."""
    from longcat_plugins.fusion.engine import Expert, fuse
    from longcat_plugins.host import UnknownComponentError

    try:
        return fuse(
            cfg.base,
            [Expert(Path(e.path), e.weight, e.name) for e in cfg.experts],
            output or cfg.output,
            method=cfg.method,
            params=cfg.params,
            seed=cfg.seed,
            overwrite=overwrite,
            host=host,
            progress=progress,
            dry_run=dry_run,
            prefetch=prefetch,
        )
    except UnknownComponentError as exc:
        raise ConfigError([ConfigProblem("method", str(exc))], source) from None
    except ConfigError as exc:
        if exc.source == "config":
            raise ConfigError(exc.problems, source) from None
        raise
