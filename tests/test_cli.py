"""`longcat-plugins list / doctor / validate` as a user runs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from conftest import REPO, loss_plugin, make_dist, run_cli


def test_list_json_shows_plugins_and_components(fake_site: Path) -> None:
    make_dist(fake_site, "acme-rl", {"acme_rl": loss_plugin("acme_loss")}, {"acme": "acme_rl"}, version="2.3")
    proc = run_cli("list", "--json", env={"LONGCAT_PLUGINS_DISABLE": "algorithm:acme_loss"})
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    plugins = {p["name"]: p for p in data["plugins"]}
    assert plugins["acme"]["distribution"] == "acme-rl" and plugins["acme"]["version"] == "2.3"
    [comp] = plugins["acme"]["components"]
    assert comp["name"] == "acme_loss" and comp["enabled"] is False
    assert "LONGCAT_PLUGINS_DISABLE" in comp["inactive_reason"]
    assert plugins["longcat.algorithms"]["builtin"] is True


def test_list_table(fake_site: Path) -> None:
    make_dist(fake_site, "acme-rl", {"acme_rl": loss_plugin("acme_loss")}, {"acme": "acme_rl"})
    proc = run_cli("list")
    assert proc.returncode == 0, proc.stderr
    assert "acme-rl" in proc.stdout and "algorithm:acme_loss" in proc.stdout and "longcat.fusion" in proc.stdout


def test_doctor_passes_and_checks_registration_in_verl(fake_site: Path) -> None:
    make_dist(fake_site, "acme-rl", {"acme_rl": loss_plugin("acme_loss")}, {"acme": "acme_rl"})
    proc = run_cli("doctor")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "algorithm:acme_loss" in proc.stdout and "OK registered" in proc.stdout


def test_doctor_fails_on_a_broken_plugin(fake_site: Path) -> None:
    make_dist(fake_site, "bad-dist", {"bad_rl": "import nonexistent_module_xyz"}, {"bad": "bad_rl"})
    proc = run_cli("doctor", "-v")
    assert proc.returncode == 1
    assert "plugin 'bad' (distribution bad-dist)" in proc.stderr
    assert "nonexistent_module_xyz" in proc.stderr and "Traceback" in proc.stderr
    # disabling it makes the environment healthy again
    assert run_cli("doctor", env={"LONGCAT_PLUGINS_DISABLE": "bad"}).returncode == 0


def test_doctor_fails_when_a_component_cannot_be_registered(fake_site: Path) -> None:
    source = """
        from longcat_plugins import RewardManager, hookimpl
        class NotAManager:
            '''not a RewardManagerBase'''
        @hookimpl
        def register_rewards():
            return [RewardManager("fake_manager", NotAManager)]
    """
    make_dist(fake_site, "odd-dist", {"odd_rl": source}, {"odd": "odd_rl"})
    proc = run_cli("doctor")
    assert proc.returncode == 1
    assert "FAIL reward:fake_manager (plugin 'odd')" in proc.stderr
    assert "not a RewardManagerBase subclass" in proc.stderr


def test_validate_exit_codes(tmp_path: Path, example_plugin_installed: None) -> None:
    recipe = REPO / "configs" / "example_plugin.yaml"
    ok = run_cli("validate", str(recipe))
    assert ok.returncode == 0, ok.stderr
    assert "algorithm:truncated_reinforce" in ok.stdout
    bad = run_cli("validate", str(recipe), "longcat.enable=[exampel]", "+longcat.strct=true")
    assert bad.returncode == 2
    assert "longcat.enable[0]: unknown plugin 'exampel' (did you mean 'example'?)" in bad.stderr
    assert "longcat.strct: unknown key (did you mean 'strict'?)" in bad.stderr
    missing = run_cli("validate", str(tmp_path / "nope.yaml"))
    assert missing.returncode == 2 and "not found" in missing.stderr


@pytest.mark.parametrize("recipe", ["arithmetic", "tool_agent", "dora", "code_agent"])
def test_each_demo_recipe_composes_on_locally_built_data_and_passes_the_cpu_checks(
    recipe: str, tiny_assets: Any, tmp_path: Path
) -> None:
    """What ``demo --recipe`` hands to verl: its data exists, and the composed recipe passes the
    same validation and CPU preflight the Hydra callback runs before Ray starts."""
    import dataclasses

    from longcat_plugins.config import compose, validate_config
    from longcat_plugins.learning.demos import prepare_demo
    from longcat_plugins.runtime.launch import resolve_config

    built = dataclasses.replace(tiny_assets, root=tmp_path)  # demo data lands beside, not in, the shared cache
    demo = prepare_demo(recipe, built, steps=2)
    values = dict(o.split("=", 1) for o in demo.overrides)
    for key in ("data.train_files", "data.val_files", "actor_rollout_ref.model.path"):
        assert Path(values[key]).exists(), (key, values[key])
    cfg = compose(resolve_config(demo.config), demo.overrides)
    problems, _ = validate_config(cfg, cpu_preflight=True)
    assert problems == [], problems
    assert not list(tmp_path.rglob("*.tmp"))
    with pytest.raises(ValueError, match="choices: arithmetic, tool_agent, dora, code_agent"):
        prepare_demo("nope", built, steps=2)
