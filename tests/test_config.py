"""The longcat: section schema and whole-config validation: every problem, with its path."""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from longcat_plugins import AdvantageEstimator, PolicyLoss, hookimpl
from longcat_plugins.config import (
    ConfigError,
    build_settings,
    check_mapping,
    compose,
    to_plain,
    validate_config,
    validate_section,
)
from longcat_plugins.host import Host
from longcat_plugins.selection import Selection

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


def _written_out(value: object) -> object:
    """A default as a YAML recipe writes it: nested settings as mappings, tuples as lists."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return list(value) if isinstance(value, tuple) else value


def test_every_built_in_default_written_out_validates() -> None:
    """A recipe that writes out a component's documented defaults (every key of its settings, at
    its default) selects what it selects without them: no value that is the setting's own (the
    dora scheduler's ``admission: none``) is refused as an unknown name."""
    base = to_plain(compose(REPO / "configs" / "longcat.yaml"))
    host = Host(Selection()).load()
    refused = {}
    for component, _ in host.all_components():
        if component.config is None or component.kind == "policy_loss" or component.family.value == "fusion":
            continue  # loss knobs live in verl's keys, fusion parameters in the fuse spec
        defaults = {}
        for f in dataclasses.fields(component.config):
            if f.default is not dataclasses.MISSING:
                defaults[f.name] = _written_out(f.default)
            elif f.default_factory is not dataclasses.MISSING:
                defaults[f.name] = _written_out(f.default_factory())
        cfg = copy.deepcopy(base)
        family = cfg["longcat"].setdefault("settings", {}).setdefault(component.family.value, {})
        family[component.name] = {**defaults, **(family.get(component.name) or {})}
        problems, _ = validate_config(cfg, check_contracts=False)
        if problems:
            refused[component.ref] = [f"{p.path}: {p.message}" for p in problems]
    assert refused == {}


@pytest.mark.parametrize(
    ("component", "settings", "says"),
    [
        ("reward.code", {"cpu_s": -1.0}, "cpu_s must be > 0"),
        ("reward.code", {"max_concurrent": 0}, "max_concurrent must be >= 1"),
        ("reward.code", {"language": "cobol"}, "language 'cobol' is not supported"),
        ("reward.code", {"isolation": ""}, "isolation must be one of ['auto', 'bwrap'"),
        ("reward.code", {"python_call_mode": "each"}, "python_call_mode must be 'batch' or 'per_case'"),
        ("reward.math", {"memory_mb": 0}, "memory_mb must be > 0"),
        ("reward.math", {"correct_score": float("nan")}, "correct_score must be a finite number"),
        ("reward.math", {"correct_score": 0.0}, "correct_score (0.0) must be above incorrect_score (0.0)"),
        ("reward.genrm", {"temperature": -1.0}, "temperature must be >= 0"),
        ("reward.genrm", {"max_tokens": 0}, "max_tokens must be >= 1"),
        ("environment.longcat_tool_agent", {"max_tool_response_chars": -5}, "max_tool_response_chars must be >= 1"),
        ("environment.longcat_tool_agent", {"noise_level": -2}, "noise_level must be >= -1"),
        (
            "environment.longcat_tool_agent",
            {"summary_threshold_tokens": 100, "summary_instruction": " "},
            "summary_instruction: must not be empty",
        ),
        ("environment.longcat_code_agent", {"isolation": "sandboxed"}, "isolation must be one of"),
        ("scheduler.dora", {"min_lend_gain_s": float("nan")}, "min_lend_gain_s must be >= 0"),
        ("scheduler.dora", {"oversampling_max": "x"}, "oversampling_max: expected int"),
        ("scheduler.longcat_data", {"correct_threshold": float("nan")}, "correct_threshold: must be a finite number"),
        (
            "environment.longcat_tool_agent",
            {"noise_curriculum": {"gap_threshold": float("nan")}},
            "gap_threshold must be in [-1, 1]",
        ),
        (
            "scheduler.longcat_data",
            {"selfverify": {"min_delta": float("nan")}},
            "selfverify.min_delta: must be a finite",
        ),
        ("fusion.ties", {"density": 0.5}, "give ties's parameters under params in the fuse spec"),
    ],
)
def test_a_setting_the_component_cannot_run_with_is_refused_naming_it(
    component: str, settings: dict[str, object], says: str
) -> None:
    """Values a reward, environment or scheduler would only fail on inside a Ray worker (making
    every sample invalid, or raising a traceback from a recipe check), and fusion settings nothing
    reads, are problems of the recipe: found by validation, with the key."""
    cfg = to_plain(compose(REPO / "configs" / "longcat.yaml"))
    family, name = component.split(".")
    node = cfg["longcat"].setdefault("settings", {}).setdefault(family, {})
    node[name] = {**(node.get(name) or {}), **settings}
    problems, _ = validate_config(cfg, check_contracts=False)
    lines = [f"{p.path}: {p.message}" for p in problems]
    assert any(line.startswith(f"longcat.settings.{component}") and says in line for line in lines), lines


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


