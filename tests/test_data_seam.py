"""One planner seam for every planning trainer: a plugin's data strategy (tests/outside_plugin/
outside_data.py, installed as a real distribution) is selected by name and runs in the step
planner; the ``dora`` trainer's dispatch hands each chunk it starts to the same planner (budget,
groups, response budget, the plugin's order and shape, verification rows), and bad combinations
exit 2 before Ray naming the key."""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import REPO, make_dist, run_cli
from omegaconf import OmegaConf

from longcat_plugins.data.planned import PlannedData, columns
from longcat_plugins.data.planner import Candidate, DataPlanner, GroupResult
from longcat_plugins.data.settings import DataSettings
from longcat_plugins.runtime.launch import configs_dir
from longcat_plugins.schedulers.core.config import DoraConfig
from longcat_plugins.schedulers.dispatch import DispatchPlanner

PLUGIN_FILE = REPO / "tests" / "outside_plugin" / "outside_data.py"
sys.path.insert(0, str(PLUGIN_FILE.parent))
import outside_data  # noqa: E402

DORA = str(configs_dir() / "dora_cpu.yaml")
SYNC = str(configs_dir() / "cpu_demo.yaml")
KEY = "longcat.settings.scheduler.longcat_data"


def install(site: Path) -> None:
    make_dist(
        site, "outside-data", {"outside_data_dist": PLUGIN_FILE.read_text()}, {"outside_data": "outside_data_dist"}
    )


def strategy(max_rollouts: int = 0) -> outside_data.LowestRateFirst:
    s = outside_data.LowestRateFirst({"max_rollouts": max_rollouts})
    s.name = "lowest_rate_first"
    return s


def pool(rates: list[float]) -> list[Candidate]:
    return [Candidate(f"t{i}", historical=r) for i, r in enumerate(rates)]


# -- the planner runs the plugin's hooks ------------------------------------------------------------


def test_the_plugins_order_chooses_which_prompts_start_and_its_shape_is_what_is_submitted() -> None:
    settings = DataSettings(pool_factor=2, budget={"enable": True, "n_min": 2, "n_max": 8})
    planner = DataPlanner(settings, batch_prompts=3, rollout_n=4, strategies=[strategy(max_rollouts=3)])
    rows, _ = planner.plan(pool([0.9, 0.1, 0.5, 0.05, 0.7, 0.3]))
    # the three lowest historical pass rates start, lowest first
    assert [r.task for r in rows] == ["t3", "t1", "t5"]
    # D4 gave each at least n_min; the plugin's cap at 3 holds for each
    assert all(2 <= r.rollouts <= 3 for r in rows), rows
    plain = DataPlanner(settings, batch_prompts=3, rollout_n=4).plan(pool([0.9, 0.1, 0.5, 0.05, 0.7, 0.3]))[0]
    assert [r.task for r in plain] == ["t0", "t1", "t2"]  # without it: source order
    assert max(r.rollouts for r in plain) > 3


def test_its_observations_are_metrics_and_its_state_resumes() -> None:
    s = strategy()
    planner = DataPlanner(DataSettings(), batch_prompts=2, rollout_n=2, strategies=[s])
    metrics = planner.observe([GroupResult("t0", 0, [1.0, 0.0], [3, 4]), GroupResult("t1", 0, [0.0, 0.0], [5, 6])])
    assert metrics["longcat/data/lowest_rate_first/groups_seen"] == 2.0
    state = planner.state_dict()
    again = DataPlanner(DataSettings(), batch_prompts=2, rollout_n=2, strategies=[strategy()])
    again.load_state_dict(state)
    assert again.strategies[0].seen == 2
    assert again.observe([GroupResult("t2", 0, [1.0, 1.0], [1, 1])])["longcat/data/lowest_rate_first/groups_seen"] == 3


def test_a_strategy_that_breaks_the_contract_is_named() -> None:
    class Invents(outside_data.LowestRateFirst):
        def order(self, candidates, rates, order):
            return [*order, 99]

    bad = Invents({})
    bad.name = "invents"
    planner = DataPlanner(DataSettings(), batch_prompts=2, rollout_n=2, strategies=[bad])
    with pytest.raises(ValueError, match="data strategy 'invents': order"):
        planner.plan(pool([0.5, 0.5]))


# -- dora: the dispatch's chunks go through the same planner ------------------------------------------


