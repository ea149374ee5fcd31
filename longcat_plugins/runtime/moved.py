"""The learning kit's old import paths, for one release: ``longcat_plugins.runtime.<module>`` of a
module that moved to :mod:`longcat_plugins.learning` still imports, as that same module object,
with a :class:`DeprecationWarning` naming the new path.

An alias finder rather than a shim file per module: the old files are gone, so git sees each move
as a rename (history and concurrent edits follow the file), and the runtime package holds no
import of the learning kit (the kit builds on the runtime, never the reverse).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

#: old module path -> new module path (removed in the release after 0.x: see docs/architecture.md)
MOVED: dict[str, str] = {
    f"longcat_plugins.runtime.{old}": f"longcat_plugins.learning.{new}"
    for old, new in {
        "assets": "assets",
        "code_probe": "code_probe",
        "code_warmstart": "code_warmstart",
        "demos": "demos",
        "sft": "sft",
        "sft_dataset": "sft_dataset",
        "tool_probe": "tool_probe",
        "tool_warmstart": "tool_warmstart",
        "warmstart": "arithmetic_warmstart",
    }.items()
}


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds the old paths of :data:`MOVED`; loading one returns the module at its new path."""

    def find_spec(
        self, fullname: str, path: Any, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        return importlib.util.spec_from_loader(fullname, self) if fullname in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = MOVED[spec.name]
        warnings.warn(
            f"{spec.name} moved to {new}: import it from there ({spec.name} is removed in the next release)",
            DeprecationWarning,
            stacklevel=2,  # warnings skips importlib's own frames: this names the importing line
        )
        return importlib.import_module(new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new path is already imported."""


def install() -> None:
    """Put the alias finder on ``sys.meta_path`` (once per process)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedFinder())
