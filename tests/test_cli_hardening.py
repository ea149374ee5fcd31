"""The CLI on hostile or unusual input (issue 13 items 8-14): foreign text with Rich markup,
recipe names, relative paths, plugins shadowing verl, the progress/summary wording, the
reusable ``runtime`` config group, and a start that imports neither verl nor torch."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import REPO, loss_plugin, make_dist, run_cli, validate_refuses

from longcat_plugins.runtime import launch

MARKUP = "[/x] and [thirdparty_demo] and [bold]"


# -- item 8: foreign text is printed literally ---------------------------------------------------


def test_list_and_doctor_print_markup_in_a_plugin_exception_literally(fake_site: Path) -> None:
    source = f"raise RuntimeError({MARKUP!r})"
    make_dist(fake_site, "markup-dist", {"markup_rl": source}, {"markup": "markup_rl"})
    listed = run_cli("list")
    assert listed.returncode == 0, listed.stderr
    assert MARKUP in listed.stderr and "MarkupError" not in listed.stderr
    doctor = run_cli("doctor")
    assert doctor.returncode == 1 and MARKUP in doctor.stderr and "MarkupError" not in doctor.stderr


def test_validate_prints_markup_in_a_config_value_literally(tmp_path: Path, fake_site: Path) -> None:
    recipe = _user_recipe(tmp_path, "longcat:\n  enable: ['[/x]thirdparty']\n")
    proc = run_cli("validate", str(recipe))
    assert proc.returncode == 2
    assert "longcat.enable[0]: unknown plugin '[/x]thirdparty'" in proc.stderr, proc.stderr


def test_a_clash_hint_keeps_the_bracketed_plugin_name(fake_site: Path) -> None:
    make_dist(fake_site, "one-dist", {"one_rl": loss_plugin("shared_loss")}, {"aa_other": "one_rl"})
    make_dist(fake_site, "two-dist", {"two_rl": loss_plugin("shared_loss")}, {"thirdparty_demo": "two_rl"})
    proc = run_cli("list", env={"COLUMNS": "2000"})  # wide enough that no table cell wraps
    assert "longcat.disable: [thirdparty_demo]" in proc.stderr, proc.stderr
    # the components table's "enabled" cell carries the same hint
    assert proc.stdout.count("longcat.disable: [thirdparty_demo]") == 2, proc.stdout


# -- item 9: validate finds recipes by name like train -----------------------------------------


def test_validate_resolves_a_shipped_recipe_by_name() -> None:
    proc = run_cli("validate", "cpu_demo")
    assert proc.returncode == 0, proc.stderr
    assert "cpu_demo: OK" in proc.stdout
    missing = run_cli("validate", "no_such_recipe")
    assert missing.returncode == 2 and "one of:" in missing.stderr and "cpu_demo" in missing.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["demo", "--steps", "0"],
        ["demo", "--steps", "-3"],
        ["select-tool-tasks", "unused.parquet", "-o", "kept.parquet", "--model", "unused", "--n", "0"],
    ],
)
def test_a_count_below_one_exits_2_naming_the_option(args: list[str], tmp_path: Path) -> None:
    """A demo of no steps used to run the start's validation and print a checkpoint directory that
    was never written; negative steps did the same. Counts are refused before anything starts."""
    proc = run_cli(*args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    option = args[-2]  # the option given the bad count
    assert f"Invalid value for '{option}'" in proc.stderr and "x>=1" in proc.stderr, proc.stderr
    assert list(tmp_path.iterdir()) == []  # no run directory, no output


# -- item 10: the child sees the user's directory -----------------------------------------------


def test_training_child_resolves_relative_override_paths_against_the_users_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The launcher's real Popen; the child is a tiny script standing in for main_ppo that
    opens the relative path it was given, as verl opens data.train_files."""
    user_dir = tmp_path / "project"
    (user_dir / "data").mkdir(parents=True)
    (user_dir / "data" / "train.parquet").write_text("rows")
    child = "import sys; print(open(sys.argv[-1].split('=', 1)[1]).read())"
    monkeypatch.setattr(
        launch, "build_command", lambda config, overrides, run_dir: [sys.executable, "-c", child, *overrides]
    )
    monkeypatch.chdir(user_dir)
    result = launch.run_training(
        REPO / "configs" / "cpu_demo.yaml", ["data.train_files=data/train.parquet"], tmp_path / "run"
    )
    assert result.returncode == 0, result.log.read_text()
    assert "rows" in result.log.read_text()


