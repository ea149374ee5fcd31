"""Failures that cannot hide (issue 32 item 3): a reward that raises is an invalid sample with
the same keys as every other, counted per step, logged once with its traceback, and above
``longcat.settings.reward.failures.max_failed_share`` the step stops naming the reward; an
invalid sample never makes a stock estimator's advantages (so the loss) NaN."""

from __future__ import annotations

import asyncio
import logging
import math
import textwrap
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
import verl  # noqa: F401 - loads the bridge, which installs the seams on import
from test_rewards_verl import make_batch, make_config, sync_bridge

from longcat_plugins import RewardFunction, hookimpl
from longcat_plugins.algorithms import masking
from longcat_plugins.config import compose, validate_config, validate_section
from longcat_plugins.learning.assets import ensure_assets
from longcat_plugins.rewards import failures
from longcat_plugins.rewards.result import ERROR_KEY, FAILED_KEY, NAME_KEY, VALID_KEY
from longcat_plugins.testing import HostFactory

REPO = Path(__file__).resolve().parents[1]

USER_REWARD = '''
def flaky(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """A user's reward with a bug: it divides by the answer."""
    if ground_truth == "0":
        return {"score": 1.0 / int(ground_truth), "pred": solution_str}
    return {"score": 1.0, "pred": solution_str}
'''


@pytest.fixture(scope="module")
def model_path() -> str:
    sync_bridge()
    return str(ensure_assets().model)


@pytest.fixture(autouse=True)
def fresh_warnings() -> None:
    failures._warned.clear()


