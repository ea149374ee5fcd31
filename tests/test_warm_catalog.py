"""The warm-start catalog and ``longcat-plugins warm-starts``: what the README's test command
builds ahead of the suites must be what their fixtures take, and bad names build nothing."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import run_cli

from longcat_plugins.learning.warm_catalog import CATALOG, FOR_TESTS, check_names, warm_start

TESTS = Path(__file__).parent
README = TESTS.parent / "README.md"


def test_the_names_the_suites_take_are_the_ones_built_ahead() -> None:
    """Every ``warm_start("name")`` of a test fixture is in FOR_TESTS and the other way round:
    a fixture left out would build its SFT inside the suite, beside the other worker."""
    used = set()
    for path in TESTS.glob("test_*.py"):
        if path.name == Path(__file__).name:
            continue
        used |= set(re.findall(r"\bwarm_start\(\"([a-z0-9-]+)\"\)", path.read_text()))
    assert used == set(FOR_TESTS)
    check_names(FOR_TESTS)


def test_the_readme_test_command_builds_them_before_pytest() -> None:
    block = README.read_text().split("<!-- test-command -->")[1].split("<!-- /test-command -->")[0]
    assert "longcat-plugins warm-starts --for-tests &&" in block
    assert block.index("warm-starts") < block.index("pytest")


def test_unknown_names_are_refused_with_the_choices_and_nothing_is_built(tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    proc = run_cli("warm-starts", "tool", "tool-verdictz", "--cache-dir", str(cache))
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "'tool-verdictz'" in proc.stderr and "'tool'" not in proc.stderr.split(";")[0]
    assert all(name in proc.stderr for name in CATALOG)
    assert not cache.exists()  # refused before the first (valid) name was built
    with pytest.raises(ValueError, match="unknown warm start.*'nope'"):
        warm_start("nope", tmp_path)


@pytest.mark.parametrize("args", [["tool", "--all"], ["--all", "--for-tests"], ["code", "--for-tests"]])
def test_one_selection_at_a_time(args: list[str], tmp_path: Path) -> None:
    proc = run_cli("warm-starts", *args, "--cache-dir", str(tmp_path / "cache"))
    assert proc.returncode == 2 and "one of them" in proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "cache").exists()


def test_without_names_it_lists_who_starts_from_each() -> None:
    proc = run_cli("warm-starts")
    assert proc.returncode == 0, proc.stderr
    listed = [line.split()[0] for line in proc.stdout.splitlines()]
    assert listed == list(CATALOG)
    assert "demo --recipe longcat_tool" in proc.stdout
