"""The system recipe on the tool environment (``configs/longcat_tool.yaml``), without Ray: the
verification rows of a tool run are single-turn rows beside the episodes, the truth they judge is
the episode's rubric score against ``correct_threshold``, the ``selfverify`` reward credits exactly
one verdict, the tool loop can leave its rubric record to the reward manager, and bad
combinations exit 2 before Ray naming the key."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from longcat_plugins.data.planned import AGENT_KEY, PlannedData, candidates_of, columns
from longcat_plugins.data.selfverify import DATA_SOURCE
from longcat_plugins.data.settings import DataSettings
from longcat_plugins.runtime.launch import configs_dir

TOOL_SOURCE = "longcat_env/retail"
YES, NO = "Verdict: correct.", "Verdict: incorrect."


class CharTokenizer:
    """One token per character (what ``PlannedData`` reads the responses with)."""

    pad_token_id = 0

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        return "".join(chr(int(i)) for i in ids if int(i))

    def apply_chat_template(self, messages: list[dict[str, str]], **kwargs: Any) -> str:
        return "".join(m["content"] for m in messages)

    def __call__(self, text: str, add_special_tokens: bool = False) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) for c in text]}


def tool_rows(n: int) -> dict[str, Any]:
    """Tool task rows as verl's dataset hands them over (``agent_name`` from the generator)."""
    from verl.utils import tensordict_utils as tu

    def objs(values: list[Any]) -> np.ndarray:
        out = np.empty(len(values), dtype=object)
        out[:] = values
        return out

    return columns(
        tu.get_tensordict(
            {
                "raw_prompt": objs(
                    [
                        [{"role": "system", "content": "tools"}, {"role": "user", "content": f"task {i}"}]
                        for i in range(n)
                    ]
                ),
                "data_source": objs([TOOL_SOURCE] * n),
                "reward_model": objs([{"style": "rubric", "ground_truth": "[]"}] * n),
                "extra_info": objs([{"index": i, "env_path": "/envs/e", "task_id": f"t{i}"} for i in range(n)]),
                "agent_name": objs(["longcat_tool_agent"] * n),
                "index": np.arange(n),
            }
        )
    )


def planned(threshold: float = 1.0, **selfverify: Any) -> PlannedData:
    settings = DataSettings(
        correct_threshold=threshold,
        selfverify={
            "enable": True,
            "tasks": 2,
            "window": 1,
            "agent_loop": "single_turn_agent",
            "prompt": "{problem}\n{solution}\nRight?",
            **selfverify,
        },
    )
    config = OmegaConf.create(
        {
            "data": {"train_batch_size": 2, "seed": 0},
            "actor_rollout_ref": {
                "rollout": {"n": 2, "prompt_length": 512, "agent": {"default_agent_loop": "longcat_tool_agent"}}
            },
        }
    )
    return PlannedData(settings, config, tokenizer=CharTokenizer())


def observe(data: PlannedData, uids: list[str], rewards: list[list[float]], texts: list[list[str]], step: int) -> dict:
    """Feed ``data`` a trained batch: per uid, its samples' rewards (verl's rm_scores, on the
    last token) and response texts, as TransferQueue hands them over."""
    keys, tags, scores, responses = [], [], [], []
    for uid, rs, ts in zip(uids, rewards, texts, strict=True):
        for i, (r, t) in enumerate(zip(rs, ts, strict=True)):
            keys.append(f"{uid}_{i}_0")
            tags.append({"response_len": len(t)})
            scores.append(torch.tensor([0.0, r]))
            responses.append(torch.tensor([ord(c) for c in t] + [0], dtype=torch.long))
    tq = SimpleNamespace(
        kv_batch_get=lambda **kw: {"rm_scores": scores, "responses": torch.nested.nested_tensor(responses)},
    )
    batch = SimpleNamespace(keys=keys, tags=tags, partition_id="train")
    return data.observe(tq, batch, set(), step)


