"""Two GRPO steps through stock ``main_ppo`` with ``longcat_heavy_thinking`` on a warm start (CPU):
every parallel trajectory and every summary is a training row carrying the reward of its own
response, and each summary saw its session's parallel answers."""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest
from conftest import trained_steps

from longcat_plugins.environments.heavy_thinking import NO_ANSWER, answer_of, truncate_answer
from longcat_plugins.learning.assets import Assets
from longcat_plugins.rewards.arithmetic import compute_score as arithmetic
from longcat_plugins.runtime.launch import resolve_config, run_training

K = 2
ANSWER_MAX_CHARS = 40  # heavy_thinking_cpu.yaml


@pytest.mark.slow
@pytest.mark.ray
def test_two_grpo_steps_train_parallel_and_summary_outputs(
    tiny_warm_start: Assets, tmp_path: Path, ray_tmp: Path
) -> None:
    result = run_training(
        resolve_config("heavy_thinking_cpu"),
        [
            f"data.train_files={tiny_warm_start.train}",
            f"data.val_files={tiny_warm_start.val}",
            f"actor_rollout_ref.model.path={tiny_warm_start.model}",
            f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
            f"trainer.rollout_data_dir={tmp_path / 'rollouts'}",
            f"longcat.settings.environment.longcat_heavy_thinking.k={K}",
            # partial credit: the few-step test warm start is rarely exact, and rewards that differ
            # between a session's outputs are what shows whose reward each row carries
            "reward.custom_reward_function.name=arithmetic",
        ],
        tmp_path / "run",
    )
    trained_steps(result)
    dumps = sorted((tmp_path / "rollouts").glob("*.jsonl"))
    assert len(dumps) == 2, dumps
    for dump in dumps:
        rows = [json.loads(line) for line in dump.read_text().splitlines()]
        sessions: dict[str, dict[int, dict]] = defaultdict(dict)
        for row in rows:
            uid, session, index = row["uid"].rsplit("_", 2)
            sessions[f"{uid}_{session}"][int(index)] = row
        assert len(sessions) == 4 * 2  # train_batch_size x rollout.n
        for outputs in sessions.values():
            assert sorted(outputs) == list(range(K + 1))  # K parallel trajectories, then the summary
            summary = outputs[K]
            assert "Candidate answers" in summary["input"]
            for j in range(K):
                assert "Candidate answers" not in outputs[j]["input"]
                answer = truncate_answer(answer_of(outputs[j]["output"]), ANSWER_MAX_CHARS) or NO_ANSWER
                assert f"({j + 1}) {answer}" in summary["input"]  # the answer, in trajectory order
            for row in outputs.values():  # each row: the reward of its own response, not the summary's
                expected = arithmetic("", row["output"], row["gts"])
                expected = expected["score"] if isinstance(expected, dict) else expected
                assert row["score"] == pytest.approx(expected, abs=1e-6), row
        scores = [row["score"] for row in rows]
        assert len(set(scores)) > 1, scores  # the rows' rewards differ: not one reward broadcast
