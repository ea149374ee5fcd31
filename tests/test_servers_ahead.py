"""The ``hf`` replicas' server processes start beside the trainer's engines
(``runtime/servers_ahead.py``): when verl's trainer sizes its resource pools, one model-less
``HFServer`` per hybrid replica, which verl's ``launch_servers`` then loads. The real runs: the
suite's shared v1 run (``test_e2e_cpu.py``) and the bench (``bench_dora_cpu.py --hf-servers``)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from longcat_plugins.learning.assets import Assets
from longcat_plugins.runtime import servers_ahead
from longcat_plugins.runtime.hf_rollout import HFReplica, server_name
from longcat_plugins.runtime.servers_ahead import ENV_HF_SERVERS, STARTED, hf_servers_mode, start_hf_servers


def test_the_mode_parses_and_a_bad_one_names_the_variable_and_the_choices() -> None:
    assert hf_servers_mode(None) == hf_servers_mode("") == "ahead"
    assert hf_servers_mode("verl") == "verl"
    with pytest.raises(ValueError, match="LONGCAT_HF_SERVERS: expected one of ahead, verl, got 'now'"):
        hf_servers_mode("now")


def test_a_bad_mode_stops_main_ppo_before_ray(tmp_path: Path) -> None:
    from conftest import main_ppo_refuses

    proc = main_ppo_refuses(tmp_path, "example_plugin", env={ENV_HF_SERVERS: "now"})
    assert "LONGCAT_HF_SERVERS: expected one of ahead, verl, got 'now'" in proc.stderr


def _trainer(name: str = "hf", devices: int = 2, tp: int = 1, hybrid: bool = True, **rollout: Any) -> Any:
    """What ``start_hf_servers`` reads of a v1 trainer once its resource pools are sized."""
    config = OmegaConf.create(
        {"actor_rollout_ref": {"rollout": {"name": name, "tensor_model_parallel_size": tp, **rollout}}}
    )
    pools = type("Pools", (), {"resource_pool_spec": {"global_pool": [devices]}})()
    return type("Trainer", (), {"config": config, "resource_pool_manager": pools, "_enable_hybrid_replicas": hybrid})()


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, str]]:
    """The servers ``start_hf_servers`` asks for (rank, node), on a one-node cluster."""
    import ray

    calls: list[tuple[int, str]] = []
    monkeypatch.setattr(ray, "nodes", lambda: [{"NodeID": "node-a", "Alive": True}, {"NodeID": "gone", "Alive": False}])
    monkeypatch.setattr(
        HFReplica, "start_ahead", classmethod(lambda cls, rank, config, node: calls.append((rank, node)))
    )
    monkeypatch.delenv(ENV_HF_SERVERS, raising=False)
    return calls


def test_one_server_per_hybrid_replica_on_the_one_node(
    started: list[tuple[int, str]], capsys: pytest.CaptureFixture[str]
) -> None:
    assert start_hf_servers(_trainer(devices=4, tp=2)) == 2
    assert started == [(0, "node-a"), (1, "node-a")]
    assert STARTED in capsys.readouterr().out


@pytest.mark.parametrize(
    ("why", "trainer", "mode"),
    [
        ("another rollout", _trainer(name="vllm"), None),
        ("no hybrid replicas (standalone rollout only)", _trainer(hybrid=False), None),
        ("replicas verl sizes its own way", _trainer(disaggregation={"enabled": True}), None),
        ("LONGCAT_HF_SERVERS=verl", _trainer(), "verl"),
    ],
)
def test_verls_order_where_servers_cannot_or_should_not_start_ahead(
    why: str, trainer: Any, mode: str | None, started: list[tuple[int, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    if mode is not None:
        monkeypatch.setenv(ENV_HF_SERVERS, mode)
    assert start_hf_servers(trainer) == 0, why
    assert started == [], why


def test_a_cluster_of_several_nodes_keeps_verls_order(
    started: list[tuple[int, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    import ray

    monkeypatch.setattr(ray, "nodes", lambda: [{"NodeID": n, "Alive": True} for n in ("node-a", "node-b")])
    assert start_hf_servers(_trainer()) == 0 and started == []


def test_verls_trainer_starts_them_once_its_pools_are_sized(monkeypatch: pytest.MonkeyPatch) -> None:
    """The bridge hooks verl's own ``PPOTrainer._init_resource_pool_mgr``; the hook runs verl's
    sizing first, then the servers, once however often the module is imported."""
    import types

    from verl.trainer.ppo.v1 import PPOTrainer

    assert getattr(PPOTrainer._init_resource_pool_mgr, "__longcat_hf_servers_ahead__", False), (
        "not installed on verl's base"
    )
    order: list[str] = []

    class Trainer:
        def _init_resource_pool_mgr(self) -> None:
            order.append("verl sized the pools")

    monkeypatch.setattr(servers_ahead, "start_hf_servers", lambda trainer: order.append("servers started"))
    module = types.ModuleType("trainer_base")
    module.PPOTrainer = Trainer  # type: ignore[attr-defined]
    servers_ahead._hook_trainer_base(module)
    servers_ahead._hook_trainer_base(module)  # a second import: not wrapped twice
    Trainer()._init_resource_pool_mgr()
    assert order == ["verl sized the pools", "servers started"]


def rollout_config() -> Any:
    """A rollout config as verl's trainer holds it (``_target_``: verl builds its dataclass)."""
    return OmegaConf.create(
        {"_target_": "verl.workers.config.RolloutConfig", "name": "hf", "prompt_length": 16, "response_length": 4}
    )


