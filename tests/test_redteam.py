"""``longcat-plugins redteam`` (issue 32 item 5): a reward gets adversarial responses it must not
credit; the command names what it credited and exits 1, exits 0 on a reward that resists, 2 on
an unknown name. The built-in answer rewards meant for training on real answers credit nothing."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import make_dist, run_cli

from longcat_plugins import redteam as rt
from longcat_plugins.testing import make_host

#: an outside plugin: a reward that credits the ground truth found anywhere (hackable), and one
#: that credits only the exact sentence "The answer is N." (resists)
ANSWER_PLUGIN = """
    import re

    from longcat_plugins import RewardFunction, hookimpl

    def anywhere(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        '''Credits the ground truth if any number in the response equals it.'''
        return float(str(ground_truth) in re.findall(r"\\d+", solution_str or ""))

    def sentence(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
        '''Credits only a response that is exactly "The answer is N.".'''
        return {"score": float((solution_str or "").strip() == f"The answer is {ground_truth}.")}

    @hookimpl
    def register_rewards():
        return [RewardFunction("anywhere", anywhere), RewardFunction("sentence", sentence)]
"""


def anywhere(data_source: str, solution_str: str, ground_truth: str, extra_info: object = None, **kw: object) -> float:
    """The hackable reward, in-process."""
    return float(str(ground_truth) in re.findall(r"\d+", solution_str or ""))


def test_every_case_is_hostile_to_a_naive_reward() -> None:
    """Each answer case holds its ground truth somewhere or in a lookalike form: a reward that
    credits any matching number is caught by most of them, so the library tests something."""
    results = rt.run_answer_cases(anywhere)
    assert len(results) == len(rt.ANSWER_CASES) and all(r.error == "" for r in results)
    credited = {r.case for r in results if r.credited}
    assert {"buried_number", "several_boxes", "restated_prompt", "not_x_it_is_y", "answer_only_in_think"} <= credited
    assert {"code_output", "hedge_maybe", "over_long_enumeration", "retracted_box"} <= credited
    # the lookalikes have no ASCII digits of the ground truth: they test the reward's own reading
    assert {"confusable_digits_latin", "confusable_digits_cyrillic"}.isdisjoint(credited)


def test_credit_of_reads_what_verl_trains_on() -> None:
    assert rt.credit_of(0.5) == 0.5 and rt.credit_of({"score": 1.0}) == 1.0
    assert rt.credit_of({"score": float("nan"), "longcat_reward_valid": 0.0}) is None
    assert rt.credit_of({"score": 1.0, "longcat_reward_valid": 0.0}) is None
    assert rt.credit_of("x") is None


@pytest.mark.parametrize("name", ["math", "arithmetic_exact", "selfverify"])
def test_builtin_answer_rewards_credit_nothing(name: str) -> None:
    report = rt.redteam(make_host(builtins=True), name)
    assert report.summary()["cases"] == len(rt.ANSWER_CASES)
    assert [(r.case, r.score) for r in report.credited] == []
    assert report.raised == []
    assert report.summary()["max_s"] <= 2.0  # the bound for a hostile input


def test_the_partial_credit_demo_reward_is_reported_as_hackable() -> None:
    """``arithmetic`` pays for any number near the answer (by design, for a random model); the
    red team must say so rather than pass it."""
    report = rt.redteam(make_host(builtins=True), "arithmetic")
    assert {"buried_number_last", "hedge_maybe", "code_output"} <= {r.case for r in report.credited}


def test_cli_names_the_credited_case_and_exits_1_0_2(tmp_path: Path, fake_site: Path) -> None:
    make_dist(fake_site, "answer-rewards", {"answer_rewards": ANSWER_PLUGIN}, {"answers": "answer_rewards"})
    out = tmp_path / "rt.json"
    bad = run_cli("redteam", "anywhere", "--json", str(out))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "CREDITED anywhere: buried_number scored 1" in bad.stderr
    summary = json.loads(out.read_text())["anywhere"]
    assert summary["cases"] == len(rt.ANSWER_CASES) and "several_boxes" in summary["credited_cases"]
    assert summary["credited"] == len(summary["credited_cases"]) > 5
    good = run_cli("redteam", "sentence")
    assert good.returncode == 0, good.stdout + good.stderr
    assert "nothing credited" in good.stdout
    unknown = run_cli("redteam", "no_such_reward")
    assert unknown.returncode == 2
    assert "unknown reward 'no_such_reward'" in unknown.stderr
    assert all(n in unknown.stderr for n in ("anywhere", "sentence", "math", "environment"))
    assert run_cli("redteam").returncode == 2  # neither names nor --all


def test_environment_hacks_run_on_a_generated_environment() -> None:
    """Every hack runs against real episodes; a hack that is credited is reported by name with its
    task (the hardening of the environments is tracked in issue 32 item 2)."""
    results = rt.run_env_hacks(rt.EnvSetup(envs=1, max_tasks=2))
    tasks = {r.case.split("[")[1] for r in results}
    assert len(results) == len(rt.ENV_HACKS) * len(tasks) and tasks
    assert all(r.error == "" for r in results), [r.error for r in results if r.error]
    by_hack = {name: [r for r in results if r.case.startswith(name + "[")] for name in rt.ENV_HACKS}
    # no tool call, no content: nothing is met
    for name in ("do_nothing", "claim_success", "malformed_arguments"):
        assert all(r.score == 0.0 for r in by_hack[name]), [(r.case, r.score) for r in by_hack[name]]
