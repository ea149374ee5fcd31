"""Our reward-loop managers inside verl's own reward loop: verl's ``RewardLoopWorker`` builds
the manager from the registry by name (through ``load_reward_manager``), scores a batch, and the
results are assembled the way ``RewardLoopManager.compute_rm_score`` does (``rm_scores`` plus
``reward_extra_info`` stacked by the first sample's keys)."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
import verl  # noqa: F401 - loads the bridge, which registers our managers on registry import
from omegaconf import OmegaConf

from longcat_plugins.learning.assets import ensure_assets
from longcat_plugins.rewards.result import ERROR_KEY, FAILED_KEY, NAME_KEY, VALID_KEY

PY_ADD = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
ADD_CASES = json.dumps({"inputs": ["1 2\n", "5 5\n"], "outputs": ["3\n", "10\n"]})
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "add",
            "parameters": {
                "type": "object",
                "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
                "required": ["a", "b"],
            },
        },
    }
]
GOOD_CALL = '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call>'
BAD_CALL = '<tool_call>{"name": "add", "arguments": {"a": "one"}}</tool_call>'

# (data_source, response, ground_truth, extra_info, expected score: float, or None for invalid)
SAMPLES: dict[str, list[tuple[str, str, Any, dict[str, Any], float | None]]] = {
    "math": [
        ("math_test", r"so \boxed{\frac{1}{2}}", "0.5", {}, 1.0),
        ("math_test", r"\boxed{3}", "0.5", {}, 0.0),
        ("math_test", r"\boxed{9^{9^{9^{9}}}}", "7", {}, None),
    ],
    "code": [
        ("code_test", PY_ADD, ADD_CASES, {}, 1.0),
        ("code_test", "```python\nprint(3)\n```", ADD_CASES, {}, 0.0),
        ("code_test", PY_ADD, '{"inputs": []}', {}, None),
    ],
    "tool_format": [
        ("tool_test", GOOD_CALL, None, {"tools": TOOLS}, 1.0),
        ("tool_test", BAD_CALL, None, {"tools": TOOLS}, 0.0),
        ("tool_test", GOOD_CALL, None, {"tools": [{"function": {}}]}, None),
    ],
}
MANAGERS = {"longcat_math": "math", "longcat_code": "code", "longcat_tool_format": "tool_format"}


@pytest.fixture(scope="module")
def model_path() -> str:
    sync_bridge()
    return str(ensure_assets().model)


def sync_bridge() -> None:
    """Register our managers even if the host was built before verl's registry was imported.

    Building the host imports our managers, which import verl's reward-manager package (and so
    its registry) while the host is still building; the bridge parks that module as pending and
    flushes it only on the next registry import. ``bridge.sync()`` is what the CLI and the Hydra
    callback call; doing it here keeps these tests independent of test order.
    """
    from longcat_plugins.verl_bridge import bridge

    bridge.sync()


def make_config(model_path: str, manager: str, reward_kwargs: dict[str, Any] | None = None) -> Any:
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"model": {"path": model_path, "tokenizer_path": None}},
            "reward": {
                "num_workers": 1,
                "reward_model": {"enable": False, "model_path": None},
                "custom_reward_function": {"path": None, "name": None, "reward_kwargs": {}},
                "reward_manager": {"source": "register", "name": manager, "module": {"path": None, "name": None}},
                "sandbox_fusion": None,
                "reward_kwargs": reward_kwargs or {},
            },
        }
    )


def make_batch(tokenizer: Any, samples: list[tuple[str, str, Any, dict[str, Any], float | None]]) -> Any:
    """A DataProto shaped like the agent loop's output: left-padded prompts, right-padded responses."""
    from verl import DataProto

    prompts = [tokenizer.encode("Q: solve it.") for _ in samples]
    responses = [tokenizer.encode(s[1]) for s in samples]
    plen, rlen = max(map(len, prompts)), max(map(len, responses))
    pad = tokenizer.pad_token_id
    p = torch.tensor([[pad] * (plen - len(x)) + x for x in prompts])
    r = torch.tensor([x + [pad] * (rlen - len(x)) for x in responses])
    pm = torch.tensor([[0] * (plen - len(x)) + [1] * len(x) for x in prompts])
    rm = torch.tensor([[1] * len(x) + [0] * (rlen - len(x)) for x in responses])
    non_tensors = {
        "data_source": np.array([s[0] for s in samples], dtype=object),
        "reward_model": np.array([{"ground_truth": s[2], "style": "rule"} for s in samples], dtype=object),
        "extra_info": np.array([s[3] for s in samples], dtype=object),
    }
    return DataProto.from_dict(
        tensors={"prompts": p, "responses": r, "attention_mask": torch.cat([pm, rm], dim=1)},
        non_tensors=non_tensors,
    )


