"""Warm starts (:mod:`longcat_plugins.learning.arithmetic_warmstart`): built with verl's real SFT trainer,
deterministic per seed, atomic, and scored with the exact-match reward's one answer form."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pandas as pd
import pytest
from conftest import TEST_SFT_STEPS

from longcat_plugins.learning.arithmetic_warmstart import (
    VERDICT_CORRECT,
    VERDICT_INCORRECT,
    VERIFY_PROMPT,
    answer_shares,
    candidate_solution,
    ensure_warm_start,
    final_number,
    split_questions,
    teacher_answer,
    verification_messages,
    write_sft_parquet,
)
from longcat_plugins.learning.assets import Assets
from longcat_plugins.learning.sft import SFTConfig, SFTError
from longcat_plugins.rewards.arithmetic import compute_exact_score, exact_answer
from longcat_plugins.runtime.launch import heldout_accuracy, summary_rows


@pytest.mark.parametrize(
    ("response", "credited"),
    [
        ("The answer is 7.", "7"),
        ("  The answer is -3.\n", "-3"),
        ("The answer is 7", None),  # no full stop: not the form
        ("7", None),
        ("3+4-0 = 7.", None),  # right number, not the answer form
        ("The answer is 7. The answer is 8.", None),  # two answers
        ("The answer is 7.5.", None),
        ("I think 7. The answer is 7.", None),
        ("", None),
    ],
)
def test_only_the_answer_form_is_credited(response: str, credited: str | None) -> None:
    assert exact_answer(response) == credited
    assert compute_exact_score("longcat/arithmetic", response, "7")["score"] == float(credited == "7")


def test_split_is_disjoint_and_seeded() -> None:
    train, val = split_questions(seed=0)
    assert len(val) == 64 and len(train) == 1000 - 64 and not set(train) & set(val)
    assert split_questions(seed=0) == (train, val) and split_questions(seed=1)[1] != val


def test_teacher_mixes_the_answer_form() -> None:
    import random

    rng = random.Random(0)
    answers = [teacher_answer((3, 4, 2), rng, share=0.5) for _ in range(200)]
    assert set(answers) == {"The answer is 5.", "3+4-2 = 5."}
    assert 60 < answers.count("The answer is 5.") < 140


def test_verdict_follows_the_exact_match_reward_not_the_arithmetic() -> None:
    """A candidate is judged correct exactly when the main reward credits it: a worked equation
    with the right number is "incorrect", as the phase's truth (its outcome reward) says."""
    import random

    rng = random.Random(0)
    seen = {"right form": 0, "near miss": 0, "equation": 0}
    for _ in range(400):
        solution, correct = candidate_solution((3, 4, 2), rng)
        assert correct == (compute_exact_score("longcat/arithmetic", solution, "5")["score"] == 1.0)
        kind = "equation" if "=" in solution else "right form" if correct else "near miss"
        seen[kind] += 1
        if kind == "near miss":
            assert exact_answer(solution) not in (None, "5") and abs(int(exact_answer(solution)) - 5) <= 3
    assert 150 < seen["right form"] < 250 and min(seen.values()) > 50


def test_verification_rows_are_the_phases_own_prompt() -> None:
    """The SFT conversation shows exactly what a phase shows for that problem and solution (the
    trainer's :meth:`SelfVerification.prompt` with the warm start's template), and its verdict is
    one of the two the reward parses, coupled to the candidate's credit."""
    import random

    from longcat_plugins.data.selfverify import Judged, SelfVerification, parse_verdict, verification_reward
    from longcat_plugins.data.settings import SelfVerifySettings
    from longcat_plugins.learning.assets import chain_problem

    sv = SelfVerification(
        SelfVerifySettings(prompt=VERIFY_PROMPT, correct=VERDICT_CORRECT, incorrect=VERDICT_INCORRECT)
    )
    rng, again = random.Random(1), random.Random(1)
    for triple in [(3, 4, 2), (9, 0, 9), (0, 0, 0), (9, 9, 0)]:
        user, assistant = verification_messages(triple, rng)
        solution, correct = candidate_solution(triple, again)
        question, _ = chain_problem(*triple)
        assert user == {"role": "user", "content": sv.prompt(Judged("t", 1, question, solution, correct, 0.5))}
        verdict = parse_verdict(assistant["content"], VERDICT_CORRECT, VERDICT_INCORRECT)
        assert verdict == ("correct" if correct else "incorrect")
        assert verification_reward(verdict, "correct" if correct else "incorrect") == 1.0


