"""The system recipe on the tool environment, end to end (``configs/longcat_tool.yaml``): DORA,
the triplet-clip objective, the step planner's strategies, self-verification of tool episodes
judged against their rubric score and the reward router, with verl's real trainer on the tool
warm start of the CPU lane (``LANE_PLAN``, cached like the tool tests' one) continued on verdicts
(:mod:`longcat_plugins.learning.tool_verdicts`). Every component's own metrics must show that it
acted (:mod:`longcat_plugins.evaluation.system`), not merely that it was enabled."""

from __future__ import annotations

from pathlib import Path

import pytest

from longcat_plugins.learning.warmstart import WarmStart

pytestmark = [pytest.mark.slow, pytest.mark.ray]

#: steps of the run: with the plateau detector's window at 1 (the recipe's is 2), a phase can
#: start after 2 trained steps, and its verification rows are trained a step or two later
STEPS = 5
SV = "longcat.settings.scheduler.longcat_data.selfverify"
#: the recipe at a size 2 shared CPU cores finish within the test: 4 tasks a step (chosen among 8)
#: of 12 that recur, 4 rollouts each on average, 3 turns, no validation
SMALL = [
    "data.train_batch_size=4",
    "actor_rollout_ref.actor.ppo_mini_batch_size=4",
    "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=4",
    "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu=4",
    "data.train_max_samples=12",
    "longcat.settings.environment.longcat_tool_agent.max_turns=3",
    "trainer.val_before_train=false",
    "trainer.test_freq=-1",
    f"{SV}.window=1",
]
#: the metrics shown when a component did not act
SHOWN = (
    "critic/score/mean",
    "longcat/selfverify/",
    "longcat/reward/scored/",
    "longcat/data/curriculum/",
    "longcat/data/plan/",
    "dora/filtered_groups",
    "dora/versions_held/max",
)


@pytest.fixture(scope="session")
def tool_verdict_warm() -> WarmStart:
    """The lane's tool warm start (as ``tests/test_vllm_lane.py``'s ``tool_warm32``), plus verdicts."""
    from longcat_plugins.learning.tool_verdicts import ensure_verdict_warm_start
    from longcat_plugins.learning.tool_warmstart import LANE_PLAN, ensure_tool_warm_start

    return ensure_verdict_warm_start(ensure_tool_warm_start(None, LANE_PLAN))


def test_the_tool_system_recipe_runs_with_every_component_acting(
    tool_verdict_warm: WarmStart, tmp_path: Path, ray_tmp: Path
) -> None:
    from longcat_plugins.evaluation.system import _ALL, TOOL_SYSTEM, components_active
    from longcat_plugins.learning.demos import tool_system_demo
    from longcat_plugins.runtime.launch import resolve_config, run_training

    demo = tool_system_demo(tool_verdict_warm, STEPS)
    result = run_training(
        resolve_config(demo.config),
        [*demo.overrides, *SMALL, f"+ray_kwargs.ray_init._temp_dir={ray_tmp}"],
        tmp_path / "run",
    )
    assert result.returncode == 0, result.log.read_text()[-6000:]
    steps = result.steps
    trained = [s for s in steps if "actor/pg_loss" in s]
    assert len(trained) == STEPS, [sorted(s) for s in steps][:2]
    active = components_active(steps, TOOL_SYSTEM)
    shown = [{k: v for k, v in s.items() if k.startswith(SHOWN)} for s in trained]
    missing = {name: _ALL[name][0] for name in TOOL_SYSTEM if name not in active}
    assert active == list(TOOL_SYSTEM), (missing, shown)
    # the verdicts are paid against the rubric: the verification rows were scored by selfverify,
    # the episodes by tool_rubric, and some verdict was parseable (the warm start judges)
    assert any(s.get("longcat/reward/scored/selfverify", 0) > 0 for s in steps)
    assert any(s.get("longcat/selfverify/verify_unparseable", 1.0) < 1.0 for s in steps)
