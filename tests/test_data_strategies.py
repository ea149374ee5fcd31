"""The data strategies (issue 14): float64 references for every allocation rule, greedy vs an
exact DP, curriculum and context-budget rules, replay and quotas, resume sample for sample, and
bad settings stopped with their key path."""

from __future__ import annotations

import itertools
import json
import random
from functools import cache

import numpy as np
import pytest

from longcat_plugins.config import ConfigError
from longcat_plugins.data.budget import greedy_allocate, informative_value, knapsack_value, spend_remainder
from longcat_plugins.data.context import ContextCurriculum, length_percentile
from longcat_plugins.data.curriculum import TwoAxisCurriculum
from longcat_plugins.data.oversampling import group_sizes, plan_groups
from longcat_plugins.data.planner import Candidate, DataPlanner, GroupResult
from longcat_plugins.data.replay import GroupRef, ReplayBuffer, choose_batch
from longcat_plugins.data.settings import DataSettings
from longcat_plugins.data.stats import TaskStats
from longcat_plugins.host import Host
from longcat_plugins.selection import Selection

# -- D4: value functions and allocation --------------------------------------------------------


def ref_informative(n: int, p: float) -> float:
    """P[a group of n Bernoulli(p) rewards is not all equal], float64, from the definition."""
    p64 = np.float64(p)
    return float(np.float64(1.0) - p64**n - (np.float64(1.0) - p64) ** n) if n > 0 else 0.0


def ref_knapsack(n: int, p: float) -> float:
    """Knapsack-RL (arXiv 2509.25849): Value(N, p) = [1 - p^N - (1 - p)^N] * p * (1 - p)^2."""
    p64 = np.float64(p)
    return ref_informative(n, p) * float(p64 * (np.float64(1.0) - p64) ** 2)


@pytest.mark.parametrize("p", [0.0, 0.05, 0.3, 0.5, 0.77, 1.0])
@pytest.mark.parametrize("n", [0, 1, 2, 3, 8, 17])
def test_value_functions_match_float64_references(n: int, p: float) -> None:
    assert informative_value(n, p) == pytest.approx(ref_informative(n, p), abs=1e-15)
    assert knapsack_value(n, p) == pytest.approx(ref_knapsack(n, p), abs=1e-15)


def exact_dp(rates: list[float], budget: int, n_min: int, n_max: int, value) -> float:
    """Best total value over all allocations with n_min <= N_i <= n_max and sum N_i <= budget."""

    @cache
    def best(i: int, left: int) -> float:
        if i == len(rates):
            return 0.0
        options = [value(n, rates[i]) + best(i + 1, left - n) for n in range(n_min, min(n_max, left) + 1)]
        return max(options) if options else float("-inf")

    return best(0, budget)


@pytest.mark.parametrize("value", [ref_informative, ref_knapsack])
@pytest.mark.parametrize("seed", range(12))
def test_greedy_matches_exact_dp_where_the_value_is_concave(value, seed: int) -> None:
    rng = random.Random(seed)
    tasks = rng.randint(1, 5)
    rates = [rng.choice([0.0, 1.0, rng.random()]) if rng.random() < 0.2 else rng.random() for _ in range(tasks)]
    n_min, n_max = rng.randint(1, 2), rng.randint(2, 8)
    n_max = max(n_max, n_min)
    budget = rng.randint(n_min * tasks, n_max * tasks + 3)
    alloc = greedy_allocate(rates, budget, n_min, n_max, value)
    assert sum(alloc) <= budget and all(n_min <= n <= n_max for n in alloc)
    got = sum(value(n, p) for n, p in zip(alloc, rates, strict=True))
    assert got == pytest.approx(exact_dp(rates, budget, n_min, n_max, value), abs=1e-12)


def test_greedy_gives_the_rollouts_to_tasks_near_half_and_spends_the_budget() -> None:
    rates = [0.02, 0.5, 0.95, 0.3]
    alloc = greedy_allocate(rates, 32, 2, 16, informative_value)
    assert alloc[1] == max(alloc) and alloc[0] == alloc[2] == min(alloc) or alloc[1] > alloc[0]
    assert sum(spend_remainder(alloc, 32, 16)) == 32
    # a task at p = 0 or 1 gains nothing: greedy stops, the remainder is spread round robin
    assert greedy_allocate([0.0, 1.0], 8, 2, 8, informative_value) == [2, 2]
    assert spend_remainder([2, 2], 8, 8) == [4, 4]


def test_greedy_rejects_impossible_budgets() -> None:
    with pytest.raises(ValueError, match="budget must be >= 0"):
        greedy_allocate([0.5], -1, 0, 4, informative_value)
    with pytest.raises(ValueError, match="cannot give 3 tasks n_min=2"):
        greedy_allocate([0.5] * 3, 5, 2, 4, informative_value)