def _payload(i: int, stage: str = "") -> Any:
    from verl.utils import tensordict_utils as tu

    prompt = np.empty(1, dtype=object)
    prompt[0] = [{"role": "user", "content": f"What is {i} + 1?"}]
    return tu.get_tensordict(
        {
            "raw_prompt": prompt,
            "data_source": np.array(["arith"], dtype=object),
            "reward_model": np.array([{"ground_truth": str(i + 1)}], dtype=object),
            "extra_info": np.array([{"index": i, "pass_rate": [0.9, 0.1, 0.5, 0.05][i % 4]}], dtype=object),
            "index": np.array([i]),
            "uid": np.array([f"verl-{i}"], dtype=object),
        }
    )


def _dora_like(settings: DataSettings, batch: int = 4, n: int = 4) -> tuple[Any, DispatchPlanner]:
    """A ``DoraTrainer`` holding only what ``_planned_batch`` reads (no Ray, no workers)."""
    from longcat_plugins.schedulers.trainer import DoraTrainer

    config = OmegaConf.create(
        {
            "data": {"train_batch_size": batch, "seed": 0},
            "actor_rollout_ref": {"rollout": {"n": n, "prompt_length": 64}},
        }
    )
    rows = iter(range(10_000))

    def fetch() -> tuple[str, str, Any]:
        i = next(rows)
        return "arith", f"task{i}", _payload(i)

    dispatch = DispatchPlanner(DoraConfig.from_mapping({"batch_size": batch}), fetch, window=2 * batch, lookahead=8)
    trainer = object.__new__(DoraTrainer)
    trainer.planned = PlannedData(settings, config)
    trainer._planner = dispatch
    trainer.tokenizer = None
    trainer.global_steps = 1
    trainer._data_metrics = {}
    trainer._verify_due = False
    trainer._verify_template = None
    return trainer, dispatch


def test_dora_submits_the_planners_groups_in_place_of_the_dispatchs() -> None:
    settings = DataSettings(
        pass_rate_key="extra_info.pass_rate",
        budget={"enable": True, "n_min": 2, "n_max": 8},
        oversampling={"enable": True, "k_max": 2, "min_group": 2},
        context={"enable": True, "budgets": [16, 32]},
    )
    trainer, dispatch = _dora_like(settings)
    trainer.planned.planner.strategies = [strategy()]  # as the host would load it by name
    issues = dispatch.plan(set())
    assert len(issues) == 8  # the window: 2 x batch groups outstanding
    batch = trainer._planned_batch(issues)
    uids = [str(u) for u in batch["uid"]]
    # every submitted group is outstanding in the dispatch under its own (new) uid, none of the issues' is
    assert set(dispatch.groups) == set(uids) and not {i.uid for i in issues} & set(uids)
    n = [int(x) for x in batch["__rollout_n__"]]
    groups = [str(g) for g in batch["longcat_group"]]
    # D4: this chunk's share of the step's budget (8 prompts of a 4-prompt step: 2 x 4 x 4 rollouts)
    assert sum(n) == 32 and all(x >= 2 for x in n)
    # D5/A5: a task of low pass rate is split into two groups of its own ids
    per_task = Counter(g.split("#")[0] for g in groups)
    assert max(per_task.values()) == 2, groups
    assert all(int(x) == 16 for x in batch["longcat_max_tokens"])  # D6: the first budget
    assert trainer._data_metrics["longcat/data/plan/rollouts"] == 32.0


def test_dora_allocates_a_one_prompt_chunk_against_the_steps_recent_tasks() -> None:
    """Planned alone, a one-prompt chunk's share of the budget is exactly rollout.n; streamed,
    it competes with the step's recently planned tasks (D4 under DORA)."""
    settings = DataSettings(pass_rate_key="extra_info.pass_rate", budget={"enable": True, "n_min": 2, "n_max": 8})
    trainer, dispatch = _dora_like(settings)
    first = trainer._planned_batch(dispatch.plan(set()))
    planner = trainer.planned.planner
    assert [t for t, _ in planner.window] == ["5", "6", "7"]  # the last batch - 1 tasks planned
    uid = str(first["uid"][0])
    dispatch.take([uid])
    trainer._data_metrics = {}
    issues = dispatch.plan(set(dispatch.groups))
    assert len(issues) == 1
    batch = trainer._planned_batch(issues)
    # pass rate 0.9 against 0.1, 0.5 and 0.05: its marginal value beats theirs for a fifth rollout
    assert [int(x) for x in batch["__rollout_n__"]] == [5]
    assert trainer._data_metrics["longcat/data/plan/window_tasks"] == 3.0
    assert trainer._data_metrics["longcat/data/plan/carry"] == 1.0
    assert trainer._data_metrics["longcat/data/plan/budget"] == 4.0


