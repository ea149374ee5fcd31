"""Run a callback right after a named module finishes importing (or now, if it already has).

The verl bridge uses this so that ``import verl`` stays cheap: each registry is filled the
moment its own module is imported, in whatever process that happens, instead of importing
every verl registry module (seconds and hundreds of MB per Ray worker) up front.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
import threading
from collections.abc import Callable
from types import ModuleType
from typing import Any

Callback = Callable[[ModuleType], None]


class _NotifyingLoader(importlib.abc.Loader):
    """Wraps the real loader; everything but ``exec_module`` is forwarded to it."""

    def __init__(self, loader: Any, finder: _PostImportFinder) -> None:
        self._loader = loader
        self._finder = finder

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._loader.exec_module(module)
        self._finder.fire(module)

    def __getattr__(self, name: str) -> Any:  # get_source, get_code, is_package, get_filename, ...
        return getattr(self._loader, name)


class _PostImportFinder(importlib.abc.MetaPathFinder):
    def __init__(self) -> None:
        self.callbacks: dict[str, list[Callback]] = {}
        #: top-level packages whose every module reports when it finishes (see watch_package)
        self.packages: dict[str, list[Callback]] = {}
        self._lock = threading.RLock()
        self._local = threading.local()

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> Any:
        if fullname not in self.callbacks and fullname.partition(".")[0] not in self.packages:
            return None
        busy: set[str] = self._local.__dict__.setdefault("busy", set())
        if fullname in busy:
            return None
        busy.add(fullname)
        try:
            for finder in sys.meta_path:
                if finder is self or not hasattr(finder, "find_spec"):
                    continue
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
            else:
                return None
        finally:
            busy.discard(fullname)
        source_module = str(spec.origin or "").endswith(".py")  # not a namespace or resource directory
        if fullname in self.callbacks or source_module:
            if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                spec.loader = _NotifyingLoader(spec.loader, self)
        return spec

    def fire(self, module: ModuleType) -> None:
        with self._lock:
            callbacks = list(self.callbacks.get(module.__name__, ()))
            callbacks += self.packages.get(module.__name__.partition(".")[0], ())
        for callback in callbacks:
            callback(module)


_finder = _PostImportFinder()


def when_imported(module_name: str, callback: Callback) -> None:
    """Call ``callback(module)`` once ``module_name`` is imported: now if it already is, and
    again on every later (re)import. Callbacks must be idempotent and must not raise."""
    with _finder._lock:
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
        _finder.callbacks.setdefault(module_name, []).append(callback)
    module = sys.modules.get(module_name)
    if module is not None and getattr(module, "__spec__", None) is not None and not _initializing(module):
        callback(module)


def _initializing(module: ModuleType) -> bool:
    return bool(getattr(module.__spec__, "_initializing", False))


def watch_package(package: str, callback: Callback | None = None) -> None:
    """Make every module of the top-level ``package`` imported from now on report when it has
    finished importing, to ``callback`` (if given) and to callbacks added later. Watch a package
    before its modules are imported (``longcat_plugins`` watches itself in its ``__init__``):
    a module already executing reports nothing."""
    with _finder._lock:
        if _finder not in sys.meta_path:
            sys.meta_path.insert(0, _finder)
        callbacks = _finder.packages.setdefault(package, [])
        if callback is not None and callback not in callbacks:
            callbacks.append(callback)


def will_report(module: ModuleType) -> bool:
    """Will ``module``, still executing, report its end to the package callbacks?"""
    return isinstance(getattr(getattr(module, "__spec__", None), "loader", None), _NotifyingLoader)


def initializing(module: ModuleType) -> bool:
    """Is ``module`` still executing its body (in ``sys.modules`` but half-made)?"""
    return getattr(module, "__spec__", None) is not None and _initializing(module)