# -- D5 + A5 ---------------------------------------------------------------------------------


def test_oversampling_gives_hard_tasks_more_groups_within_the_budget() -> None:
    ks = plan_groups([0.9, 0.1, 0.5, 0.0], k_min=1, k_max=3, group_size=4, budget=100)
    # k = k_min + round((k_max - k_min)(1 - p)), the report's "lower pass rate -> larger coefficient"
    assert ks == [1 + round(2 * 0.1), 1 + round(2 * 0.9), 1 + round(2 * 0.5), 3]
    capped = plan_groups([0.0, 0.0, 0.0], k_min=1, k_max=3, group_size=4, budget=20)
    assert capped == [3, 2, 0] and sum(capped) * 4 <= 20
    assert group_sizes(8, 3) == [3, 3, 2] and group_sizes(3, 3) == [3] and group_sizes(0, 2) == []


def test_planner_duplicates_a_hard_task_into_groups_with_their_own_ids() -> None:
    settings = DataSettings(oversampling={"enable": True, "k_min": 1, "k_max": 3, "group_size": 2}, prior_pass_rate=0.5)
    planner = DataPlanner(settings, batch_prompts=3, rollout_n=4)
    planner.stats.observe("hard", [0.0] * 4, 1.0)
    planner.stats.observe("hard", [0.0] * 4, 1.0)
    planner.stats.observe("easy", [1.0] * 4, 1.0)
    rows, metrics = planner.plan([Candidate("hard"), Candidate("easy"), Candidate("new")])
    groups = {}
    for r in rows:
        groups.setdefault(r.task, []).append(r.group_id)
    assert len(groups["hard"]) == 3 and len(groups["easy"]) == 1 and len(groups["new"]) == 2
    assert len({r.group_id for r in rows}) == len(rows)
    assert sum(r.rollouts for r in rows) <= 12 and metrics["longcat/data/plan/groups"] == len(rows)


def test_budget_and_oversampling_compose_under_the_same_budget_as_uniform() -> None:
    settings = DataSettings(budget={"enable": True, "value": "knapsack"}, oversampling={"enable": True, "k_max": 2})
    planner = DataPlanner(settings, batch_prompts=4, rollout_n=8)
    for task, rewards in (("a", [1.0] * 7 + [0.0]), ("b", [0.0, 1.0] * 4), ("c", [0.0] * 8)):
        planner.stats.observe(task, rewards, 1.0)
    rows, metrics = planner.plan([Candidate(t) for t in "abcd"])
    per_task = {t: sum(r.rollouts for r in rows if r.task == t) for t in "abcd"}
    assert sum(per_task.values()) == 32 == metrics["longcat/data/plan/budget"]
    # p = 0.25 is nearest the knapsack weight p(1 - p)^2 peak (p = 1/3): it gets the most rollouts
    assert per_task["c"] == max(per_task.values()) > per_task["b"] and all(r.rollouts >= 2 for r in rows)


# -- shared statistics -----------------------------------------------------------------------


def test_task_stats_reference_and_exact_json_round_trip() -> None:
    stats = TaskStats(prior=0.5, momentum=0.25)
    stats.observe("t", [1.0, 0.0, 1.0, 1.0], 1.0)  # accuracy 0.75
    stats.observe("t", [0.0, 0.0, None, 0.0], 1.0)  # accuracy 0 over the 3 valid
    expected = 0.75 * (0.75 * 0.5 + 0.25 * 0.75) + 0.25 * 0.0
    assert stats.pass_rate("t") == pytest.approx(expected, abs=1e-15)
    stats.observe_batch(0.3)
    assert stats.pass_rate("unseen") == 0.3  # the live mean stands in for unseen tasks
    assert stats.attempts["t"] == 7 and stats.successes["t"] == 3
    again = TaskStats(prior=0.5, momentum=0.25)
    again.load_state_dict(json.loads(json.dumps(stats.state_dict())))
    assert again.state_dict() == stats.state_dict() and again.pass_rate("t") == stats.pass_rate("t")


# -- D3 ----------------------------------------------------------------------------------------