def test_dora_returns_prompts_the_planner_left_out_to_the_pool() -> None:
    class FirstTwo(outside_data.LowestRateFirst):
        def order(self, candidates, rates, order):
            return order[:2]

    s = FirstTwo({})
    s.name = "first_two"
    trainer, dispatch = _dora_like(DataSettings())
    trainer.planned.planner.strategies = [s]
    issues = dispatch.plan(set())
    batch = trainer._planned_batch(issues)
    assert len(batch["uid"]) == 2
    # the six left out are first in the pool again, in order, and no longer outstanding
    assert [task for _, task, _ in dispatch.pool[:6]] == [i.task for i in issues[2:]]
    assert len(dispatch.groups) == 2
    assert dispatch.metrics()["dora/dispatch/withdrawn_prompts"] == 6.0


def test_dora_adds_the_verification_rows_once_per_trained_step() -> None:
    from longcat_plugins.data.selfverify import Judged

    settings = DataSettings(selfverify={"enable": True, "tasks": 2, "window": 1})
    trainer, dispatch = _dora_like(settings)
    sv = trainer.planned.selfverify
    sv.active = True
    sv.pool = [Judged("a", 1, "What is 1 + 1?", "3", False, 0.5), Judged("b", 1, "What is 2 + 2?", "4", True, 0.5)]
    trainer._verify_due = True
    batch = trainer._planned_batch(dispatch.plan(set()))
    sources = [str(s) for s in batch["data_source"]]
    assert sources.count("longcat_selfverify") == 2 and len(sources) == 10
    assert sum(1 for t in dispatch.groups.values() if t[1] == "selfverify") == 2
    # the next chunk of the same step carries none
    for uid in list(dispatch.groups)[:4]:
        dispatch.take([uid])
    later = trainer._planned_batch(dispatch.plan(set(dispatch.groups) - set(list(dispatch.groups)[:4])))
    assert later is None or "longcat_selfverify" not in [str(s) for s in later["data_source"]]


def test_with_pool_factor_dora_chooses_each_chunk_among_more_rows() -> None:
    trainer, dispatch = _dora_like(DataSettings(pool_factor=2, pass_rate_key="extra_info.pass_rate"))
    trainer.planned.planner.strategies = [strategy()]
    issues = dispatch.plan(set())
    batch = trainer._planned_batch(issues)
    # 8 issued + 8 borrowed rows, pass rates 0.9, 0.1, 0.5, 0.05 repeating: the 8 lowest start
    started = sorted(int(i) for i in batch["index"])
    assert started == [1, 3, 5, 7, 9, 11, 13, 15], started
    # the 8 others wait at the front of the pool, in source order, and count as prompts started only once
    assert [task for _, task, _ in dispatch.pool[:8]] == [f"task{i}" for i in (0, 2, 4, 6, 8, 10, 12, 14)]
    metrics = dispatch.metrics()
    assert metrics["dora/dispatch/prompts_total"] == 8.0 and metrics["dora/dispatch/deferred_prompts"] == 4.0
    assert len(dispatch.groups) == 8


def test_groups_the_sampler_dropped_are_forgotten() -> None:
    trainer, dispatch = _dora_like(DataSettings(budget={"enable": True}))
    batch = trainer._planned_batch(dispatch.plan(set()))
    uids = [str(u) for u in batch["uid"]]
    assert set(trainer.planned.group_refs) == set(uids)
    assert trainer.planned.retain(set(uids[:3])) == len(uids) - 3
    assert set(trainer.planned.group_refs) == set(uids[:3])


