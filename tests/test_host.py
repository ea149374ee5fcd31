"""Discovery, enable/disable, clashes and broken plugins, through real entry points."""

from __future__ import annotations

import importlib.metadata
from pathlib import Path

import pytest
from conftest import loss_plugin, make_dist

from longcat_plugins import FusionMethod, PolicyLoss, hookimpl
from longcat_plugins.components import Family, schema_from_signature
from longcat_plugins.host import ENTRY_POINT_GROUP, Host, UnknownComponentError
from longcat_plugins.selection import Rule, Selection

BUILTINS = {"longcat.algorithms", "longcat.schedulers", "longcat.rewards", "longcat.environments", "longcat.fusion"}


def eps_under(site: Path) -> list[importlib.metadata.EntryPoint]:
    """Entry points of the distributions under ``site`` only (isolates tests from what is installed)."""
    return [
        ep
        for d in importlib.metadata.distributions(path=[str(site)])
        for ep in d.entry_points
        if ep.group == ENTRY_POINT_GROUP
    ]


def test_builtins_are_discovered_through_our_own_entry_points() -> None:
    host = Host().load()
    builtins = {n for n, i in host.plugins.items() if i.builtin}
    assert builtins == BUILTINS
    for name in BUILTINS:
        info = host.plugins[name]
        assert info.distribution == "longcat-plugins" and info.status == "active", info
    assert not [p for p in host.problems if p.plugin in BUILTINS]


def test_third_party_entry_point_is_discovered(fake_site: Path) -> None:
    make_dist(fake_site, "acme-rl", {"acme_rl": loss_plugin("acme_loss")}, {"acme": "acme_rl"}, version="2.3")
    host = Host().load()  # the default path: every installed entry point, ours and theirs
    info = host.plugins["acme"]
    assert (info.distribution, info.version, info.builtin, info.status) == ("acme-rl", "2.3", False, "active")
    comp = host.get("algorithm", "acme_loss")
    assert (comp.plugin, comp.distribution, comp.kind, comp.summary) == (
        "acme",
        "acme-rl",
        "policy_loss",
        "A test loss.",
    )


def test_clash_names_both_distributions_and_uses_neither(fake_site: Path) -> None:
    make_dist(fake_site / "a", "dist-one", {"one_rl": loss_plugin("shared")}, {"one": "one_rl"})
    make_dist(fake_site / "b", "dist-two", {"two_rl": loss_plugin("shared")}, {"two": "two_rl"})
    eps = eps_under(fake_site / "a") + eps_under(fake_site / "b")
    import sys

    sys.path[:0] = [str(fake_site / "a"), str(fake_site / "b")]
    try:
        host = Host().load(eps)
        clash = [p for p in host.problems if "clash" in p.message]
        assert len(clash) == 1
        assert "dist-one" in clash[0].message and "dist-two" in clash[0].message
        with pytest.raises(UnknownComponentError, match="clash"):
            host.get("algorithm", "shared")
        # disabling one side resolves it, by plugin name or by distribution name
        for rule in ("two", "dist-two"):
            host = Host(Selection(disable=(Rule(rule, "test"),))).load(eps)
            assert host.get("algorithm", "shared").distribution == "dist-one"
            assert not host.problems
    finally:
        del sys.path[:2]


BROKEN = {
    "import_error": "import nonexistent_module_xyz\n",
    "hook_raises": """
        from longcat_plugins import hookimpl
        @hookimpl
        def register_algorithms():
            raise RuntimeError("boom in hook")
    """,
    "misspelled_hook": """
        from longcat_plugins import hookimpl
        @hookimpl
        def register_algorithm():
            return []
    """,
    "wrong_family": """
        from longcat_plugins import hookimpl, FusionMethod
        def merge(*, alpha: float = 1.0): ...
        @hookimpl
        def register_algorithms():
            return [FusionMethod("merge", merge)]
    """,
    "not_a_list": """
        from longcat_plugins import hookimpl
        @hookimpl
        def register_rewards():
            return "math"
    """,
}

