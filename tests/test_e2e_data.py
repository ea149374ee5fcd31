"""The data strategies through verl's real v1 trainer (``trainer.v1.trainer_mode=longcat_data``):
budget allocation + pass-rate oversampling + the context budget + the curriculum + per-domain
rollout quotas + replay on the tiny model, 3 steps; the ``longcat/data/*`` metrics show the
decisions, every request keeps to the planned response budget, and a run resumed from the
step-2 checkpoint plans step 3 row for row, and trains the same groups (replayed ones included),
as the uninterrupted run did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import train_cpu

from longcat_plugins.learning.assets import Assets

pytestmark = [pytest.mark.slow, pytest.mark.ray]

SETTINGS = "+longcat.settings.scheduler.longcat_data"
OVERRIDES = [
    "trainer.v1.trainer_mode=longcat_data",
    "actor_rollout_ref.rollout.agent.default_agent_loop=longcat_single_turn",
    "trainer.total_training_steps=3",
    "trainer.save_freq=1",
    f"{SETTINGS}.correct_threshold=0.05",  # the random model's partial-credit rewards: a pass is any credit
    f"{SETTINGS}.budget.enable=true",
    f"{SETTINGS}.budget.value=knapsack",
    f"{SETTINGS}.oversampling.enable=true",
    f"{SETTINGS}.oversampling.k_max=3",
    f"{SETTINGS}.context.enable=true",
    f"{SETTINGS}.context.budgets=[8,12,16]",
    f"{SETTINGS}.context.near=0.5",
    f"{SETTINGS}.curriculum.enable=true",
    f"{SETTINGS}.pool_factor=2",
    f"{SETTINGS}.quotas.enable=true",
    f"{SETTINGS}.quotas.domain_key=data_source",
    f"{SETTINGS}.quotas.domain_ratios={{arith_a:0.5,arith_b:0.5}}",
    f"{SETTINGS}.quotas.domain_oversampling={{arith_b:2.0}}",
    f"{SETTINGS}.quotas.tolerance=0.25",
    f"{SETTINGS}.replay.enable=true",
    f"{SETTINGS}.replay.reuse_ratio=0.25",
]


def with_pass_rates(train: Path, out: Path) -> Path:
    """The tiny training set with a historical pass rate per task (``extra_info.pass_rate``) and
    two domains (``data_source``)."""
    import pandas as pd

    rows = pd.read_parquet(train)
    rates = [0.05, 0.35, 0.65, 0.95]
    rows["extra_info"] = [{**info, "pass_rate": rates[i % 4]} for i, info in enumerate(rows["extra_info"])]
    rows["data_source"] = ["arith_a" if i % 2 else "arith_b" for i in range(len(rows))]
    rows.to_parquet(out)
    return out


def trace(path: Path, kind: str = "rows") -> dict[int, list]:
    """The trace's per-step records of one kind: ``rows`` (planned) or ``trained`` (with ``strays``)."""
    records = [r for r in map(json.loads, path.read_text().splitlines()) if kind in r]
    if kind == "trained":
        return {r["step"]: [r["trained"], r["strays"]] for r in records}
    return {r["step"]: r[kind] for r in records}


def test_data_strategies_act_in_verls_trainer_and_resume_row_for_row(
    tiny_assets: Assets, tmp_path: Path, ray_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = tmp_path / "first"
    train = with_pass_rates(tiny_assets.train, tmp_path / "train.parquet")
    overrides = [*OVERRIDES, f"data.train_files={train}", f"{SETTINGS}.pass_rate_key=extra_info.pass_rate"]
    monkeypatch.setenv("LONGCAT_DATA_TRACE", str(tmp_path / "first.jsonl"))
    result, _ = train_cpu(tiny_assets, first, ray_tmp, *overrides)
    steps = {s["step"]: s for s in result.steps}
    assert sorted(steps) == [1, 2, 3]
    budget = 4 * 4  # train_batch_size x rollout.n of the recipe
    for record in steps.values():
        assert record["longcat/data/plan/rollouts"] == budget == record["longcat/data/plan/budget"]
        # per-domain rollout quotas: arith_b (oversampling 2) may start twice its share of prompts
        assert (
            record["longcat/data/quotas/arith_b/rollout_quota"]
            == 4
            == 2 * record["longcat/data/quotas/arith_a/rollout_quota"]
        )
        assert (
            record["longcat/data/quotas/arith_b/prompts_started"]
            > record["longcat/data/quotas/arith_a/prompts_started"]
        )
        assert (
            record["longcat/data/quotas/arith_a/trained_groups"] > 0
            and record["longcat/data/quotas/arith_b/trained_groups"] > 0
        )
        assert 0.0 <= record["longcat/data/zero_variance_group_frac"] <= 1.0
        assert record["longcat/data/rollout_tokens"] > 0
        # every request kept to the step's planned response budget (D6, per request)
        assert record["response_length/max"] <= record["longcat/data/context/max_tokens"]
    assert steps[3]["longcat/data/tasks_tracked"] > steps[1]["longcat/data/tasks_tracked"]
    # the surplus the quotas started is kept and mixed into later batches, within the bound
    assert steps[1]["longcat/data/batch/surplus_groups"] > 0
    assert sum(steps[s]["longcat/data/replay/reused_groups"] for s in (2, 3)) > 0
    assert max(steps[s]["longcat/data/replay/staleness/max"] for s in (2, 3)) <= 1
    assert steps[3]["longcat/data/rollout_tokens/total"] == sum(
        s["longcat/data/rollout_tokens"] for s in steps.values()
    )
    planned = trace(tmp_path / "first.jsonl")
    # budget allocation moved rollouts between tasks of different pass rates (knapsack: p = 0.35
    # gets the most), oversampling split the hard tasks into groups
    per_task = [
        sum(n for task, _, n, _ in rows if task == t) for rows in planned.values() for t in {r[0] for r in rows}
    ]
    groups = [sum(1 for task, *_ in rows if task == t) for rows in planned.values() for t in {r[0] for r in rows}]
    assert len(set(per_task)) > 1 and max(groups) > 1, planned
    assert max(s["longcat/data/plan/groups_per_task/max"] for s in steps.values()) > 1
    state = json.loads((first / "checkpoints" / "global_step_2" / "longcat_data.json").read_text())
    assert state["steps"] == 2 and state["stats"]["rates"]

    # resume from step 2: step 3 is planned row for row as in the uninterrupted run
    monkeypatch.setenv("LONGCAT_DATA_TRACE", str(tmp_path / "resumed.jsonl"))
    resumed, _ = train_cpu(
        tiny_assets,
        tmp_path / "resumed",
        ray_tmp,
        *overrides,
        "trainer.resume_mode=resume_path",
        f"trainer.resume_from_path={first / 'checkpoints' / 'global_step_2'}",
    )
    assert [s["step"] for s in resumed.steps] == [3]
    assert trace(tmp_path / "resumed.jsonl") == {3: planned[3]}
    # and trains the same groups: the replay buffer comes back with verl's TransferQueue state
    trained = trace(tmp_path / "first.jsonl", "trained")
    assert trained[3][1] == 0 and any(gen_step < 3 for _, _, gen_step in trained[3][0]), trained[3]
    assert trace(tmp_path / "resumed.jsonl", "trained") == {3: trained[3]}
    assert resumed.steps[0]["longcat/data/replay/reused_groups"] == steps[3]["longcat/data/replay/reused_groups"]