def run_worker(config: Any, samples: list) -> list[dict[str, Any]]:
    """verl's RewardLoopWorker (our seam included) on one batch, per sample as the agent loop calls it."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    async def go() -> list[dict[str, Any]]:
        worker = RewardLoopWorker(config, reward_router_address=None)
        data = make_batch(worker.input_tokenizer, samples)
        return await worker.compute_score_batch(data)

    return asyncio.run(go())


def stacked(outputs: list[dict[str, Any]]) -> dict[str, np.ndarray]:
    infos = [o["reward_extra_info"] for o in outputs]
    return {k: np.array([info[k] for info in infos]) for k in infos[0]}  # verl: the first sample's keys


def test_a_users_reward_that_raises_is_an_invalid_sample_with_its_traceback(
    model_path: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert failures.APPLIED.get(failures.WORKER_MODULE)
    path = tmp_path / "my_reward.py"
    path.write_text(textwrap.dedent(USER_REWARD))
    config = make_config(model_path, "naive")
    config.reward.custom_reward_function.path = str(path)
    config.reward.custom_reward_function.name = "flaky"
    samples = [("s", "one", "1", {}, None), ("s", "zero", "0", {}, None), ("s", "z", "0", {}, None)]
    with caplog.at_level(logging.WARNING, logger=failures.__name__):
        outputs = run_worker(config, samples)
    scores = [o["reward_score"] for o in outputs]
    assert scores[0] == 1.0 and math.isnan(scores[1]) and math.isnan(scores[2])
    extra = stacked(outputs)  # every sample has the longcat keys, so verl's stacking works
    assert list(extra[VALID_KEY]) == [1.0, 0.0, 0.0] and list(extra[FAILED_KEY]) == [0.0, 1.0, 1.0]
    assert set(extra[NAME_KEY]) == {"flaky"}
    assert extra[ERROR_KEY][1].startswith("flaky: ZeroDivisionError: float division by zero")
    assert list(extra["pred"]) == ["one", None, None]  # the user's own key: None where the reward raised
    assert "my_reward.py" in extra[ERROR_KEY][1] and "Traceback" in extra[ERROR_KEY][1]
    warned = [r for r in caplog.records if "reward 'flaky' raised" in r.getMessage()]
    assert len(warned) == 1 and "ZeroDivisionError" in warned[0].getMessage()  # the first failure, once


class RaisingRewardPlugin:
    @hookimpl
    def register_rewards(self) -> list[RewardFunction]:
        def explodes(
            data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kw: Any
        ) -> float:
            """Raises on everything."""
            raise KeyError("missing_field")

        return [RewardFunction("explodes", explodes)]


def test_an_outside_plugins_reward_that_raises_under_the_router_is_counted(
    model_path: str, longcat_host: HostFactory
) -> None:
    longcat_host(
        RaisingRewardPlugin(),
        builtins=True,
        activate=True,
        settings={"reward": {"longcat_router": {"routes": {"boom*": "explodes", "math*": "math"}}}},
    )
    config = make_config(model_path, "longcat_router")
    samples = [("math_a", r"\boxed{2}", "2", {}, None), ("boom_a", "x", "y", {}, None)]
    outputs = run_worker(config, samples)
    assert outputs[0]["reward_score"] == 1.0 and math.isnan(outputs[1]["reward_score"])
    step = failures.count(o["reward_extra_info"] for o in outputs)
    assert step.failed == {"math": 0, "explodes": 1} and step.invalid == 1
    assert step.metrics() == {
        "longcat/reward/failed/explodes": 1.0,
        "longcat/reward/failed/math": 0.0,
        "longcat/reward/scored/explodes": 1.0,
        "longcat/reward/scored/math": 1.0,
        "longcat/reward/invalid_share": 0.5,
    }
    assert "explodes: KeyError: 'missing_field'" in step.first_error["explodes"]


def _infos(n_failed: int, n_ok: int, n_undecided: int = 0) -> list[dict[str, Any]]:
    failed = {VALID_KEY: 0.0, FAILED_KEY: 1.0, NAME_KEY: "flaky", ERROR_KEY: "flaky: ValueError: bad\nTraceback..."}
    ok = {VALID_KEY: 1.0, FAILED_KEY: 0.0, NAME_KEY: "flaky", ERROR_KEY: ""}
    undecided = {VALID_KEY: 0.0, FAILED_KEY: 0.0, NAME_KEY: "flaky", ERROR_KEY: "timeout"}
    return [failed] * n_failed + [ok] * n_ok + [undecided] * n_undecided


def test_the_step_stops_above_the_share_naming_the_reward() -> None:
    limit = failures.FailureSettings(max_failed_share=0.2)
    failures.enforce(failures.count(_infos(2, 8)), "step 1", limit)  # 20%: at the share, counted only
    # undecidable samples (a timeout) are invalid but not failures: they never stop a run
    failures.enforce(failures.count(_infos(0, 2, 8)), "step 1", limit)
    with pytest.raises(failures.RewardFailuresError) as info:
        failures.enforce(failures.count(_infos(3, 7)), "training step 4", limit)
    msg = str(info.value)
    assert msg.startswith("training step 4: reward 'flaky' raised on 3 of 10 samples (30% of the step > ")
    assert "longcat.settings.reward.failures.max_failed_share = 0.2" in msg and "flaky: ValueError: bad" in msg
    with pytest.raises(failures.RewardFailuresError):  # 0: the first failure stops
        failures.enforce(failures.count(_infos(1, 99)), "step", failures.FailureSettings(max_failed_share=0.0))


def test_the_share_is_a_typed_setting_and_disabling_the_guard_only_counts(longcat_host: HostFactory) -> None:
    problems = validate_section({"settings": {"reward": {"failures": {"max_failed_share": "lots"}}}})
    assert [p.path for p in problems] == ["longcat.settings.reward.failures.max_failed_share"]
    problems = validate_section({"settings": {"reward": {"failures": {"max_failed_share": 1.5}}}})
    assert "max_failed_share must be in [0, 1], got 1.5" in problems[0].message
    longcat_host(builtins=True, activate=True, settings={"reward": {"failures": {"max_failed_share": 0.5}}})
    assert failures.settings().max_failed_share == 0.5
    longcat_host(builtins=True, activate=True, disable=("reward:failures",))
    assert failures.settings().max_failed_share == 1.0


def test_the_v1_trainer_seam(longcat_host: HostFactory) -> None:
    longcat_host(builtins=True, activate=True, settings={"reward": {"failures": {"max_failed_share": 0.3}}})
    called: list[int] = []

    class PPOTrainer:
        global_steps = 7

        def _compute_advantage(self, batch: Any, metrics: dict) -> str:
            called.append(len(batch.keys))
            return "advantages"

    rows = [{"reward_extra_info": info} for info in _infos(1, 3) + _infos(1, 0)]

    class FakeTQ:
        @staticmethod
        def kv_batch_get(keys: list, partition_id: str, select_fields: list) -> Any:
            assert select_fields == ["extra_fields"]
            return {"extra_fields": np.array([rows[int(k)] for k in keys], dtype=object)}

    module = ModuleType("fake_trainer_base")
    module.PPOTrainer, module.tq = PPOTrainer, FakeTQ  # type: ignore[attr-defined]
    failures.wrap_trainer(module)
    # five rows, the last is padding (not counted): 1 of 4 failed = 25% <= 30%
    batch = SimpleNamespace(keys=list("01234"), partition_id="train", tags=[{}] * 4 + [{"is_padding": True}])
    metrics: dict[str, float] = {}
    assert PPOTrainer()._compute_advantage(batch, metrics) == "advantages" and called == [5]
    # the padding row is not a scored sample either
    assert metrics == {
        "longcat/reward/failed/flaky": 1.0,
        "longcat/reward/scored/flaky": 4.0,
        "longcat/reward/invalid_share": 0.25,
    }
    # the padding row counted would be 2 of 5 = 40%: a batch of rows 0-2 and 4 has 2 of 4 = 50%
    batch = SimpleNamespace(keys=list("0124"), partition_id="train", tags=[{}] * 4)
    with pytest.raises(failures.RewardFailuresError, match=r"^training step 7: reward 'flaky' raised on 2 of 4"):
        PPOTrainer()._compute_advantage(batch, {})
    assert called == [5]  # verl's advantage (and so the update) never ran


# -- masking: stock estimators never see a NaN ------------------------------------------------------


def grpo_data(scores: list[float], uids: list[str], length: int = 3) -> Any:
    from verl import DataProto

    rewards = torch.zeros(len(scores), length)
    rewards[:, -1] = torch.tensor(scores)
    mask = torch.ones(len(scores), length, dtype=torch.int64)  # verl's compute_response_mask dtype
    return DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask},
        non_tensors={"uid": np.array(uids, dtype=object)},
    )


def reference_grpo(scores: list[float], uids: list[str], eps: float = 1e-6) -> list[float]:
    """GRPO (Shao et al. 2024) in float64 over the valid samples only; 0 for invalid ones and for
    groups of several samples with fewer than two valid."""
    out = []
    for s, u in zip(scores, uids, strict=True):
        group = [x for x, v in zip(scores, uids, strict=True) if v == u]
        valid = [x for x in group if math.isfinite(x)]
        if not math.isfinite(s) or (len(group) > 1 and len(valid) < 2):
            out.append(0.0)
            continue
        if len(valid) == 1:
            out.append(s)  # verl's single-sample rule: mean 0, std 1
            continue
        mean = sum(valid) / len(valid)
        std = math.sqrt(sum((x - mean) ** 2 for x in valid) / (len(valid) - 1))
        out.append((s - mean) / (std + eps))
    return out


def test_stock_grpo_masks_invalid_samples_and_matches_grpo_over_the_valid_ones() -> None:
    from verl.trainer.ppo import ray_trainer

    assert masking.APPLIED.get("verl.trainer.ppo.ray_trainer") and ray_trainer.compute_advantage.__longcat_masking__
    nan = math.nan
    scores = [1.0, 0.0, nan, 0.5, nan, nan, nan, 1.0, 0.2, 0.9, 0.4, 0.0]
    uids = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    data = ray_trainer.compute_advantage(grpo_data(scores, uids), "grpo")
    adv = data.batch["advantages"].double()
    assert torch.isfinite(adv).all() and torch.isfinite(data.batch["returns"]).all()
    want = reference_grpo(scores, uids)
    for i, w in enumerate(want):
        assert torch.allclose(adv[i], torch.full((3,), w, dtype=torch.float64), atol=1e-5), (i, adv[i], w)
    assert want[4:8] == [0.0] * 4  # group b: one valid sample, no baseline


def test_a_batch_without_invalid_samples_is_verls_result_bit_for_bit() -> None:
    from verl.trainer.ppo import ray_trainer

    original = ray_trainer.compute_advantage.__wrapped__
    scores, uids = [1.0, 0.0, 0.5, 0.25, 0.0, 1.0], ["a"] * 3 + ["b"] * 3
    ours = ray_trainer.compute_advantage(grpo_data(scores, uids), "grpo").batch["advantages"]
    theirs = original(grpo_data(scores, uids), "grpo").batch["advantages"]
    assert torch.equal(ours, theirs)


def test_every_registered_stock_outcome_estimator_stays_finite() -> None:
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import ray_trainer

    scores = [1.0, math.nan, 0.0, 0.5, 1.0, 0.0, math.nan, 0.25]
    uids = ["a"] * 4 + ["b"] * 4
    for name in ("grpo", "rloo", "reinforce_plus_plus", "opo", "grpo_passk", "reinforce_plus_plus_baseline"):
        data = ray_trainer.compute_advantage(grpo_data(scores, uids), name, config=AlgoConfig())
        adv = data.batch["advantages"]
        assert torch.isfinite(adv).all(), name
        assert (adv[1] == 0).all() and (adv[6] == 0).all(), name


def test_gae_keeps_the_critic_still_on_invalid_rows() -> None:
    from verl.trainer.config import AlgoConfig
    from verl.trainer.ppo import ray_trainer

    data = grpo_data([1.0, math.nan], ["a", "b"])
    data.batch["values"] = torch.tensor([[0.1, 0.2, 0.3], [0.4, 0.5, 0.6]])
    out = ray_trainer.compute_advantage(data, "gae", gamma=1.0, lam=1.0, config=AlgoConfig())
    assert torch.isfinite(out.batch["advantages"]).all() and (out.batch["advantages"][1] == 0).all()
    assert torch.equal(out.batch["returns"][1], torch.tensor([0.4, 0.5, 0.6]))


def test_longcat_grpo_gets_the_whole_batch(longcat_host: HostFactory) -> None:
    longcat_host(builtins=True, activate=True)
    from verl.trainer.ppo import ray_trainer

    assert masking.masks_invalid("longcat_grpo") and not masking.masks_invalid("grpo")
    scores, uids = [1.0, 0.0, math.nan, 0.5], ["a"] * 4
    adv = ray_trainer.compute_advantage(grpo_data(scores, uids), "longcat_grpo").batch["advantages"]
    assert torch.isfinite(adv).all() and (adv[2] == 0).all()


def test_the_loss_of_a_step_with_an_invalid_sample_is_finite() -> None:
    """verl's own vanilla PPO loss on the advantages stock grpo gives a batch with a NaN score."""
    from verl.trainer.ppo import ray_trainer
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.workers.config import ActorConfig

    data = ray_trainer.compute_advantage(grpo_data([1.0, math.nan, 0.0, 0.5], ["a"] * 4), "grpo")
    logp = torch.randn(4, 3)
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=4,
        ppo_micro_batch_size_per_gpu=1,
        global_batch_info={"dp_size": 1, "batch_num_tokens": 12, "global_batch_size": 4},
    )
    loss, _ = get_policy_loss_fn("vanilla")(
        old_log_prob=logp,
        log_prob=logp + 0.1,
        advantages=data.batch["advantages"],
        response_mask=data.batch["response_mask"].bool(),  # what verl's ppo_loss passes
        loss_agg_mode="token-mean",
        config=config,
    )
    assert torch.isfinite(loss)


