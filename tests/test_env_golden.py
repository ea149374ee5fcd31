"""Warm-start SFT data: golden trajectories rendered in exactly the ``longcat_tool_agent`` loop's format.

The checks go through verl's own pieces: the hermes ``ToolParser`` reads each rendered assistant
turn back to the golden call, verl's ``MultiTurnSFTDataset`` tokenises each row, and the real
agent loop, replaying the rendered assistant turns from a scripted server, builds the very same
token stream (with the SFT loss on exactly the tokens the loop marks as the model's).
"""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path
from typing import Any

import pytest
from env_agent_helpers import ScriptedServer, make_loop
from omegaconf import OmegaConf
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

from longcat_plugins.environments.agent_loop import ToolAgentSettings
from longcat_plugins.environments.envgen import generate_environments
from longcat_plugins.environments.golden import (
    GoldenChainError,
    golden_messages,
    sft_rows,
    task_infos,
    write_sft_parquet,
)
from longcat_plugins.learning.tool_warmstart import RENDER, SHORT_CHAINS, build_tool_tokenizer
from longcat_plugins.learning.warmstart import TOOL_CHAT_TEMPLATE


class _TemplateOnly:
    chat_template = TOOL_CHAT_TEMPLATE


@pytest.fixture(scope="module")
def golden(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[dict[str, Any]], Any]:
    """Two generated environments (short chains), their SFT rows and a tokenizer trained on them."""
    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("golden")
    generate_environments("retail", 2, root / "envs", seed=3, config=SHORT_CHAINS)
    rows = sft_rows(task_infos(root / "envs" / "tasks.parquet"), _TemplateOnly(), RENDER)
    build_tool_tokenizer(root / "tok", rows, seed=0, vocab_size=512)
    write_sft_parquet(rows, root / "sft.parquet")
    return root, rows, AutoTokenizer.from_pretrained(root / "tok")


def test_assistant_turns_parse_back_to_the_golden_calls(golden: tuple[Path, list[dict[str, Any]], Any]) -> None:
    root, rows, tok = golden
    parser = ToolParser.get_tool_parser("hermes", tok)
    for row, info in zip(rows, task_infos(root / "envs" / "tasks.parquet"), strict=True):
        from longcat_plugins.environments.episodes import open_episode

        chain = open_episode(info).golden_chain()
        assistant = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        assert len(assistant) == len(chain) + 1  # one call per turn, then the final answer
        for text, (name, args) in zip(assistant, chain, strict=False):
            ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
            _, calls = asyncio.run(parser.extract_tool_calls(ids))
            assert [(c.name, json.loads(c.arguments)) for c in calls] == [(name, args)]
        _, calls = asyncio.run(parser.extract_tool_calls(tok.encode(assistant[-1], add_special_tokens=False)))
        assert calls == []
        # tool messages carry the episode's real results
        tools = [m for m in row["messages"] if m["role"] == "tool"]
        assert [m["name"] for m in tools] == [n for n, _ in chain]
        assert all(json.loads(m["content"]) and "error" not in json.loads(m["content"]) for m in tools)


def test_loop_replaying_the_rows_builds_the_sft_token_stream(golden: tuple[Path, list[dict[str, Any]], Any]) -> None:
    """prompt + response of the real loop == verl's SFT tokenisation; SFT loss mask == the loop's model tokens."""
    root, rows, tok = golden
    ds = MultiTurnSFTDataset(
        str(root / "sft.parquet"),
        tok,
        OmegaConf.create({"max_length": 4096, "pad_mode": "no_padding", "truncation": "error"}),
    )
    infos = task_infos(root / "envs" / "tasks.parquet")
    settings = ToolAgentSettings(tools_style=RENDER.tools_style, render_tools=RENDER.render_tools, max_turn_tokens=512)
    assert len(ds) == len(rows) >= 4
    for i, (row, info) in enumerate(zip(rows, infos, strict=True)):
        script = [m["content"] for m in row["messages"] if m["role"] == "assistant"]
        server = ScriptedServer(tok, list(script))

        async def go(server: ScriptedServer = server, info: dict[str, Any] = info) -> Any:
            loop = make_loop(tok, server, settings, prompt_length=4096, response_length=4096, use_v1=False)
            return await loop.run({"temperature": 1.0}, extra_info=info, raw_prompt=[])

        out = asyncio.run(go())
        assert out.reward_score == 1.0 and out.extra_fields["reward_extra_info"]["env_success"] == 1.0
        item = ds[i]
        sft_ids = item["input_ids"].tolist()
        assert list(out.prompt_ids) + list(out.response_ids) == sft_ids, f"row {i}: token streams differ"
        loss_mask = item["loss_mask"].tolist()
        n = len(out.prompt_ids)
        assert loss_mask[:n] == [0] * n
        assert loss_mask[n:] == list(out.response_mask)