EXPECTED = {
    "import_error": "No module named 'nonexistent_module_xyz'",
    "hook_raises": "boom in hook",
    "misspelled_hook": "register_algorithm",
    "wrong_family": "may return only PolicyLoss, AdvantageEstimator",
    "not_a_list": "must return a list of components",
}


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_broken_plugin_is_reported_and_others_keep_working(fake_site: Path, kind: str) -> None:
    make_dist(fake_site, "bad-dist", {f"bad_{kind}": BROKEN[kind]}, {"bad": f"bad_{kind}"})
    make_dist(fake_site, "good-dist", {"good_rl": loss_plugin("good_loss")}, {"good": "good_rl"})
    host = Host().load(eps_under(fake_site))
    assert host.plugins["bad"].status == "broken"
    [problem] = host.problems
    assert problem.plugin == "bad" and problem.distribution == "bad-dist"
    assert EXPECTED[kind] in problem.message
    assert "Traceback" in problem.detail
    assert host.get("algorithm", "good_loss").plugin == "good"


def _plugin_with(*components: object) -> object:
    class Plugin:
        @hookimpl
        def register_algorithms(self) -> list[object]:
            return [c for c in components if c.family is Family.ALGORITHM]

        @hookimpl
        def register_fusion_methods(self) -> list[object]:
            return [c for c in components if c.family is Family.FUSION]

    return Plugin()


def _fn(*args: object, **kwargs: object) -> None:
    """doc line"""


def _merge(*, alpha: float = 0.5, seed: int = 0) -> None:
    """merge"""


@pytest.mark.parametrize(
    ("enable", "disable", "expected"),
    [
        ((), (), {"algorithm:a1", "algorithm:a2", "fusion:m1"}),
        ((), ("p",), set()),
        ((), ("algorithm:a1",), {"algorithm:a2", "fusion:m1"}),
        ((), ("algorithm:*",), {"fusion:m1"}),
        (("fusion:*",), (), {"fusion:m1"}),
        (("p",), ("algorithm:a2",), {"algorithm:a1", "fusion:m1"}),
        (("other",), (), set()),
    ],
)
def test_enable_disable_rules(enable: tuple[str, ...], disable: tuple[str, ...], expected: set[str]) -> None:
    selection = Selection(tuple(Rule(p, "e") for p in enable), tuple(Rule(p, "d") for p in disable))
    host = Host(selection)
    host.add_plugin(_plugin_with(PolicyLoss("a1", _fn), PolicyLoss("a2", _fn), FusionMethod("m1", _merge)), "p")
    assert {c.ref for c in host.components()} == expected
    for comp, why in host.all_components():
        assert (why is None) == (comp.ref in expected)


def test_env_vars(monkeypatch: pytest.MonkeyPatch) -> None:
    base = Selection.from_section({"enable": ["a"], "disable": ["b"]})
    env = {"LONGCAT_PLUGINS_DISABLE": "c, d", "LONGCAT_PLUGINS_ENABLE": "x", "LONGCAT_PLUGINS_DISABLE_AUTOLOAD": "1"}
    sel = base.with_env_overrides(env)
    assert [r.pattern for r in sel.enable] == ["x"]  # the env allow-list replaces the config's
    assert [(r.pattern, r.source) for r in sel.disable] == [
        ("b", "longcat.disable[0]"),
        ("c", "LONGCAT_PLUGINS_DISABLE"),
        ("d", "LONGCAT_PLUGINS_DISABLE"),
    ]
    assert sel.autoload is False
    # the forwarded config section is the starting point of a worker's selection
    fwd = Selection.from_env({"LONGCAT_PLUGINS_CONFIG": '{"disable": ["q"], "autoload": false}'})
    assert [r.pattern for r in fwd.disable] == ["q"] and fwd.autoload is False


def test_autoload_off_keeps_builtins_and_named_third_party(fake_site: Path) -> None:
    make_dist(fake_site, "acme-rl", {"acme_rl": loss_plugin("acme_loss")}, {"acme": "acme_rl"})
    host = Host(Selection(autoload=False)).load()
    assert host.plugins["acme"].status == "disabled" and "autoload" in host.plugins["acme"].reason
    assert all(host.plugins[b].status == "active" for b in BUILTINS)
    host = Host(Selection(enable=(Rule("acme", "env"), Rule("longcat.*", "env")), autoload=False)).load()
    assert host.plugins["acme"].status == "active"


def test_disabled_plugin_is_not_even_imported(fake_site: Path) -> None:
    make_dist(fake_site, "bad-dist", {"explodes": "raise SystemExit('imported!')"}, {"bad": "explodes"})
    host = Host(Selection(disable=(Rule("bad", "test"),))).load(eps_under(fake_site))
    assert host.plugins["bad"].status == "disabled" and not host.problems


