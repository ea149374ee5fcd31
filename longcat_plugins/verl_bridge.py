"""The one entry point in verl's ``verl.plugins`` group: host -> verl registries.

verl imports this module from ``verl/__init__.py`` in every process that imports verl (the
driver, every Ray worker, reward and agent-loop workers). Importing it must never make
``import verl`` fail and must stay cheap, so it only arranges, per registry, that the
enabled components are registered the moment that registry's module is imported
(:mod:`longcat_plugins.import_hooks`). Failures are logged at WARNING: verl itself would
hide them at DEBUG.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from longcat_plugins import host as host_mod
from longcat_plugins import import_hooks
from longcat_plugins.components import Component
from longcat_plugins.import_hooks import when_imported
from longcat_plugins.verl_version import TESTED_VERL, installed_verl, verl_is_tested

logger = logging.getLogger("longcat_plugins.verl_bridge")


@dataclass(frozen=True)
class VerlTarget:
    """Where one kind of component lands in verl."""

    kind: str
    module: str
    #: reads the registry dict out of the imported module
    registry: Callable[[ModuleType], MutableMapping[str, Any]]
    #: the value verl stores for a component (most store the object; agent loops a hydra target)
    entry: Callable[[Component], Any]
    #: verl's base class the target must subclass, as (module, attribute), if any
    base: tuple[str, str] | None = None
    #: the stock verl key that selects a name of this kind, for validation messages
    selected_by: str = ""
    #: values of ``selected_by`` that are the setting's own and name no component (``admission:
    #: none`` asks no policy), accepted by validation like stock names
    setting_values: tuple[str, ...] = ()
    #: register the moment ``module`` is imported (verl's registries). The scheduler core's
    #: registries are not hooked: plugin modules import them at their own import time, and a
    #: hook there would build the host while that plugin is half-imported. They are filled on
    #: first lookup (:mod:`longcat_plugins.schedulers.core.registry`) and by :meth:`Bridge.sync`.
    on_import: bool = True


def _attr(name: str) -> Callable[[ModuleType], MutableMapping[str, Any]]:
    return lambda module: getattr(module, name)


def _same(comp: Component) -> Any:
    return comp.target


def _hydra_target(comp: Component) -> Any:
    return {"_target_": comp.target_path}


TARGETS: dict[str, VerlTarget] = {
    t.kind: t
    for t in (
        VerlTarget(
            "policy_loss",
            "verl.trainer.ppo.core_algos",
            _attr("POLICY_LOSS_REGISTRY"),
            _same,
            selected_by="actor_rollout_ref.actor.policy_loss.loss_mode",
        ),
        VerlTarget(
            "adv_estimator",
            "verl.trainer.ppo.core_algos",
            _attr("ADV_ESTIMATOR_REGISTRY"),
            _same,
            selected_by="algorithm.adv_estimator",
        ),
        VerlTarget(
            "reward_manager",
            "verl.experimental.reward_loop.reward_manager.registry",
            _attr("REWARD_MANAGER"),
            _same,
            base=("verl.experimental.reward_loop.reward_manager.base", "RewardManagerBase"),
            selected_by="reward.reward_manager.name",
        ),
        VerlTarget(
            "agent_loop",
            "verl.experimental.agent_loop.agent_loop",
            _attr("_agent_loop_registry"),
            _hydra_target,
            base=("verl.experimental.agent_loop.agent_loop", "AgentLoopBase"),
            selected_by="actor_rollout_ref.rollout.agent.default_agent_loop",
        ),
        VerlTarget(
            "trainer",
            "verl.trainer.ppo.v1.trainer_base",
            _attr("TRAINER_REGISTRY"),
            _same,
            base=("verl.trainer.ppo.v1.trainer_base", "PPOTrainer"),
            selected_by="trainer.v1.trainer_mode",
        ),
        VerlTarget(
            "schedule_policy",
            "verl.experimental.fully_async_policy.dynamic_schedule.base",
            _attr("_policy_registry"),
            _same,
            base=("verl.experimental.fully_async_policy.dynamic_schedule.base", "DynamicSchedulePolicyBase"),
            selected_by="async_training.dynamic_schedule_policy",
        ),
        # not verl's: the scheduler core's registries, read by verl's ``dora`` trainer (its sampler
        # and load balancer) and by the Python DoraController
        VerlTarget(
            "dora_eviction_policy",
            "longcat_plugins.schedulers.core.versions",
            _attr("EVICTION_POLICIES"),
            _same,
            selected_by="longcat.settings.scheduler.dora.eviction",
            on_import=False,
        ),
        VerlTarget(
            "dora_balancer",
            "longcat_plugins.schedulers.core.balancer",
            _attr("BALANCERS"),
            _same,
            selected_by="longcat.settings.scheduler.dora.balancer",
            on_import=False,
        ),
        VerlTarget(
            "dora_admission",
            "longcat_plugins.schedulers.core.admission",
            _attr("ADMISSIONS"),
            _same,
            selected_by="longcat.settings.scheduler.dora.admission",
            setting_values=("none",),
            on_import=False,
        ),
    )
}


@dataclass
class Registration:
    component: Component
    target: VerlTarget
    ok: bool
    message: str = ""


class Bridge:
    """Tracks what it put into verl's registries so it can tell ours from stock entries,
    take back what a later selection disables, and report per component to ``doctor``."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.registered: dict[tuple[str, str], Any] = {}  # (kind, name) -> value we stored
        self.results: dict[tuple[str, str], Registration] = {}
        self._pending: list[ModuleType] = []
        #: registry modules imported while a package on their import path was half-made
        self._deferred: set[str] = set()
        #: registry modules with a component whose own module (or one it imports) was half-made
        self._waiting: set[str] = set()
        #: packages whose import hook is running (still flagged as initializing, but complete)
        self._finishing: set[str] = set()
        #: per thread: >0 while registering, i.e. while importing some component's lazy target
        self._local = threading.local()

    def on_module_imported(self, module: ModuleType) -> None:
        """Import-hook callback: register every enabled component whose registry is in ``module``."""
        try:
            if _half_made_package(exclude=self._finishing):
                # e.g. core_algos imported from inside verl.experimental.agent_loop's __init__:
                # building the host now would import plugin modules (a v1 trainer) that import
                # that half-made package. Its import hook calls retry_deferred once it is complete.
                self._deferred.add(module.__name__)
                return
            if host_mod.is_building() or getattr(self._local, "depth", 0):
                # a plugin being loaded, or a component's module being imported for registration,
                # imported this verl module: finish once that import is complete, so no plugin
                # module is asked for while half-initialised
                self._pending.append(module)
                return
            host = host_mod.get_host()
            self._sync_module(module, host)
            self.flush_pending(host)
        except Exception:  # never break the import of a verl module
            logger.warning("longcat-plugins: registering components into %s failed", module.__name__, exc_info=True)

    def on_plugin_module_imported(self, module: ModuleType) -> None:
        """A module of a watched package finished: retry registrations that found it half-made."""
        import sys

        if not self._waiting or getattr(self._local, "depth", 0):
            return
        with self._lock:
            waiting, self._waiting = sorted(self._waiting), set()
        for name in waiting:
            registry_module = sys.modules.get(name)
            if registry_module is not None:
                self.on_module_imported(registry_module)

    def retry_deferred(self, package: ModuleType) -> None:
        """A package on some registry's import path finished: register what waited for it."""
        import sys

        self._finishing.add(package.__name__)
        try:
            for name in sorted(self._deferred):
                module = sys.modules.get(name)
                self._deferred.discard(name)
                if module is not None:
                    self.on_module_imported(module)
        finally:
            self._finishing.discard(package.__name__)

    def flush_pending(self, host: host_mod.Host) -> None:
        """Registries imported by a plugin while the host was being built (whoever built it)."""
        try:
            while self._pending:
                self._sync_module(self._pending.pop(), host)
        except Exception:  # never break the caller of get_host
            logger.warning("longcat-plugins: registering components after the host was built failed", exc_info=True)

    def sync(self, host: host_mod.Host | None = None) -> None:
        """Bring every already-imported registry in line with ``host`` (after a re-selection)."""
        import sys

        host = host or host_mod.get_host()
        for module_name in {t.module for t in TARGETS.values()}:
            module = sys.modules.get(module_name)
            if module is not None:
                self._sync_module(module, host)
        self.flush_pending(host)

    def _sync_module(self, module: ModuleType, host: host_mod.Host) -> None:
        self._local.depth = getattr(self._local, "depth", 0) + 1
        try:
            self._sync_module_locked(module, host)
        finally:
            self._local.depth -= 1

    def _sync_module_locked(self, module: ModuleType, host: host_mod.Host) -> None:
        with self._lock:
            for target in TARGETS.values():
                if target.module != module.__name__:
                    continue
                registry = target.registry(module)
                wanted = {c.name: c for c in host.components(kind=target.kind)}
                for (kind, name), value in list(self.registered.items()):
                    if kind == target.kind and name not in wanted:
                        if registry.get(name) is value:
                            del registry[name]
                        del self.registered[(kind, name)]
                        self.results.pop((kind, name), None)
                for comp in wanted.values():
                    self.results[(target.kind, comp.name)] = self._register(comp, target, registry)
                for problem in host.problems:
                    _warn_once(str(problem), problem.detail)

    def _register(self, comp: Component, target: VerlTarget, registry: MutableMapping[str, Any]) -> Registration:
        refusal = self.refusal(comp, target, registry)
        if isinstance(refusal, Waiting):
            # e.g. the user's first import was our DORA sampler, which imports verl's v1 trainer
            # base, whose hook is here: the trainer component imports that sampler, still
            # half-made. It registers the moment the sampler (or whatever blocks) has finished.
            self._waiting.add(target.module)
            return Registration(comp, target, False, refusal)
        if refusal is not None:
            _warn_once(refusal)
            return Registration(comp, target, False, refusal)
        value = target.entry(comp)
        registry[comp.name] = value
        self.registered[(target.kind, comp.name)] = value
        return Registration(comp, target, True)

    def refusal(self, comp: Component, target: VerlTarget, registry: MutableMapping[str, Any]) -> str | None:
        """Why the bridge will not put ``comp`` into ``registry`` (``None``: it will): it shadows
        a stock verl name, its target cannot be imported, or it is not what verl expects."""
        try:  # a lazy ``module:attr`` target is imported here, in the process that needs it
            value = target.entry(comp)
            resolved = comp.target
        except ImportError as exc:
            message = f"{target.kind} {comp.name!r} from plugin {comp.plugin!r}: {exc}"
            blocking = _half_made_modules(comp)
            if blocking and all(import_hooks.will_report(m) for m in blocking):
                return Waiting(f"{message} (waits for {', '.join(m.__name__ for m in blocking)} to finish importing)")
            return message
        existing = registry.get(comp.name)
        if existing is not None and existing is not self.registered.get((target.kind, comp.name)) and existing != value:
            return (
                f"{target.kind} {comp.name!r} from plugin {comp.plugin!r} ({comp.distribution}) clashes with "
                f"verl's own {existing!r}; not registered. Rename the component."
            )
        if target.base is not None:
            import importlib

            base = getattr(importlib.import_module(target.base[0]), target.base[1])
            if not (isinstance(resolved, type) and issubclass(resolved, base)):
                return f"{target.kind} {comp.name!r} from plugin {comp.plugin!r}: {resolved!r} is not a {base.__name__} subclass"
        elif not callable(resolved):
            return f"{target.kind} {comp.name!r} from plugin {comp.plugin!r}: {resolved!r} is not callable"
        return None

    def stock_names(self, kind: str, module: ModuleType) -> list[str]:
        """Names in verl's registry of ``kind`` that did not come from us."""
        registry = TARGETS[kind].registry(module)
        return sorted(n for n, v in registry.items() if self.registered.get((kind, n)) is not v)


