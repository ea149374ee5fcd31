"""The runtime pieces DORA needs, in process and on a small real Ray cluster: multi-version
``hf`` servers (a running batch keeps its version while the next one loads), the
``object_store`` checkpoint engine, and the DORA client's restart/fail-over (no sample lost or
duplicated when a replica dies mid-generation)."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
from collections.abc import Iterator

import pytest
import torch
from conftest import chat_prompt_ids
from omegaconf import OmegaConf

from longcat_plugins.learning.assets import Assets
from longcat_plugins.runtime.hf_rollout import HFServer


def prompt_ids(tiny: Assets, n: int) -> list[list[int]]:
    return chat_prompt_ids(tiny, (f"What is {i}+7?" for i in range(n)))


def teacher_forced_logprobs(
    tiny: Assets, state: dict[str, torch.Tensor], prompt: list[int], out: list[int]
) -> torch.Tensor:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny.model, dtype=torch.float32, attn_implementation="sdpa")
    model.load_state_dict(state)
    with torch.no_grad():
        logits = model(torch.tensor([prompt + out])).logits[0, len(prompt) - 1 : -1].float()
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(out)[:, None]).squeeze(-1)


def test_running_batch_keeps_its_version_while_the_next_loads(tiny: Assets) -> None:
    server = HFServer({"prompt_length": 32, "response_length": 200, "seed": 0}, {"local_path": str(tiny.model)})
    server.eos_ids = set()  # run every request to its budget, so the long one is surely running
    long_prompt, short_prompt = prompt_ids(tiny, 2)
    old_state = {k: v.clone() for k, v in server.model.state_dict().items()}
    new_state = {k: v + 0.5 * torch.randn_like(v) for k, v in old_state.items()}

    async def scenario() -> tuple:
        greedy = {"temperature": 0, "logprobs": True}
        long = asyncio.create_task(server.generate(long_prompt, {**greedy, "max_tokens": 150}, request_id="long"))
        while server.busy_since is None:
            await asyncio.sleep(0.001)
        await server.update_weights(new_state, global_steps=1)  # returns without waiting for the batch
        held_during = sorted(server.versions)
        short = await server.generate(short_prompt, {**greedy, "max_tokens": 5}, request_id="short")
        return await long, short, held_during

    long_out, short_out, held_during = asyncio.run(scenario())
    assert held_during == [0, 1], "both versions are held while the old one still generates"
    assert sorted(server.versions) == [1], "the old version is evicted once no batch uses it"
    assert long_out.extra_fields["weights_version"] == 0 and long_out.extra_fields["global_steps"] is None
    assert short_out.extra_fields["weights_version"] == 1 and short_out.extra_fields["global_steps"] == 1
    assert len(long_out.token_ids) == 150
    # every token of the long sample came from the old weights (and not from the new ones)
    old_lp = teacher_forced_logprobs(tiny, old_state, long_prompt, long_out.token_ids)
    new_lp = teacher_forced_logprobs(tiny, new_state, long_prompt, long_out.token_ids)
    assert torch.allclose(torch.tensor(long_out.log_probs), old_lp, atol=1e-4)
    assert not torch.allclose(torch.tensor(long_out.log_probs), new_lp, atol=1e-2)
    short_lp = teacher_forced_logprobs(tiny, new_state, short_prompt, short_out.token_ids)
    assert torch.allclose(torch.tensor(short_out.log_probs), short_lp, atol=1e-4)


# -- on Ray ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    import ray

    tmp = tempfile.mkdtemp(prefix="lcray", dir="/tmp")
    ray.init(num_cpus=4, _temp_dir=tmp, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()
    shutil.rmtree(tmp, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.ray
def test_object_store_engine_round_trip(ray_cluster: None) -> None:
    from longcat_plugins.runtime.object_store_engine import ObjectStoreCheckpointEngine

    sender = ObjectStoreCheckpointEngine(is_master=True)
    follower = ObjectStoreCheckpointEngine(is_master=False)
    receiver = ObjectStoreCheckpointEngine()
    weights = {f"layer{i}.weight": torch.randn(8, 8) for i in range(3)}

    async def scenario() -> dict[str, torch.Tensor]:
        pending = asyncio.ensure_future(_collect(receiver, 5))  # the receiver may ask first
        assert await follower.send_weights(iter(weights.items()), global_steps=5) == {}
        metrics = await sender.send_weights(iter(weights.items()), global_steps=5)
        assert metrics["object_store/weight_mbytes"] > 0
        return await pending

    got = asyncio.run(scenario())
    assert got.keys() == weights.keys() and all(torch.equal(got[k], weights[k]) for k in weights)


async def _collect(engine: object, version: int) -> dict[str, torch.Tensor]:
    return {name: tensor async for name, tensor in engine.receive_weights(global_steps=version)}  # type: ignore[attr-defined]


@pytest.mark.slow
@pytest.mark.ray
def test_client_restarts_on_a_dead_replica_without_losing_or_duplicating(ray_cluster: None, tiny: Assets) -> None:
    import ray
    from verl.workers.rollout.router import get_router_handle

    from longcat_plugins.schedulers.client import DoraLLMServerClient

    cfg = {"prompt_length": 32, "response_length": 120, "seed": 0}
    servers = {
        f"replica-{rank}": ray.remote(HFServer)
        .options(max_concurrency=64, num_cpus=0)
        .remote(cfg, {"local_path": str(tiny.model)}, replica_rank=rank)
        for rank in range(2)
    }
    ray.get([h.get_stats.remote() for h in servers.values()])
    balancer = get_router_handle(servers=servers)
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"name": "hf", "full_determinism": False}}})
    client = DoraLLMServerClient(config=config, load_balancer_handle=balancer)
    prompts = prompt_ids(tiny, 8)

    async def scenario() -> list:
        params = {"temperature": 1.0, "max_tokens": 120, "logprobs": True}
        tasks = [
            asyncio.ensure_future(client.generate(f"req-{i}", prompt_ids=p, sampling_params=dict(params)))
            for i, p in enumerate(prompts)
        ]
        while True:  # kill replica 0 while it is generating
            stats = await servers["replica-0"].get_stats.remote()
            if stats["busy_s"] > 0 or stats["queued"] or stats["requests"]:
                break
            await asyncio.sleep(0.01)
        ray.kill(servers["replica-0"])
        return await asyncio.gather(*tasks)

    outputs = asyncio.run(scenario())
    assert len(outputs) == len(prompts), "no sample lost"
    assert all(o.stop_reason == "completed" and 1 <= len(o.token_ids) <= 120 for o in outputs)
    restarted = [o for o in outputs if o.extra_fields["dora_restarts"] > 0]
    assert restarted, "some requests were on the killed replica"
    assert all(o.extra_fields["replica"] == 1 for o in restarted), "restarted on the surviving replica"
    # one version per sample, and each sample's tokens come from exactly one attempt
    for o in outputs:
        assert o.extra_fields["min_global_steps"] == o.extra_fields["max_global_steps"]
        assert len(o.log_probs) == len(o.token_ids)
    assert ray.get(balancer.get_all_servers.remote()) == ["replica-1"]


@pytest.mark.slow
@pytest.mark.ray
def test_a_pinned_pool_needs_a_node_with_its_resource(ray_cluster: None) -> None:
    """``node_resources`` naming a resource no node has is refused at once, naming the setting,
    instead of leaving the trainer's placement group pending forever; no pool is made."""
    from longcat_plugins.runtime.placement import PinnedResourcePoolManager

    where = "longcat.settings.scheduler.dora.node_resources"
    manager = PinnedResourcePoolManager(
        resource_pool_spec={"global_pool": [1]},
        mapping={},
        node_resources={"global_pool": "trainer_node", "reward_pool": "CPU"},
        where=where,
    )
    with pytest.raises(ValueError) as err:
        manager.create_resource_pool()
    text = str(err.value)
    assert f"{where}.global_pool: no node of the Ray cluster has the resource 'trainer_node'" in text
    assert "--resources='{\"trainer_node\": 1}'" in text
    assert f"{where}.reward_pool: this run has no resource pool 'reward_pool'" in text
    assert manager.resource_pool_dict == {}
