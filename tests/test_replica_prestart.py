"""The standalone replicas started beside the trainer's engines (``schedulers/prestart.py``).

The end-to-end runs (``test_e2e_dora.py``: two Ray nodes with the trainer pinned, and the
elastic group with a hybrid replica at rank 0) check that real runs take the prestarted
replicas; these check the rules on stand-ins for verl's pools and manager."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from omegaconf import OmegaConf

from longcat_plugins.runtime.servers_ahead import hybrid_replica_count
from longcat_plugins.schedulers import prestart as prestart_module
from longcat_plugins.schedulers.prestart import ReplicaPrestart
from longcat_plugins.schedulers.settings import DoraSettings


def rollout_config(tp: int = 1, dp: int = 1, disaggregation: bool = False) -> Any:
    rollout = {"tensor_model_parallel_size": tp, "data_parallel_size": dp, "pipeline_model_parallel_size": 1}
    if disaggregation:
        rollout["disaggregation"] = {"enabled": True}
    return OmegaConf.create({"actor_rollout_ref": {"rollout": rollout}})


class Pool:
    """verl's ``RayResourcePool`` as far as the prestart reads it: ``pgs`` set on reservation."""

    def __init__(self) -> None:
        self.pgs: list[str] | None = None

    def get_placement_groups(self, strategy: str = "STRICT_PACK", device_name: str = "cuda") -> list[str]:
        if self.pgs is None:
            self.pgs = [f"{strategy}:{device_name}"]
        return self.pgs


class PoolManager:
    def __init__(self, spec: dict[str, list[int]]) -> None:
        self.resource_pool_spec = spec
        self.resource_pool_dict: dict[str, Pool] = {}

    def create_resource_pool(self) -> None:
        self.resource_pool_dict = {name: Pool() for name in self.resource_pool_spec}


class Creator:
    """``LLMServerManager.create`` stand-in: records its calls and the thread they ran on."""

    def __init__(self, fail: Exception | None = None) -> None:
        self.calls: list[dict[str, Any]] = []
        self.threads: list[str] = []
        self.release = threading.Event()
        self.release.set()
        self.fail = fail

    def __call__(self, **kwargs: Any) -> Any:
        self.calls.append(kwargs)
        self.threads.append(threading.current_thread().name)
        self.release.wait(10)
        if self.fail is not None:
            raise self.fail
        return ("manager", kwargs["start_rank"])


def test_the_first_standalone_rank_follows_verls_hybrid_replica_count() -> None:
    assert hybrid_replica_count(rollout_config(), 8, hybrid=False) == 0
    assert hybrid_replica_count(rollout_config(), 1, hybrid=True) == 1
    assert hybrid_replica_count(rollout_config(tp=2), 8, hybrid=True) == 4
    assert hybrid_replica_count(rollout_config(tp=2, dp=2), 8, hybrid=True) == 2
    assert hybrid_replica_count(rollout_config(disaggregation=True), 8, hybrid=True) is None
    assert hybrid_replica_count(rollout_config(disaggregation=True), 8, hybrid=False) == 0


def test_replicas_start_only_once_every_trainer_pool_holds_its_devices() -> None:
    create = Creator()
    early = ReplicaPrestart(create, rollout_config(tp=2), hybrid=True)
    manager = PoolManager({"global_pool": [4, 4], "reward_pool": [1]})
    early.watch_pools(manager)
    assert early.start_rank == 4 and not early.started
    manager.create_resource_pool()
    manager.resource_pool_dict["global_pool"].get_placement_groups(strategy="PACK")
    assert not early.started, "the reward pool has not reserved yet"
    manager.resource_pool_dict["global_pool"].get_placement_groups()
    assert not early.started
    groups = manager.resource_pool_dict["reward_pool"].get_placement_groups(device_name="cpu")
    assert groups == ["STRICT_PACK:cpu"], "the pool's own reservation is returned unchanged"
    assert early.started
    assert early.take(4) == ("manager", 4)
    assert early.ahead and early.create_s is not None
    assert create.calls == [{"config": early._config, "start_rank": 4}], "one call, verl's arguments"
    assert create.threads == ["longcat-replica-prestart"]
    early.start()  # idempotent
    assert len(create.calls) == 1


def test_a_rank_that_differs_from_verls_stops_the_setup_naming_the_setting() -> None:
    early = ReplicaPrestart(Creator(), rollout_config(), hybrid=True)
    manager = PoolManager({"global_pool": [2]})
    early.watch_pools(manager)
    manager.create_resource_pool()
    manager.resource_pool_dict["global_pool"].get_placement_groups()
    with pytest.raises(RuntimeError, match=r"from rank 2, but verl built 3 .*prestart_replicas=false"):
        early.take(3)