def test_validate_refuses_an_unmasked_estimator_where_the_seam_cannot_apply(monkeypatch: pytest.MonkeyPatch) -> None:
    recipe = REPO / "configs" / "reward_router_cpu.yaml"
    assert validate_config(compose(recipe))[0] == []  # masking applies on this verl: stock grpo is fine
    monkeypatch.setattr(masking, "verl_supported", lambda: False)
    problems = {p.path: p.message for p in validate_config(compose(recipe))[0]}
    assert "Use algorithm.adv_estimator: longcat_grpo" in problems["algorithm.adv_estimator"]
    assert validate_config(compose(recipe, ["algorithm.adv_estimator=longcat_grpo"]))[0] == []


def test_the_legacy_trainers_batch_is_counted_in_compute_advantage(longcat_host: HostFactory) -> None:
    """The legacy trainer keeps the reward extra info in ``non_tensor_batch``: the wrapped
    ``compute_advantage`` counts it and stops the step above the share."""
    from verl.trainer.ppo import ray_trainer

    longcat_host(builtins=True, activate=True)  # default share 0.2
    infos = _infos(1, 3)  # 25% failed
    data = grpo_data([math.nan, 1.0, 0.0, 0.5], ["a"] * 4)
    for key in (VALID_KEY, FAILED_KEY, NAME_KEY, ERROR_KEY):
        data.non_tensor_batch[key] = np.array([info[key] for info in infos], dtype=object)
    with pytest.raises(failures.RewardFailuresError, match=r"legacy trainer\): reward 'flaky' raised on 1 of 4"):
        ray_trainer.compute_advantage(data, "grpo")
    longcat_host(builtins=True, activate=True, settings={"reward": {"failures": {"max_failed_share": 0.25}}})
    adv = ray_trainer.compute_advantage(data, "grpo").batch["advantages"]
    assert torch.isfinite(adv).all() and (adv[0] == 0).all()
