"""Plugin contracts before Ray (issue 32 item 4): each enabled policy loss, advantage estimator
and reward is called once the way verl calls it; a wrong shape, dtype, NaN, exception or a loss
knob of the wrong type is named with its plugin, its component and what verl expected, by
``longcat-plugins check``, by ``validate`` (so the Hydra gate) and by the ``longcat_host`` fixture."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from conftest import make_dist, run_cli

from longcat_plugins import AdvantageEstimator, PolicyLoss, RewardFunction, hookimpl
from longcat_plugins.config import compose, validate_config
from longcat_plugins.contracts import ContractError, check_component
from longcat_plugins.testing import HostFactory

REPO = Path(__file__).resolve().parents[1]


def good_loss(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):  # noqa: E501
    """A correct REINFORCE loss."""
    from verl.trainer.ppo.core_algos import agg_loss

    losses = -advantages * torch.exp(log_prob - old_log_prob)
    return agg_loss(losses, response_mask, loss_agg_mode, **config.global_batch_info), {"actor/x": 1.0}


def per_token_loss(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):  # noqa: E501
    """Forgets to aggregate: returns the per-token loss matrix."""
    return -advantages * torch.exp(log_prob - old_log_prob), {}


def detached_loss(
    old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None, rollout_is_weights=None
):  # noqa: E501
    """Computes on .detach(): no gradient."""
    return (-advantages * log_prob.detach()).mean(), {}


def one_tensor_estimator(token_level_rewards, response_mask, config=None, index=None, **kwargs):
    """Returns only the advantages."""
    return token_level_rewards * response_mask


def int_estimator(token_level_rewards, response_mask, config=None, index=None, **kwargs):
    """Integer advantages of the wrong length."""
    adv = torch.zeros(token_level_rewards.shape[0], 2, dtype=torch.long)
    return adv, adv


def nan_estimator(token_level_rewards, response_mask, config=None, index=None, **kwargs):
    """0/0 for a group whose scores are equal."""
    adv = token_level_rewards / (token_level_rewards.sum(-1, keepdim=True) * 0)
    return adv, adv


def raising_reward(data_source, solution_str, ground_truth, extra_info=None, **kw):
    """Reads a key verl does not pass."""
    return float(extra_info["answer"] == ground_truth)


def string_reward(data_source, solution_str, ground_truth, extra_info=None, **kw):
    """Returns a verdict word."""
    return "correct"


def nan_reward(data_source, solution_str, ground_truth, extra_info=None, **kw):
    """NaN without saying the sample is invalid."""
    return {"score": float("nan")}


class Broken:
    @hookimpl
    def register_algorithms(self) -> list:
        return [
            PolicyLoss("good_loss", good_loss),
            PolicyLoss("per_token_loss", per_token_loss),
            PolicyLoss("detached_loss", detached_loss),
            AdvantageEstimator("one_tensor", one_tensor_estimator),
            AdvantageEstimator("int_adv", int_estimator),
            AdvantageEstimator("nan_adv", nan_estimator),
        ]

    @hookimpl
    def register_rewards(self) -> list:
        return [
            RewardFunction("raising", raising_reward),
            RewardFunction("stringly", string_reward),
            RewardFunction("nanny", nan_reward),
        ]


EXPECTED = {
    "algorithm:good_loss": None,
    "algorithm:per_token_loss": "the loss has shape (8, 6); verl expects ()",
    "algorithm:detached_loss": "the loss does not depend on log_prob",
    "algorithm:one_tensor": "returned Tensor; verl's compute_advantage expects (advantages, returns), each of shape (8, 6)",
    "algorithm:int_adv": "advantages has shape (8, 2); verl expects (8, 6)",
    "algorithm:nan_adv": "advantages is not finite (NaN or inf) on a finite batch",
    "reward:raising": "raised KeyError: 'answer' (at ",
    "reward:stringly": 'returned a score of type str; verl expects a number or a dict with a numeric "score"',
    "reward:nanny": "returned a non-finite score (nan) without marking the sample invalid (longcat_reward_valid: 0)",
}


def test_each_broken_component_is_named_with_what_verl_expected(longcat_host_factory: HostFactory) -> None:
    host = longcat_host_factory(("broken", Broken()))
    for comp in host.components():
        want = EXPECTED[comp.ref]
        outcome = check_component(comp)
        if want is None:
            assert outcome.ok, outcome.problems
            continue
        assert any(want in p for p in outcome.problems), (comp.ref, outcome.problems)
        assert outcome.messages()[0].startswith(f"{comp.ref} (plugin 'broken'): ")
        assert outcome.seconds < 5


def test_the_fixture_checks_a_plugin_before_any_run(longcat_host: HostFactory) -> None:
    with pytest.raises(ContractError) as info:
        longcat_host(("broken", Broken()), check=True)
    for ref, want in EXPECTED.items():
        assert (f"{ref} (plugin 'broken'): " in str(info.value)) is (want is not None), ref
    longcat_host(builtins=True, check=True)  # the built-ins are not the test's plugins: nothing to check


def test_the_documented_outside_plugin_keeps_its_contracts(
    longcat_host: HostFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.syspath_prepend(str(REPO / "tests" / "outside_plugin"))
    import outside_plugin

    host = longcat_host(outside_plugin, check=True)
    assert {c.ref for c in host.components()} >= {"algorithm:clipped_reinforce", "reward:last_line"}


CAPPED_PLUGIN = """
from dataclasses import dataclass
import torch
from verl.trainer.ppo.core_algos import agg_loss
from verl.workers.config.actor import PolicyLossConfig
from longcat_plugins import PolicyLoss, RewardFunction, hookimpl

