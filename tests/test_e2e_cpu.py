"""verl's real trainer on the CPU runtime, end to end: 2 GRPO steps with the v1 and the legacy
trainer, the rollout's weights changing every step, and resume from a checkpoint. The v1 run is
the suite's shared run (``shared_cpu_run`` in conftest), the legacy run ``legacy_cpu_run``; the
eval and objective tests read them too."""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
from conftest import LEGACY_RUN_GROUP, SHARED_RUN_GROUP, SHARED_RUN_OBJECTIVE, SharedRun, actor_processes
from conftest import train_cpu as train

from longcat_plugins.learning.assets import Assets
from longcat_plugins.runtime.launch import RunResult
from longcat_plugins.runtime.servers_ahead import STARTED as HF_SERVERS_STARTED
from longcat_plugins.schedulers.agent_loops_ahead import SPAWNED as AGENT_LOOPS_SPAWNED
from longcat_plugins.schedulers.agent_loops_ahead import STARTED as AGENT_LOOPS_STARTED

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def assert_learning_step(step: dict) -> None:
    for key in ("actor/pg_loss", "actor/grad_norm"):
        assert math.isfinite(step[key]), (key, step[key])
    assert step["actor/grad_norm"] > 0
    assert step["critic/score/mean"] > 0, "the partial-credit reward should be non-zero"


def assert_two_steps_with_fresh_weights(steps: list[dict], updates: list[dict]) -> None:
    assert [s["step"] for s in steps] == [1, 2]
    for step in steps:
        assert_learning_step(step)
    assert any(s["actor/pg_loss"] != 0 for s in steps)
    # the rollout server received the trainer's weights after each step, and they changed
    assert [u["global_steps"] for u in updates][-2:] == [1, 2], updates
    digests = [u["digest"] for u in updates]
    assert len(set(digests)) == len(digests), "weights pushed to the rollout did not change between steps"


@SHARED_RUN_GROUP
def test_two_grpo_steps_v1(shared_cpu_run: SharedRun) -> None:
    """The v1 trainer: the suite's shared run (2 steps, v1, checkpoint at step 2)."""
    steps = [s for s in shared_cpu_run.result.steps if s["step"] > 0]  # step 0: validation before training
    assert_two_steps_with_fresh_weights(steps, shared_cpu_run.updates)
    # verl's TaskRunner ran in the driver (runtime/in_driver.py): no actor process of its own
    log = shared_cpu_run.result.log.read_text()
    assert "TaskRunnerV1 runs in the driver process" in log and "(TaskRunnerV1 pid=" not in log
    # the agent-loop worker's process started with the engines and its manager beside the replica
    # (schedulers/agent_loops_ahead.py); that manager, with that process, was the one main_ppo
    # used: the recipe's one worker process, not a second
    assert AGENT_LOOPS_SPAWNED in log and AGENT_LOOPS_STARTED in log
    assert actor_processes(shared_cpu_run.ray_dir, "AgentLoopWorkerTQ") == 1
    # the replica's server process started beside the engines (runtime/servers_ahead.py), and it
    # is the one verl's launch loaded: one HFServer process
    assert HF_SERVERS_STARTED in log
    assert actor_processes(shared_cpu_run.ray_dir, "HFServer") == 1


@LEGACY_RUN_GROUP
def test_two_grpo_steps_legacy(legacy_cpu_run: tuple[RunResult, list[dict]]) -> None:
    """The legacy trainer: the suite's legacy run (2 steps, ``longcat_gspo``)."""
    result, updates = legacy_cpu_run
    assert_two_steps_with_fresh_weights(result.steps, updates)
    assert "TaskRunner runs in the driver process" in result.log.read_text()


@SHARED_RUN_GROUP
def test_resume_continues_from_the_saved_step(
    shared_cpu_run: SharedRun, tiny_assets: Assets, tmp_path: Path, ray_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resume from the shared run's step-2 checkpoint, copied so the shared run stays as it was;
    with verl's TaskRunner in its own actor (``LONGCAT_TASK_RUNNER=actor``), as without our hook."""
    monkeypatch.setenv("LONGCAT_TASK_RUNNER", "actor")
    ckpt = tmp_path / "ckpt"
    shutil.copytree(shared_cpu_run.result.checkpoints, ckpt)
    assert (ckpt / "latest_checkpointed_iteration.txt").read_text().strip() == "2"
    second, updates = train(
        tiny_assets,
        tmp_path / "second",
        ray_tmp,
        "trainer.total_training_steps=3",
        "trainer.save_freq=-1",
        f"trainer.default_local_dir={ckpt}",
        "trainer.resume_mode=auto",
        *SHARED_RUN_OBJECTIVE,
    )
    assert [s["step"] for s in second.steps] == [3], "a resumed run trains only the steps after the checkpoint"
    log = second.log.read_text()
    assert "(TaskRunnerV1 pid=" in log and "runs in the driver process" not in log
    # in the actor too, and before the checkpoint is loaded: one worker process, resumed at step 3
    assert AGENT_LOOPS_SPAWNED in log and AGENT_LOOPS_STARTED in log
    assert actor_processes(ray_tmp, "AgentLoopWorkerTQ") == 1
    assert HF_SERVERS_STARTED in log and actor_processes(ray_tmp, "HFServer") == 1
    assert_learning_step(second.steps[0])
    assert updates[-1]["global_steps"] == 3