def registration_problems(host: host_mod.Host, include_builtin: bool = False) -> list[tuple[Component, str]]:
    """What the bridge would refuse to register of ``host``'s enabled components, and why;
    imports only the verl registries those components go to. Built-ins are skipped unless
    asked for (``doctor`` checks them; the test suite pins that they register)."""
    import importlib

    out = []
    for comp in host.components():
        target = TARGETS.get(comp.kind)
        info = host.plugins.get(comp.plugin)
        if target is None or (info is not None and info.builtin and not include_builtin):
            continue
        registry = target.registry(importlib.import_module(target.module))
        why = bridge.refusal(comp, target, registry)
        if why is not None:
            out.append((comp, why))
    return out


_warned: set[str] = set()


def _warn_once(message: str, detail: str = "") -> None:
    if message in _warned:
        return
    _warned.add(message)
    logger.warning("longcat-plugins: %s%s", message, f"\n{detail}" if detail and "NoneType: None" not in detail else "")


bridge = Bridge()
host_mod.on_host_built(bridge.flush_pending)


def _package_ancestors(module_name: str) -> list[str]:
    """``verl.a.b.c`` -> ``[verl.a, verl.a.b]`` (the root package is left out)."""
    parts = module_name.split(".")
    return [".".join(parts[:i]) for i in range(2, len(parts))]