def test_a_failed_start_reaches_verls_setup_as_itself() -> None:
    failure = ValueError("no such model")
    early = ReplicaPrestart(Creator(fail=failure), rollout_config(), hybrid=False)
    manager = PoolManager({"global_pool": [1]})
    early.watch_pools(manager)
    manager.create_resource_pool()
    manager.resource_pool_dict["global_pool"].get_placement_groups()
    with pytest.raises(ValueError, match="no such model") as caught:
        early.take(0)
    assert caught.value is failure


def test_a_pool_reserved_late_starts_the_replicas_in_verls_order() -> None:
    create = Creator()
    early = ReplicaPrestart(create, rollout_config(), hybrid=False)
    manager = PoolManager({"global_pool": [1], "teacher_pool": [1]})
    early.watch_pools(manager)
    manager.create_resource_pool()
    manager.resource_pool_dict["global_pool"].get_placement_groups()
    assert not early.started
    assert early.take(0) == ("manager", 0)
    assert not early.ahead and len(create.calls) == 1


def test_unknown_ranks_leave_verls_own_call() -> None:
    create = Creator()
    early = ReplicaPrestart(create, rollout_config(disaggregation=True), hybrid=True)
    manager = PoolManager({"global_pool": [2]})
    early.watch_pools(manager)
    manager.create_resource_pool()
    manager.resource_pool_dict["global_pool"].get_placement_groups()
    assert not early.started and early.start_rank is None
    assert early.take(1) == ("manager", 1)
    assert create.threads == [threading.current_thread().name] and not early.ahead


def test_verls_standalone_call_gets_the_prestarted_manager_and_nothing_else_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import importlib

    module = importlib.import_module(prestart_module.SEPARATE_ASYNC)
    original = module.LLMServerManager
    passed: list[dict[str, Any]] = []
    monkeypatch.setattr(original, "create", classmethod(lambda cls, **kwargs: passed.append(kwargs) or "hybrid"))
    create = Creator()
    early = ReplicaPrestart(create, rollout_config(), hybrid=False)
    manager = PoolManager({"global_pool": [1]})
    early.watch_pools(manager)
    manager.create_resource_pool()
    manager.resource_pool_dict["global_pool"].get_placement_groups()
    with early.handing_over():
        swapped = module.LLMServerManager
        assert swapped is not original and issubclass(swapped, original)
        assert swapped.create(config="c", start_rank=0) == ("manager", 0)
        assert swapped.create(config="c", worker_group="wg", rollout_resource_pool="p") == "hybrid"
    assert module.LLMServerManager is original
    assert passed == [{"config": "c", "worker_group": "wg", "rollout_resource_pool": "p"}]
    with pytest.raises(RuntimeError), early.handing_over():
        raise RuntimeError("setup failed")
    assert module.LLMServerManager is original, "restored when the setup fails"


def test_the_setting_is_a_boolean() -> None:
    assert DoraSettings().prestart_replicas is True
    with pytest.raises(ValueError, match="prestart_replicas must be true or false, got 'yes'"):
        DoraSettings(prestart_replicas="yes")  # type: ignore[arg-type]


def test_the_agent_loop_manager_created_ahead_is_the_one_main_ppo_gets(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ

    from longcat_plugins.schedulers.prestart import PrestartedAgentLoopManager

    built: list[tuple[type, dict[str, Any]]] = []

    def create(cls: type, **kwargs: Any) -> object:
        built.append((cls, kwargs))
        return object()

    monkeypatch.setattr(AgentLoopManagerTQ, "create", classmethod(create))
    config, other = OmegaConf.create({"run": 1}), OmegaConf.create({"run": 2})
    arguments = {"llm_client": "client", "teacher_client": None, "reward_loop_worker_handles": ["r"]}
    PrestartedAgentLoopManager.prestart(config=config, **arguments)
    assert built == [(PrestartedAgentLoopManager, {"config": config, **arguments})], "verl's create, once"
    ahead = PrestartedAgentLoopManager._ahead[id(config)]
    assert PrestartedAgentLoopManager.create(config=config, **arguments) is ahead
    assert len(built) == 1, "main_ppo's call took the manager created ahead"
    fresh = PrestartedAgentLoopManager.create(config=config, **arguments)
    assert fresh is not ahead and len(built) == 2, "handed over once, then built as verl does"
    PrestartedAgentLoopManager.create(config=other, **arguments)
    assert len(built) == 3 and built[-1][1]["config"] is other, "another run's config gets its own"