def test_verification_rows_run_single_turn_beside_the_episodes_and_judge_against_the_rubric() -> None:
    data = planned(threshold=1.0)
    pool = tool_rows(4)
    plan, _ = data.planner.plan(candidates_of(pool, data.settings))
    batch = data.rows(pool, plan, step=1)
    assert set(batch[AGENT_KEY]) == {"longcat_tool_agent"}  # no phase yet: episodes only
    uids = [str(u) for u in batch["uid"]]
    # rubric scores of each task's episodes: 1.0 is every item met; 0.75 is not a pass at threshold 1.0
    # (the other tasks pass: task 0 is the hardest, its two episodes are the pair to judge)
    metrics = observe(
        data,
        uids,
        [[1.0, 0.75]] + [[1.0, 1.0]] * (len(uids) - 1),
        [["called A then B", "called A"]] + [["x", "y"]] * (len(uids) - 1),
        step=1,
    )
    assert metrics["longcat/selfverify/main_accuracy"] == pytest.approx((2 * len(uids) - 1) / (2 * len(uids)))
    data.selfverify.active = True
    batch = data.rows(pool, plan, step=2)
    verify = [i for i, s in enumerate(batch["data_source"]) if s == DATA_SOURCE]
    episodes = [i for i, s in enumerate(batch["data_source"]) if s == TOOL_SOURCE]
    assert len(verify) == 2 and len(episodes) == len(plan)
    # the verification rows are single-turn (verl reads agent_name per row); the episodes keep theirs
    assert [batch[AGENT_KEY][i] for i in verify] == ["single_turn_agent"] * 2
    assert [batch[AGENT_KEY][i] for i in episodes] == ["longcat_tool_agent"] * len(plan)
    # the pair: the partial episode (0.75 < 1.0) is the incorrect candidate, the complete one the correct
    shown = {batch["raw_prompt"][i][0]["content"]: batch["reward_model"][i]["ground_truth"] for i in verify}
    assert shown == {
        "task 0\ncalled A\nRight?": "incorrect",
        "task 0\ncalled A then B\nRight?": "correct",
    }, shown


def test_a_lower_threshold_makes_a_partial_rubric_score_correct() -> None:
    """The truth is ``rubric score >= correct_threshold``: at 0.75 both episodes pass, so there is
    no (incorrect, correct) pair to judge and no verification row."""
    data = planned(threshold=0.75)
    pool = tool_rows(2)
    plan, _ = data.planner.plan(candidates_of(pool, data.settings))
    uids = [str(u) for u in data.rows(pool, plan, step=1)["uid"]]
    observe(data, uids, [[1.0, 0.75]] + [[1.0, 1.0]] * (len(uids) - 1), [["a", "b"]] * len(uids), step=1)
    data.selfverify.active = True
    assert DATA_SOURCE not in set(data.rows(pool, plan, step=2)["data_source"])


def _reference(rubric: float, threshold: float, response: str) -> float:
    """RISE's coupling, written out from the paper's rule (independent of the module's code)."""
    truth = "correct" if rubric >= threshold else "incorrect"
    said = {YES: "correct", NO: "incorrect"}.get(response.strip())
    if said is None:
        return -1.0
    return 1.0 if said == truth else -0.5


@pytest.mark.parametrize("threshold", [1.0, 0.5])
@pytest.mark.parametrize("rubric", [1.0, 0.75, 0.5, 0.0])
@pytest.mark.parametrize(
    "response",
    [YES, NO, f"  {YES}\n", f"{YES} {NO}", f"I think {YES}", "Verdict: correct", "", "Done."],
)
def test_the_selfverify_reward_on_a_tool_episode_follows_the_rubric_verdict(
    rubric: float, threshold: float, response: str
) -> None:
    """End to end in the planner and the reward: an episode with this rubric score is judged; the
    verification row the planner writes, scored by ``selfverify``, pays +1 for the verdict the
    rubric gives, -0.5 for the other, -1 for anything that is not exactly one verdict."""
    from longcat_plugins.rewards.selfverify import compute_score

    data = planned(threshold=threshold, correct=YES, incorrect=NO)
    pool = tool_rows(2)
    plan, _ = data.planner.plan(candidates_of(pool, data.settings))
    uids = [str(u) for u in data.rows(pool, plan, step=1)["uid"]]
    # the judged episode (task 0, sample 0) and a partner of the other truth, so the pair exists
    other = 0.0 if rubric >= threshold else 1.0
    observe(
        data,
        uids,
        [[rubric, other]] + [[other, other]] * (len(uids) - 1),
        [["judged", "partner"]] + [["p1", "p2"]] * (len(uids) - 1),
        1,
    )
    data.selfverify.active = True
    batch = data.rows(pool, plan, step=2)
    [row] = [
        i for i, s in enumerate(batch["data_source"]) if s == DATA_SOURCE and "judged" in str(batch["raw_prompt"][i])
    ]
    got = compute_score(
        DATA_SOURCE, response, batch["reward_model"][row]["ground_truth"], dict(batch["extra_info"][row])
    )
    assert got["score"] == _reference(rubric, threshold, response)
    assert got["acc"] == float(got["score"] == 1.0)


