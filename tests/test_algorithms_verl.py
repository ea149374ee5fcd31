"""The algorithms family inside verl: registration, the validity channel through verl's own
functions, and the recipes in ``configs/``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from conftest import REPO, run_cli, run_python, validate_refuses
from omegaconf import OmegaConf

from longcat_plugins import builtins
from longcat_plugins.algorithms.advantages import compute_longcat_grpo_advantage
from longcat_plugins.algorithms.gspo import LongcatGSPOConfig, compute_longcat_gspo_loss
from longcat_plugins.algorithms.triplet_clip import TripletClipConfig, compute_triplet_clip_loss
from longcat_plugins.algorithms.validity import RepetitionDetector, masked_score

RECIPES = ["triplet_clip", "longcat_gspo"]
#: stock overrides any real run sets (verl has no default micro-batch size)
RUN_OVERRIDES = ["actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu=2"]


@pytest.fixture
def algorithms_in_verl(longcat_host: Any) -> None:
    longcat_host(("longcat.algorithms", builtins.algorithms), activate=True)


def test_registered_in_verl_through_the_host(algorithms_in_verl: None) -> None:
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn

    assert get_policy_loss_fn("triplet_clip") is compute_triplet_clip_loss
    assert get_policy_loss_fn("longcat_gspo") is compute_longcat_gspo_loss
    assert get_adv_estimator_fn("longcat_grpo") is compute_longcat_grpo_advantage


def test_registered_in_a_fresh_interpreter_by_import_verl() -> None:
    proc = run_python(
        """
        from verl.trainer.ppo.core_algos import get_adv_estimator_fn, get_policy_loss_fn
        print(get_policy_loss_fn("triplet_clip").__qualname__, get_policy_loss_fn("longcat_gspo").__qualname__,
              get_adv_estimator_fn("longcat_grpo").__qualname__)
        """
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == [
        "compute_triplet_clip_loss",
        "compute_longcat_gspo_loss",
        "compute_longcat_grpo_advantage",
    ]


def test_listed_and_doctor_passes() -> None:
    import json

    listing = json.loads(run_cli("list", "--json").stdout)
    (plugin,) = [p for p in listing["plugins"] if p["name"] == "longcat.algorithms"]
    assert {(c["kind"], c["name"]) for c in plugin["components"]} == {
        ("policy_loss", "triplet_clip"),
        ("policy_loss", "longcat_gspo"),
        ("adv_estimator", "longcat_grpo"),
    }
    proc = run_cli("doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_validity_travels_through_verl_as_a_nan_score(algorithms_in_verl: None) -> None:
    """masked_score -> verl's assemble_rm_scores -> verl's compute_advantage (legacy and v1) -> 0."""
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase
    from verl.trainer.ppo.ray_trainer import compute_advantage
    from verl.trainer.ppo.v1.utils import compute_advantage_for_multi_trajectories

    n, prompt_len, width = 8, 3, 10
    lengths = torch.tensor([10, 4, 10, 7, 10, 5, 9, 10])
    response_mask = (torch.arange(width).unsqueeze(0) < lengths.unsqueeze(1)).float()
    responses = torch.randint(100, 200, (n, width), generator=torch.Generator().manual_seed(0))
    responses[0] = 7  # truncated while looping: keeps its score
    short = RepetitionDetector(min_tail_tokens=4)  # responses of 10 tokens
    raw = [0.0, 1.0, 1.0, 0.0, 1.0, 0.0, 1.0, 1.0]
    reward_ok = [True, True, True, True, True, False, True, True]
    scores = [
        masked_score(
            s, reward_ok=ok, response_ids=responses[i, : lengths[i]], max_response_length=width, detector=short
        )
        for i, (s, ok) in enumerate(zip(raw, reward_ok, strict=True))
    ]
    invalid = [math.isnan(s) for s in scores]
    assert invalid == [False, False, True, False, True, True, False, True]

    batch = DataProto.from_dict(
        tensors={
            "prompts": torch.ones(n, prompt_len, dtype=torch.long),
            "responses": responses,
            "attention_mask": torch.cat([torch.ones(n, prompt_len), response_mask], dim=1).long(),
        }
    )
    rm_scores = RewardManagerBase.assemble_rm_scores(batch, scores)
    assert torch.isnan(rm_scores.sum(-1)).tolist() == invalid

    uids = np.array(["a"] * 4 + ["b"] * 4, dtype=object)
    config = OmegaConf.create({"adv_estimator": "longcat_grpo", "norm_adv_by_std_in_grpo": True})
    for run in ("legacy", "v1"):
        data = DataProto.from_dict(
            tensors={"token_level_rewards": rm_scores.clone(), "response_mask": response_mask},
            non_tensors={"uid": uids},
        )
        if run == "legacy":
            out = compute_advantage(data, adv_estimator="longcat_grpo", config=config)
        else:
            keys = [f"{u}_0_{i}" for i, u in enumerate(uids)]
            out = compute_advantage_for_multi_trajectories(data, keys, adv_estimator="longcat_grpo", config=config)
        adv = out.batch["advantages"]
        assert torch.isfinite(adv).all()
        per_seq = (adv * response_mask).sum(-1) / response_mask.sum(-1)
        assert (per_seq[torch.tensor(invalid)] == 0).all()
        valid_a = [raw[i] for i in range(4) if not invalid[i]]  # 0.0, 1.0, 0.0
        mean, std = np.mean(valid_a), np.std(valid_a, ddof=1)
        assert per_seq[0].item() == pytest.approx((0.0 - mean) / (std + 1e-6), abs=1e-5)


# -- recipes ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_validates(recipe: str) -> None:
    proc = run_cli("validate", str(REPO / "configs" / f"{recipe}.yaml"))
    assert proc.returncode == 0, proc.stdout + proc.stderr


def compose(path: Path, overrides: list[str] | None = None) -> Any:
    from longcat_plugins.config import compose as compose_recipe

    return compose_recipe(path, [*RUN_OVERRIDES, *(overrides or [])])


def leaves(node: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for k, v in node.items():
            out.update(leaves(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: node}


#: what a recipe may change relative to stock verl: loss and estimator keys only
ALLOWED = (
    "longcat.",
    "algorithm.adv_estimator",
    "algorithm.use_kl_in_reward",
    "algorithm.rollout_correction.",
    "actor_rollout_ref.actor.policy_loss.",
    "actor_rollout_ref.actor.use_kl_loss",
    "actor_rollout_ref.actor.loss_agg_mode",
    "actor_rollout_ref.actor.loss_scale_factor",
    "actor_rollout_ref.actor.clip_ratio_low",
    "actor_rollout_ref.actor.clip_ratio_high",
    "actor_rollout_ref.rollout.calculate_log_probs",
)


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_changes_only_loss_and_estimator_keys(recipe: str, tmp_path: Path) -> None:
    stock_yaml = tmp_path / "stock.yaml"
    stock_yaml.write_text(
        "hydra:\n  searchpath:\n    - pkg://verl.trainer.config\ndefaults:\n  - ppo_trainer\n  - _self_\n"
    )
    # unresolved: keys that merely interpolate a changed one (critic.loss_agg_mode) are not changes
    stock = leaves(OmegaConf.to_container(compose(stock_yaml), resolve=False))
    ours = leaves(OmegaConf.to_container(compose(REPO / "configs" / f"{recipe}.yaml"), resolve=False))
    changed = sorted(k for k in set(stock) | set(ours) if stock.get(k, "<absent>") != ours.get(k, "<absent>"))
    assert changed and all(k.startswith(ALLOWED) for k in changed), [k for k in changed if not k.startswith(ALLOWED)]


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_builds_verl_actor_config_with_our_knobs(recipe: str) -> None:
    from verl.utils.config import omega_conf_to_dataclass

    cfg = compose(REPO / "configs" / f"{recipe}.yaml")
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)  # as verl's actor worker does
    rollout_correction = cfg.algorithm.rollout_correction
    assert cfg.algorithm.adv_estimator == "longcat_grpo"
    assert rollout_correction.rollout_is == "token" and rollout_correction.bypass_mode is False
    assert rollout_correction.rollout_is_threshold == actor.policy_loss.is_cap
    assert actor.use_kl_loss is False
    if recipe == "triplet_clip":
        assert isinstance(actor.policy_loss, TripletClipConfig) and actor.policy_loss.loss_mode == "triplet_clip"
        assert actor.loss_scale_factor == cfg.data.max_response_length
    else:
        assert isinstance(actor.policy_loss, LongcatGSPOConfig) and actor.policy_loss.loss_mode == "longcat_gspo"
        assert actor.loss_agg_mode == "seq-mean-token-mean"


def test_bad_knob_in_a_recipe_fails_naming_the_key() -> None:
    from hydra.errors import InstantiationException
    from verl.utils.config import omega_conf_to_dataclass

    cfg = compose(REPO / "configs" / "triplet_clip.yaml", ["actor_rollout_ref.actor.policy_loss.eps_neg_high=0.9"])
    with pytest.raises(InstantiationException, match=r"actor_rollout_ref\.actor\.policy_loss\.eps_neg_high"):
        omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)


@pytest.mark.parametrize("recipe", RECIPES)
def test_icepop_needs_verl_ratios_up_to_its_upper_bound(recipe: str) -> None:
    """IcePop on with the recipe's TIS threshold (C = 2 < β = 5) hides the tokens above β from
    the loss: validate exits 2 naming verl's threshold key; with verl's own IcePop bounds it passes."""
    path = str(REPO / "configs" / f"{recipe}.yaml")
    on = "actor_rollout_ref.actor.policy_loss.icepop=true"
    proc = validate_refuses(path, on)
    assert "algorithm.rollout_correction.rollout_is_threshold" in proc.stdout + proc.stderr
    proc = run_cli("validate", path, on, "algorithm.rollout_correction.rollout_is_threshold='0.5_5.0'")
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize(
    ("overrides", "says"),
    [
        (["icepop=true", "icepop_low=6"], "icepop_low < 1 < actor_rollout_ref.actor.policy_loss.icepop_high"),
        (["icepop=maybe"], "icepop: expected bool, got str 'maybe'"),
    ],
)
def test_bad_icepop_knobs_are_named_before_verls_threshold_is(overrides: list[str], says: str) -> None:
    """IcePop bounds the loss refuses (or an ``icepop`` that is not a bool) are reported by the
    loss itself, in one pass: the check of verl's threshold against them used to come first and
    suggest ``rollout_is_threshold: '6_5.0'`` from bounds that cannot be used."""
    proc = validate_refuses(
        str(REPO / "configs" / "triplet_clip.yaml"), *[f"actor_rollout_ref.actor.policy_loss.{o}" for o in overrides]
    )
    out = proc.stdout + proc.stderr
    assert says in out, out
    assert "rollout_is_threshold" not in out, out