#: packages on the import path of some registry module; each gets an import hook (see _install)
REGISTRY_PACKAGES = sorted({p for t in TARGETS.values() if t.on_import for p in _package_ancestors(t.module)})


class Waiting(str):
    """A refusal that lasts only until a half-made module finishes importing."""


def _half_made_modules(comp: Component) -> list[ModuleType]:
    """Modules of ``comp``'s top-level package (and of longcat_plugins) still executing their body."""
    import sys

    tops = {comp.target_path.partition(".")[0], "longcat_plugins"}
    return [
        module
        for name, module in list(sys.modules.items())
        if name.partition(".")[0] in tops and module is not None and import_hooks.initializing(module)
    ]


def _half_made_package(exclude: set[str] | frozenset[str] = frozenset()) -> bool:
    """Is one of :data:`REGISTRY_PACKAGES` (other than ``exclude``) still executing its ``__init__``?"""
    import sys

    for name in REGISTRY_PACKAGES:
        package = sys.modules.get(name)
        if name not in exclude and package is not None:
            if getattr(getattr(package, "__spec__", None), "_initializing", False):
                return True
    return False


def _import_registry_first(comp: Component) -> None:
    """Before a component's lazy target is imported: import the verl registry module it goes
    to, so that registry's import hook runs (and registers) before the target's module starts."""
    import importlib
    import sys

    target = TARGETS.get(comp.kind)
    if target is None or target.module in sys.modules:
        return
    try:
        importlib.import_module(target.module)
    except Exception:  # the target's own import then reports what is missing
        logger.debug("longcat-plugins: importing %s before %s failed", target.module, comp.ref, exc_info=True)