def test_verdict_rows_leave_the_answer_rows_unchanged(tmp_path: Path) -> None:
    """verdicts > 0 adds that share of questions as verification conversations; the answer rows
    (their teacher draws included) are the ones verdicts=0 writes, in another order."""
    train, _ = split_questions(seed=0)
    write_sft_parquet(tmp_path / "plain.parquet", train[:200], seed=0)
    write_sft_parquet(tmp_path / "judge.parquet", train[:200], seed=0, verdicts=0.5)
    plain = [list(m) for m in pd.read_parquet(tmp_path / "plain.parquet")["messages"]]
    judge = [list(m) for m in pd.read_parquet(tmp_path / "judge.parquet")["messages"]]
    judging = [m for m in judge if m[0]["content"].endswith(" Right?")]
    answering = [m for m in judge if not m[0]["content"].endswith(" Right?")]
    assert len(judging) == 100 and sorted(map(str, answering)) == sorted(map(str, plain))
    assert {m[1]["content"] for m in judging} == {VERDICT_CORRECT, VERDICT_INCORRECT}
    assert str(judge[: len(plain)]) != str(plain)  # shuffled together, not appended after them
    with pytest.raises(ValueError, match="verdicts must be a share"):
        ensure_warm_start(tmp_path, verdicts=1.5)


def _digest(assets: Assets) -> str:
    return hashlib.sha256((assets.model / "model.safetensors").read_bytes()).hexdigest()


def test_warm_start_is_deterministic_per_seed(tiny_warm_start: Assets, tmp_path: Path) -> None:
    """A second build from nothing, same seed and SFT: the same weights, data and accuracy."""
    meta = json.loads((tiny_warm_start.root / "warm.json").read_text())
    assert meta["sft"]["total_steps"] == TEST_SFT_STEPS
    again = ensure_warm_start(tmp_path, size="tiny", sft=SFTConfig(**meta["sft"]))
    assert _digest(again) == _digest(tiny_warm_start)
    assert json.loads((again.root / "warm.json").read_text())["val_greedy_acc"] == meta["val_greedy_acc"]
    for split in ("train", "val"):
        pd.testing.assert_frame_equal(
            pd.read_parquet(getattr(again, split)), pd.read_parquet(getattr(tiny_warm_start, split))
        )
    # the SFT checkpoint is verl's HF export, with its tokenizer
    assert (again.model / "tokenizer.json").exists() and (again.model / "config.json").exists()
    assert ensure_warm_start(tmp_path, size="tiny", sft=SFTConfig(**meta["sft"])) == again  # cached: no rebuild


def test_verdict_warm_start_builds_apart_and_probes_its_verdicts(tiny_warm_start: Assets, tmp_path: Path) -> None:
    """verdicts=0.5: its own cache key, the verification rows in its SFT data, the same RL splits,
    and warm.json records the greedy verdict probe (shares of the held-out questions)."""
    meta = json.loads((tiny_warm_start.root / "warm.json").read_text())
    built = ensure_warm_start(tmp_path, size="tiny", sft=SFTConfig(**meta["sft"]), verdicts=0.5)
    assert built.root.name == tiny_warm_start.root.name.replace("-a0.3-", "-a0.3-vd0.5-")
    sft = pd.read_parquet(built.root / "sft.parquet")
    assert len(sft) == 936 + 468
    assert sum(list(m)[0]["content"].endswith(" Right?") for m in sft["messages"]) == 468
    pd.testing.assert_frame_equal(pd.read_parquet(built.val), pd.read_parquet(tiny_warm_start.val))
    probe = json.loads((built.root / "warm.json").read_text())
    assert probe["verdicts"] == 0.5 and "verdict_acc" not in meta
    assert 0.0 <= probe["verdict_acc"] <= 1.0 - probe["verdict_unparseable"]
    assert 0.0 <= probe["verdict_constant"] <= 1.0


def test_failed_build_leaves_nothing(tmp_path: Path) -> None:
    """verl's SFT refuses sequences longer than max_length (truncation: error): the build fails
    with SFTError and the cache holds no asset directory, finished or temporary."""
    with pytest.raises(SFTError, match="SFT trainer failed"):
        ensure_warm_start(tmp_path, size="tiny", sft=SFTConfig(epochs=1, total_steps=1, max_length=8))
    assert list(tmp_path.iterdir()) == []


