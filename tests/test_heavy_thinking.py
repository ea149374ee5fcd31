"""Heavy thinking (``longcat_heavy_thinking``): the summary's input (answers only, order,
truncation), the reward crediting rule, settings errors, and verl's real agent-loop machinery
around a scripted rollout server (outputs, per-output rewards through verl's v1 overwrite)."""

from __future__ import annotations

import asyncio
import random
import re
from typing import Any

import pytest
from conftest import run_cli
from env_agent_helpers import ScriptedServer, build_loop
from omegaconf import OmegaConf

from longcat_plugins.environments.heavy_thinking import (
    NO_ANSWER,
    ContextMemory,
    HeavyThinkingSettings,
    answer_of,
    answer_order,
    credit,
    heavy_think,
    majority_answer,
    summary_messages,
    truncate_answer,
)
from longcat_plugins.schema import ConfigError

KEY = "longcat.settings.environment.longcat_heavy_thinking"

# -- the summary's input ---------------------------------------------------------------------------


def test_answer_is_the_text_after_the_reasoning() -> None:
    assert answer_of("<think>3+4 = 7, minus 2</think> The answer is 5.") == "The answer is 5."
    assert answer_of("<think>a</think>x<think>b</think> y ") == "y"  # after the last marker
    assert answer_of("<think>still thinking when cut") == ""  # cut inside the reasoning: no answer
    assert answer_of("  The answer is 5. ") == "The answer is 5."  # no markers: all answer
    assert answer_of("<think>r</think>x", think_end="") == "<think>r</think>x"


def test_truncation_keeps_the_conclusion() -> None:
    assert truncate_answer("abc", 3) == "abc"
    assert truncate_answer("0123456789", 4) == "...6789"


def _reference_summary(question: str, answers: list[str], order: list[int], limit: int) -> str:
    """Written from the report: the current question, then the K answers (answers only) numbered
    in the given order, each cut to its last ``limit`` characters."""
    lines = []
    for n, i in enumerate(order):
        a = answers[i] if len(answers[i]) <= limit else "..." + answers[i][-limit:]
        lines.append(f"({n + 1}) {a if a else '(no answer)'}")
    return f"Q: {question}\n" + "\n".join(lines) + "\nFinal?"


def test_summary_messages_hold_the_answers_only_in_order_and_cut() -> None:
    settings = HeavyThinkingSettings(k=3, summary_template="Q: {question}\n{answers}\nFinal?", answer_max_chars=6)
    responses = [
        "<think>long reasoning A</think>ans 7",
        "<think>reasoning B</think>the answer is 12345678",
        "<think>cut",
    ]
    answers = [answer_of(r) for r in responses]
    history = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "earlier"},
        {"role": "assistant", "content": "earlier reply"},
        {"role": "user", "content": "What is 3+4-2?"},
    ]
    for order in ([0, 1, 2], [2, 0, 1]):
        msgs = summary_messages(history, answers, settings, order)
        assert msgs[:-1] == history[:-1]  # the memory before the current turn, unchanged
        assert msgs[-1] == {"role": "user", "content": _reference_summary("What is 3+4-2?", answers, order, 6)}
        assert "reasoning" not in msgs[-1]["content"] and NO_ANSWER in msgs[-1]["content"]
    assert history[-1]["content"] == "What is 3+4-2?"  # not mutated
    with pytest.raises(ValueError, match="must end with a user message"):
        summary_messages(history[:-1], answers, settings, [0, 1, 2])


def test_answer_order_is_a_seeded_permutation() -> None:
    assert answer_order(4, "index", None) == [0, 1, 2, 3]
    a, b = answer_order(6, "shuffle", random.Random(1)), answer_order(6, "shuffle", random.Random(1))
    assert a == b and sorted(a) == list(range(6))


def test_majority_answer_ties_to_the_earliest() -> None:
    assert majority_answer(["a", "b", " b", "a"]) == 0
    assert majority_answer(["x", "y", "y"]) == 1
    with pytest.raises(ValueError):
        majority_answer([])


# -- reward crediting ------------------------------------------------------------------------------


