"""Self-verification (A6): the plateau detector against a float64 reference, the strict verdict
format, RISE's reward coupling, the choice of rollouts to judge, the phase's start and end rules,
the reward function's dispatch, and bad settings naming their key."""

from __future__ import annotations

import random

import numpy as np
import pytest

from longcat_plugins.config import ConfigError
from longcat_plugins.data.selfverify import (
    DATA_SOURCE,
    Judged,
    PlateauDetector,
    SelfVerification,
    parse_verdict,
    pick_candidates,
    verification_reward,
)
from longcat_plugins.data.settings import SelfVerifySettings
from longcat_plugins.host import Host, Selection

YES, NO = "Verdict: correct.", "Verdict: incorrect."


def reference_plateau(values: list[float], window: int, min_delta: float) -> list[bool]:
    """Float64, from the rule: after each value, mean(last w) - mean(the w before) < min_delta."""
    out = []
    x = np.asarray(values, dtype=np.float64)
    for t in range(1, len(x) + 1):
        if t < 2 * window:
            out.append(False)
            continue
        recent = x[t - window : t].mean()
        before = x[t - 2 * window : t - window].mean()
        out.append(bool(recent - before < min_delta))
    return out


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("window", [1, 2, 3, 5])
def test_plateau_detector_matches_a_float64_reference(seed: int, window: int) -> None:
    rng = random.Random(seed)
    # a rising then flat reward curve with noise: the detector must fire only on the flat part
    values = [
        min(1.0, 0.05 * t) + rng.uniform(-0.02, 0.02) if t < 12 else 0.6 + rng.uniform(-0.02, 0.02) for t in range(24)
    ]
    detector = PlateauDetector(window, 0.01)
    got = [detector.observe(v) for v in values]
    assert got == reference_plateau(values, window, 0.01)
    assert any(got[16:]) and not any(got[: 2 * window - 1])


def test_plateau_detector_stays_quiet_while_the_reward_rises_and_restarts_after_reset() -> None:
    detector = PlateauDetector(2, 0.05)
    assert [detector.observe(0.1 * t) for t in range(8)] == [False] * 8  # +0.2 per window
    assert [detector.observe(0.7) for _ in range(4)] == [False, True, True, True]
    detector.reset()
    assert [detector.observe(0.7) for _ in range(4)] == [False, False, False, True]


@pytest.mark.parametrize(
    ("response", "verdict"),
    [
        (YES, "correct"),
        (f"  {NO}\n", "incorrect"),
        (f"{YES} {NO}", None),  # both verdicts: not a clear verdict
        (f"I think so. {YES}", None),  # verdict inside other text
        ("Verdict: correct", None),  # not the exact form
        ("verdict: correct.", None),
        ("correct", None),
        ("", None),
        (None, None),
    ],
)
def test_only_a_response_that_is_exactly_one_verdict_counts(response: str | None, verdict: str | None) -> None:
    assert parse_verdict(response, YES, NO) == verdict


def test_verification_reward_is_coupled_to_the_true_correctness_as_in_rise() -> None:
    assert verification_reward("correct", "correct") == 1.0
    assert verification_reward("incorrect", "incorrect") == 1.0
    assert verification_reward("correct", "incorrect") == -0.5
    assert verification_reward("incorrect", "correct") == -0.5
    assert verification_reward(None, "correct") == verification_reward(None, "incorrect") == -1.0
    with pytest.raises(ValueError, match="verification target"):
        verification_reward("correct", "maybe")


def test_a_constant_verdict_cannot_beat_judging() -> None:
    """The chosen rollouts alternate wrong and right, so always answering one verdict earns the
    mean of +1 and -0.5 at best, while judging correctly earns +1."""
    pool = [Judged(f"t{i}", 1, f"q{i}", f"a{i}", i % 3 == 0, i / 10) for i in range(10)]
    chosen = pick_candidates(pool, 6)
    targets = ["correct" if j.correct else "incorrect" for j in chosen]
    assert targets == ["incorrect", "correct"] * 3
    always_yes = np.mean([verification_reward("correct", t) for t in targets])
    judged = np.mean([verification_reward(t, t) for t in targets])
    assert always_yes == pytest.approx(0.25) and judged == 1.0


def test_candidates_come_from_the_hardest_tasks_first_without_duplicates() -> None:
    pool = [
        Judged("easy", 2, "q1", "a", True, 0.9),
        Judged("hard", 2, "q2", "b", False, 0.1),
        Judged("hard", 2, "q2", "b", False, 0.1),  # the same response twice: judged once
        Judged("mid", 2, "q3", "c", True, 0.5),
        Judged("mid", 1, "q3", "d", False, 0.5),
    ]
    chosen = pick_candidates(pool, 4)
    assert [(j.task, j.solution) for j in chosen] == [("hard", "b"), ("mid", "c"), ("mid", "d"), ("easy", "a")]
    assert pick_candidates(pool, 10) == chosen  # no more pairs than there are
    assert pick_candidates(pool, 3) == chosen[:2]  # whole pairs only
    assert pick_candidates([j for j in pool if not j.correct], 4) == []  # no pair: nothing to judge
    assert pick_candidates([], 4) == []


