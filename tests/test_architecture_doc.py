"""docs/architecture.md names modules, classes and functions of ours and of verl in backticks
(``module`` or ``module:attr``); every one must import, so the map cannot drift from the house."""

from __future__ import annotations

import importlib
import re
from typing import Any

import pytest
from conftest import REPO

DOC = REPO / "docs" / "architecture.md"
#: a backticked dotted name of ours or verl's, optionally ``:attr`` (dotted too)
NAME = re.compile(r"`((?:longcat_plugins|verl)(?:\.\w+)*(?::\w+(?:\.\w+)*)?)`")


def resolve(name: str) -> Any:
    """The object ``name`` denotes: ``module:attr``, a module, or a module's dotted attribute."""
    module, _, attr = name.partition(":")
    if not attr:
        parts = module.split(".")
        for cut in range(len(parts), 0, -1):  # the longest importable prefix, the rest attributes
            try:
                obj: Any = importlib.import_module(".".join(parts[:cut]))
            except ModuleNotFoundError:
                continue
            for part in parts[cut:]:
                obj = getattr(obj, part)
            return obj
        raise ModuleNotFoundError(module)
    obj = importlib.import_module(module)
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


def named() -> list[str]:
    return sorted(set(NAME.findall(DOC.read_text())))


def test_the_doc_names_the_parts_of_the_house() -> None:
    names = named()
    for part in ("host", "verl_bridge", "runtime", "learning", "algorithms", "rewards", "environments", "schedulers"):
        assert any(f"longcat_plugins.{part}" in n for n in names), f"docs/architecture.md names nothing of {part}"


@pytest.mark.parametrize("name", named())
def test_every_name_in_the_doc_imports(name: str) -> None:
    try:
        resolve(name)
    except (ImportError, AttributeError) as exc:
        pytest.fail(f"docs/architecture.md names `{name}`, which does not resolve: {exc}")


def test_a_name_that_does_not_exist_fails_to_resolve() -> None:
    """The check can fail: a renamed module or attribute is caught, not skipped."""
    assert resolve("longcat_plugins.learning.warmstart:WarmStart").__name__ == "WarmStart"
    with pytest.raises(AttributeError):
        resolve("longcat_plugins.learning.warmstart:NoSuchThing")
    with pytest.raises(ModuleNotFoundError):
        resolve("longcat_plugins_nowhere.module")
