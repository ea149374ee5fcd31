"""Embedded CPU runtime: verl platform ``cpu``, the ``hf`` rollout, the ``object_store``
checkpoint engine (weights to standalone replicas without an accelerator), and the fixes verl needs.
The learning kit that builds tiny models, warm starts and demos on top of it is
:mod:`longcat_plugins.learning`.

:func:`install` is called by the verl bridge in every process that imports verl. The ``hf``
rollout is always registered (it is a valid choice anywhere); the platform and the fixes
take effect only where the CPU runtime is active (see :mod:`.platform`).
"""

from __future__ import annotations

from types import ModuleType

from longcat_plugins.import_hooks import when_imported
from longcat_plugins.runtime import moved

moved.install()  # the learning kit's old paths (longcat_plugins.runtime.assets, ...) for one release

HF_ROLLOUT = "hf"


def env_choice(variable: str, value: str | None, choices: tuple[str, ...]) -> str:
    """The value of a runtime environment variable with fixed ``choices`` (empty: the first); a
    bad value names the variable and the choices."""
    value = (value or "").strip() or choices[0]
    if value not in choices:
        raise ValueError(f"{variable}: expected one of {', '.join(choices)}, got {value!r}")
    return value


HF_ADAPTER = "longcat_plugins.runtime.hf_rollout.HFServerAdapter"


def _register_replica(module: ModuleType) -> None:
    def load() -> type:
        from longcat_plugins.runtime.hf_rollout import HFReplica

        return HFReplica

    if HF_ROLLOUT not in module.RolloutReplicaRegistry._registry:
        module.RolloutReplicaRegistry.register(HF_ROLLOUT, load)


def _register_adapter(module: ModuleType) -> None:
    module._ROLLOUT_REGISTRY.setdefault((HF_ROLLOUT, "async"), HF_ADAPTER)


def _register_checkpoint_engine(module: ModuleType) -> None:
    """The ``object_store`` weight transport (standalone replicas without an accelerator)."""
    import longcat_plugins.runtime.object_store_engine  # noqa: F401 - registers on import


def install() -> None:
    from longcat_plugins.runtime.fixes import FIXES
    from longcat_plugins.runtime.platform import register_platform
    from longcat_plugins.runtime.vllm_cpu import VLLM_FIXES, install_version_alias

    register_platform()
    install_version_alias()
    when_imported("verl.workers.rollout.replica", _register_replica)
    when_imported("verl.workers.rollout.base", _register_adapter)
    when_imported("verl.checkpoint_engine.base", _register_checkpoint_engine)
    for module_name, fixes in [*FIXES.items(), *VLLM_FIXES.items()]:
        for fix in fixes:
            when_imported(module_name, fix)
    from longcat_plugins.runtime import servers_ahead

    servers_ahead.install()  # the hf replicas' server processes start beside the trainer's engines