def test_heldout_accuracy_line_reads_verls_validation_metric() -> None:
    steps = [
        {"step": 0, "val-core/longcat/arithmetic/acc/mean@1": 0.25},
        {"step": 1, "critic/score/mean": 0.3},
        {"step": 2, "val-core/longcat/arithmetic/acc/mean@1": 0.5, "critic/score/mean": 0.4},
    ]
    assert heldout_accuracy(steps) == (0.25, 0.5)
    assert [r["val_acc"] for r in summary_rows(steps)] == [0.25, None, 0.5]
    assert heldout_accuracy(steps[:2]) is None


def test_warm_demo_composes_with_the_exact_reward_and_greedy_validation(tiny_warm_start: Assets) -> None:
    """What ``demo`` (init warm) hands to verl passes validation and the CPU preflight, and
    scores with the exact-match reward, validating greedily before training and during it."""
    from longcat_plugins.config import compose, to_plain, validate_config
    from longcat_plugins.learning.demos import prepare_demo
    from longcat_plugins.runtime.launch import resolve_config

    demo = prepare_demo("arithmetic", tiny_warm_start, steps=6, init="warm")
    cfg = compose(resolve_config(demo.config), demo.overrides)
    problems, _ = validate_config(cfg, cpu_preflight=True)
    assert problems == [], problems
    plain = to_plain(cfg)
    assert plain["reward"]["custom_reward_function"]["name"] == "arithmetic_exact"
    assert plain["actor_rollout_ref"]["model"]["path"] == str(tiny_warm_start.model)
    assert plain["trainer"]["val_before_train"] is True and plain["trainer"]["test_freq"] == 3
    assert plain["actor_rollout_ref"]["rollout"]["val_kwargs"]["do_sample"] is False
    with pytest.raises(ValueError, match="no warm start"):
        prepare_demo("dora", tiny_warm_start, steps=2, init="warm")


def test_demo_init_warm_on_a_recipe_without_one_exits_2() -> None:
    from conftest import run_cli

    proc = run_cli("demo", "--recipe", "dora", "--init", "warm")
    assert proc.returncode == 2 and "has no warm start" in proc.stderr


def test_bench_pass_at_k_matches_a_float_reference() -> None:
    """The learning bench's unbiased pass@k against the product form 1 - prod(1 - k/i),
    i = n-c+1..n (Chen et al., 2021), in float64; k > n is refused."""
    import sys

    import numpy as np
    from conftest import REPO

    sys.path.insert(0, str(REPO / "bench"))
    try:
        from bench_learning import pass_at_k
    finally:
        sys.path.remove(str(REPO / "bench"))
    for n in (1, 4, 8, 16):
        for c in range(n + 1):
            for k in range(1, n + 1):
                reference = (
                    1.0 if n - c < k else 1.0 - float(np.prod(1.0 - k / np.arange(n - c + 1, n + 1, dtype=np.float64)))
                )
                assert pass_at_k(n, c, k) == pytest.approx(reference, abs=1e-12), (n, c, k)
    assert pass_at_k(8, 0, 4) == 0.0 and pass_at_k(8, 8, 1) == 1.0
    with pytest.raises(ValueError, match="k=9 is larger than the number of samples n=8"):
        pass_at_k(8, 3, 9)


@pytest.mark.parametrize(
    ("response", "final"),
    [
        ("The answer is 7.", "7"),
        ("3+4-0 = 7.", "7"),
        ("0+0-9 = -9.", "-9"),  # the subtraction's operand is not the answer
        ("The answer is -03.", "-3"),
        ("3+4-0", None),  # truncated before the answer: no final number
        ("The answer is", None),
        ("", None),
    ],
)
def test_final_number_reads_either_taught_form(response: str, final: str | None) -> None:
    assert final_number(response) == final


def test_answer_shares_split_form_from_arithmetic() -> None:
    responses = ["The answer is 7.", "The answer is 5.", "3+4-0 = 7.", "3+4-0 = 6.", "7"]
    answers = ["7", "7", "7", "7", "7"]
    # form: the credited form, right or wrong; arith: right in any taught form; exact: both
    assert answer_shares(responses, answers) == {"form": 0.4, "arith": 0.4, "exact": 0.2}
    with pytest.raises(ValueError, match="2 responses for 1 answers"):
        answer_shares(["a", "b"], ["1"])