# -- one name from two plugins: the fix the clash message suggests works (issue 32) ------------

_EXACT = """
    from dataclasses import dataclass
    from longcat_plugins import RewardFunction, hookimpl

    @dataclass
    class ExactConfig:
        credit: float = 1.0

    def exact(data_source, solution_str, ground_truth, extra_info=None, **kw):
        '''{who}'''
        return 1.0

    @hookimpl
    def register_rewards():
        return [RewardFunction("exact", exact{config})]
"""


def _two_exacts(site: Path) -> None:
    from conftest import make_dist

    make_dist(
        site, "exact-a", {"exact_a": _EXACT.format(who="A.", config=", config=ExactConfig")}, {"exact_a": "exact_a"}
    )
    make_dist(site, "exact-b", {"exact_b": _EXACT.format(who="B.", config="")}, {"exact_b": "exact_b"})


def _exact_recipe(overrides: list[str]) -> object:
    return compose(
        REPO / "configs" / "grpo_arithmetic.yaml",
        [
            "reward.custom_reward_function.name=exact",
            "+longcat.settings={reward: {exact: {credit: 0.5}}}",
            *overrides,
        ],
    )


def test_disabling_one_of_two_plugins_that_share_a_name_settles_the_clash(fake_site: Path) -> None:
    _two_exacts(fake_site)
    problems, _ = validate_config(_exact_recipe([]))
    assert any("clash: reward component 'exact'" in p.message for p in problems), problems
    # the fix the message suggests: the settings are checked against the plugin that stays
    problems, host = validate_config(_exact_recipe(["+longcat.disable=[exact_b]"]))
    assert problems == [], problems
    assert host.get("reward", "exact").plugin == "exact_a"
    assert host.settings_for("reward", "exact").credit == 0.5


def test_the_environment_route_settles_the_clash_too(fake_site: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _two_exacts(fake_site)
    monkeypatch.setenv("LONGCAT_PLUGINS_DISABLE", "exact_b")
    problems, host = validate_config(_exact_recipe([]))
    assert problems == [], problems
    assert host.get("reward", "exact").plugin == "exact_a"
    # keeping the plugin without settings makes the settings wrong, and says so for that one
    monkeypatch.setenv("LONGCAT_PLUGINS_DISABLE", "exact_a")
    problems, _ = validate_config(_exact_recipe([]))
    assert [str(p) for p in problems] == ["longcat.settings.reward.exact: reward:exact takes no settings"]


def test_a_bad_setting_does_not_undo_the_sections_own_selection(fake_site: Path) -> None:
    _two_exacts(fake_site)
    cfg = _exact_recipe(["+longcat.disable=[exact_b]", "longcat.settings.reward.exact.credit=high"])
    problems = paths(validate_config(cfg)[0])
    assert list(problems) == ["longcat.settings.reward.exact.credit"], problems