def test_groups_online_filtering_dropped_still_teach_the_pass_rates_and_the_verification_phase() -> None:
    """DORA's D1 drops all-correct and all-wrong groups untrained; the planner still learns their
    outcomes (pass rates), and a dropped verification group's verdicts are judged."""
    from types import SimpleNamespace

    from longcat_plugins.data.selfverify import Judged

    settings = DataSettings(budget={"enable": True}, selfverify={"enable": True, "tasks": 2, "window": 1})
    trainer, dispatch = _dora_like(settings)
    planned = trainer.planned
    planned.selfverify.active = True
    planned.selfverify.pool = [
        Judged("a", 1, "What is 1 + 1?", "3", False, 0.5),
        Judged("b", 1, "What is 2 + 2?", "4", True, 0.5),
    ]
    trainer._verify_due = True
    batch = trainer._planned_batch(dispatch.plan(set()))
    uids = [str(u) for u in batch["uid"]]
    planned.tokenizer = SimpleNamespace(pad_token_id=0, decode=lambda ids, **_: "")  # reads no response here
    verify = sorted(planned.verify_uids)
    main = [u for u in uids if u not in planned.verify_uids]
    tasks = {u: planned.group_refs[u].task for u in main}
    # three groups left the queue before the planner looked (set aside), one after (still known)
    assert planned.retain(set(uids) - {main[0], *verify}) == 3
    filtered = {main[0]: (1.0, 1.0), main[1]: (0.0, 0.0), verify[0]: (1.0,) * 4, verify[1]: (-0.5,) * 4}

    class EmptyTQ:
        def kv_batch_get(self, **_: Any) -> dict[str, list]:
            return {"rm_scores": [], "responses": []}

    trained = SimpleNamespace(keys=[], tags=[], partition_id="train")
    metrics = planned.observe(EmptyTQ(), trained, set(), 2, filtered=filtered)
    stats = planned.planner.stats
    assert (stats.attempts[tasks[main[0]]], stats.successes[tasks[main[0]]]) == (2, 2)
    assert (stats.attempts[tasks[main[1]]], stats.successes[tasks[main[1]]]) == (2, 0)
    assert metrics["longcat/data/filtered_groups_observed"] == 2.0
    assert metrics["longcat/data/trained_groups"] == 0.0  # they are not what was trained
    assert metrics["longcat/selfverify/verify_filtered"] == 8.0 and metrics["longcat/selfverify/verify_samples"] == 0.0
    assert metrics["longcat/selfverify/verify_accuracy"] == 0.5
    assert planned.selfverify.active, "no verification sample trained: not a phase step"
    assert not planned.gone and main[1] not in planned.group_refs and not planned.verify_uids


def test_dora_checkpoints_the_groups_in_flight_with_the_planner() -> None:
    import json

    trainer, dispatch = _dora_like(DataSettings(budget={"enable": True}))
    trainer.planned.planner.strategies = [strategy()]
    batch = trainer._planned_batch(dispatch.plan(set()))
    state = json.loads(json.dumps(trainer.planned.state_dict(in_flight=True)))
    again, _ = _dora_like(DataSettings(budget={"enable": True}))
    again.planned.planner.strategies = [strategy()]
    again.planned.load_state_dict(state)
    # the groups verl restores into its queue are the planner's again: their results will count
    assert set(again.planned.group_refs) == {str(u) for u in batch["uid"]}
    assert again.planned.group_refs == trainer.planned.group_refs


def test_a_chunk_row_is_read_back_as_the_planners_candidate() -> None:
    from longcat_plugins.data.planned import candidates_of

    cols = columns(_payload(3))
    [c] = candidates_of(cols, DataSettings(pass_rate_key="extra_info.pass_rate"))
    assert (c.task, c.historical) == ("3", 0.05)


# -- bad input: exit 2 before Ray, naming the key -------------------------------------------------------


@pytest.mark.parametrize(
    ("recipe", "overrides", "expect"),
    [
        (DORA, [f"+{KEY}.strategies=[lowest_rate_frist]"], f"{KEY}.strategies[0]: unknown data strategy"),
        (DORA, [f"+{KEY}.strategies=[sync_only]"], "cannot run under trainer 'dora'"),
        (DORA, [f"+{KEY}.quotas.enable=true", f"+{KEY}.quotas.domain_ratios={{arith:1.0}}"], f"{KEY}.quotas.enable"),
        (DORA, [f"+{KEY}.replay.enable=true"], f"{KEY}.replay.enable: under the dora trainer replay is"),
        (
            DORA,
            [f"+{KEY}.oversampling.enable=true", "+longcat.settings.scheduler.dora.oversampling_max=3"],
            f"{KEY}.oversampling.enable",
        ),
        (DORA, [f"+{KEY}.budget.enable=true", "+longcat.settings.scheduler.dora.dispatch=verl"], "dispatch: dora"),
        (DORA, [f"+{KEY}.context.enable=true", f"+{KEY}.context.budgets=[8]"], "default_agent_loop"),
    ],
)
def test_bad_combinations_exit_2_before_ray(fake_site: Path, recipe: str, overrides: list[str], expect: str) -> None:
    install(fake_site)
    bad = run_cli("validate", recipe, *overrides)
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2, out
    assert expect in out, out
    assert "ray.init" not in out