# -- item 11: a plugin shadowing a stock verl name ----------------------------------------------


def test_validate_refuses_a_plugin_that_shadows_a_stock_verl_name(tmp_path: Path, fake_site: Path) -> None:
    make_dist(fake_site, "shadow-dist", {"shadow_rl": loss_plugin("vanilla")}, {"shadow": "shadow_rl"})
    recipe = _user_recipe(tmp_path, "")
    proc = validate_refuses(str(recipe))
    assert "plugin shadow" in proc.stderr and "clashes with verl's own" in proc.stderr
    # non-strict: the same refusal is not an error
    assert run_cli("validate", str(recipe), "+longcat.strict=false").returncode == 0
    assert run_cli("doctor").returncode == 1  # consistent with doctor


def test_the_hydra_gate_refuses_a_plugin_that_shadows_a_stock_verl_name(tmp_path: Path, fake_site: Path) -> None:
    """The callback verl's own main_ppo runs before Ray: exit 2 naming the plugin."""
    make_dist(fake_site, "shadow-dist", {"shadow_rl": loss_plugin("vanilla")}, {"shadow": "shadow_rl"})
    recipe = _user_recipe(tmp_path, "")
    code = f"""
        import sys
        from hydra import compose, initialize_config_dir
        from longcat_plugins.hydra_callback import LongcatCallback
        with initialize_config_dir(config_dir={str(recipe.parent)!r}, version_base=None):
            cfg = compose(config_name={recipe.stem!r}, return_hydra_config=True)
        LongcatCallback().on_job_start(cfg)
        print("gate passed")
    """
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "longcat (plugin shadow)" in proc.stderr and "gate passed" not in proc.stdout


# -- item 12: progress, summary and message wording ---------------------------------------------


def test_planned_steps_come_from_the_recipe_yaml_or_the_overrides(tmp_path: Path) -> None:
    recipe = REPO / "configs" / "tool_agent_cpu.yaml"
    assert launch.planned_steps(recipe, []) == 2
    assert launch.planned_steps(recipe, ["trainer.total_training_steps=7"]) == 7
    bare = tmp_path / "bare.yaml"
    bare.write_text("trainer:\n  total_epochs: 1\n")
    assert launch.planned_steps(bare, []) is None
    assert launch.TOTAL_LINE.search("Total training steps: 12").group(1) == "12"


def test_summary_leaves_out_the_validation_only_step_zero() -> None:
    steps = [
        {"step": 0, "val-core/acc": 0.1},
        {"step": 1, "critic/score/mean": 0.5, "actor/pg_loss": -0.1, "timing_s/step": 3.0},
    ]
    rows = launch.summary_rows(steps)
    assert [r["step"] for r in rows] == [1]
    assert rows[0]["reward"] == 0.5 and rows[0]["grad_norm"] is None


def test_a_disabled_plugin_named_by_a_stock_key_says_what_disabled_it(tmp_path: Path, fake_site: Path) -> None:
    make_dist(fake_site, "acme-rl", {"acme_rl": loss_plugin("acme_loss")}, {"acme": "acme_rl"})
    recipe = _user_recipe(
        tmp_path,
        "longcat:\n  disable: [acme]\nactor_rollout_ref:\n  actor:\n    policy_loss:\n      loss_mode: acme_loss\n",
    )
    proc = run_cli("validate", str(recipe))
    assert proc.returncode == 2
    assert "which is disabled by longcat.disable[0] ('acme')" in proc.stderr, proc.stderr
    assert "did you mean" not in proc.stderr