def test_the_router_scores_episodes_by_their_rubric_record_and_verdicts_by_selfverify() -> None:
    """``longcat_tool.yaml``'s routes: tool episodes (their loop left the rubric record) to
    ``tool_rubric``, verification rows to ``selfverify``; a record's score is the sample's reward."""
    from longcat_plugins.environments.episode_reward import EPISODE_KEY
    from longcat_plugins.host import get_host
    from longcat_plugins.rewards.managers import RouterConfig, RouterRewardManager

    cfg = OmegaConf.load(configs_dir() / "system" / "longcat_tool.yaml")
    routes = dict(cfg.longcat.settings.reward.longcat_router.routes)
    router = object.__new__(RouterRewardManager)
    router.router_config = RouterConfig(routes=routes)
    router._routes, router._cache = list(routes.items()), {}
    assert router.route(TOOL_SOURCE) == "tool_rubric" and router.route(DATA_SOURCE) == "selfverify"
    tool_rubric = get_host().get("reward", "tool_rubric", kind="reward_function").target
    for score, success in ((1.0, 1.0), (0.4, 0.0)):
        record = {EPISODE_KEY: {"score": score, "success": success, "tool_calls": 2.0}}
        got = tool_rubric(data_source=TOOL_SOURCE, solution_str="Done.", extra_info=record)
        assert got["score"] == score and got["acc"] == success


def test_the_tool_loop_hands_its_rubric_record_to_the_reward_manager(tokenizer: Any, env: Any) -> None:
    """``reward_in_loop: false``: no score from the loop (verl's reward loop scores the sample),
    the rubric reward in ``extra_fields["longcat_episode"]`` for ``tool_rubric``, the same value
    the loop would have scored."""
    from env_agent_helpers import ScriptedServer
    from test_env_agent import golden_script, run

    from longcat_plugins.environments.agent_loop import ToolAgentSettings
    from longcat_plugins.environments.episode_reward import EPISODE_KEY, compute_score

    (scored,) = run(tokenizer, ScriptedServer(tokenizer, golden_script(env, "t1")), ToolAgentSettings(), "t1")
    settings = ToolAgentSettings(reward_in_loop=False)
    (left,) = run(tokenizer, ScriptedServer(tokenizer, golden_script(env, "t1")), settings, "t1")
    assert scored.reward_score == 1.0 and left.reward_score is None
    assert "reward_extra_info" not in left.extra_fields
    record = left.extra_fields[EPISODE_KEY]
    assert record["score"] == scored.reward_score and record["success"] == 1.0
    got = compute_score(TOOL_SOURCE, "", extra_info={EPISODE_KEY: record})
    assert got["score"] == scored.reward_score and math.isfinite(got["score"])


def test_reward_in_loop_false_refuses_several_outputs_per_episode() -> None:
    from longcat_plugins.environments.agent_loop import ToolAgentSettings

    with pytest.raises(ValueError, match="reward_in_loop=false scores one output per episode"):
        ToolAgentSettings(reward_in_loop=False, discard_turns=2)
    ToolAgentSettings(reward_in_loop=False, discard_turns=2, segments_as_outputs=False)  # the last segment only


# -- the recipe and bad input -----------------------------------------------------------------------------

TOOL = str(configs_dir() / "longcat_tool.yaml")
SV = "longcat.settings.scheduler.longcat_data.selfverify"
LOOP = "longcat.settings.environment.longcat_tool_agent"


def test_the_recipe_composes_the_tool_task_with_the_system() -> None:
    from longcat_plugins.config import compose, validate_config

    cfg = compose(TOOL)
    assert cfg.trainer.v1.trainer_mode == "dora" and cfg.algorithm.adv_estimator == "longcat_grpo"
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "triplet_clip"
    assert cfg.actor_rollout_ref.rollout.agent.default_agent_loop == "longcat_tool_agent"
    assert cfg.reward.reward_manager.name == "longcat_router"
    assert cfg.longcat.settings.environment.longcat_tool_agent.reward_in_loop is False
    assert cfg.longcat.settings.reward.selfverify.main == "tool_rubric"
    problems, _ = validate_config(cfg)
    assert problems == []


def test_the_demo_overrides_compose_with_the_recipe(tmp_path: Any) -> None:
    from longcat_plugins.config import compose, validate_config
    from longcat_plugins.learning.demos import SYSTEM_TOOL_PROMPT_TOKENS, tool_system_demo
    from longcat_plugins.learning.warmstart import WarmStart
    from longcat_plugins.runtime.launch import resolve_config

    warm = WarmStart(
        *(tmp_path / n for n in ("root", "model", "train", "val")), base=tmp_path / "base", sft=tmp_path / "sft"
    )
    demo = tool_system_demo(warm, 8)
    cfg = compose(resolve_config(demo.config), demo.overrides)
    assert cfg.data.max_prompt_length == SYSTEM_TOOL_PROMPT_TOKENS and cfg.trainer.total_training_steps == 8
    assert cfg.actor_rollout_ref.model.path == str(warm.model) and cfg.data.train_files == str(warm.train)
    loop = cfg.longcat.settings.environment.longcat_tool_agent
    assert loop.reward_in_loop is False and loop.noise_curriculum.enabled is False and loop.format_weight == 0
    problems, _ = validate_config(cfg)
    assert problems == []