def test_unknown_component_error_lists_choices() -> None:
    host = Host()
    host.add_plugin(_plugin_with(PolicyLoss("alpha", _fn), PolicyLoss("beta", _fn)), "p")
    with pytest.raises(UnknownComponentError, match=r"unknown algorithm component 'gamma'; available: alpha, beta"):
        host.get("algorithm", "gamma")


def test_descriptor_validation() -> None:
    with pytest.raises(ValueError, match="invalid"):
        PolicyLoss("Bad Name", _fn)
    with pytest.raises(TypeError, match="dataclass"):
        PolicyLoss("ok", _fn, config=dict)
    assert PolicyLoss("ok", _fn).summary == "doc line"


def test_fusion_signature_is_its_schema() -> None:
    import dataclasses

    method = FusionMethod("m", _merge)
    assert {f.name: f.default for f in dataclasses.fields(method.config)} == {"alpha": 0.5, "seed": 0}

    # this module uses `from __future__ import annotations`: the schema still has real types
    from longcat_plugins.config import build_settings

    assert build_settings(method, {"alpha": 0.25}, "x") == method.config(alpha=0.25, seed=0)
    with pytest.raises(Exception, match=r"x\.alpha: expected float"):
        build_settings(method, {"alpha": "big"}, "x")

    def untyped(*, alpha=1.0) -> None: ...

    with pytest.raises(TypeError, match="alpha"):
        schema_from_signature(untyped, "x")


def test_component_settings_come_from_the_host_and_bad_values_raise() -> None:
    """A reward reads ``longcat.settings`` through the host; a bad value is an error naming the
    key path, never a silent fall back to the defaults."""
    from longcat_plugins.config import ConfigError
    from longcat_plugins.host import Host, set_host, settings_with_overrides
    from longcat_plugins.rewards.math import MathRewardConfig
    from longcat_plugins.selection import Rule, Selection

    def _settings(kwargs: dict) -> MathRewardConfig:  # what the math reward's compute_score reads
        return settings_with_overrides("reward", "math", MathRewardConfig, kwargs)

    good = Host(Selection(settings={"reward": {"math": {"timeout_s": 2.5}}})).load()
    bad = Host(Selection(settings={"reward": {"math": {"timeout_s": "soon"}}})).load()
    previous = set_host(good)
    try:
        assert _settings({}).timeout_s == 2.5
        assert _settings({"workers": 3, "not_a_field": 1}).workers == 3
        set_host(bad)
        with pytest.raises(ConfigError, match=r"longcat\.settings\.reward\.math"):
            _settings({})
        set_host(Host(Selection(disable=(Rule("reward:math", "test"),))).load())
        assert _settings({}).timeout_s == MathRewardConfig().timeout_s == 1.5  # disabled here: the defaults
    finally:
        set_host(previous)


def test_builtin_descriptors_are_lazy_and_match_their_targets() -> None:
    """Built-ins name their targets as ``module:attr`` (``list`` imports nothing heavy); the
    summary each declares is the first docstring line of the target it names, and the
    target and config resolve to what the descriptor says."""
    import dataclasses
    import inspect

    host = Host(Selection()).load()
    comps = [c for c, _ in host.all_components() if c.distribution == "longcat-plugins"]
    assert len(comps) >= 20 and all(c.is_lazy for c in comps)
    for comp in comps:
        path = comp.target_path  # before resolving: from the reference
        target = comp.target
        assert not comp.is_lazy
        assert f"{target.__module__}.{target.__qualname__}" == path
        assert comp.summary == inspect.getdoc(target).strip().splitlines()[0], comp.ref
        assert comp.config is None or dataclasses.is_dataclass(comp.config), comp.ref


def test_a_lazy_target_that_cannot_be_imported_names_the_component_and_reference() -> None:
    import dataclasses

    from longcat_plugins.components import ComponentImportError

    comp = PolicyLoss("later", "no_such_module_xyz.sub:fn", summary="s")
    assert comp.target_path == "no_such_module_xyz.sub.fn" and comp.summary == "s"
    with pytest.raises(ComponentImportError, match=r"PolicyLoss 'later': cannot import 'no_such_module_xyz.sub:fn'"):
        _ = comp.target
    with pytest.raises(ValueError, match="not a 'package.module:attribute' reference"):
        PolicyLoss("bad", "just a string")
    fusion = FusionMethod("lazy_ties", "longcat_plugins.fusion.methods:ties")
    assert {f.name for f in dataclasses.fields(fusion.config)} >= {"density", "majority"}
