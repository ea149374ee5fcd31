"""Generate N verified environments of a domain into a directory, plus a verl task parquet.

Output (written into a temporary sibling directory and renamed into place only when complete)::

    OUT/
      envs/env_00000/ ...      one environment folder each (see runtime.py)
      tasks.parquet            one row per task, in the shape verl's RLHFDataset reads
      stats.json               counts, rejections by reason, timings, graph statistics
      graph.json               the domain's tools (typed params/returns, reads/writes) and dependency edges

Parquet columns: ``data_source`` (``longcat_env/<domain>``), ``prompt`` (system policy + the clean
first user message), ``ability`` (``agentic_tool_use``), ``reward_model`` (``style: rubric``,
``ground_truth``: the rubric as JSON), ``extra_info`` (``index``, ``env_path`` (absolute),
``env_rel_path`` (relative to OUT), ``task_id``, ``domain``, ``split``) and ``agent_name``
(``longcat_tool_agent``, the agent loop that runs these episodes).
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from longcat_plugins.environments.generate import EnvironmentGenerator, GenConfig, GenerationError
from longcat_plugins.environments.graph import ToolGraph
from longcat_plugins.environments.runtime import ToolEnvironment
from longcat_plugins.environments.spec import DomainSpec, load_spec
from longcat_plugins.environments.verify import check_tools, verify_environment

AGENT_NAME = "longcat_tool_agent"
ABILITY = "agentic_tool_use"


class OutputExistsError(FileExistsError):
    """The output directory exists and is not empty (nothing was written)."""


@dataclass
class EnvgenReport:
    domain: str
    out: Path
    environments: int = 0
    tasks: int = 0
    attempts: int = 0
    rejected: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    tools_per_env: list[int] = field(default_factory=list)
    graph: dict[str, float] = field(default_factory=dict)
    #: the GenConfig the environments were built with
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def envs_per_s(self) -> float:
        return self.environments / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict[str, Any]:
        t = self.tools_per_env or [0]
        return {
            "domain": self.domain,
            "environments": self.environments,
            "tasks": self.tasks,
            "attempts": self.attempts,
            "rejected": self.rejected,
            "rejected_total": sum(self.rejected.values()),
            "seconds": round(self.seconds, 3),
            "envs_per_s": round(self.envs_per_s, 2),
            "tools_per_env": {"min": min(t), "mean": round(sum(t) / len(t), 2), "max": max(t)},
            "graph": self.graph,
            "config": self.config,
        }


def task_rows(env: ToolEnvironment, env_path: Path, rel: str, start_index: int, split: str) -> list[dict[str, Any]]:
    rows = []
    for i, task in enumerate(env.tasks):
        ep = env.new_episode(task.task_id, seed=0)
        rows.append(
            {
                "data_source": f"longcat_env/{env.domain}",
                "prompt": [
                    {"role": "system", "content": ep.system_prompt()},
                    {"role": "user", "content": ep.first_user_message()},
                ],
                "ability": ABILITY,
                "reward_model": {"style": "rubric", "ground_truth": json.dumps(task.rubric)},
                "extra_info": {
                    "index": start_index + i,
                    "env_path": str(env_path),
                    "env_rel_path": rel,
                    "task_id": task.task_id,
                    "domain": env.domain,
                    "split": split,
                },
                "agent_name": AGENT_NAME,
            }
        )
    return rows


def check_output_dir(out: Path) -> None:
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise OutputExistsError(f"output directory {out} exists and is not empty; choose another or empty it")


def generate_environments(
    spec: str | Path | DomainSpec,
    count: int,
    out: str | Path,
    *,
    seed: int = 0,
    config: GenConfig | None = None,
    split: str = "train",
    max_rejection_ratio: float = 2.0,
    progress: Callable[[int, int, dict[str, int]], None] | None = None,
) -> EnvgenReport:
    """Generate ``count`` verified environments into ``out`` atomically; see the module doc."""
    if count < 1:
        raise ValueError(f"count must be >= 1 (got {count})")
    dom = spec if isinstance(spec, DomainSpec) else load_spec(spec)
    out = Path(out).resolve()
    check_output_dir(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.parent / f".{out.name}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    broken = check_tools(dom)
    if broken:
        raise GenerationError(
            f"{dom.source or dom.domain}: generated tools fail their unit checks: "
            + "; ".join(f"{k}: {v}" for k, v in sorted(broken.items()))
        )
    report = EnvgenReport(dom.domain, out, graph=ToolGraph.build(dom).stats(), config=asdict(config or GenConfig()))
    t0 = time.perf_counter()
    try:
        (tmp / "envs").mkdir(parents=True)
        gen = EnvironmentGenerator(dom, seed=seed, config=config)
        rows: list[dict[str, Any]] = []
        limit = int(count * (1 + max_rejection_ratio)) + 5
        index = 0
        while report.environments < count:
            if report.attempts >= limit:
                raise GenerationError(
                    f"{dom.domain}: {report.attempts} attempts gave only {report.environments}/{count} "
                    f"verified environments (rejections: {report.rejected})"
                )
            report.attempts += 1
            index += 1
            try:
                env = gen.generate(index - 1)
            except GenerationError:
                report.rejected["generation_failed"] = report.rejected.get("generation_failed", 0) + 1
                continue
            verdict = verify_environment(env, min_tools=gen.cfg.min_tools)
            if not verdict.ok:
                for k, v in verdict.reasons.items():
                    report.rejected[k] = report.rejected.get(k, 0) + v
                continue
            name = f"env_{report.environments:05d}"
            env.save(tmp / "envs" / name)
            rel = f"envs/{name}"
            rows += task_rows(env, out / rel, rel, len(rows), split)
            report.environments += 1
            report.tasks += len(env.tasks)
            report.tools_per_env.append(len(env.tool_names))
            if progress is not None:
                progress(report.environments, report.attempts, report.rejected)
        graph = ToolGraph.build(dom)
        (tmp / "graph.json").write_text(
            json.dumps(
                {
                    "domain": dom.domain,
                    "description": dom.description,
                    "tools": {
                        n: {
                            "op": t.op,
                            "params": [{"name": p.name, "type": p.field.json_type, "id_of": p.ref} for p in t.params],
                            "returns": [{"name": r[0], "type": r[1], "id_of": r[2]} for r in t.returns],
                            "reads": sorted(t.reads),
                            "writes": sorted(t.writes),
                        }
                        for n, t in dom.tools.items()
                    },
                    "edges": graph.edges(),
                    "stats": graph.stats(),
                },
                indent=1,
            )
        )
        import pandas as pd

        pd.DataFrame(rows).to_parquet(tmp / "tasks.parquet")
        report.seconds = time.perf_counter() - t0
        (tmp / "stats.json").write_text(json.dumps(report.to_dict(), indent=1))
        check_output_dir(out)
        if out.exists():
            out.rmdir()
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return report