@dataclass
class CappedConfig(PolicyLossConfig):
    loss_mode: str = "capped"
    cap: float = 2.0

def capped(old_log_prob, log_prob, advantages, response_mask, loss_agg_mode="token-mean", config=None,
           rollout_is_weights=None):
    '''Reads its knob.'''
    ratio = torch.exp(log_prob - old_log_prob).clamp(max=config.policy_loss.cap)
    return agg_loss(-advantages * ratio, response_mask, loss_agg_mode, **config.global_batch_info), {}

def shouty(data_source, solution_str, ground_truth, extra_info=None, **kw):
    '''Raises on every sample.'''
    raise RuntimeError("shouty is broken")

@hookimpl
def register_algorithms():
    return [PolicyLoss("capped", capped, config=CappedConfig)]

@hookimpl
def register_rewards():
    return [RewardFunction("shouty", shouty)]
"""


def _capped_recipe(tmp_path: Path, knobs: str, reward: str = "arithmetic") -> Path:
    recipe = tmp_path / "capped.yaml"
    recipe.write_text(
        "defaults:\n  - grpo_arithmetic\n  - _self_\n"
        "actor_rollout_ref:\n  actor:\n    policy_loss:\n      _target_: capped_rl.CappedConfig\n"
        f"      loss_mode: capped\n{knobs}"
        f"reward:\n  custom_reward_function:\n    name: {reward}\n"
    )
    return recipe


def test_validate_names_a_loss_knob_of_the_wrong_type_and_a_reward_that_raises(tmp_path: Path, fake_site: Path) -> None:
    make_dist(fake_site, "capped-rl", {"capped_rl": CAPPED_PLUGIN}, {"capped": "capped_rl"})
    good = _capped_recipe(tmp_path, "      cap: 1.5\n")
    assert validate_config(compose(good))[0] == []
    problems = {p.path: p.message for p in validate_config(compose(_capped_recipe(tmp_path, "      cap: lots\n")))[0]}
    assert problems == {
        "actor_rollout_ref.actor.policy_loss.loss_mode": "algorithm:capped (plugin 'capped'): "
        "actor_rollout_ref.actor.policy_loss.cap: expected float, got str 'lots'"
    }, problems
    problems = {p.path: p.message for p in validate_config(compose(_capped_recipe(tmp_path, "", reward="shouty")))[0]}
    assert list(problems) == ["reward.custom_reward_function.name"]
    assert problems["reward.custom_reward_function.name"].startswith(
        "reward:shouty (plugin 'capped'): raised RuntimeError: shouty is broken (at "
    )


def test_validate_checks_a_users_reward_file(tmp_path: Path) -> None:
    reward = tmp_path / "mine.py"
    reward.write_text("def score(data_source, solution_str, ground_truth, extra_info=None):\n    return None\n")
    cfg = compose(
        REPO / "configs" / "grpo_arithmetic.yaml",
        [f"reward.custom_reward_function.path={reward}", "reward.custom_reward_function.name=score"],
    )
    problems = [str(p) for p in validate_config(cfg)[0]]
    assert problems == [
        f"reward.custom_reward_function: reward 'score' ({reward}): returned a score of type NoneType; "
        'verl expects a number or a dict with a numeric "score"'
    ]


def test_check_cli_passes_on_the_builtins_and_fails_naming_an_outside_plugin(tmp_path: Path, fake_site: Path) -> None:
    ok = run_cli("check", env={"COLUMNS": "200"})
    assert ok.returncode == 0, ok.stderr
    assert "algorithm:triplet_clip" in ok.stdout and "reward:longcat_router" in ok.stdout
    make_dist(fake_site, "capped-rl", {"capped_rl": CAPPED_PLUGIN}, {"capped": "capped_rl"})
    bad = run_cli("check", "--config", str(_capped_recipe(tmp_path, "      cap: lots\n")), env={"COLUMNS": "200"})
    assert bad.returncode == 1, bad.stdout + bad.stderr
    assert "FAIL reward:shouty (plugin 'capped'): raised RuntimeError: shouty is broken" in bad.stderr
    assert "FAIL algorithm:capped (plugin 'capped'): actor_rollout_ref.actor.policy_loss.cap: expected float" in (
        bad.stderr
    )


def test_the_hydra_gate_refuses_a_broken_selected_component(tmp_path: Path, fake_site: Path) -> None:
    from omegaconf import OmegaConf

    from longcat_plugins.hydra_callback import LongcatCallback

    make_dist(fake_site, "capped-rl", {"capped_rl": CAPPED_PLUGIN}, {"capped": "capped_rl"})
    cfg = compose(_capped_recipe(tmp_path, "      cap: 1.5\n", reward="shouty"))
    with pytest.raises(SystemExit) as info:
        LongcatCallback().on_job_start(OmegaConf.create(OmegaConf.to_container(cfg)))
    assert info.value.code == 2