@pytest.mark.parametrize(
    ("overrides", "expect"),
    [
        ([f"{LOOP}.reward_in_loop=true"], f"{LOOP}.reward_in_loop: {SV} next to tool episodes"),
        ([f"{SV}.agent_loop="], f"{SV}.agent_loop: verification rows are single-turn, but they would run in"),
        ([f"{SV}.agent_loop=longcat_tool_agent"], "selfverify.agent_loop: verification rows are single-turn"),
        ([f"{LOOP}.discard_turns=2"], "reward_in_loop=false scores one output per episode"),
    ],
)
def test_a_verification_that_cannot_run_under_the_tool_recipe_exits_2_before_ray(
    overrides: list[str], expect: str
) -> None:
    from conftest import run_cli

    bad = run_cli("validate", TOOL, *overrides)
    assert bad.returncode == 2, bad.stdout + bad.stderr
    assert expect in " ".join((bad.stdout + bad.stderr).split()), bad.stdout + bad.stderr


def test_the_tool_evidence_stays_absent_when_its_component_is_idle() -> None:
    from longcat_plugins.evaluation.system import TOOL_EVIDENCE, TOOL_SYSTEM, components_active

    rubric, verify = "longcat/reward/scored/tool_rubric", "longcat/selfverify/verify_samples"
    assert components_active([{rubric: 0.0, verify: 0.0}], list(TOOL_EVIDENCE)) == []
    # verification trained in another step than any rubric-scored episode: not the coupling's evidence
    assert components_active([{rubric: 8.0}, {verify: 4.0}], list(TOOL_EVIDENCE)) == ["tool_rubric"]
    assert components_active([{rubric: 8.0, verify: 4.0}], list(TOOL_EVIDENCE)) == list(TOOL_EVIDENCE)
    assert set(TOOL_EVIDENCE) < set(TOOL_SYSTEM)
    with pytest.raises(ValueError, match="no evidence defined for component"):
        components_active([], ["tool_rubrik"])


def test_self_verification_acted_when_it_trained_or_judged_every_verdict_right() -> None:
    """Online filtering drops all-correct verification groups: a phase whose verdicts were all
    right trained nothing and still acted. A constant verdict (half right on the pairs a phase
    shows), or a phase whose groups were all dropped otherwise, did not."""
    from longcat_plugins.evaluation.system import components_active

    sv = "longcat/selfverify/"
    trained = {sv + "verify_samples": 4.0, sv + "verify_filtered": 4.0, sv + "verify_accuracy": 0.75}
    all_right = {sv + "verify_samples": 0.0, sv + "verify_filtered": 16.0, sv + "verify_accuracy": 1.0}
    constant = {sv + "verify_samples": 0.0, sv + "verify_filtered": 16.0, sv + "verify_accuracy": 0.5}
    idle = {sv + "phase": 0.0, sv + "pool": 128.0}
    for steps, acted in [
        ([idle, trained], True),
        ([idle, all_right], True),
        ([idle, constant], False),
        ([idle], False),
    ]:
        assert components_active(steps, ["selfverify"]) == (["selfverify"] if acted else []), steps
    rubric = {"longcat/reward/scored/tool_rubric": 8.0}
    assert components_active([{**rubric, **all_right}], ["selfverify_tool"]) == ["selfverify_tool"]
    assert components_active([{**rubric, **constant}], ["selfverify_tool"]) == []
    assert components_active([rubric, all_right], ["selfverify_tool"]) == [], "another step than the episodes'"


@pytest.mark.parametrize(
    ("args", "expect"),
    [
        (["--init", "random"], "--recipe longcat_tool runs on its warm start"),
        (["--rollout", "vllm"], "--recipe longcat_tool runs on the hf rollout only"),
        (["--trainer", "legacy"], "--recipe longcat_tool runs the v1 trainer"),
    ],
)
def test_the_demo_refuses_what_the_tool_system_cannot_run_before_building_anything(
    args: list[str], expect: str, tmp_path: Any
) -> None:
    from conftest import run_cli

    bad = run_cli("demo", "--recipe", "longcat_tool", "--cache-dir", str(tmp_path), *args)
    assert bad.returncode == 2 and expect in bad.stderr, bad.stdout + bad.stderr
    assert not list(tmp_path.iterdir())  # nothing built
