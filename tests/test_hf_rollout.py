"""The hf rollout server in-process: batching, sampling parameters, log-probs, weight updates."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path

import pytest
import torch
from conftest import chat_prompt_ids

from longcat_plugins.learning.assets import Assets
from longcat_plugins.runtime.hf_rollout import HFServer


@pytest.fixture
def server(tiny: Assets) -> HFServer:
    config = {"prompt_length": 32, "response_length": 12, "seed": 0}
    return HFServer(config, {"local_path": str(tiny.model)})


def prompts(tiny: Assets, n: int) -> list[list[int]]:
    return chat_prompt_ids(tiny, (f"What is {i}+{2 * i}?" for i in range(n)))


async def generate_all(server: HFServer, batch: list[list[int]], params: dict) -> list:
    return await asyncio.gather(*[server.generate(p, dict(params), request_id=str(i)) for i, p in enumerate(batch)])


def test_concurrent_requests_are_batched_and_logprobs_match_a_full_forward(server: HFServer, tiny: Assets) -> None:
    batch = prompts(tiny, 6)
    outs = asyncio.run(generate_all(server, batch, {"temperature": 0.7, "top_p": 1.0, "top_k": -1, "logprobs": True}))
    assert server.stats["max_batch"] == 6 and server.stats["batches"] == 1
    for prompt, out in zip(batch, outs, strict=True):
        assert 1 <= len(out.token_ids) <= 12 and len(out.log_probs) == len(out.token_ids)
        # independent check: teacher-forced forward over prompt+response, no padding, no cache
        ids = torch.tensor([prompt + out.token_ids])
        with torch.no_grad():
            logits = server.model(ids).logits[0, len(prompt) - 1 : -1].float() / 0.7
        expected = torch.log_softmax(logits, -1).gather(-1, torch.tensor(out.token_ids)[:, None]).squeeze(-1)
        assert torch.allclose(torch.tensor(out.log_probs), expected, atol=1e-4), (out.log_probs, expected)


def test_greedy_is_deterministic_and_batch_independent(server: HFServer, tiny: Assets) -> None:
    batch = prompts(tiny, 4)
    greedy = {"temperature": 0, "logprobs": False}
    together = asyncio.run(generate_all(server, batch, greedy))
    alone = [asyncio.run(generate_all(server, [p], greedy))[0] for p in batch]
    assert [o.token_ids for o in together] == [o.token_ids for o in alone]
    assert together[0].log_probs is None


def test_max_tokens_and_eos(server: HFServer, tiny: Assets) -> None:
    [out] = asyncio.run(generate_all(server, prompts(tiny, 1), {"temperature": 1.0, "max_tokens": 3}))
    assert len(out.token_ids) <= 3
    server.eos_ids = set(range(server.model.config.vocab_size))  # every token ends the sequence
    [out] = asyncio.run(generate_all(server, prompts(tiny, 1), {"temperature": 1.0}))
    assert len(out.token_ids) == 1


def test_update_weights_changes_generation(server: HFServer, tiny: Assets) -> None:
    batch = prompts(tiny, 2)
    greedy = {"temperature": 0}
    before = asyncio.run(generate_all(server, batch, greedy))
    digest0 = server.weights_digest()
    state = {k: torch.randn_like(v) for k, v in server.model.state_dict().items()}
    digest1 = asyncio.run(server.update_weights(state, global_steps=7))
    after = asyncio.run(generate_all(server, batch, greedy))
    assert digest1 != digest0 and server.weights_version == 1 and server.global_steps == 7
    assert [o.token_ids for o in before] != [o.token_ids for o in after]
    assert after[0].extra_fields["global_steps"] == 7
    with pytest.raises(KeyError, match="not in the model"):
        asyncio.run(server.update_weights({"nope.weight": torch.zeros(1)}))


def test_missing_model_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="actor_rollout_ref.model.path"):
        HFServer({}, {"local_path": str(tmp_path / "absent")})


def test_single_version_mode_holds_one_version_and_abort_stops_the_running_batch(tiny: Assets) -> None:
    """Single-version mode (the engine model of vLLM/SGLang): a load waits for the running batch
    and replaces the one version in place; an abort also ends the running batch at once."""
    server = HFServer({"prompt_length": 32, "response_length": 400, "seed": 0}, {"local_path": str(tiny.model)})
    server.eos_ids = set()  # every request decodes its full length: a batch runs long enough to interrupt
    batch = prompts(tiny, 2)
    state = {k: v.clone() for k, v in server.model.state_dict().items()}

    async def until_running() -> None:
        while not server._running:
            await asyncio.sleep(0.001)

    async def load_during_a_batch() -> tuple[list, str]:
        await server.set_single_version(True)
        running = asyncio.create_task(generate_all(server, batch, {"temperature": 1.0}))
        await until_running()
        digest = await server.update_weights(state, global_steps=1)
        return await running, digest

    outs, _ = asyncio.run(load_during_a_batch())
    # the batch finished on the version it started with, before the load replaced it
    assert [o.extra_fields["weights_version"] for o in outs] == [0, 0]
    assert all(len(o.token_ids) == 400 for o in outs)
    assert sorted(server.versions) == [1] and server.get_stats()["max_versions_held"] == 1

    async def abort_during_a_batch() -> list:
        running = asyncio.create_task(generate_all(server, batch, {"temperature": 1.0}))
        await until_running()
        await server.abort_all_requests()
        return await asyncio.wait_for(running, 5.0)

    outs = asyncio.run(abort_during_a_batch())
    assert [o.stop_reason for o in outs] == ["aborted", "aborted"] and server.stats["aborted"] == 2


def _model_logprobs(model: torch.nn.Module, prompt: list[int], response: list[int]) -> torch.Tensor:
    """Independent reference: one teacher-forced float64 forward over prompt+response."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logits = copy.deepcopy(model).double()(ids).logits[0, len(prompt) - 1 : -1]
    return torch.log_softmax(logits, -1).gather(-1, torch.tensor(response)[:, None]).squeeze(-1)