def test_curriculum_opens_easy_early_stage_tasks_first_and_advances_on_live_accuracy() -> None:
    cur = TwoAxisCurriculum(["tool", "plan", "auto"], floors=[0.6, 0.0], advance_at=0.5, window=2)
    labels = ["plan", "tool", "tool", "auto"]
    rates = [0.9, 0.7, 0.2, 0.9]
    order, n_open = cur.order(labels, rates)
    assert n_open == 1 and order[0] == 1  # only the easy tool task is open
    assert order[1:] == [2, 0, 3]  # then earliest stage first, easiest first
    assert not cur.observe(0.9)  # one step is not a window
    assert cur.observe(0.6) and (cur.stage, cur.level) == (0, 1)
    assert cur.order(labels, rates)[1] == 2  # every tool task now
    cur.observe(0.5), cur.observe(0.5)
    assert (cur.stage, cur.level) == (1, 0)
    state = json.loads(json.dumps(cur.state_dict()))
    other = TwoAxisCurriculum(["tool", "plan", "auto"], floors=[0.6, 0.0], advance_at=0.5, window=2)
    other.load_state_dict(state)
    assert other.order(labels, rates) == cur.order(labels, rates)
    with pytest.raises(ValueError, match="not one of the curriculum's stages"):
        cur.order(["nope"], [0.5])


# -- D6 ----------------------------------------------------------------------------------------


def ref_percentile(values: list[int], q: float) -> float:
    """Linear interpolation between closest ranks (numpy's default), float64."""
    xs = sorted(float(v) for v in values)
    pos = (len(xs) - 1) * q / 100.0
    lo = int(np.floor(pos))
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def test_context_budget_rises_when_the_p90_length_nears_it() -> None:
    lengths = [3, 9, 12, 5, 14, 16, 7, 15, 16, 11]
    assert length_percentile(lengths, 90) == pytest.approx(ref_percentile(lengths, 90), abs=1e-12)
    ctx = ContextCurriculum([16, 24, 32], near=0.9, percentile=90)
    assert not ctx.observe([4, 5, 6, 7, 8, 9, 10, 11, 12, 13])  # p90 12.1 < 14.4
    assert ctx.max_tokens == 16
    assert ctx.observe(lengths)  # p90 16 >= 0.9 * 16
    assert ctx.max_tokens == 24
    ctx.observe([32] * 10), ctx.observe([32] * 10)
    assert ctx.max_tokens == 32  # the last budget stays


# -- D2 and S4 ---------------------------------------------------------------------------------


def refs(n: int, step: int, domain: str = "d", start: int = 0) -> list[GroupRef]:
    return [GroupRef(f"u{step}-{start + i}", f"t{start + i}", domain, step) for i in range(n)]


def test_replay_mixes_the_surplus_back_at_the_reuse_ratio_within_the_staleness_bound() -> None:
    rng = random.Random(0)
    buffer: ReplayBuffer[GroupRef] = ReplayBuffer(16, rng)
    first = choose_batch(refs(12, 1), 8, 1, buffer, 0.25, 1, None, rng)
    assert len(first.train) == 8 and not first.replayed and len(buffer) == 4
    second = choose_batch(refs(12, 2), 8, 2, buffer, 0.25, 1, None, rng)
    assert len(second.replayed) == 2 and len(second.train) == 8  # round(0.25 * 8)
    assert {g.step for g in second.replayed} == {1}
    uids = [g.uid for g in second.train]
    assert len(set(uids)) == 8 and uids != sorted(uids, key=lambda u: (u.split("-")[0], int(u.split("-")[1])))
    # step 3: groups of step 1 are two versions old (bound 1): dropped, never replayed
    third = choose_batch(refs(8, 3), 8, 3, buffer, 0.25, 1, None, rng)
    assert all(g.step == 2 for g in third.replayed)
    assert any(g.step == 1 for g in third.dropped) and all(g.step >= 2 for g in buffer.items)


def test_quotas_start_more_rare_domain_prompts_and_keep_the_trained_batch_balanced() -> None:
    settings = DataSettings(
        pool_factor=4,
        quotas={
            "enable": True,
            "domain_ratios": {"math": 0.5, "agent": 0.5},
            "domain_oversampling": {"agent": 2.0},
            "tolerance": 0.125,
        },
    )
    planner = DataPlanner(settings, batch_prompts=8, rollout_n=2)
    # a skewed pool: 28 math prompts, 4 agent prompts
    pool = [Candidate(f"m{i}", "math") for i in range(28)] + [Candidate(f"a{i}", "agent") for i in range(4)]
    random.Random(1).shuffle(pool)
    rows, metrics = planner.plan(pool)
    started = {d: sum(1 for r in rows if r.domain == d) for d in ("math", "agent")}
    assert started == {"math": 4, "agent": 4}  # agent's quota is ceil(0.5 * 8 * 2) = 8, only 4 exist
    assert metrics["longcat/data/quotas/agent/rollout_quota"] == 8.0
    # a skewed finished mix: 12 math groups, 4 agent groups; the trained 8 hold 4 + 4
    fresh = refs(12, 1, "math") + refs(4, 1, "agent", start=100)
    planner.batch_prompts = 8
    choice, m = planner.choose(fresh, 1)
    counts = {d: sum(g.domain == d for g in choice.train) for d in ("math", "agent")}
    assert sum(counts.values()) == 8 and abs(counts["math"] / 8 - 0.5) <= 0.125, counts
    assert m["longcat/data/quotas/max_share_error"] <= 0.125