def test_time_to_target_is_the_first_validation_reaching_it() -> None:
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "bench"))
    try:
        import bench_learning
        import bench_system
        from heldout_curve import time_to_target
    finally:
        sys.path.remove(str(REPO / "bench"))
    # both learning benches read it with the one definition
    assert bench_learning.time_to_target is time_to_target and bench_system.time_to_target is time_to_target
    curve = [
        {"step": 0, "wall_s": 0.0, "acc": 0.2},
        {"step": 3, "wall_s": 30.0, "acc": 0.5},
        {"step": 6, "wall_s": 61.0, "acc": 0.4},
    ]
    assert time_to_target(curve, 0.45) == 30.0
    assert time_to_target(curve, 0.2) == 0.0
    assert time_to_target(curve, 0.6) is None
    assert time_to_target(curve, None) is None


def test_validation_curve_clocks_training_only() -> None:
    """The clock of ``time_to_target_s``: the running sum of verl's ``timing_s/step`` over the
    trained steps up to each validation (step 0's validation at 0 s), whatever the record order;
    steps without a validation move the clock but add no point."""
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "bench"))
    try:
        from heldout_curve import time_to_target, validation_curve
    finally:
        sys.path.remove(str(REPO / "bench"))
    acc = "val-core/arithmetic/acc/mean@1"
    records = [
        {"step": 2, "timing_s/step": 4.5, acc: 0.5, "timing_s/testing": 9.0},
        {"step": 0, acc: 0.25},
        {"step": 1, "timing_s/step": 3.25},
        {"step": 3, "timing_s/step": 5.0},
        {"step": 4, "timing_s/step": 2.0, acc: 0.75},
    ]
    curve = validation_curve(records)
    assert curve == [
        {"step": 0, "wall_s": 0.0, "acc": 0.25},
        {"step": 2, "wall_s": 7.75, "acc": 0.5},
        {"step": 4, "wall_s": 14.75, "acc": 0.75},
    ]
    assert time_to_target(curve, 0.6) == 14.75


def test_bench_append_refuses_rows_on_other_settings(tmp_path: Path) -> None:
    """One results file compares like with like: ``--append`` to a file whose rows were measured
    with another run length, validation interval or overrides stops, naming the file and row."""
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "bench"))
    try:
        from bench_learning import SCHEDULE, check_append, settings
    finally:
        sys.path.remove(str(REPO / "bench"))
    wanted = settings(30, 5, [])
    assert wanted == {"steps": 30, "test_freq": 5, "overrides": SCHEDULE}
    same = {"objective": "vanilla", "trainer": "sync", "seed": 0, "settings": settings(30, 5, [])}
    check_append([same, same], wanted, tmp_path / "l.json")
    check_append([], wanted, tmp_path / "l.json")
    for other in (
        settings(20, 5, []),
        settings(30, 3, []),
        settings(30, 5, ["actor_rollout_ref.actor.optim.lr=5e-4"]),
        settings(30, 5, [], "constant"),
        None,  # a row from before settings were recorded
    ):
        row = {"objective": "dora", "trainer": "sync", "seed": 2, "settings": other}
        with pytest.raises(ValueError, match=r"--append: .*l\.json holds a dora/sync seed 2 row"):
            check_append([same, row], wanted, tmp_path / "l.json")


def test_learning_diagnostics_reads_verl_metrics_per_training_step(tmp_path: Path) -> None:
    """The dips' diagnosis reads verl's file logger: one record per training step (step 0's
    validation-only record is skipped), a metric the run did not log is None, not 0."""
    import json
    import sys

    from conftest import REPO

    sys.path.insert(0, str(REPO / "bench"))
    try:
        from learning_diagnostics import read_steps, train_diagnostics
    finally:
        sys.path.remove(str(REPO / "bench"))
    lines = [
        {"step": 0, "data": {"val-core/longcat/arithmetic/acc/mean@1": 0.3}},
        {"step": 2, "data": {"critic/score/mean": 0.5, "actor/ppo_kl": 0.0, "rollout_corr/kl": 0.371704}},
        {
            "step": 1,
            "data": {"critic/score/mean": 0.25, "response_length/clip_ratio": 0.99, "dora/staleness/mean": 1.0},
        },
    ]
    (tmp_path / "metrics.jsonl").write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    rows = train_diagnostics(read_steps(tmp_path))
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[0] == {
        "step": 1,
        "score": 0.25,
        "ppo_kl": None,
        "pg_clipfrac": None,
        "rollout_corr_kl": None,
        "clip_ratio": 0.99,
        "staleness": 1.0,
    }
    assert rows[1]["rollout_corr_kl"] == 0.3717 and rows[1]["ppo_kl"] == 0.0 and rows[1]["staleness"] is None
    with pytest.raises(SystemExit, match="no metrics.jsonl"):
        read_steps(tmp_path / "missing")
