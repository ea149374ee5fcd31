"""Benchmark of ``longcat_tool_agent`` outside the model: what the loop itself costs per trajectory.

A scripted policy (the golden chain as hermes tool calls, then the golden answer) drives full
episodes of generated retail environments through the agent loop with verl's real
continuous-token builder and tool parser; the "model" answers instantly, so the time measured is
the loop's: tokenising, parsing, tool execution, rubric. Compared: no context management vs a
discard-all reset after every turn (one segment per turn). Writes bench/results/agent_loop.json.

    PYTHONPATH=. python bench/bench_agent_loop.py [--episodes 60]
"""

from __future__ import annotations

import argparse
import asyncio
import platform
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from provenance import provenance, stamp  # bench/provenance.py: the record every bench writes

from longcat_plugins.atomic import write_json_atomic

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--episodes", type=int, default=60)
    args = parser.parse_args()
    origin = provenance(seeds=[0])  # environments and episodes from seed 0

    import pandas as pd
    from env_agent_helpers import ScriptedServer, hermes, make_loop
    from transformers import AutoTokenizer

    from longcat_plugins.environments.agent_loop import ToolAgentSettings, episode_spec, load_environment_cached
    from longcat_plugins.environments.envgen import generate_environments
    from longcat_plugins.learning.assets import ensure_assets

    tokenizer = AutoTokenizer.from_pretrained(ensure_assets().model)
    work = Path(tempfile.mkdtemp(prefix="bench-agent-"))
    generate_environments("retail", max(1, args.episodes // 3), work / "envs", seed=0)
    rows = pd.read_parquet(work / "envs" / "tasks.parquet").to_dict("records")[: args.episodes]

    def script_for(row: dict[str, Any]) -> list[str]:
        env_path, task_id, seed = episode_spec(row["extra_info"])
        ref = load_environment_cached(env_path).new_episode(task_id, seed=seed)
        return [hermes(n, a) for n, a in ref.golden_chain()] + [ref.golden_answer()]

    results: dict[str, Any] = {}
    for label, settings in (
        ("plain", ToolAgentSettings(tools_style="compact")),
        ("discard_every_turn", ToolAgentSettings(tools_style="compact", discard_turns=1, max_context_resets=16)),
    ):

        async def run_all(settings: ToolAgentSettings = settings) -> tuple[list[float], list[Any]]:
            times, outs = [], []
            for row in rows:
                server = ScriptedServer(tokenizer, script_for(row))
                loop = make_loop(tokenizer, server, settings, prompt_length=8192, response_length=4096)
                start = time.perf_counter()
                out = await loop.run({"temperature": 1.0, "logprobs": True}, **row)
                times.append(time.perf_counter() - start)
                outs.append(out if isinstance(out, list) else [out])
            return times, outs

        times, outs = asyncio.run(run_all())
        infos = [o[-1].extra_fields["reward_extra_info"] for o in outs]
        turns = sum(i["env_turns"] for i in infos)
        results[label] = {
            "trajectories": len(times),
            "trajectories_per_s": round(len(times) / sum(times), 2),
            "ms_per_turn": round(1000 * sum(times) / turns, 2),
            "mean_segments": round(sum(len(o) for o in outs) / len(outs), 2),
            "mean_reward": round(sum(o[-1].reward_score for o in outs) / len(outs), 4),
            "success_rate": round(sum(i["env_success"] for i in infos) / len(infos), 4),
        }
        print(label, results[label])

    shutil.rmtree(work, ignore_errors=True)
    out = Path(__file__).resolve().parent / "results" / "agent_loop.json"
    payload = stamp({"machine": platform.platform(), "python": platform.python_version(), "results": results}, origin)
    write_json_atomic(out, payload, indent=1)
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