class _Worker:
    """A replica worker whose node ``launch_servers`` asks for."""

    def __init__(self, node: str) -> None:
        self.__ray_call__ = type("Call", (), {"remote": staticmethod(lambda fn: _ready(node))})()


async def _ready(value: Any) -> Any:
    return value


class _Context:
    """Ray's runtime context, as far as ``launch_servers`` reads it, without a cluster."""

    @staticmethod
    def get_job_id() -> str:
        return "01000000"


def test_a_server_started_on_another_node_than_its_workers_is_an_error_naming_the_setting(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray

    monkeypatch.setattr(ray, "get_runtime_context", _Context)
    ahead_node, workers_node = "a" * 56, "b" * 56  # Ray's node ids: hex
    replica = HFReplica(replica_rank=0, config=rollout_config(), model_config=None)
    replica.workers = [_Worker(workers_node)]
    HFReplica._ahead[server_name(0)] = (object(), ahead_node, "01000000")
    try:
        with pytest.raises(
            RuntimeError, match=f"started ahead on node {ahead_node}.* on {workers_node}; set LONGCAT_HF_SERVERS=verl"
        ):
            asyncio.run(replica.launch_servers())
    finally:
        HFReplica._ahead.clear()


@pytest.fixture
def local_ray(ray_tmp: Path) -> Iterator[None]:
    import ray

    ray.init(num_cpus=2, include_dashboard=False, _temp_dir=str(ray_tmp), log_to_driver=False)
    try:
        yield
    finally:
        HFReplica._ahead.clear()
        ray.shutdown()


@pytest.mark.slow
@pytest.mark.ray
def test_the_server_started_ahead_is_the_one_verls_launch_loads_and_serves(local_ray: None, tiny: Assets) -> None:
    import ray

    rollout = rollout_config()
    node = ray.get_runtime_context().get_node_id()
    HFReplica.start_ahead(0, rollout, node)
    ((ahead, _, _),) = HFReplica._ahead.values()
    pid = ray.get(ahead.__ray_call__.remote(lambda self: __import__("os").getpid()))
    assert ray.get(ahead.__ray_call__.remote(lambda self: hasattr(self, "model"))) is False, "no model yet"

    replica = HFReplica(replica_rank=0, config=rollout, model_config={"local_path": str(tiny.model)})
    asyncio.run(replica.launch_servers())
    assert HFReplica._ahead == {}, "taken once"
    server = replica.server_handle
    assert server._actor_id == ahead._actor_id, "verl's launch used the process started ahead"
    assert ray.get(server.__ray_call__.remote(lambda self: __import__("os").getpid())) == pid
    out = ray.get(server.generate.remote([1, 2, 3], {"max_tokens": 3, "temperature": 0.0}, request_id="r"))
    assert len(out.token_ids) == 3, out


@pytest.mark.slow
@pytest.mark.ray
def test_a_server_left_by_an_earlier_ray_session_is_not_used(local_ray: None, tiny: Assets) -> None:
    """A setup that failed after starting its servers leaves them behind in this process's table;
    a later session's launch starts its own instead of calling a handle of a cluster that is gone."""
    import ray

    HFReplica._ahead[server_name(0)] = (object(), ray.get_runtime_context().get_node_id(), "ff000000")
    replica = HFReplica(replica_rank=0, config=rollout_config(), model_config={"local_path": str(tiny.model)})
    asyncio.run(replica.launch_servers())
    assert HFReplica._ahead == {}
    out = ray.get(replica.server_handle.generate.remote([1, 2], {"max_tokens": 2, "temperature": 0.0}, request_id="r"))
    assert len(out.token_ids) == 2
