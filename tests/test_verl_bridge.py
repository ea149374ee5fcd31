"""The bridge in fresh interpreters: what ``import verl`` does with our entry point."""

from __future__ import annotations

import json
import sys
import textwrap
import types
from pathlib import Path

import pytest
from conftest import loss_plugin, make_dist, run_python

from longcat_plugins.import_hooks import when_imported

PROBE = """
    import json, sys
    import verl
    assert "longcat_plugins.verl_bridge" in sys.modules, "verl did not load the bridge"
    cheap = "verl.trainer.ppo.core_algos" not in sys.modules
    from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY
    print(json.dumps({"cheap": cheap, "losses": sorted(POLICY_LOSS_REGISTRY)}))
"""


def probe(env: dict[str, str] | None = None) -> tuple[dict, str]:
    proc = run_python(PROBE, env=env)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1]), proc.stderr


def test_import_verl_registers_third_party_component_lazily(fake_site: Path) -> None:
    make_dist(fake_site, "acme-rl", {"acme_rl": loss_plugin("acme_loss")}, {"acme": "acme_rl"})
    out, _ = probe()
    assert out["cheap"], "import verl must not import the registry modules itself"
    assert "acme_loss" in out["losses"] and "vanilla" in out["losses"]


def test_env_disable_keeps_it_out_of_verl(fake_site: Path) -> None:
    make_dist(fake_site, "acme-rl", {"acme_rl": loss_plugin("acme_loss")}, {"acme": "acme_rl"})
    for env in ({"LONGCAT_PLUGINS_DISABLE": "acme"}, {"LONGCAT_PLUGINS_DISABLE": "algorithm:acme_loss"}):
        out, _ = probe(env)
        assert "acme_loss" not in out["losses"], env
    out, _ = probe({"LONGCAT_PLUGINS_CONFIG": json.dumps({"disable": ["acme-rl"]})})
    assert "acme_loss" not in out["losses"]


def test_broken_plugin_never_breaks_import_verl_and_is_logged_loudly(fake_site: Path) -> None:
    make_dist(fake_site, "bad-dist", {"bad_rl": "raise RuntimeError('kaput')"}, {"bad": "bad_rl"})
    make_dist(fake_site, "acme-rl", {"acme_rl": loss_plugin("acme_loss")}, {"acme": "acme_rl"})
    out, stderr = probe()
    assert "acme_loss" in out["losses"]
    assert "WARNING" in stderr and "plugin 'bad' (distribution bad-dist)" in stderr and "kaput" in stderr


def test_component_shadowing_a_stock_verl_name_is_refused(fake_site: Path) -> None:
    make_dist(fake_site, "evil-dist", {"evil_rl": loss_plugin("vanilla", fn="not_vanilla")}, {"evil": "evil_rl"})
    code = (
        textwrap.dedent(PROBE)
        + "from verl.trainer.ppo.core_algos import POLICY_LOSS_REGISTRY as R\nprint(R['vanilla'].__module__)"
    )
    proc = run_python(code)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip().splitlines()[-1] == "verl.trainer.ppo.core_algos"
    assert "clashes with verl's own" in proc.stderr


def test_when_imported_fires_after_import_and_for_already_imported() -> None:
    seen: list[str] = []
    when_imported("json", lambda m: seen.append(m.__name__))  # already imported: fires now
    assert seen == ["json"]
    name = "longcat_test_fresh_module"
    sys.modules.pop(name, None)
    when_imported(name, lambda m: seen.append(m.__name__ + ":" + str(m.VALUE)))
    mod_dir = Path(__file__).parent / "_fresh"
    mod_dir.mkdir(exist_ok=True)
    (mod_dir / f"{name}.py").write_text("VALUE = 42\n")
    sys.path.insert(0, str(mod_dir))
    try:
        import importlib

        importlib.invalidate_caches()
        mod = importlib.import_module(name)
        assert seen == ["json", f"{name}:42"]
        assert isinstance(mod, types.ModuleType) and mod.__spec__.loader.get_source(name) == "VALUE = 42\n"
    finally:
        sys.path.remove(str(mod_dir))
        sys.modules.pop(name, None)
        (mod_dir / f"{name}.py").unlink()
        mod_dir.rmdir()


def test_registry_imported_while_plugins_load_is_filled_once_the_host_is_built(fake_site: Path) -> None:
    """A plugin importing a verl registry module during discovery queues it; building the host
    from anywhere (not only from the bridge) must then register into it."""
    source = "import verl.trainer.ppo.core_algos\n" + textwrap.dedent(loss_plugin("early_loss"))
    make_dist(fake_site, "early-dist", {"early_rl": source}, {"early": "early_rl"})
    proc = run_python(
        """
        import sys
        from longcat_plugins.host import get_host
        get_host()
        print("early_loss" in sys.modules["verl.trainer.ppo.core_algos"].POLICY_LOSS_REGISTRY)
        """
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "True"


FIRST_IMPORT_PROBE = """
    import logging, sys
    logging.basicConfig(level=logging.WARNING, stream=sys.stdout, format="LOG %(message)s")
    import longcat_plugins.schedulers.{module}
    from verl.trainer.ppo.v1.trainer_base import TRAINER_REGISTRY
    from verl.experimental.fully_async_policy.dynamic_schedule.base import _policy_registry
    from longcat_plugins.schedulers.trainer import DoraTrainer
    from longcat_plugins.schedulers.elastic import DoraSchedulePolicy
    print("dora", TRAINER_REGISTRY.get("dora") is DoraTrainer)
    print("dora_elastic", _policy_registry.get("dora_elastic") is DoraSchedulePolicy)
"""


@pytest.mark.parametrize("module", ["sampler", "trainer", "elastic"])
def test_a_component_module_imported_first_still_registers_once_it_is_complete(module: str) -> None:
    """Importing one of our scheduler modules first imports verl's registries from inside it; the
    components those registries want import that half-made module. They register as soon as it
    has finished, with no warning."""
    proc = run_python(FIRST_IMPORT_PROBE.format(module=module))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dora True" in proc.stdout and "dora_elastic True" in proc.stdout, proc.stdout + proc.stderr[-2000:]
    assert "LOG" not in proc.stdout and "WARNING" not in proc.stderr, proc.stdout + proc.stderr[-2000:]