def test_every_output_keeps_the_reward_of_its_own_answer() -> None:
    out = credit([[1.0, 0.0, 0.0], [0.0, 1.0, 1.0]], [0.0, 1.0])
    assert [(c.role, c.round, c.index, c.reward) for c in out] == [
        ("parallel", 0, 0, 1.0),
        ("parallel", 0, 1, 0.0),
        ("parallel", 0, 2, 0.0),
        ("summary", 0, 3, 0.0),
        ("parallel", 1, 0, 0.0),
        ("parallel", 1, 1, 1.0),
        ("parallel", 1, 2, 1.0),
        ("summary", 1, 3, 1.0),
    ]
    # a right final answer credits no wrong candidate, a wrong one blames no right candidate
    assert [c.reward for c in credit([[0.0, 0.0]], [1.0])] == [0.0, 0.0, 1.0]
    assert [c.reward for c in credit([[1.0, 1.0]], [0.0])] == [1.0, 1.0, 0.0]
    with pytest.raises(ValueError):
        credit([[1.0]], [1.0, 0.0])


# -- settings ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"k": 0}, "k: the width must be an integer >= 1"),
        ({"rounds": 0}, "rounds: the depth"),
        ({"summary_template": "{question} pick one"}, r"summary_template: needs the answer slot \{answers\}"),
        ({"summary_template": "{answers} {hint}"}, r"unknown slot\(s\) hint"),
        ({"summary_template": "{answers"}, "summary_template: not a valid template"),
        ({"answer_order": "random"}, "answer_order"),
        ({"answer_max_chars": 0}, "answer_max_chars"),
    ],
)
def test_bad_settings_name_the_key(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        HeavyThinkingSettings(**kwargs)


def test_the_host_reports_bad_settings_at_their_key_path() -> None:
    from longcat_plugins.host import get_host

    component = get_host().get("environment", "longcat_heavy_thinking")
    from longcat_plugins.schema import build_settings

    with pytest.raises(ConfigError, match=re.escape(KEY) + ".*k: the width"):
        build_settings(component, {"k": 0}, KEY)
    assert build_settings(component, {"k": 3, "rounds": 2}, KEY) == HeavyThinkingSettings(k=3, rounds=2)


def test_validate_exits_2_naming_the_key() -> None:
    bad_k = run_cli("validate", "heavy_thinking_cpu", f"{KEY}.k=0")
    assert (
        bad_k.returncode == 2 and KEY in bad_k.stdout + bad_k.stderr and "k: the width" in bad_k.stdout + bad_k.stderr
    )
    no_slot = run_cli("validate", "heavy_thinking_cpu", f"{KEY}.summary_template='{{question}} pick one'")
    text = no_slot.stdout + no_slot.stderr
    assert no_slot.returncode == 2 and KEY in text and "summary_template: needs the answer slot" in text

    grpo = run_cli("validate", "heavy_thinking_cpu", "algorithm.adv_estimator=grpo")
    text = grpo.stdout + grpo.stderr
    assert grpo.returncode == 2 and "algorithm.adv_estimator: grpo under the v1 trainer" in text, text
    summary_only = run_cli(
        "validate", "heavy_thinking_cpu", "algorithm.adv_estimator=grpo", f"+{KEY}.train_parallel=false"
    )
    assert summary_only.returncode == 0, summary_only.stdout + summary_only.stderr


# -- the orchestration -------------------------------------------------------------------------------


class _Text:
    def __init__(self, text: str) -> None:
        self.text = text


def test_rounds_see_the_previous_final_answer_through_the_memory() -> None:
    settings = HeavyThinkingSettings(k=2, rounds=2, summary_template="{answers}", refine_prompt="again")
    calls: list[tuple[list[dict[str, Any]], int, str]] = []

    async def generate(messages: list[dict[str, Any]], max_tokens: int, tag: str) -> _Text:
        calls.append((messages, max_tokens, tag))
        return _Text(f"final-{tag}" if tag.endswith("summary") else f"<think>t</think>ans-{tag}")

    trace = asyncio.run(heavy_think([{"role": "user", "content": "Q"}], generate, settings, 5, 7))
    tags = [t for _, _, t in calls]
    assert sorted(tags[:2]) == ["r0-p0", "r0-p1"] and tags[2] == "r0-summary"
    assert [m for m, _, t in calls if t == "r1-p0"][0] == [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": "final-r0-summary"},
        {"role": "user", "content": "again"},
    ]
    assert [m for m, _, t in calls if t == "r1-summary"][0][-1] == {
        "role": "user",
        "content": "(1) ans-r1-p0\n(2) ans-r1-p1",
    }
    assert {b for _, b, t in calls if "summary" in t} == {7} and {b for _, b, t in calls if "-p" in t} == {5}
    assert trace.final == "final-r1-summary" and isinstance(trace.memory, ContextMemory)
    assert trace.memory.messages[-1] == {"role": "assistant", "content": "final-r1-summary"}


# -- the agent loop on verl's machinery ---------------------------------------------------------------


def _loop(tokenizer: Any, server: ScriptedServer, settings: HeavyThinkingSettings, **cfg: Any) -> Any:
    from longcat_plugins.environments._heavy_agent_loop import LongcatHeavyThinkingAgentLoop

    config = OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 512, "response_length": 64, "multi_turn": {}}},
            "trainer": {"use_v1": cfg.get("use_v1", True)},
            "algorithm": {"adv_estimator": cfg.get("adv_estimator", "longcat_grpo")},
            "reward": {
                "custom_reward_function": {"path": "pkg://longcat_plugins.reward_functions", "name": "arithmetic_exact"}
            },
            "data": {},
        }
    )
    return build_loop(LongcatHeavyThinkingAgentLoop, config, server, tokenizer, settings)


