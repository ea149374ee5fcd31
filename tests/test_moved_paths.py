"""The learning kit's old import paths (``longcat_plugins.runtime.<module>``) and
``environments.contract.load_environment`` resolve for one release, to the very objects at their
new paths, with a DeprecationWarning that names the new path."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest
from conftest import REPO

from longcat_plugins.runtime.moved import MOVED


def _forget(name: str) -> None:
    """Drop an alias from the import system so the next import goes through the finder again."""
    sys.modules.pop(name, None)
    parent, _, child = name.rpartition(".")
    if parent in sys.modules and child in vars(sys.modules[parent]):
        delattr(sys.modules[parent], child)


@pytest.mark.parametrize(("old", "new"), sorted(MOVED.items()))
def test_an_old_path_warns_and_is_the_new_module(old: str, new: str) -> None:
    _forget(old)
    with pytest.warns(DeprecationWarning, match=rf"{old} moved to {new}\b"):
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)


def test_from_import_of_an_old_module_and_its_names() -> None:
    _forget("longcat_plugins.runtime.warmstart")
    with pytest.warns(DeprecationWarning, match="longcat_plugins.learning.arithmetic_warmstart"):
        from longcat_plugins.runtime import warmstart
    from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start

    assert warmstart.ensure_warm_start is ensure_warm_start
    _forget("longcat_plugins.runtime.tool_warmstart")
    with pytest.warns(DeprecationWarning, match="longcat_plugins.learning.tool_warmstart"):
        from longcat_plugins.runtime.tool_warmstart import DEMO_PLAN
    assert DEMO_PLAN.key() == "479350de8d"  # the same plan, the same cache directory


def test_only_moved_modules_are_aliased() -> None:
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("longcat_plugins.runtime.no_such_module")
    assert "longcat_plugins.runtime.platform" not in MOVED  # the runtime's own modules stay


def test_contract_load_environment_warns_and_is_the_runtime_one() -> None:
    from longcat_plugins.environments import contract
    from longcat_plugins.environments.runtime import load_environment

    with pytest.warns(DeprecationWarning, match="longcat_plugins.environments.runtime.load_environment"):
        assert contract.load_environment is load_environment
    with pytest.raises(AttributeError, match="no attribute 'no_such_name'"):
        contract.no_such_name  # noqa: B018


def test_the_warning_is_shown_by_default_at_the_importing_line() -> None:
    """Python shows a DeprecationWarning by default only when it is attributed to ``__main__``:
    the finder's stacklevel must point past importlib at the user's import."""
    proc = subprocess.run(
        [sys.executable, "-c", "import longcat_plugins.runtime.assets"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"},
    )
    assert proc.returncode == 0, proc.stderr
    assert (
        "<string>:1: DeprecationWarning: longcat_plugins.runtime.assets moved to longcat_plugins.learning.assets"
        in (proc.stderr)
    )
