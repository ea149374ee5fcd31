"""The hf rollout server in-process: batching, sampling parameters, log-probs, weight updates."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import torch

from longcat_plugins.runtime.assets import Assets, ensure_assets
from longcat_plugins.runtime.hf_rollout import HFServer


@pytest.fixture(scope="session")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Assets:
    return ensure_assets(tmp_path_factory.mktemp("assets"), size="tiny")


@pytest.fixture
def server(tiny: Assets) -> HFServer:
    config = {"prompt_length": 32, "response_length": 12, "seed": 0}
    return HFServer(config, {"local_path": str(tiny.model)})


def prompts(tiny: Assets, n: int) -> list[list[int]]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny.model)
    return [
        list(
            tok.apply_chat_template(
                [{"role": "user", "content": f"What is {i}+{2 * i}?"}], add_generation_prompt=True, tokenize=True
            )["input_ids"]
        )
        for i in range(n)
    ]


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