SAMPLE = {
    "raw_prompt": [{"role": "user", "content": "What is 3+4-2?"}],
    "data_source": "longcat/arithmetic",
    "reward_model": {"ground_truth": "5"},
    "extra_info": {"index": 0},
    "uid": "u0",
    "index": 0,
}


def _run(tokenizer: Any, server: ScriptedServer, settings: HeavyThinkingSettings, **cfg: Any) -> Any:
    """Build the loop inside the event loop (verl binds it at construction) and run ``SAMPLE``."""

    async def go() -> Any:
        loop = _loop(tokenizer, server, settings, **cfg)
        if "prompt_length" in cfg:
            loop.prompt_length = cfg["prompt_length"]
        return await loop.run({"temperature": 1.0, "logprobs": True}, **SAMPLE)

    return asyncio.run(go())


def _server(tokenizer: Any) -> ScriptedServer:
    replies = iter(["<think>3+4=7</think>The answer is 5.", "The answer is 5.", "<think>3+4=8</think>The answer is 6."])

    def reply(prompt: str) -> str:
        return "The answer is 5." if "Candidate answers" in prompt else next(replies)

    return ScriptedServer(tokenizer, reply)


def test_the_loop_trains_each_trajectory_with_its_own_reward(tokenizer: Any) -> None:
    server = _server(tokenizer)
    outputs = _run(tokenizer, server, HeavyThinkingSettings(k=3))
    assert [o.extra_fields["longcat_heavy"]["role"] for o in outputs] == ["parallel"] * 3 + ["summary"]
    # the run's reward function (exact match) on each output's whole response (the K requests
    # run concurrently, so which trajectory got which reply is read back from its tokens): the
    # reasoning of the first reply is part of what it wrote, so it is not an exact answer
    texts = [tokenizer.decode(o.response_ids, skip_special_tokens=True) for o in outputs]
    assert sorted(texts[:3]) == sorted(
        ["<think>3+4=7</think>The answer is 5.", "The answer is 5.", "<think>3+4=8</think>The answer is 6."]
    )
    expected = [float(t == "The answer is 5.") for t in texts]
    assert [o.reward_score for o in outputs] == expected and expected[3] == 1.0 and sum(expected[:3]) == 1.0
    summary_prompt = server.requests[-1]["text"]
    answers = [t.split("</think>")[-1] for t in texts[:3]]
    assert "\n".join(f"({n}) {a}" for n, a in enumerate(answers, 1)) in summary_prompt
    assert "3+4=" not in summary_prompt  # answers only
    # verl's v1 worker (agent_loop_tq.py) copies the last output's reward onto the others before
    # as_dict(); each output's rm_scores must still carry its own
    final = outputs[-1]
    for o in outputs[:-1]:
        o.reward_score = final.reward_score
        o.extra_fields["reward_extra_info"] = final.extra_fields["reward_extra_info"]
    rows = [o.as_dict() for o in outputs]
    assert [float(r["rm_scores"][-1]) for r in rows] == expected
    assert [r["extra_fields"]["reward_extra_info"]["acc"] for r in rows] == expected
    assert all("credited_reward" not in r for r in rows)
    info = rows[0]["extra_fields"]["reward_extra_info"]
    assert info["heavy_parallel_acc"] == pytest.approx(1 / 3) and info["heavy_agreement"] == pytest.approx(2 / 3)