def test_a_request_stopped_and_continued_elsewhere_on_its_version_equals_greedy_without_the_move(
    tiny: Assets,
) -> None:
    """DORA's migration on the hf server: stop one request of a running batch (the others decode
    on), continue it on another server from its prefix pinned to its version (re-prefill), and
    the joined sample is exactly the greedy decode that never moved; its log-probs are the
    one version's (a float64 recomputation), not the newer weights the target also holds."""
    config = {"prompt_length": 32, "response_length": 48, "seed": 0}
    source, target = (HFServer(config, {"local_path": str(tiny.model)}, replica_rank=r) for r in (0, 1))
    old = {k: v.clone() for k, v in source.model.state_dict().items()}
    new = {k: v + 0.05 * torch.randn_like(v) for k, v in old.items()}
    for server in (source, target):
        server.eos_ids = set()  # full length: long enough to stop mid-decode
        asyncio.run(server.set_staleness(1))
        asyncio.run(server.update_weights(old, global_steps=1))
    batch = prompts(tiny, 3)
    greedy = {"temperature": 0, "logprobs": True, "max_tokens": 40}
    reference = asyncio.run(generate_all(source, batch, greedy))
    asyncio.run(target.update_weights(new, global_steps=2))  # target holds 1 and 2 (window 1)
    assert sorted(s for _, s in target.versions.values()) == [1, 2]

    async def migrate() -> tuple[list, object, dict]:
        running = asyncio.create_task(generate_all(source, batch, greedy))
        while not source._running or len(source._running[0].tokens) < 5:
            await asyncio.sleep(0.001)
        stop = await source.stop_request("0")
        outs = await running  # request 0 returns at once; 1 and 2 finish undisturbed
        part = outs[0]
        rest = await target.generate(
            batch[0],
            dict(greedy),
            request_id="0",
            dora_version=part.extra_fields["global_steps"],
            dora_prefix=part.token_ids,
        )
        return outs, rest, stop

    outs, rest, stop = asyncio.run(migrate())
    part = outs[0]
    assert part.stop_reason == "migrated" and stop["stopped"] and stop["tokens"] == len(part.token_ids)
    assert 5 <= len(part.token_ids) < 40 and part.extra_fields["global_steps"] == 1
    assert [o.token_ids for o in outs[1:]] == [o.token_ids for o in reference[1:]]
    assert rest.stop_reason == "completed" and rest.extra_fields["global_steps"] == 1
    joined = part.token_ids + rest.token_ids
    assert joined == reference[0].token_ids and len(joined) == 40  # the budget is the original one
    lps = torch.tensor(part.log_probs + rest.log_probs, dtype=torch.float64)
    assert torch.allclose(lps, torch.tensor(reference[0].log_probs, dtype=torch.float64), atol=1e-4)
    one_version = _model_logprobs(source.versions[source.local_version(1)][0], batch[0], joined)
    assert torch.allclose(lps, one_version, atol=1e-4), (lps - one_version).abs().max()
    newer = _model_logprobs(target.model, batch[0], joined)
    assert not torch.allclose(lps, newer, atol=1e-3)  # the check can tell the versions apart

    # a version the server does not hold is refused, not silently replaced
    gone = asyncio.run(target.generate(batch[0], dict(greedy), request_id="x", dora_version=7, dora_prefix=[1]))
    assert gone.stop_reason == "version_unavailable" and gone.token_ids == []
    # a request that already finished is not stopped: nothing is produced twice
    assert asyncio.run(source.stop_request("0")) == {"stopped": False, "tokens": 0}


def test_stop_stale_stops_only_requests_on_versions_that_left_the_window(tiny: Assets) -> None:
    """Stale abort: after version 3 is published with staleness 1, requests running on version
    1 are stopped at once (their callers restart them); a request pinned to version 2 decodes on."""
    server = HFServer({"prompt_length": 32, "response_length": 300, "seed": 0}, {"local_path": str(tiny.model)})
    server.eos_ids = set()
    state = {k: v.clone() for k, v in server.model.state_dict().items()}
    batch = prompts(tiny, 2)

    async def run() -> tuple[list, dict]:
        await server.set_staleness(2)
        await server.update_weights(state, global_steps=1)
        old = asyncio.create_task(server.generate(batch[0], {"temperature": 1.0}, request_id="old"))
        while not server._running:
            await asyncio.sleep(0.001)
        await server.update_weights(state, global_steps=2)
        fresh = asyncio.create_task(
            server.generate(batch[1], {"temperature": 1.0, "max_tokens": 20}, "fresh", dora_version=2)
        )
        await asyncio.sleep(0.05)
        await server.update_weights(state, global_steps=3)
        stopped = await server.stop_stale(3, 1)
        return [await asyncio.wait_for(old, 5.0), await fresh], stopped

    (old, fresh), stopped = asyncio.run(run())
    assert stopped["stopped"] == ["old"] and server.stats["stale_stopped"] == 1
    assert old.stop_reason == "aborted" and 0 < len(old.token_ids) < 300 and old.extra_fields["global_steps"] == 1
    assert stopped["tokens"] == [len(old.token_ids)]  # the censored length, what the caller got
    assert fresh.stop_reason == "completed" and len(fresh.token_ids) == 20 and fresh.extra_fields["global_steps"] == 2
