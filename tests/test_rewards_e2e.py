"""Slow: 2 GRPO steps through stock ``main_ppo`` on the CPU runtime with the ``longcat_router``
reward manager over a mixed math + code dataset."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from longcat_plugins.learning.assets import ensure_assets
from longcat_plugins.runtime.launch import resolve_config, run_training

pytestmark = [pytest.mark.slow, pytest.mark.ray]

CASES = json.dumps({"inputs": ["3\n", "10\n"], "outputs": ["6\n", "20\n"]})


def mixed_dataset(path: Path, n: int = 8) -> Path:
    import pandas as pd

    rows = []
    for i in range(n):
        if i % 2 == 0:
            a, b = i + 2, 3
            rows.append(
                {
                    "data_source": "math_arith",
                    "prompt": [{"role": "user", "content": f"{a}+{b}=? Answer in \\boxed{{}}."}],
                    "ability": "math",
                    "reward_model": {"style": "rule", "ground_truth": str(a + b)},
                    "extra_info": {"index": i},
                }
            )
        else:
            rows.append(
                {
                    "data_source": "code_double",
                    "prompt": [{"role": "user", "content": "Python: read n, print 2*n."}],
                    "ability": "code",
                    "reward_model": {"style": "rule", "ground_truth": CASES},
                    "extra_info": {"index": i},
                }
            )
    pd.DataFrame(rows).to_parquet(path)
    return path


def test_two_grpo_steps_with_the_router_on_mixed_data(tmp_path: Path, ray_tmp: Path) -> None:
    data = mixed_dataset(tmp_path / "mixed.parquet")
    result = run_training(
        resolve_config("reward_router_cpu"),
        [
            f"data.train_files={data}",
            f"data.val_files={data}",
            f"actor_rollout_ref.model.path={ensure_assets().model}",
            f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
            "trainer.total_training_steps=2",
            f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
        ],
        tmp_path / "run",
    )
    log = result.log.read_text()
    assert result.returncode == 0, log[-5000:]
    assert [s["step"] for s in result.steps] == [1, 2]
    for step in result.steps:
        assert math.isfinite(step["actor/pg_loss"])
        assert "critic/score/mean" in step
    # verl dumps every rollout with its score (the v1 trainer's dump omits reward extra info):
    # math and code samples were all scored, none invalid (random text is wrong, not uncheckable;
    # an invalid sample would carry NaN)
    dumps = sorted((tmp_path / "rollouts").glob("*.jsonl"))
    assert len(dumps) == 2, dumps
    rows = [json.loads(line) for f in dumps for line in f.read_text().splitlines()]
    assert {r["input"].split()[0] for r in rows} >= {"Python:"} and any("boxed" in r["input"] for r in rows)
    assert all(math.isfinite(r["score"]) for r in rows), [r["score"] for r in rows]