def score_in_verl(config: Any, samples: list) -> tuple[torch.Tensor, dict[str, np.ndarray], Any]:
    """verl's RewardLoopWorker on one batch, assembled like RewardLoopManager.compute_rm_score."""
    from verl.experimental.reward_loop.reward_loop import RewardLoopWorker

    async def go() -> tuple[Any, list[dict], Any]:
        worker = RewardLoopWorker(config, reward_router_address=None)
        data = make_batch(worker.input_tokenizer, samples)
        return data, await worker.compute_score_batch(data), worker.reward_manager

    data, outputs, manager = asyncio.run(go())
    scores = [o["reward_score"] for o in outputs]
    rm_scores = type(manager).assemble_rm_scores(data, scores)
    infos = [o.get("reward_extra_info", {}) for o in outputs]
    stacked = {k: np.array([info[k] for info in infos]) for k in infos[0]}  # what verl does
    return rm_scores, stacked, manager


def check(rm_scores: torch.Tensor, extra: dict[str, np.ndarray], expected: list[float | None]) -> None:
    """Valid samples: the score at the last response token; invalid ones: NaN there, flag 0, a reason."""
    for i, want in enumerate(expected):
        row = rm_scores[i]
        if want is None:
            assert torch.isnan(row).any(), (i, row)
            assert extra[VALID_KEY][i] == 0.0 and extra[ERROR_KEY][i], (i, extra[ERROR_KEY][i])
        else:
            assert extra[VALID_KEY][i] == 1.0, (i, extra[ERROR_KEY][i])
            assert math.isclose(float(row.sum()), want), (i, row)


@pytest.mark.parametrize("manager", list(MANAGERS))
def test_kind_manager_scores_a_batch_in_verls_reward_loop(model_path: str, manager: str) -> None:
    samples = SAMPLES[MANAGERS[manager]]
    config = make_config(model_path, manager, {"timeout_s": 1.0} if manager == "longcat_math" else None)
    rm_scores, extra, mgr = score_in_verl(config, samples)
    assert type(mgr).__module__ == "longcat_plugins.rewards.managers"
    assert set(extra) == {"acc", VALID_KEY, ERROR_KEY, NAME_KEY, FAILED_KEY}
    check(rm_scores, extra, [s[4] for s in samples])


def test_router_scores_a_mixed_batch_in_verls_reward_loop(model_path: str) -> None:
    samples = [s for kind in SAMPLES.values() for s in kind]
    samples.append(("mystery_source", "42", "42", {}, None))  # no route: invalid, named
    config = make_config(model_path, "longcat_router", {"math": {"timeout_s": 1.0}})
    rm_scores, extra, mgr = score_in_verl(config, samples)
    assert type(mgr).__name__ == "RouterRewardManager"
    assert list(extra[NAME_KEY][:3]) == ["math"] * 3 and list(extra[NAME_KEY][3:6]) == ["code"] * 3
    assert "no reward route for data_source 'mystery_source'" in extra[ERROR_KEY][-1]
    check(rm_scores, extra, [s[4] for s in samples])


def test_router_custom_and_default_routes(model_path: str, tmp_path: Path) -> None:
    from verl.utils import hf_tokenizer

    from longcat_plugins.rewards.managers import RouterConfig, RouterRewardManager

    def custom(data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **kw: Any) -> float:
        if "boom" in solution_str:
            raise RuntimeError("custom reward exploded")
        return 0.25

    async def go() -> list[dict]:
        mgr = RouterRewardManager(
            make_config(model_path, "longcat_router"),
            hf_tokenizer(model_path),
            custom,
            router_config=RouterConfig(routes={"openai/gsm8k": "default", "mine*": "custom"}),
        )
        samples = [
            ("openai/gsm8k", "#### 72", "72", {}, None),
            ("mine_a", "anything", "x", {}, None),
            ("mine_b", "boom", "x", {}, None),
        ]
        data = make_batch(mgr.tokenizer, samples)
        return [await mgr.run_single(data[i : i + 1]) for i in range(len(samples))]

    gsm, mine, boom = asyncio.run(go())
    assert gsm["reward_score"] == 1.0 and gsm["reward_extra_info"][NAME_KEY] == "default"
    assert mine["reward_score"] == 0.25 and mine["reward_extra_info"][VALID_KEY] == 1.0
    assert math.isnan(boom["reward_score"]) and "exploded" in boom["reward_extra_info"][ERROR_KEY]


def test_rewards_accept_numpy_data_as_parquet_gives_it() -> None:
    """pyarrow hands lists as numpy arrays inside ground_truth / extra_info."""
    from longcat_plugins.rewards import code, math, tool_format

    gt = {"inputs": np.array(["1 2\n", "5 5\n"], dtype=object), "outputs": np.array(["3\n", "10\n"], dtype=object)}
    assert asyncio.run(code.compute_score("code", PY_ADD, gt))["score"] == 1.0
    assert math.compute_score("math", r"\boxed{2}", np.array(["1", "2"], dtype=object))["score"] == 1.0
    tools = np.array([{"function": {"name": "add", "parameters": {"type": "object", "required": np.array(["a"])}}}])
    ok = tool_format.compute_score(
        "tool", '<tool_call>{"name": "add", "arguments": {"a": 1}}</tool_call>', None, {"tools": tools}
    )
    assert ok["score"] == 1.0, ok