def test_legacy_trainer_trains_the_final_summary_only(tokenizer: Any) -> None:
    out = _run(tokenizer, _server(tokenizer), HeavyThinkingSettings(k=3), use_v1=False)
    assert not isinstance(out, list) and out.extra_fields["longcat_heavy"]["role"] == "summary"
    assert out.reward_score == 1.0


def test_v1_grpo_with_parallel_outputs_is_refused(tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="algorithm.adv_estimator: grpo"):
        _loop(tokenizer, _server(tokenizer), HeavyThinkingSettings(k=2), adv_estimator="grpo")
    _loop(tokenizer, _server(tokenizer), HeavyThinkingSettings(k=2, train_parallel=False), adv_estimator="grpo")


def test_a_summary_prompt_over_the_prompt_length_names_the_keys(tokenizer: Any) -> None:
    with pytest.raises(ValueError, match="data.max_prompt_length=20.*answer_max_chars"):
        _run(tokenizer, _server(tokenizer), HeavyThinkingSettings(k=2), prompt_length=20)


def _bench_heavy_thinking() -> Any:
    import sys
    from pathlib import Path

    bench = str(Path(__file__).resolve().parents[1] / "bench")
    sys.path.insert(0, bench)
    try:
        import bench_heavy_thinking
    finally:
        sys.path.remove(bench)
    return bench_heavy_thinking


def test_bench_append_replaces_only_rows_of_the_same_model_mode_k_and_seed(tmp_path: Any) -> None:
    """``bench_heavy_thinking.py --model ... --append`` keeps the other models' rows; rows from
    before the ``model`` field are the warm start's; a checkpoint is named by its run directory."""
    bench = _bench_heavy_thinking()
    legacy = {"mode": "sampling", "k": 1, "seed": 0, "pass_at_1": 0.25}  # no "model": the warm start
    warm_hts = {"mode": "heavy_thinking", "k": 2, "seed": 0, "pass_at_1": 0.05}
    trained = {"model": "heavy_rl-seed0-s20", "mode": "sampling", "k": 1, "seed": 0, "pass_at_1": 0.5}
    runs = bench.merge_runs([legacy, warm_hts], [trained])
    assert sorted(r["pass_at_1"] for r in runs) == [0.05, 0.25, 0.5]  # another model: nothing replaced
    again = {**trained, "pass_at_1": 0.75}
    runs = bench.merge_runs(runs, [again])
    assert sorted(r["pass_at_1"] for r in runs) == [0.05, 0.25, 0.75]  # same key: replaced
    fresh_warm = {"model": "warm", "mode": "sampling", "k": 1, "seed": 0, "pass_at_1": 0.3}
    runs = bench.merge_runs(runs, [fresh_warm])
    assert sorted(r["pass_at_1"] for r in runs) == [0.05, 0.3, 0.75]  # the legacy row was the warm start's
    other_seed = {**fresh_warm, "seed": 1}
    assert len(bench.merge_runs(runs, [other_seed])) == 4
    export = tmp_path / "heavy_rl-seed0-s20" / "checkpoints" / "global_step_20" / "actor" / "huggingface"
    assert bench.model_label(export) == "heavy_rl-seed0-s20"
    assert bench.model_label(tmp_path / "my-model") == "my-model"


def test_bench_model_that_is_not_a_checkpoint_exits_2_naming_the_option(tmp_path: Any) -> None:
    import subprocess
    import sys
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "bench" / "bench_heavy_thinking.py"
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, str(script), "--model", str(tmp_path), "--out", str(out)], capture_output=True, text=True
    )
    assert proc.returncode == 2 and "--model" in proc.stderr and "config.json" in proc.stderr, proc.stderr
    assert not out.exists()
