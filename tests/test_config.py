"""The longcat: section schema and whole-config validation: every problem, with its path."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from longcat_plugins import AdvantageEstimator, PolicyLoss, hookimpl
from longcat_plugins.config import (
    ConfigError,
    build_settings,
    check_mapping,
    compose,
    validate_config,
    validate_section,
)
from longcat_plugins.host import Host

REPO = Path(__file__).resolve().parents[1]


@dataclass
class KnobConfig:
    eps: float = 0.2
    mode: str = "token"
    levels: list[int] = field(default_factory=lambda: [1, 2])


def _loss(*args: object) -> None:
    """A loss with knobs."""


class KnobPlugin:
    @hookimpl
    def register_algorithms(self) -> list[AdvantageEstimator | PolicyLoss]:
        return [AdvantageEstimator("knobbed", _loss, config=KnobConfig), PolicyLoss("lossy", _loss, config=KnobConfig)]


@pytest.fixture
def host() -> Host:
    host = Host().load()
    host.add_plugin(KnobPlugin(), "knobs", distribution="knob-dist")
    return host


def paths(problems: list) -> dict[str, str]:
    return {p.path: p.message for p in problems}


def test_valid_section_has_no_problems(host: Host) -> None:
    section = {"enable": [], "disable": ["longcat.fusion"], "settings": {"algorithm": {"knobbed": {"eps": 0.3}}}}
    assert validate_section(section, host) == []


def test_every_problem_is_reported_with_its_path(host: Host) -> None:
    section = {
        "enabel": ["x"],  # unknown key
        "autoload": "yes",  # wrong type
        "disable": ["longcat.fusoin", "algorithm:knobed", "knob-dist"],
    }
    problems = paths(validate_section(section, host))
    assert "did you mean 'enable'" in problems["longcat.enabel"]
    assert "choices: autoload, disable, enable, settings, strict" in problems["longcat.enabel"]
    assert problems["longcat.autoload"] == "expected bool, got str 'yes'"
    # names are checked in the same pass, wherever the schema let them through
    assert "unknown plugin 'longcat.fusoin' (did you mean 'longcat.fusion'?)" in problems["longcat.disable[0]"]
    assert "knobs" in problems["longcat.disable[0]"]  # choices list every plugin
    assert "unknown component 'algorithm:knobed'" in problems["longcat.disable[1]"]
    assert "algorithm:knobbed" in problems["longcat.disable[1]"]
    assert "longcat.disable[2]" not in problems  # distribution names are valid too


def test_settings_are_typed_by_the_component_schema(host: Host) -> None:
    section = {
        "settings": {
            "algorithm": {"knobbed": {"eps": "big", "levels": [1, "two"], "nope": 1}, "missing": {}},
            "rewrd": {},
        }
    }
    problems = paths(validate_section(section, host))
    assert problems["longcat.settings.algorithm.knobbed.eps"] == "expected float, got str 'big'"
    assert problems["longcat.settings.algorithm.knobbed.levels[1]"] == "expected int, got str 'two'"
    assert "choices: eps, levels, mode" in problems["longcat.settings.algorithm.knobbed.nope"]
    assert "choices: knobbed" in problems["longcat.settings.algorithm.missing"]
    assert "did you mean 'reward'" in problems["longcat.settings.rewrd"]


def test_policy_loss_knobs_have_one_home(host: Host) -> None:
    """A loss is handed verl's actor config, so its knobs live in actor.policy_loss; the same
    knobs under longcat.settings would be silently unread, so they are refused with the right path."""
    problems = paths(validate_section({"settings": {"algorithm": {"lossy": {"eps": 0.1}}}}, host))
    msg = problems["longcat.settings.algorithm.lossy"]
    assert "actor_rollout_ref.actor.policy_loss" in msg and "loss_mode: lossy" in msg
    assert not validate_section({"settings": {"algorithm": {"lossy": {}}}}, host)


def test_settings_for_builds_the_dataclass(host: Host) -> None:
    comp = host.get("algorithm", "knobbed")
    assert build_settings(comp, {"eps": 1}, "x") == KnobConfig(eps=1)
    with pytest.raises(ConfigError, match=r"x\.eps: expected float"):
        build_settings(comp, {"eps": None}, "x")


def test_check_mapping_reports_missing_required() -> None:
    @dataclass
    class Needs:
        path: str
        n: int = 1

    assert paths(check_mapping({}, Needs, "a")) == {"a.path": "required key is missing"}


def test_recipe_composes_with_verl_ppo_trainer_and_validates(example_plugin_installed: None) -> None:
    cfg = compose(REPO / "configs" / "example_plugin.yaml")
    # stock verl keys and ours in one config
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "truncated_reinforce"
    assert cfg.trainer.total_epochs is not None and "longcat" in cfg
    problems, host = validate_config(cfg)
    assert problems == []
    assert "algorithm:truncated_reinforce" in [c.ref for c in host.components()]


def test_stock_keys_selecting_unknown_or_disabled_names(example_plugin_installed: None) -> None:
    recipe = REPO / "configs" / "example_plugin.yaml"
    cfg = compose(
        recipe, ["actor_rollout_ref.actor.policy_loss.loss_mode=truncated_reinfrce", "algorithm.adv_estimator=nope"]
    )
    problems = paths(validate_config(cfg)[0])
    msg = problems["actor_rollout_ref.actor.policy_loss.loss_mode"]
    assert "unknown policy_loss 'truncated_reinfrce' (did you mean 'truncated_reinforce'?)" in msg
    assert "vanilla" in msg and "gspo" in msg  # stock names are choices too
    assert "unknown adv_estimator 'nope'" in problems["algorithm.adv_estimator"]
    # disabling the component from YAML makes selecting it an error that says why
    cfg = compose(recipe, ["longcat.disable=[algorithm:truncated_reinforce]"])
    msg = paths(validate_config(cfg)[0])["actor_rollout_ref.actor.policy_loss.loss_mode"]
    assert "is disabled by longcat.disable[0]" in msg
