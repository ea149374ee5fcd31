"""pytest plugin for plugin authors (loaded automatically through the ``pytest11`` entry point).

Fixtures give a fresh host with only the plugins you choose, optionally made the process-wide
one and pushed into verl's registries, and undo everything afterwards, the way pytest's
``pytester`` lets pytest plugins be tested::

    def test_my_loss_is_in_verl(longcat_host):
        longcat_host(my_plugin, activate=True)
        from verl.trainer.ppo.core_algos import get_policy_loss_fn
        assert get_policy_loss_fn("my_loss") is my_loss
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import pytest

from longcat_plugins.host import Host, set_host
from longcat_plugins.selection import Selection

HostFactory = Callable[..., Host]


def make_host(
    *plugins: Any,
    builtins: bool = False,
    entry_points: bool = False,
    selection: Selection | None = None,
    enable: tuple[str, ...] = (),
    disable: tuple[str, ...] = (),
    settings: Mapping[str, Mapping[str, Mapping[str, Any]]] | None = None,
    check: bool = False,
) -> Host:
    """A host with exactly ``plugins`` (modules or objects, or ``(name, plugin)`` pairs), plus
    the built-ins and/or every installed entry point when asked.

    ``settings`` is what a user writes under ``longcat.settings`` (``{family: {name: {...}}}``);
    it is validated against the components' schemas here, so a wrong key fails the test at once
    with its key path, and components read it with :func:`longcat_plugins.settings_for`.

    ``check=True`` calls every policy loss, advantage estimator, reward function and reward
    manager of ``plugins`` once the way verl does (what ``longcat-plugins check`` runs) and raises
    :class:`~longcat_plugins.contracts.ContractError` listing every problem.
    """
    from longcat_plugins.selection import Rule

    if selection is None:
        selection = Selection(
            tuple(Rule(p, "test enable") for p in enable),
            tuple(Rule(p, "test disable") for p in disable),
            settings=dict(settings or {}),
        )
    elif settings is not None:
        raise TypeError("give either selection= or settings=, not both (a Selection carries its own settings)")
    host = Host(selection)
    if builtins or entry_points:
        import importlib.metadata

        from longcat_plugins.host import ENTRY_POINT_GROUP, _is_builtin

        eps = [ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP) if entry_points or _is_builtin(ep)]
        host.load(eps)
    for plugin in plugins:
        name, obj = plugin if isinstance(plugin, tuple) else (getattr(plugin, "__name__", repr(plugin)), plugin)
        host.add_plugin(obj, name=name, distribution="test")
    if settings:
        from longcat_plugins.config import ConfigError, validate_section

        problems = validate_section({"settings": dict(settings)}, host)
        if problems:
            raise ConfigError(problems, "settings=")
    if check:
        from longcat_plugins.contracts import ContractError, active, check_component

        mine = {name for name, info in host.plugins.items() if info.distribution == "test"}
        with active(host):
            found = [
                message
                for comp in host.components()
                if comp.plugin in mine
                and comp.kind in ("policy_loss", "adv_estimator", "reward_function", "reward_manager")
                for message in check_component(comp).messages()
            ]
        if found:
            raise ContractError("\n".join(found))
    return host


class _VerlSandbox:
    """Snapshots the verl registries the bridge writes to and restores them."""

    def __init__(self) -> None:
        from longcat_plugins.verl_bridge import TARGETS, bridge

        self._saved: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self._bridge_state = (dict(bridge.registered), dict(bridge.results))
        for target in TARGETS.values():
            module = sys.modules.get(target.module)
            if module is not None:
                registry = target.registry(module)
                self._saved.append((registry, dict(registry)))

    def restore(self) -> None:
        from longcat_plugins.verl_bridge import bridge

        for registry, content in self._saved:
            registry.clear()
            registry.update(content)
        bridge.registered, bridge.results = self._bridge_state


@pytest.fixture
def longcat_host_factory() -> HostFactory:
    """``make(*plugins, builtins=False, entry_points=False, enable=(), disable=(), settings=None)``
    -> a fresh :class:`Host` that touches nothing global."""
    return make_host


@pytest.fixture
def longcat_host() -> Iterator[HostFactory]:
    """Like ``longcat_host_factory``, but with ``activate=True`` the host becomes the
    process-wide one (so :func:`longcat_plugins.settings_for` reads its ``settings=``) and its
    components are registered into verl; undone at teardown."""
    previous = set_host(None)
    set_host(previous)
    sandboxes: list[_VerlSandbox] = []

    def factory(*plugins: Any, activate: bool = False, **kwargs: Any) -> Host:
        host = make_host(*plugins, **kwargs)
        if activate:
            import verl  # noqa: F401 - installs the bridge through verl's own plugin discovery

            from longcat_plugins.verl_bridge import TARGETS, bridge

            for target in TARGETS.values():
                __import__(target.module)
            sandboxes.append(_VerlSandbox())
            set_host(host)
            bridge.sync(host)
        return host

    yield factory
    for sandbox in reversed(sandboxes):
        sandbox.restore()
    set_host(previous)
