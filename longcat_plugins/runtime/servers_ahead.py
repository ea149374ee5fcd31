"""The ``hf`` rollout's server processes start with the trainer's engines, not after them.

verl's v1 setup builds the trainer's worker group and its engines (``init_model``: on a GPU the
CUDA context, NCCL, FSDP) and only then creates the hybrid replicas, whose server is one more
process that imports torch, transformers and verl before it can load the model: 7 s of
``trainer.init()``'s last phase on this project's 2-core machine, 14-19 s on the lent H100,
after everything else. The ``hf`` server needs nothing from the engines (it loads the model from
``actor_rollout_ref.model.path`` itself), so its process can start as soon as the trainer knows
how many replicas it will build: when its resource pools are sized.

:func:`install` wraps verl's ``PPOTrainer._init_resource_pool_mgr``: once it has run, each hybrid
replica's ``HFServer`` process is started without a model (:meth:`HFReplica.start_ahead`), and
verl's ``launch_servers`` later loads the model in it. Only for the ``hf`` rollout with hybrid
replicas, on a one-node cluster (the server must sit beside its replica's workers, whose node is
not known before they exist; ``launch_servers`` checks it). ``LONGCAT_HF_SERVERS=verl`` keeps
verl's order.
"""

from __future__ import annotations

import functools
import logging
import os
from types import ModuleType
from typing import Any

from omegaconf import DictConfig

from longcat_plugins.import_hooks import when_imported
from longcat_plugins.runtime import env_choice

logger = logging.getLogger(__name__)

#: ``ahead`` (default: beside the engines) or ``verl`` (verl's order: after them)
ENV_HF_SERVERS = "LONGCAT_HF_SERVERS"
CHOICES = ("ahead", "verl")
#: printed when servers are started ahead (the start-up benches look for it)
STARTED = "longcat-plugins: hf rollout servers start beside the trainer's engines"


def hf_servers_mode(value: str | None) -> str:
    """The ``LONGCAT_HF_SERVERS`` choice (empty: ``ahead``); a bad value names the choices."""
    return env_choice(ENV_HF_SERVERS, value, CHOICES)


def hybrid_replica_count(config: DictConfig, actor_world_size: int, hybrid: bool) -> int | None:
    """How many hybrid replicas verl will build on the trainer's devices (the standalone
    replicas' first rank), or ``None`` where it cannot be known before verl builds them
    (prefill/decode disaggregation sizes replicas its own way)."""
    if not hybrid:
        return 0
    rollout = config.actor_rollout_ref.rollout
    disaggregation = rollout.get("disaggregation", None)
    if disaggregation is not None and disaggregation.get("enabled", False):
        return None
    per_replica = (
        int(rollout.tensor_model_parallel_size)
        * int(rollout.get("data_parallel_size", 1) or 1)
        * int(rollout.get("pipeline_model_parallel_size", 1) or 1)
    )
    return actor_world_size // per_replica


def start_hf_servers(trainer: Any) -> int:
    """Start the server process of each hybrid ``hf`` replica ``trainer`` will build, now that
    its resource pools are sized; how many were started (0 where verl's order stays)."""
    import ray

    from longcat_plugins.runtime.hf_rollout import HFReplica

    if hf_servers_mode(os.environ.get(ENV_HF_SERVERS)) != "ahead":
        return 0
    config = trainer.config
    rollout = config.actor_rollout_ref.rollout
    if rollout.name != "hf" or not getattr(trainer, "_enable_hybrid_replicas", True):
        return 0
    world = sum(trainer.resource_pool_manager.resource_pool_spec.get("global_pool", []))
    count = hybrid_replica_count(config, world, hybrid=True)
    nodes = [node["NodeID"] for node in ray.nodes() if node["Alive"]]
    if not count or len(nodes) != 1:
        logger.info("hf servers in verl's order: %s replicas on %d nodes", count, len(nodes))
        return 0
    for rank in range(count):
        HFReplica.start_ahead(rank, rollout, nodes[0])
    print(STARTED, flush=True)
    return count


def _hook_trainer_base(module: ModuleType) -> None:
    from longcat_plugins.verl_version import verl_is_tested

    trainer_cls = module.PPOTrainer
    original = trainer_cls._init_resource_pool_mgr
    if getattr(original, "__longcat_hf_servers_ahead__", False):
        return
    if not verl_is_tested():
        logger.warning("longcat-plugins: hf servers in verl's order: verl is outside the tested range")
        return

    @functools.wraps(original)
    def _init_resource_pool_mgr(self: Any) -> None:
        original(self)
        start_hf_servers(self)

    _init_resource_pool_mgr.__longcat_hf_servers_ahead__ = True  # type: ignore[attr-defined]
    trainer_cls._init_resource_pool_mgr = _init_resource_pool_mgr


def install() -> None:
    """Hook verl's v1 trainer base when it is imported (every process; it acts in the one whose
    trainer sizes its resource pools)."""
    when_imported("verl.trainer.ppo.v1.trainer_base", _hook_trainer_base)