@pytest.mark.parametrize(
    ("setting", "value", "says"),
    [
        ("routes", {"math*": "mth"}, "routes.math*: 'mth' is not a reward this run can call; choices: "),
        ("default", "custom", "needs reward.custom_reward_function.path"),
        ("default", "code_sandbox", "default: 'code_sandbox' is not a reward this run can call"),
        ("reward_kwargs", {"mathh": {"timeout_s": 3.0}}, "reward_kwargs.mathh: 'mathh' is not a reward"),
        (
            "reward_kwargs",
            {"math": {"timeout": 3.0}},
            "reward_kwargs.math.timeout: unknown key (did you mean 'timeout_s'",
        ),
        ("reward_kwargs", {"math": {"timeout_s": -1.0}}, "reward_kwargs.math: timeout_s must be > 0"),
    ],
)
def test_router_names_only_rewards_it_can_call(setting: str, value: object, says: str) -> None:
    """A route or default naming a reward the run cannot call is refused by validation, naming
    the key (on the reward worker it failed every sample routed to it); the shipped recipe passes."""
    from longcat_plugins.config import compose, to_plain, validate_config

    recipe = Path(__file__).resolve().parents[1] / "configs" / "reward_router_cpu.yaml"
    cfg = to_plain(compose(recipe))
    assert validate_config(cfg, check_contracts=False)[0] == []
    cfg["longcat"]["settings"]["reward"]["longcat_router"][setting] = value
    lines = [f"{p.path}: {p.message}" for p in validate_config(cfg, check_contracts=False)[0]]
    assert any(line.startswith("longcat.settings.reward.longcat_router.") and says in line for line in lines), lines


@pytest.mark.parametrize("recipe", ["longcat", "cpu_demo"])
def test_selfverify_main_names_an_enabled_reward(recipe: str) -> None:
    """``selfverify.main`` naming no enabled reward function is refused by validation, whether the
    router routes to ``selfverify`` (the system recipe) or ``custom_reward_function`` selects it."""
    from longcat_plugins.config import compose, to_plain, validate_config

    cfg = to_plain(compose(Path(__file__).resolve().parents[1] / "configs" / f"{recipe}.yaml"))
    if recipe == "cpu_demo":
        cfg["reward"]["custom_reward_function"]["name"] = "selfverify"
    settings = cfg["longcat"].setdefault("settings", {}).setdefault("reward", {})
    settings["selfverify"] = {**settings.get("selfverify", {}), "main": "arith_exact"}
    lines = [f"{p.path}: {p.message}" for p in validate_config(cfg, check_contracts=False)[0]]
    assert any(
        line.startswith("longcat.settings.reward.selfverify.main: 'arith_exact' is not an enabled reward function")
        for line in lines
    ), lines
    settings["selfverify"]["main"] = "arithmetic_exact"
    assert validate_config(cfg, check_contracts=False)[0] == []


def test_the_router_never_runs_bad_settings_as_its_default_routes() -> None:
    """In a verl process, a router setting that does not validate raises naming its key (it used
    to be logged at info level and the default routes used instead); a host without the router
    gives the defaults."""
    from longcat_plugins.config import ConfigError
    from longcat_plugins.host import Host, set_host
    from longcat_plugins.rewards.managers import DEFAULT_ROUTES, RouterRewardManager
    from longcat_plugins.selection import Selection

    bad = {"settings": {"reward": {"longcat_router": {"routes": {"math*": 3}}}}}
    set_host(Host(Selection.from_section(bad)).load())
    try:
        with pytest.raises(ConfigError, match=r"longcat\.settings\.reward\.longcat_router\.routes"):
            RouterRewardManager._settings()
        set_host(Host(Selection.from_section({"disable": ["reward:longcat_router"]})).load())
        assert RouterRewardManager._settings().routes == DEFAULT_ROUTES
    finally:
        set_host(None)


def test_router_checks_verls_reward_kwargs_entries_named_after_a_reward() -> None:
    """``reward.reward_kwargs.<reward>`` (verl's key, merged last by the router) is checked like the
    router's own ``reward_kwargs``; its other entries (another manager's settings) are left alone."""
    from longcat_plugins.config import compose, to_plain, validate_config

    cfg = to_plain(compose(Path(__file__).resolve().parents[1] / "configs" / "reward_router_cpu.yaml"))
    cfg["reward"]["reward_kwargs"] = {"math": {"timeout": 3.0}, "overlong_buffer_cfg": {"enable": False}}
    lines = [f"{p.path}: {p.message}" for p in validate_config(cfg, check_contracts=False)[0]]
    assert lines == [
        "reward.reward_kwargs.math.timeout: unknown key (did you mean 'timeout_s'?); choices: correct_score, "
        "drop_uid, incorrect_score, max_answer_chars, max_response_chars, memory_mb, timeout_s, workers"
    ], lines
    cfg["reward"]["reward_kwargs"]["math"] = {"timeout_s": 3.0}
    assert validate_config(cfg, check_contracts=False)[0] == []