# -- resume: sample for sample -----------------------------------------------------------------


def synthetic_step(planner: DataPlanner, step: int, pool: list[Candidate]) -> list[tuple]:
    rows, _ = planner.plan(pool)
    fresh = [GroupRef(f"s{step}-{i}", r.task, r.domain, step, r.group) for i, r in enumerate(rows)]
    choice, _ = planner.choose(fresh, step)
    by_uid = {f"s{step}-{i}": r for i, r in enumerate(rows)}
    results = []
    for g in choice.train:
        rng = random.Random(hash((g.task, g.group, g.step)) & 0xFFFF)
        n = by_uid[g.uid].rollouts if g.uid in by_uid else 4
        rewards = [float(rng.random() < int(g.task[1:]) / 40) for _ in range(n)]
        results.append(
            GroupResult(g.task, g.group, rewards, [rng.randint(1, 16) for _ in range(n)], g.uid not in by_uid)
        )
    planner.observe(results)
    return [(r.task, r.group, r.rollouts, r.max_tokens) for r in rows] + [("train", tuple(g.uid for g in choice.train))]


def test_a_resumed_planner_continues_sample_for_sample() -> None:
    settings = DataSettings(
        budget={"enable": True},
        oversampling={"enable": True, "k_max": 2},
        curriculum={"enable": True, "floors": [0.3, 0.0], "advance_at": 0.2},
        context={"enable": True, "budgets": [8, 12, 16]},
        replay={"enable": True, "reuse_ratio": 0.25},
        pool_factor=2,
    )
    pools = [[Candidate(f"t{(7 * s + i) % 40}") for i in range(16)] for s in range(8)]
    straight = DataPlanner(settings, batch_prompts=8, rollout_n=4, seed=3)
    expected = [synthetic_step(straight, s + 1, pools[s]) for s in range(8)]
    first = DataPlanner(settings, batch_prompts=8, rollout_n=4, seed=3)
    got = [synthetic_step(first, s + 1, pools[s]) for s in range(4)]
    resumed = DataPlanner(settings, batch_prompts=8, rollout_n=4, seed=3)
    resumed.load_state_dict(json.loads(json.dumps(first.state_dict())))
    got += [synthetic_step(resumed, s + 1, pools[s]) for s in range(4, 8)]
    assert got == expected
    assert resumed.state_dict() == straight.state_dict()


# -- bad settings ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (
            {"budget": {"value": "entropy"}},
            "budget.value: unknown value function 'entropy'; choices: informative, knapsack",
        ),
        ({"budget": {"budget": -8}}, "budget.budget: must be >= 0"),
        (
            {"quotas": {"enable": True, "domain_ratios": {"a": 0.6, "b": 0.6}}},
            "quotas.domain_ratios: shares must sum to 1",
        ),
        ({"budget": {"vaule": "knapsack"}}, "budget.vaule"),
    ],
)
def test_bad_settings_name_their_key(raw: dict, message: str) -> None:
    host = Host(Selection(settings={"scheduler": {"longcat_data": raw}})).load()
    with pytest.raises(ConfigError) as info:
        host.settings_for("scheduler", "longcat_data")
    assert "longcat.settings.scheduler.longcat_data" in str(info.value) and message in str(info.value)


def test_validate_exits_2_on_bad_data_settings_before_ray_starts() -> None:
    from conftest import validate_refuses

    from longcat_plugins.runtime.launch import configs_dir

    recipe = str(configs_dir() / "cpu_demo.yaml")
    bad = validate_refuses(
        recipe, "trainer.v1.trainer_mode=longcat_data", "+longcat.settings.scheduler.longcat_data.budget.budget=-1"
    )
    assert "longcat.settings.scheduler.longcat_data" in bad.stderr and "budget.budget" in bad.stderr
    # the recipe-level check: a context budget above the rollout's ceiling, without the agent loop
    too_long = validate_refuses(
        recipe,
        "trainer.v1.trainer_mode=longcat_data",
        "+longcat.settings.scheduler.longcat_data.context.enable=true",
        "+longcat.settings.scheduler.longcat_data.context.budgets=[8,64]",
    )
    assert "longcat.settings.scheduler.longcat_data.context.budgets" in too_long.stderr
    assert "actor_rollout_ref.rollout.agent.default_agent_loop" in too_long.stderr


def test_all_settings_combinations_construct() -> None:
    for flags in itertools.product([False, True], repeat=3):
        DataSettings(
            budget={"enable": flags[0]}, oversampling={"enable": flags[1]}, replay={"enable": flags[2]}
        ).enabled()