def test_sft_rows_and_tokenizer_are_deterministic(
    golden: tuple[Path, list[dict[str, Any]], Any], tmp_path: Path
) -> None:
    root, rows, _ = golden
    again = sft_rows(task_infos(root / "envs" / "tasks.parquet"), _TemplateOnly(), RENDER)
    assert again == rows
    build_tool_tokenizer(tmp_path / "tok", again, seed=0, vocab_size=512)
    assert (tmp_path / "tok" / "tokenizer.json").read_bytes() == (root / "tok" / "tokenizer.json").read_bytes()


def test_prompt_is_short_with_the_tool_tokenizer(golden: tuple[Path, list[dict[str, Any]], Any]) -> None:
    """The policy and tool list lines are single tokens: the whole trajectory fits in a few hundred tokens."""
    _, rows, tok = golden
    for row in rows:
        prompt = tok.apply_chat_template(row["messages"][:2], tokenize=True, return_dict=False)
        assert len(prompt) < 200, len(prompt)
        assert len(row["messages"][0]["content"]) > 2000  # what the byte-level tokenizer would see


def test_a_golden_chain_that_misses_the_rubric_is_rejected(
    golden: tuple[Path, list[dict[str, Any]], Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from longcat_plugins.environments.runtime import ToolEpisode

    root, _, _ = golden
    info = task_infos(root / "envs" / "tasks.parquet")[0]
    monkeypatch.setattr(ToolEpisode, "golden_chain", lambda self: [])  # nothing done: the rubric fails
    with pytest.raises(GoldenChainError, match="does not meet the rubric"):
        golden_messages(info, _TemplateOnly(), RENDER)


def test_revalued_rows_are_the_same_chains_about_fresh_values(golden: tuple[Path, list[dict[str, Any]], Any]) -> None:
    """Each copy re-draws the first call's stated values everywhere after the system prompt, parses
    back through verl's hermes parser to the same calls with the fresh value, and is deterministic."""
    from longcat_plugins.learning.tool_warmstart import revalued_rows

    _, rows, tok = golden
    parser = ToolParser.get_tool_parser("hermes", tok)
    copies = revalued_rows(rows, 2, seed=0)
    assert copies == revalued_rows(rows, 2, seed=0) and copies != revalued_rows(rows, 2, seed=1)
    assert len(copies) == 2 * len(rows) and revalued_rows(rows, 0, seed=0) == []
    with pytest.raises(ValueError, match="revalued: must be >= 0"):
        revalued_rows(rows, -1, seed=0)
    changed = 0
    for row, copy in zip(rows + rows, copies, strict=True):
        old, new = row["messages"], copy["messages"]
        assert [m["role"] for m in old] == [m["role"] for m in new] and old[0] == new[0]
        calls = []
        for m in (m for m in new if m["role"] == "assistant" and m["content"].startswith("<tool_call>")):
            ids = tok.encode(m["content"], add_special_tokens=False) + [tok.eos_token_id]
            _, parsed = asyncio.run(parser.extract_tool_calls(ids))
            calls.append((parsed[0].name, json.loads(parsed[0].arguments)))
        golden_calls = [json.loads(m["content"][11:-12]) for m in old[2::2] if m["content"].startswith("<tool_call>")]
        assert [n for n, _ in calls] == [c["name"] for c in golden_calls]
        first_old, first_new = golden_calls[0]["arguments"], calls[0][1]
        for key, value in first_old.items():
            stated = isinstance(value, str) and value in old[1]["content"] and value not in old[0]["content"]
            if stated and sum(c.isalnum() for c in value) >= 5:
                fresh = first_new[key]
                assert fresh != value and len(fresh) == len(value) and fresh in new[1]["content"]
                assert not any(value in m["content"] for m in new[1:])  # replaced everywhere, not only in the call
                changed += 1
            else:
                assert first_new[key] == value  # enum values (named in the system prompt) stay
    assert changed >= len(rows)  # most first calls state an id, code, email, phone or name


def test_shortcut_twins_stop_after_the_lookup_and_the_rubric_never_credits_them(
    golden: tuple[Path, list[dict[str, Any]], Any],
) -> None:
    """A stop-early twin is its row up to the first tool result, then "Done."; the share is kept
    per unit (1.0: one twin for every row of two or more calls) and drawn per row below it,
    deterministically; replayed through a fresh episode, the rubric fails every twin."""
    from longcat_plugins.environments.episodes import open_episode
    from longcat_plugins.learning.tool_warmstart import SHORTCUT_ANSWER, shortcut_rows

    root, rows, _ = golden
    multi = [r for r in rows if sum(m["content"].startswith("<tool_call>") for m in r["messages"][2:]) >= 2]
    assert multi, "the fixture needs chains of two calls"
    twins = shortcut_rows(rows, 1.0, seed=0)
    assert len(twins) == len(multi) and len(shortcut_rows(rows, 2.0, seed=0)) == 2 * len(multi)
    assert shortcut_rows(rows, 0.0, seed=0) == []
    half = shortcut_rows(rows, 0.5, seed=0)
    assert half == shortcut_rows(rows, 0.5, seed=0) and 0 < len(half) < len(multi)
    with pytest.raises(ValueError, match="shortcuts: must be >= 0"):
        shortcut_rows(rows, -0.5, seed=0)
    infos = {(str(i["env_path"]), str(i["task_id"])): i for i in task_infos(root / "envs" / "tasks.parquet")}
    for twin, row in zip(twins, multi, strict=True):
        cut = twin["messages"]
        assert cut[:-1] == row["messages"][:4] and [m["role"] for m in cut] == [
            "system",
            "user",
            "assistant",
            "tool",
            "assistant",
        ]
        assert cut[-1] == {"role": "assistant", "content": SHORTCUT_ANSWER}
        episode = open_episode({**infos[(twin["env_path"], twin["task_id"])], "noise_level": 0})
        call = json.loads(cut[2]["content"][len("<tool_call>") : -len("</tool_call>")])
        assert episode.call_tool(call["name"], call["arguments"]).ok
        assert not episode.evaluate(SHORTCUT_ANSWER).success, twin["task_id"]


POOL = 200


@pytest.fixture(scope="module")
def pooled(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[dict[str, Any]], list[dict[str, Any]], Any]:
    """Rows of two training and two held-out environments (another generator seed) under a value
    pool, and the tool tokenizer of ``WarmStartPlan(value_pool=POOL)`` trained on the training rows."""
    from dataclasses import replace

    from transformers import AutoTokenizer

    root = tmp_path_factory.mktemp("pooled")
    config = replace(SHORT_CHAINS, value_pool=POOL)
    generate_environments("retail", 2, root / "train", seed=3, config=config)
    generate_environments("retail", 2, root / "val", seed=10_003, config=config, split="test")
    train = sft_rows(task_infos(root / "train" / "tasks.parquet"), _TemplateOnly(), RENDER)
    val = sft_rows(task_infos(root / "val" / "tasks.parquet"), _TemplateOnly(), RENDER)
    build_tool_tokenizer(root / "tok", train, seed=0, vocab_size=512, value_pool=POOL)
    return train, val, AutoTokenizer.from_pretrained(root / "tok")


def _stated_values(row: dict[str, Any]) -> list[tuple[int, str]]:
    """(message index, value) of each string argument of each call that an earlier user message or
    tool result states and the system prompt does not (the values the model must copy)."""
    messages = row["messages"]
    out = []
    for i, m in enumerate(messages):
        if m["role"] == "assistant" and m["content"].startswith("<tool_call>"):
            seen = "".join(x["content"] for x in messages[1:i])
            for v in json.loads(m["content"][11:-12])["arguments"].values():
                if isinstance(v, str) and v in seen and v not in messages[0]["content"]:
                    out.append((i, v))
    return out


def test_value_pools_are_fixed_distinct_and_the_same_for_every_seed() -> None:
    from longcat_plugins.environments.genconfig import GenConfig
    from longcat_plugins.environments.values import CITIES, POOL_KINDS, value_pool

    for kind in POOL_KINDS:
        pool = value_pool(kind, POOL)
        assert len(set(pool)) == len(pool) == (len(CITIES) if kind == "city" else POOL)
        value_pool.cache_clear()
        assert value_pool(kind, POOL) == pool  # a function of kind and size only
    with pytest.raises(ValueError, match="no value pool of kind 'money'"):
        value_pool("money", POOL)
    assert GenConfig(value_pool=10).problems() == ["value_pool: must be 0 (off) or >= 20 (got 10)"]
    assert GenConfig(value_pool=0).problems() == [] == GenConfig(value_pool=20).problems()


def test_pooled_values_are_one_token_in_the_message_or_result_and_in_the_call(
    pooled: tuple[list[dict[str, Any]], list[dict[str, Any]], Any],
) -> None:
    """Under a value pool every string a call copies (the user's code, email, name ...; the record id
    of a tool result) is one token, the same token where it is stated and in the call; the held-out
    environments draw their values from the same pools, and the calls still parse back (hermes)."""
    from longcat_plugins.environments.values import POOL_KINDS, value_pool
    from longcat_plugins.learning.tool_warmstart import value_tokens

    train, val, tok = pooled
    pools = {v for kind in POOL_KINDS for v in value_pool(kind, POOL)}
    tokens = set(value_tokens(POOL))
    parser = ToolParser.get_tool_parser("hermes", tok)
    firsts = []
    for row in train + val:
        stated = _stated_values(row)
        assert stated, row["messages"][1]["content"]
        for i, value in stated:
            if re.fullmatch(r"\d{4}-\d\d-\d\d|\d\d:\d\d", value):
                continue  # a date or time the user states (not pooled: not one token)
            assert value in tokens, value
            ids = tok.encode(value, add_special_tokens=False)
            assert len(ids) == 1, (value, tok.convert_ids_to_tokens(ids))
            stream = tok.apply_chat_template(list(row["messages"][: i + 1]), tokenize=True, return_dict=False)
            call = tok.apply_chat_template(list(row["messages"][i : i + 1]), tokenize=True, return_dict=False)
            assert ids[0] in call and stream.count(ids[0]) >= 2, value  # in the call and stated before it
        first = _stated_values(row)[0][1]
        assert first in pools, first  # the first call's value is the user's, drawn from a pool
        firsts.append(first)
        for m in (m for m in row["messages"] if m["role"] == "assistant" and m["content"].startswith("<tool_call>")):
            ids = tok.encode(m["content"], add_special_tokens=False) + [tok.eos_token_id]
            _, parsed = asyncio.run(parser.extract_tool_calls(ids))
            golden_call = json.loads(m["content"][11:-12])
            assert (parsed[0].name, json.loads(parsed[0].arguments)) == (golden_call["name"], golden_call["arguments"])
    assert len(set(firsts)) >= 0.8 * len(firsts)  # drawn from hundreds: rarely the same value twice


def test_revalued_rows_under_a_pool_draw_fresh_values_from_the_same_pool(
    pooled: tuple[list[dict[str, Any]], list[dict[str, Any]], Any],
) -> None:
    from longcat_plugins.environments.values import POOL_KINDS, value_pool
    from longcat_plugins.learning.tool_warmstart import revalued_rows

    train, _, tok = pooled
    kind_of = {v: kind for kind in POOL_KINDS for v in value_pool(kind, POOL)}
    copies = revalued_rows(train, 2, seed=0, pool=POOL)
    assert copies == revalued_rows(train, 2, seed=0, pool=POOL) and len(copies) == 2 * len(train)
    changed = 0
    for row, copy in zip(train + train, copies, strict=True):
        old, new = _stated_values(row)[0][1], _stated_values(copy)[0][1]
        if old != new:
            assert kind_of[new] == kind_of[old] and len(tok.encode(new, add_special_tokens=False)) == 1
            assert not any(old in m["content"] for m in copy["messages"][1:])
            changed += 1
    assert changed >= len(train)  # most first calls state a pooled value