def test_a_clashing_component_is_not_called_a_clash_with_is(fake_site: Path) -> None:
    from longcat_plugins.host import Host, UnknownComponentError

    make_dist(fake_site, "one-dist", {"one_rl": loss_plugin("shared_loss")}, {"one": "one_rl"})
    make_dist(fake_site, "two-dist", {"two_rl": loss_plugin("shared_loss")}, {"two": "two_rl"})
    host = Host().load()
    with pytest.raises(UnknownComponentError) as info:
        host.get("algorithm", "shared_loss")
    assert "is clash" not in str(info.value) and "is not used: clash:" in str(info.value)


# -- item 13: the runtime config group ------------------------------------------------------------


def _user_recipe(tmp_path: Path, body: str, defaults: str = "  - grpo_arithmetic\n  - runtime: cpu\n") -> Path:
    """A user's own recipe in their own directory, composing our shipped pieces."""
    recipe = tmp_path / "mine" / "my_recipe.yaml"
    recipe.parent.mkdir(parents=True, exist_ok=True)
    recipe.write_text(
        "hydra:\n  callbacks:\n    longcat:\n      _target_: longcat_plugins.hydra_callback.LongcatCallback\n"
        f"defaults:\n{defaults}  - _self_\n{body}"
    )
    return recipe


def test_a_user_recipe_composes_the_cpu_runtime_group_with_validate(tmp_path: Path, tiny_assets) -> None:
    recipe = _user_recipe(tmp_path, "trainer:\n  total_training_steps: 3\n")
    model = f"actor_rollout_ref.model.path={tiny_assets.model}"
    ok = run_cli("validate", "--cpu", str(recipe), model)
    assert ok.returncode == 0, ok.stderr
    # without the group the CPU checks name the keys the group sets
    bare = _user_recipe(tmp_path, "", defaults="  - grpo_arithmetic\n")
    bad = run_cli("validate", "--cpu", str(bare), model)
    assert bad.returncode == 2 and "trainer.device" in bad.stderr and "actor_rollout_ref.actor.strategy" in bad.stderr
    # ... and `+runtime=cpu` adds it from the command line
    assert run_cli("validate", "--cpu", str(bare), model, "+runtime=cpu").returncode == 0


def test_a_user_recipe_composes_the_runtime_group_and_shipped_recipes_with_hydra(tmp_path: Path) -> None:
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    shipped = _user_recipe(tmp_path, "trainer:\n  total_training_steps: 3\n", defaults="  - cpu_demo\n")
    grouped = _user_recipe(tmp_path / "g", "")
    for recipe in (shipped, grouped):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(recipe.parent), version_base=None):
            cfg = compose(config_name=recipe.stem)
        assert cfg.trainer.device == "cpu" and cfg.actor_rollout_ref.rollout.name == "hf"
        assert cfg.ray_kwargs.ray_init.num_gpus == 1 and cfg.algorithm.adv_estimator == "grpo"
    assert cfg.trainer.total_training_steps == 5
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(shipped.parent), version_base=None):
        assert compose(config_name=shipped.stem).trainer.total_training_steps == 3


def test_the_shipped_recipes_are_a_hydra_package_in_an_editable_install() -> None:
    import importlib.resources

    names = {p.name for p in importlib.resources.files("longcat_plugins._configs").iterdir()}
    assert {"cpu_demo.yaml", "runtime"} <= names
    assert (importlib.resources.files("longcat_plugins._configs") / "runtime" / "cpu.yaml").is_file()


# -- items 14 / 18.1: a start that imports only what the command uses ---------------------------

IMPORT_PROBE = """
import runpy, sys
sys.argv = ["longcat-plugins", *{args!r}]
try:
    runpy.run_module("longcat_plugins", run_name="__main__")
except SystemExit as exc:
    code = exc.code
else:
    code = 0
heavy = sorted(m for m in ("verl", "ray", "torch", "sympy", "transformers") if m in sys.modules)
print("HEAVY=" + ",".join(heavy), file=sys.stderr)
sys.exit(code)
"""