def _install() -> None:
    try:
        from longcat_plugins import components

        if _import_registry_first not in components.BEFORE_RESOLVE:
            components.BEFORE_RESOLVE.append(_import_registry_first)
        for package in REGISTRY_PACKAGES:
            when_imported(package, bridge.retry_deferred)
        import_hooks.watch_package("longcat_plugins", bridge.on_plugin_module_imported)
        for module_name in sorted({t.module for t in TARGETS.values() if t.on_import}):
            when_imported(module_name, bridge.on_module_imported)
        _check_verl_version()
    except Exception:  # never make `import verl` fail
        logger.warning("longcat-plugins: installing the verl bridge failed", exc_info=True)
    try:
        from longcat_plugins.evaluation import verl_metrics

        verl_metrics.install()  # ValidationMetric components (reward:passk), in both trainers' validation
    except Exception:
        logger.warning("longcat-plugins: installing the validation metrics failed", exc_info=True)
    try:
        from longcat_plugins.algorithms import masking
        from longcat_plugins.rewards import failures

        masking.install()  # invalid samples masked out of every estimator's advantages
        failures.install()  # rewards that raise: invalid samples, counted per step, the run stops above a share
    except Exception:
        logger.warning("longcat-plugins: installing the reward-failure guards failed", exc_info=True)
    try:
        from longcat_plugins import runtime

        runtime.install()
    except Exception:
        logger.warning("longcat-plugins: installing the embedded CPU runtime failed", exc_info=True)
    try:
        from longcat_plugins.schedulers import agent_loops_ahead

        agent_loops_ahead.install()  # agent-loop workers' processes beside the engines, the manager beside the replicas
    except Exception:
        logger.warning("longcat-plugins: installing the agent-loop early start failed", exc_info=True)


def _check_verl_version() -> None:
    version = installed_verl()
    if version is not None and not verl_is_tested():
        _warn_once(f"verl {version} is outside the range this release was tested with ({TESTED_VERL})")


_install()