def make_rollouts(step: int, n: int = 4) -> list[Judged]:
    return [
        Judged(f"t{i}", step, f"What is {i}+1-0?", f"The answer is {i + (i % 2)}.", i % 2 == 0, 0.5) for i in range(n)
    ]


def test_phase_starts_on_a_plateau_and_ends_after_max_steps() -> None:
    sv = SelfVerification(SelfVerifySettings(enable=True, window=1, min_delta=0.01, tasks=2, max_steps=2))
    assert sv.to_judge() == []
    m = sv.observe(1, [0.2, 0.4], [], make_rollouts(1))
    assert m["longcat/selfverify/phase"] == 0.0 and m["longcat/selfverify/main_reward"] == pytest.approx(0.3)
    m = sv.observe(2, [0.3, 0.3], [], make_rollouts(2))  # no rise over one window: plateau
    assert m["longcat/selfverify/phase_started"] == 1.0 and sv.active
    chosen = sv.to_judge()
    assert len(chosen) == 2 and {j.correct for j in chosen} == {True, False}
    prompt = sv.prompt(chosen[0])
    assert chosen[0].problem in prompt and chosen[0].solution in prompt and "{problem}" not in prompt
    m = sv.observe(3, [0.3], [1.0, -0.5, -1.0, 1.0], make_rollouts(3))
    assert m["longcat/selfverify/phase"] == 1.0 and m["longcat/selfverify/verify_accuracy"] == 0.5
    assert m["longcat/selfverify/verify_unparseable"] == 0.25 and sv.active
    m = sv.observe(4, [0.3], [-1.0, -1.0], make_rollouts(4))
    assert m["longcat/selfverify/phase_ended"] == 1.0 and not sv.active and sv.to_judge() == []
    # the detector starts afresh: a new phase needs 2 x window new steps of stagnation
    assert sv.observe(5, [0.3], [], make_rollouts(5))["longcat/selfverify/phase_started"] == 0.0
    assert sv.observe(6, [0.3], [], make_rollouts(6))["longcat/selfverify/phase_started"] == 1.0
    assert sv.phases == 2


def test_phase_ends_early_once_verification_is_learned_and_the_pool_keeps_recent_steps() -> None:
    sv = SelfVerification(SelfVerifySettings(enable=True, window=1, max_steps=5, exit_accuracy=0.75, recent_steps=2))
    sv.observe(1, [0.5], [], make_rollouts(1))
    sv.observe(2, [0.5], [], make_rollouts(2))
    assert sv.active and {j.step for j in sv.pool} == {1, 2}
    m = sv.observe(3, [0.5], [1.0, 1.0, 1.0, -0.5], make_rollouts(3))
    assert m["longcat/selfverify/phase_ended"] == 1.0 and {j.step for j in sv.pool} == {2, 3}


def test_a_phase_counts_only_steps_that_trained_verification_and_judges_filtered_groups() -> None:
    """Under DORA a phase's prompts train a step or more after they are issued, and online
    filtering drops a verification group whose verdicts all agree: such steps are not phase
    steps, but the dropped groups' verdicts are judged."""
    sv = SelfVerification(SelfVerifySettings(enable=True, window=1, max_steps=1, exit_accuracy=0.8, wait_steps=3))
    sv.observe(1, [0.5], [], make_rollouts(1))
    assert sv.observe(2, [0.5], [], make_rollouts(2))["longcat/selfverify/phase_started"] == 1.0
    m = sv.observe(3, [0.5], [], make_rollouts(3))  # the phase's prompts are still in flight
    assert sv.active and m["longcat/selfverify/phase_ended"] == 0.0 and "longcat/selfverify/verify_samples" not in m
    # a constant verdict on a pair: both groups dropped as no-signal, judged at one half
    m = sv.observe(4, [0.5], [], make_rollouts(4), verify_filtered=[1.0] * 4 + [-0.5] * 4)
    assert sv.active and m["longcat/selfverify/verify_accuracy"] == 0.5
    assert m["longcat/selfverify/verify_samples"] == 0.0 and m["longcat/selfverify/verify_filtered"] == 8.0
    m = sv.observe(5, [0.5], [1.0, -0.5, 1.0, -0.5], make_rollouts(5), verify_filtered=[-0.5] * 4)
    assert m["longcat/selfverify/verify_samples"] == 4.0 and m["longcat/selfverify/verify_accuracy"] == 0.25
    assert m["longcat/selfverify/phase_ended"] == 1.0 and m["longcat/selfverify/phase_expired"] == 0.0