def _probe_imports(*args: str) -> tuple[subprocess.CompletedProcess[str], str]:
    proc = subprocess.run(
        [sys.executable, "-c", IMPORT_PROBE.format(args=list(args))],
        capture_output=True,
        text=True,
        # built-ins only: a third-party plugin installed in this environment (the session's example
        # plugin) may import verl itself, which is its author's choice, not our start-up
        env={**os.environ, "COLUMNS": "200", "LONGCAT_PLUGINS_DISABLE_AUTOLOAD": "1"},
        timeout=300,
    )
    heavy = next(line for line in proc.stderr.splitlines() if line.startswith("HEAVY="))
    return proc, heavy.removeprefix("HEAVY=")


def test_list_imports_neither_verl_nor_torch_and_prints_no_verl_warnings() -> None:
    proc, heavy = _probe_imports("list", "--json")
    assert proc.returncode == 0, proc.stderr
    assert heavy == "", heavy
    names = {c["name"] for p in json.loads(proc.stdout)["plugins"] for c in p["components"]}
    assert {"triplet_clip", "longcat_router", "dora", "longcat_tool_agent", "ties"} <= names


def test_fuse_dry_run_imports_neither_verl_nor_ray(tmp_path: Path) -> None:
    from test_fusion_cli import good_config
    from test_fusion_support import random_family, write_family

    base, experts = random_family(n_experts=2, seed=3)
    base_dir, expert_dirs = write_family(tmp_path / "in", base, experts, shards=2)
    config = good_config(tmp_path, (base, experts, base_dir, expert_dirs))
    proc, heavy = _probe_imports("fuse", str(config), "--dry-run")
    assert proc.returncode == 0, proc.stderr
    assert heavy == "", heavy  # a built-in method checks its values without tensors


def test_fuse_dry_run_rejects_a_bad_parameter_value_without_importing_torch(tmp_path: Path) -> None:
    from test_fusion_cli import good_config
    from test_fusion_support import random_family, write_family

    base, experts = random_family(n_experts=2, seed=3)
    base_dir, expert_dirs = write_family(tmp_path / "in", base, experts, shards=2)
    config = good_config(tmp_path, (base, experts, base_dir, expert_dirs), params={"drop_rate": 1.5})
    proc, heavy = _probe_imports("fuse", str(config), "--dry-run")
    assert proc.returncode == 2 and "params.drop_rate: must be in [0, 1), got 1.5" in proc.stderr, proc.stderr
    assert heavy == "", heavy


def test_verl_warnings_never_reach_doctor_output() -> None:
    proc = run_cli("doctor")
    assert "engine is not available" not in proc.stdout + proc.stderr


def test_validating_in_a_verl_process_registers_lazy_managers_without_half_made_imports() -> None:
    """The Hydra gate validates inside main_ppo (verl imported): resolving a reward manager's
    lazy target there must not meet its own module half-initialised (the bridge imports the
    verl registry first), so nothing is refused and every manager lands in verl's registry."""
    code = """
        import logging, warnings
        warnings.filterwarnings("ignore")
        logging.basicConfig(level=logging.WARNING, format="%(message)s")
        import verl
        from longcat_plugins.config import compose, validate_config
        problems, _ = validate_config(compose("configs/reward_router_cpu.yaml"))
        from verl.experimental.reward_loop.reward_manager.registry import REWARD_MANAGER
        print(problems, sorted(k for k in REWARD_MANAGER if k.startswith("longcat")))
    """
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, cwd=REPO, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    assert "cannot import" not in proc.stderr, proc.stderr
    assert (
        "[] ['longcat_code', 'longcat_genrm', 'longcat_math', 'longcat_router', 'longcat_tool_format']" in proc.stdout
    )
