"""``longcat_grpo``: masking of invalid samples, oversampled groups, the repetition detector."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from longcat_plugins.algorithms.advantages import compute_longcat_grpo_advantage
from longcat_plugins.algorithms.validity import (
    GROUP_KEY,
    VALID_KEY,
    RepetitionDetector,
    is_repetitive,
    masked_score,
    truncated_without_repetition,
)


def outcome_batch(scores: list[float], width: int = 6, lengths: list[int] | None = None):
    """token_level_rewards with each score on the response's last token, as verl's reward loop writes them."""
    n = len(scores)
    lengths = lengths or [width] * n
    mask = torch.arange(width).unsqueeze(0) < torch.tensor(lengths).unsqueeze(1)
    rewards = torch.zeros(n, width)
    rewards[torch.arange(n), torch.tensor(lengths) - 1] = torch.tensor(scores, dtype=torch.float32)
    return rewards, mask.float()


def group_reference(scores: list[float], valid: list[bool], norm: bool = True, eps: float = 1e-6) -> list[float]:
    """Per-sample advantages of ONE group from its valid members only (numpy, float64)."""
    vals = np.array([s for s, v in zip(scores, valid, strict=True) if v], dtype=np.float64)
    if len(vals) < 2:
        return [0.0] * len(scores)
    mean, std = vals.mean(), vals.std(ddof=1)
    return [((s - mean) / (std + eps) if norm else s - mean) if v else 0.0 for s, v in zip(scores, valid, strict=True)]


def seq_adv(advantages: torch.Tensor, mask: torch.Tensor) -> list[float]:
    return (advantages * mask).sum(-1).div(mask.sum(-1).clamp(min=1)).tolist()


@pytest.mark.parametrize("norm", [True, False])
def test_equals_stock_grpo_when_every_sample_is_valid(norm: bool) -> None:
    g = torch.Generator().manual_seed(0)
    sizes = [4, 4, 1, 3, 8]
    index = np.array([f"p{i}" for i, k in enumerate(sizes) for _ in range(k)], dtype=object)
    n = len(index)
    rewards, mask = outcome_batch(torch.randint(0, 3, (n,), generator=g).float().tolist(), width=5)
    ours, returns = compute_longcat_grpo_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    stock, _ = compute_grpo_outcome_advantage(rewards, mask, index, norm_adv_by_std_in_grpo=norm)
    torch.testing.assert_close(ours, stock, rtol=1e-6, atol=1e-6)
    assert returns is ours


def test_nan_rewards_are_excluded_from_the_group_and_get_zero_advantage() -> None:
    scores = [1.0, 0.0, math.nan, 1.0, 0.5, 0.0, math.nan, 1.0]
    index = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    rewards, mask = outcome_batch(scores, lengths=[6, 3, 6, 2, 5, 6, 1, 4])
    adv, _ = compute_longcat_grpo_advantage(rewards, mask, index)
    valid = [not math.isnan(s) for s in scores]
    expected = group_reference(scores[:4], valid[:4]) + group_reference(scores[4:], valid[4:])
    assert seq_adv(adv, mask) == pytest.approx(expected, abs=1e-6)
    assert torch.isfinite(adv).all()
    assert (adv[~torch.tensor(valid)] == 0).all()
    assert (adv[mask == 0] == 0).all()
    # scoring the invalid ones 0 instead would have moved the baseline
    scored_zero = group_reference([0.0 if math.isnan(s) else s for s in scores[:4]], [True] * 4)
    assert scored_zero[0] != pytest.approx(expected[0])


def test_validity_flag_from_non_tensor_batch() -> None:
    scores = [1.0, 0.0, 0.0, 1.0]
    rewards, mask = outcome_batch(scores)
    flags = np.array([True, True, False, True])
    adv, _ = compute_longcat_grpo_advantage(
        rewards, mask, np.array(["a"] * 4, dtype=object), non_tensor_batch={VALID_KEY: flags}
    )
    assert seq_adv(adv, mask) == pytest.approx(group_reference(scores, flags.tolist()), abs=1e-6)


def test_truncated_responses_are_masked_unless_they_loop() -> None:
    width = 64
    g = torch.Generator().manual_seed(1)
    loop = torch.tensor([5, 6, 7, 8] * 16)  # truncated while looping: a real failure, keeps its score
    cut = torch.randint(100, 200, (width,), generator=g)  # truncated, not looping: masked
    short = torch.randint(100, 200, (width,), generator=g)  # finished early: kept
    responses = torch.stack([loop, cut, short, cut.flip(0)])
    scores = [0.0, 1.0, 1.0, 0.0]
    rewards, mask = outcome_batch(scores, width=width, lengths=[64, 64, 40, 30])
    adv, _ = compute_longcat_grpo_advantage(
        rewards, mask, np.array(["a"] * 4, dtype=object), responses=responses, max_response_length=64
    )
    assert seq_adv(adv, mask) == pytest.approx(group_reference(scores, [True, False, True, True]), abs=1e-6)


def test_groups_without_a_baseline_get_zero() -> None:
    scores = [1.0, math.nan, math.nan, math.nan, math.nan, 0.7]
    index = np.array(["a", "a", "a", "b", "b", "c"], dtype=object)
    rewards, mask = outcome_batch(scores)
    adv, _ = compute_longcat_grpo_advantage(rewards, mask, index)
    # "a": one valid of three -> no baseline; "b": none valid; "c": a single-sample group (n=1) keeps stock's rule
    assert seq_adv(adv, mask) == pytest.approx([0, 0, 0, 0, 0, 0.7 / (1 + 1e-6)], abs=1e-6)


def test_oversampled_groups_of_one_prompt_get_independent_statistics() -> None:
    """A task duplicated into k = 3 groups (A5): each group is normalised on its own."""
    groups = [[1.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 0.0], [0.0, 1.0, math.nan, 1.0]]
    scores = [s for grp in groups for s in grp]
    rewards, mask = outcome_batch(scores)
    expected = [a for grp in groups for a in group_reference(grp, [not math.isnan(s) for s in grp])]

    # as verl does it: every duplicated row got its own uid before repeat(n)
    by_uid = np.array([f"task-7#{k}" for k in range(3) for _ in range(4)], dtype=object)
    adv, _ = compute_longcat_grpo_advantage(rewards, mask, by_uid)
    assert seq_adv(adv, mask) == pytest.approx(expected, abs=1e-6)

    # one uid, the group id in non_tensor_batch (a scheduler that duplicates after uids are set)
    same_uid = np.array(["task-7"] * 12, dtype=object)
    group_ids = np.repeat(np.arange(3), 4)
    adv, _ = compute_longcat_grpo_advantage(rewards, mask, same_uid, non_tensor_batch={GROUP_KEY: group_ids})
    assert seq_adv(adv, mask) == pytest.approx(expected, abs=1e-6)

    # without the group id the k groups would be pooled into one
    pooled, _ = compute_longcat_grpo_advantage(rewards, mask, same_uid)
    assert seq_adv(pooled, mask) != pytest.approx(expected, abs=1e-3)


def test_norm_by_std_follows_the_algorithm_config() -> None:
    from omegaconf import OmegaConf

    scores = [1.0, 0.0, 0.0, 2.0]
    rewards, mask = outcome_batch(scores)
    config = OmegaConf.create({"adv_estimator": "longcat_grpo", "norm_adv_by_std_in_grpo": False})
    adv, _ = compute_longcat_grpo_advantage(rewards, mask, np.array(["a"] * 4, dtype=object), config=config)
    assert seq_adv(adv, mask) == pytest.approx(group_reference(scores, [True] * 4, norm=False), abs=1e-6)


def test_requires_an_index() -> None:
    rewards, mask = outcome_batch([1.0])
    with pytest.raises(ValueError, match="uid"):
        compute_longcat_grpo_advantage(rewards, mask, None)


# -- repetition detector -------------------------------------------------------------------------------


def random_ids(n: int, seed: int = 0) -> list[int]:
    return torch.randint(1000, 30000, (n,), generator=torch.Generator().manual_seed(seed)).tolist()


@pytest.mark.parametrize(
    ("ids", "expected"),
    [
        pytest.param(random_ids(200) + [42] * 60, True, id="one-token-loop"),
        pytest.param(random_ids(200) + random_ids(7, 1) * 12, True, id="period-7"),
        pytest.param(random_ids(100) + random_ids(100, 2) * 3, True, id="period-100-three-times"),
        pytest.param(random_ids(100) + random_ids(100, 2) * 2, False, id="period-100-only-twice"),
        pytest.param(random_ids(500), False, id="no-loop"),
        pytest.param(random_ids(50) + [42] * 60 + random_ids(50, 3), False, id="loop-in-the-middle-not-the-tail"),
        pytest.param(random_ids(200) + [7, 8] * 10, False, id="tail-shorter-than-min"),
        pytest.param(random_ids(100) + random_ids(256, 4) * 3, True, id="period-256-at-max_period"),
        pytest.param(random_ids(100) + random_ids(257, 4) * 3, False, id="period-257-beyond-max_period"),
        pytest.param(random_ids(10) + [1, 2, 3] * 5000, True, id="loop-longer-than-the-window"),
        pytest.param([], False, id="empty"),
    ],
)
def test_repetition_detector(ids: list[int], expected: bool) -> None:
    assert is_repetitive(ids) is expected
    assert is_repetitive(torch.tensor(ids, dtype=torch.long)) is expected
    assert is_repetitive(np.array(ids, dtype=np.int64)) is expected


def test_detector_reports_the_loop_unit_and_honours_its_settings() -> None:
    ids = random_ids(50) + random_ids(5, 9) * 10
    assert RepetitionDetector().repeated_tail(ids) == (5, 50)
    assert not RepetitionDetector(max_period=4)(ids)
    assert not RepetitionDetector(min_repeats=11)(ids)
    assert RepetitionDetector(min_tail_tokens=50)(ids) and not RepetitionDetector(min_tail_tokens=51)(ids)
    with pytest.raises(ValueError, match="min_repeats"):
        RepetitionDetector(min_repeats=1)


def test_truncated_without_repetition_uses_the_last_masked_token() -> None:
    responses = torch.tensor([random_ids(8), [3] * 8, random_ids(8, 5)])
    mask = torch.tensor([[1] * 8, [1] * 8, [1, 1, 1, 1, 0, 0, 0, 1]])  # the last one: a tool output inside
    detector = RepetitionDetector(min_tail_tokens=4)
    assert truncated_without_repetition(responses, mask, 8, detector).tolist() == [True, False, True]
    assert truncated_without_repetition(responses, mask, 9, detector).tolist() == [False, False, False]


def test_masked_score_is_what_a_reward_manager_returns() -> None:
    cut = random_ids(64)
    assert masked_score(0.5) == 0.5
    assert math.isnan(masked_score(0.5, reward_ok=False))
    assert math.isnan(masked_score(math.nan))
    assert math.isnan(masked_score(1.0, response_ids=cut, max_response_length=64))
    assert masked_score(0.0, response_ids=random_ids(16) + [9] * 48, max_response_length=64) == 0.0
    assert masked_score(1.0, response_ids=cut[:40], max_response_length=64) == 1.0