def test_a_phase_whose_verification_never_trains_expires_after_wait_steps() -> None:
    sv = SelfVerification(SelfVerifySettings(enable=True, window=1, max_steps=2, wait_steps=2))
    sv.observe(1, [0.5], [], make_rollouts(1))
    sv.observe(2, [0.5], [], make_rollouts(2))
    assert sv.active
    assert sv.observe(3, [0.5], [], make_rollouts(3))["longcat/selfverify/phase_ended"] == 0.0
    m = sv.observe(4, [0.5], [], make_rollouts(4))
    assert not sv.active and m["longcat/selfverify/phase_expired"] == 1.0 and sv.phase_steps == 0
    # a dropped group judged all right ends a phase as learned, not expired
    sv = SelfVerification(SelfVerifySettings(enable=True, window=1, max_steps=3, exit_accuracy=0.8, wait_steps=3))
    sv.observe(1, [0.5], [], make_rollouts(1))
    sv.observe(2, [0.5], [], make_rollouts(2))
    m = sv.observe(3, [0.5], [], make_rollouts(3), verify_filtered=[1.0] * 8)
    assert not sv.active and m["longcat/selfverify/phase_expired"] == 0.0 and m["longcat/selfverify/phase_ended"] == 1.0


def test_state_round_trips() -> None:
    settings = SelfVerifySettings(enable=True, window=2)
    sv = SelfVerification(settings)
    for step in range(1, 6):
        sv.observe(step, [0.4], [], make_rollouts(step))
    copy = SelfVerification(settings)
    copy.load_state_dict(sv.state_dict())
    assert copy.state_dict() == sv.state_dict() and copy.to_judge() == sv.to_judge()


def test_the_reward_scores_verdicts_and_passes_other_samples_to_the_main_reward() -> None:
    from longcat_plugins.rewards.selfverify import compute_score

    info = {"selfverify_correct": YES, "selfverify_incorrect": NO}
    assert compute_score(DATA_SOURCE, YES, "correct", info) == {"score": 1.0, "acc": 1.0}
    assert compute_score(DATA_SOURCE, YES, "incorrect", info)["score"] == -0.5
    assert compute_score(DATA_SOURCE, f"{YES} The answer is 3.", "correct", info)["score"] == -1.0
    # the main task: arithmetic_exact by default, any enabled reward function by name
    assert compute_score("arith", "The answer is 3.", "3", {})["score"] == 1.0
    assert compute_score("arith", "It is 3.", "3", {})["score"] == 0.0
    assert compute_score("arith", "It is 3.", "3", {}, main="arithmetic")["score"] == 1.0


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"window": 0}, "selfverify.window: must be >= 1"),
        ({"tasks": 0}, "selfverify.tasks"),
        ({"tasks": 3}, "selfverify.tasks: must be an even number"),
        ({"exit_accuracy": 1.5}, "selfverify.exit_accuracy"),
        ({"wait_steps": 0}, "selfverify.wait_steps"),
        ({"prompt": "Judge: {solution}"}, "selfverify.prompt: has no {problem} slot"),
        ({"correct": "yes", "incorrect": "yes"}, "selfverify.correct"),
        ({"widow": 2}, "selfverify.widow"),
    ],
)
def test_bad_settings_name_their_key(raw: dict, message: str) -> None:
    host = Host(Selection(settings={"scheduler": {"longcat_data": {"selfverify": raw}}})).load()
    with pytest.raises(ConfigError) as info:
        host.settings_for("scheduler", "longcat_data")
    assert "longcat.settings.scheduler.longcat_data" in str(info.value) and message in str(info.value)


def test_validate_exits_2_without_the_selfverify_reward() -> None:
    from conftest import validate_refuses

    from longcat_plugins.runtime.launch import configs_dir

    bad = validate_refuses(
        str(configs_dir() / "cpu_demo.yaml"),
        "trainer.v1.trainer_mode=longcat_data",
        "+longcat.settings.scheduler.longcat_data.selfverify.enable=true",
    )
    assert "reward.custom_reward_function.name" in bad.stderr and "selfverify" in bad.stderr


def test_prompt_tokens_count_what_must_fit_the_rollouts_prompt_length(tmp_path) -> None:
    """The trainer's count of a verification prompt's tokens is the chat-templated prompt the agent
    loop sends; the warm start's longest verification prompt needs more than the tiny recipe's 32
    (the self-verification bench allows 40), its shortest fits."""
    from transformers import AutoTokenizer

    from longcat_plugins.data.planned import prompt_tokens
    from longcat_plugins.learning.arithmetic_warmstart import VERIFY_PROMPT
    from longcat_plugins.learning.assets import build_tokenizer

    build_tokenizer(tmp_path, 0, task="chain")
    tok = AutoTokenizer.from_pretrained(tmp_path)

    def count(solution: str) -> int:
        content = VERIFY_PROMPT.format(problem="What is 8+6-4? Answer with a number.", solution=solution)
        messages = [{"role": "user", "content": content}]
        ids = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)["input_ids"]
        assert prompt_tokens(tok, messages) == len(ids)
        return len(ids)

    assert 32 < count("8+6-4 = 10.") <= 40
    assert count("The answer is 9.") <= 32