def test_the_plugins_strategy_validates_under_both_trainers(fake_site: Path) -> None:
    install(fake_site)
    for recipe, extra in ((DORA, []), (SYNC, ["trainer.use_v1=true", "trainer.v1.trainer_mode=longcat_data"])):
        ok = run_cli("validate", recipe, *extra, f"+{KEY}.strategies=[lowest_rate_first]")
        assert ok.returncode == 0, ok.stdout + ok.stderr
    sync_only = run_cli(
        "validate",
        SYNC,
        "trainer.use_v1=true",
        "trainer.v1.trainer_mode=longcat_data",
        f"+{KEY}.strategies=[sync_only]",
    )
    assert sync_only.returncode == 0, sync_only.stdout + sync_only.stderr


def test_it_is_listed_beside_the_builtin_components(fake_site: Path) -> None:
    install(fake_site)
    out = run_cli("list", "--json")
    assert out.returncode == 0, out.stderr
    assert "lowest_rate_first" in out.stdout and "data_strategy" in out.stdout


# -- end to end: verl's dora trainer runs the planner, the plugin's strategy, and resumes them --------


@pytest.mark.slow
@pytest.mark.ray
def test_the_plugins_strategy_runs_inside_verls_dora_trainer_and_resumes(
    tiny_assets, tmp_path: Path, ray_tmp: Path, fake_site: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two steps of dora_cpu.yaml with budget allocation, the curriculum and the outside plugin's
    strategy (one group per prompt, so its per-group cap is the per-prompt one), a checkpoint each step; then the run resumed for a third step.
    The planner's metrics are verl's step metrics, the plugin ordered every dispatched chunk in
    the trainer process and saw every trained group, and its state came back on resume."""
    import json

    from longcat_plugins.runtime.launch import run_training

    install(fake_site)
    marker = tmp_path / "marker.jsonl"
    monkeypatch.setenv("OUTSIDE_DATA_MARKER", str(marker))
    common = [
        f"data.train_files={tiny_assets.train}",
        f"data.val_files={tiny_assets.val}",
        f"actor_rollout_ref.model.path={tiny_assets.model}",
        f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
        "trainer.save_freq=1",
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
        f"+{KEY}.correct_threshold=0.05",
        f"+{KEY}.budget.enable=true",
        f"+{KEY}.budget.n_min=2",
        f"+{KEY}.curriculum.enable=true",
        f"+{KEY}.strategies=[lowest_rate_first]",
        f"+{KEY}.strategy_settings.lowest_rate_first.max_rollouts=3",
    ]
    first_dir = tmp_path / "first"
    first = run_training(configs_dir() / "dora_cpu.yaml", [*common, "trainer.total_training_steps=2"], first_dir)
    assert first.returncode == 0, first.log.read_text()[-5000:]
    trained = [s for s in first.steps if "longcat/data/trained_groups" in s]
    assert [s["step"] for s in trained] == [1, 2], first.steps
    for step in trained:
        assert step["longcat/data/plan/rollouts_per_task/max"] <= 3  # the plugin's cap, on every chunk
        assert step["longcat/data/lowest_rate_first/groups_seen"] > 0
        assert "longcat/data/curriculum/floor" in step
    records = [json.loads(line) for line in marker.read_text().splitlines()]
    orders = [r for r in records if r["kind"] == "order"]
    seen = [r["seen"] for r in records if r["kind"] == "observe"]
    assert orders and seen == sorted(seen) and seen[-1] == trained[-1]["longcat/data/lowest_rate_first/groups_seen"]
    checkpoint = first_dir / "checkpoints" / "global_step_2"
    assert (checkpoint / "longcat_data.json").exists()

    again = run_training(
        configs_dir() / "dora_cpu.yaml",
        [
            *common,
            "trainer.total_training_steps=3",
            "trainer.resume_mode=resume_path",
            f"trainer.resume_from_path={checkpoint}",
        ],
        tmp_path / "resumed",
    )
    assert again.returncode == 0, again.log.read_text()[-5000:]
    records = [json.loads(line) for line in marker.read_text().splitlines()]
    resumed = [r for r in records if r["kind"] == "resume"]
    assert resumed and resumed[-1]["seen"] == seen[-1]  # the plugin's state came back
    step3 = [s for s in again.steps if s.get("step") == 3 and "longcat/data/trained_groups" in s]
    assert step3 and step3[0]["longcat/data/lowest_rate_first/groups_seen"] > seen[-1]
