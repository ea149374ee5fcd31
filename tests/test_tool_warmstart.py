"""The tool-use warm start's wiring, without training: its overrides compose with the recipe, the
demo's held-out line reads verl's validation metric, and bad input is refused by name."""

from __future__ import annotations

from pathlib import Path

import pytest

from longcat_plugins.config import compose, validate_config
from longcat_plugins.learning.assets import Assets
from longcat_plugins.learning.demos import prepare_demo
from longcat_plugins.learning.tool_warmstart import (
    HELD_OUT_METRIC,
    ToolWarmStart,
    WarmStartPlan,
    ensure_tool_warm_start,
    held_out_success,
    warm_overrides,
)
from longcat_plugins.learning.warmstart import static_lines

REPO = Path(__file__).resolve().parents[1]


def test_warm_overrides_compose_and_validate_with_the_tool_agent_recipe(tmp_path: Path) -> None:
    warm = ToolWarmStart(
        *(tmp_path / n for n in ("root", "model", "train", "val")), base=tmp_path / "base", sft=tmp_path / "sft.parquet"
    )
    cfg = compose(REPO / "configs" / "tool_agent_cpu.yaml", warm_overrides(warm, 10))
    loop = cfg.longcat.settings.environment.longcat_tool_agent
    assert (
        loop.noise_curriculum.enabled is False and loop.discard_turns == 0
    )  # the SFT distribution: clean, one segment
    assert cfg.actor_rollout_ref.model.path == str(warm.model) and cfg.data.val_files == str(warm.val)
    assert cfg.trainer.val_before_train is True and cfg.trainer.test_freq == 2
    assert loop.format_weight == 0  # the rubric alone is the reward
    for role in (cfg.actor_rollout_ref.actor, cfg.actor_rollout_ref.ref):  # fp32, as the warm start was trained
        assert role.fsdp_config.mixed_precision.param_dtype == "fp32"
    problems, _ = validate_config(cfg)
    assert problems == []


def test_the_tool_demo_starts_from_the_measured_plan_at_the_measured_rate(tmp_path: Path) -> None:
    """``demo --recipe tool_agent`` (warm by default) builds exactly the plan its figures come from
    (bench/results/tool_warm_start_demo.json, demo_tool_agent.json: the ``toolwarm-tiny-seed1-479350de8d``
    warm start) and trains it at lr 3e-4 for 20 steps, validating every 4."""
    from longcat_plugins.learning.demos import TOOL_WARM_DEMO_STEPS, tool_warm_demo
    from longcat_plugins.learning.tool_warmstart import DEMO_PLAN, demo_plan

    assert demo_plan("tiny") == DEMO_PLAN and DEMO_PLAN.key() == "479350de8d" and DEMO_PLAN.shortcuts == 1.0
    assert demo_plan("small").size == "small" and demo_plan("small").hidden_size == 0  # the size's own width
    warm = ToolWarmStart(
        *(tmp_path / n for n in ("root", "model", "train", "val")), base=tmp_path / "base", sft=tmp_path / "sft.parquet"
    )
    demo = tool_warm_demo(warm, TOOL_WARM_DEMO_STEPS)
    cfg = compose(REPO / "configs" / "tool_agent_cpu.yaml", demo.overrides)
    assert cfg.actor_rollout_ref.actor.optim.lr == 3e-4 and cfg.trainer.total_training_steps == 20
    assert cfg.trainer.test_freq == 4 and cfg.data.train_files == str(warm.train)


def test_held_out_success_reads_the_first_and_last_validation() -> None:
    steps = [
        {"step": 0, HELD_OUT_METRIC: 0.2},
        {"step": 1, "critic/score/mean": 0.5},
        {"step": 2, HELD_OUT_METRIC: 0.3},
        {"step": 4, HELD_OUT_METRIC: 0.45},
    ]
    assert held_out_success(steps) == (0.2, 0.45)
    assert held_out_success(steps[:2]) is None  # one validation: nothing to compare


def test_static_lines_are_the_recurring_system_prompt_lines() -> None:
    rows = [
        {
            "messages": [
                {
                    "role": "system",
                    "content": "You are an agent of the store.\nfind_x(a: string) - Find.\nonly-here line!",
                }
            ]
        },
        {"messages": [{"role": "system", "content": "You are an agent of the store.\nfind_x(a: string) - Find."}]},
    ]
    assert static_lines(rows) == ["You are an agent of the store.", "find_x(a: string) - Find."]


def test_bad_init_and_size_are_refused_by_name(tmp_path: Path) -> None:
    built = Assets(tmp_path, tmp_path / "model", tmp_path / "train.parquet", tmp_path / "val.parquet")
    with pytest.raises(ValueError, match="init must be 'warm' or 'random'"):
        prepare_demo("tool_agent", built, 2, init="pretrained")
    with pytest.raises(ValueError, match="unknown model size 'huge'"):
        ensure_tool_warm_start(tmp_path, WarmStartPlan(size="huge"))
    assert not list(tmp_path.iterdir())  # nothing written


def test_each_plan_builds_into_its_own_cache_directory() -> None:
    assert WarmStartPlan().key() == WarmStartPlan().key()
    assert len({WarmStartPlan().key(), WarmStartPlan(sft_steps=3).key(), WarmStartPlan(seed=1).key()}) == 3
    # fields added later count only when set: the candidates measured before them keep their directories
    assert WarmStartPlan().key() == "3dd12334cb"
    assert WarmStartPlan(sft_steps=1000, space_tokens=True).key() == "3a009d2453"
    assert WarmStartPlan(revalued=4).key() not in {WarmStartPlan().key(), WarmStartPlan(revalued=5).key()}
    assert WarmStartPlan(sft_steps=1000, space_tokens=True, revalued=8).key() == "9092bb40b1"
    assert WarmStartPlan(value_pool=200).key() not in {WarmStartPlan().key(), WarmStartPlan(value_pool=300).key()}
    assert WarmStartPlan(value_pool=200).gen_config().value_pool == 200 and WarmStartPlan().gen_config().value_pool == 0


def test_sft_config_takes_exactly_the_planned_updates() -> None:
    plan = WarmStartPlan(sft_steps=400, sft_batch_size=8)
    for rows in (950, 3200, 8, 3):  # ~3.4 epochs, exactly one, many, fewer rows than a batch
        config = plan.sft_config(rows)
        assert config.total_steps == 400 and config.batch_size == 8
        assert config.epochs * max(1, rows // 8) >= 400 > (config.epochs - 1) * max(1, rows // 8)


def test_fitting_rows_drop_only_trajectories_longer_than_the_sft_length(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from longcat_plugins.environments.envgen import generate_environments
    from longcat_plugins.environments.golden import sft_rows, task_infos
    from longcat_plugins.learning.tool_warmstart import (
        RENDER,
        SHORT_CHAINS,
        TOOL_CHAT_TEMPLATE,
        build_tool_tokenizer,
        fitting_rows,
    )

    class _TemplateOnly:
        chat_template = TOOL_CHAT_TEMPLATE

    generate_environments("retail", 2, tmp_path / "envs", seed=5, config=SHORT_CHAINS)
    rows = sft_rows(task_infos(tmp_path / "envs" / "tasks.parquet"), _TemplateOnly(), RENDER)
    build_tool_tokenizer(tmp_path / "tok", rows, seed=0, vocab_size=512)
    tok = AutoTokenizer.from_pretrained(tmp_path / "tok")
    lengths = [len(tok.apply_chat_template(list(r["messages"]), tokenize=True, return_dict=False)) for r in rows]
    cut = sorted(lengths)[len(lengths) // 2]
    kept = fitting_rows(rows, tmp_path / "tok", cut)
    assert kept == [r for r, n in zip(rows, lengths, strict=True) if n <= cut] and 0 < len(kept) < len(rows)
    assert fitting_rows(rows, tmp_path / "tok", max(lengths)) == rows
    with pytest.raises(ValueError, match="sft_max_length: no golden trajectory fits in 5 tokens"):
        fitting_rows(rows, tmp_path / "tok", 5)


def test_space_tokens_make_a_value_the_same_tokens_in_the_message_and_in_the_call(tmp_path: Path) -> None:
    from transformers import AutoTokenizer

    from longcat_plugins.learning.assets import build_tokenizer

    corpus = [
        f'The shipment\'s tracking number is {code}. <tool_call>{{"tracking_number": "{code}"}}</tool_call>'
        for code in ("DKP72P", "E4YWUA", "Z9UD94", "H1LSYY", "K4KZZZ", "Velvet Lounge", "Austin")
    ] * 20

    def copies(space_tokens: bool, value: str) -> tuple[bool, bool]:
        """Whether the value's own tokens occur, in order, in the user's sentence and in the call."""
        out = tmp_path / f"tok-{space_tokens}"
        if not out.exists():
            build_tokenizer(out, 0, 600, corpus=corpus, space_tokens=space_tokens)
        tok = AutoTokenizer.from_pretrained(out)
        own = tok.tokenize(value)
        said, called = tok.tokenize(f"number is {value}."), tok.tokenize(f'{{"n": "{value}"}}')
        contains = lambda seq: any(seq[i : i + len(own)] == own for i in range(len(seq)))  # noqa: E731
        return contains(said), contains(called)

    for value in ("DKP72P", "Q0XNB2", "Velvet Lounge"):
        assert copies(True, value) == (True, True), value
    assert copies(False, "Velvet Lounge") == (False, True)  # byte-level BPE glues the space to the first letter
    assert WarmStartPlan(space_tokens=True).key() != WarmStartPlan().key()


def test_tied_embeddings_and_width_are_plan_fields_that_keep_the_older_keys(tmp_path: Path) -> None:
    import sys

    from transformers import AutoModelForCausalLM

    from longcat_plugins.learning.assets import build_model, build_tokenizer

    assert WarmStartPlan(tie_embeddings=False).key() == "3dd12334cb"  # unset: the default plan's directory
    assert WarmStartPlan(hidden_size=0).key() == "3dd12334cb"
    keys = {WarmStartPlan().key(), WarmStartPlan(tie_embeddings=True).key(), WarmStartPlan(hidden_size=128).key()}
    assert len(keys) == 3
    build_tokenizer(tmp_path, 0, 300)
    for tie, width in ((False, 0), (True, 0), (True, 128)):
        build_model(tmp_path, "tiny", 0, tie_embeddings=tie, hidden_size=width)
        model = AutoModelForCausalLM.from_pretrained(tmp_path)
        shared = model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()
        assert model.config.tie_word_embeddings is tie and shared is tie
        assert (model.config.hidden_size, model.config.intermediate_size) == ((128, 256) if width else (64, 128))
        assert (model.config.num_hidden_layers, model.config.num_attention_heads) == (2, 4)  # the size's
    sys.path.insert(0, str(REPO / "bench"))
    try:
        from bench_tool_warm_starts import parse_candidate
    finally:
        sys.path.remove(str(REPO / "bench"))
    plan = parse_candidate("tiny:1200:400:te:rv4:vp20:hd128")
    assert plan == WarmStartPlan(sft_steps=1200, revalued=4, value_pool=20, tie_embeddings=True, hidden_size=128)
    assert parse_candidate("tiny:2000:400:rv4:vp200").tie_embeddings is False
    with pytest.raises(SystemExit, match=r"unknown flag\(s\) \['tie'\]"):
        parse_candidate("tiny:2000:400:tie")
    assert (
        parse_candidate("tiny:4000:400:te:sc1").shortcuts == 1.0 and parse_candidate("tiny:1:1:sc0.5").shortcuts == 0.5
    )
    with pytest.raises(SystemExit, match=r"unknown flag\(s\) \['scx'\]"):
        parse_candidate("tiny:2000:400:scx")
    assert WarmStartPlan(shortcuts=0.0).key() == "3dd12334cb" != WarmStartPlan(shortcuts=1.0).key()


def test_copy_probe_marks_the_values_a_call_copies_from_the_user_and_from_a_tool() -> None:
    """bench/tool_copy_probe.py scores a value at the position where an assistant turn copies it:
    a value the user stated, one only a tool result stated, and the first turn's positions."""
    import sys

    import torch

    sys.path.insert(0, str(REPO / "bench"))
    try:
        from tool_copy_probe import copy_marks
    finally:
        sys.path.remove(str(REPO / "bench"))
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "My phone is 555-1. Close it."},
        {"role": "assistant", "content": "call(555-1)"},
        {"role": "tool", "content": "CUS-0003"},
        {"role": "assistant", "content": "call(CUS-0003)"},
    ]
    # token ids: 10 = "555-1", 11 = "CUS-0003", 12 = "CUS-0009" (a value no message states), others text
    ids = [1, 2, 10, 3, 4, 5, 10, 6, 7, 11, 8, 5, 11, 12, 6]
    mask = [0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1]  # two assistant turns: 5-7 and 11-14
    row = {"input_ids": torch.tensor(ids), "loss_mask": torch.tensor(mask), "messages": messages}
    marks = copy_marks(row, {10: "555-1", 11: "CUS-0003", 12: "CUS-0009"})
    assert marks == {"copy_user": [6], "copy_tool": [12], "first": [5, 6, 7], "asst": [5, 6, 7, 11, 12, 13, 14]}


def test_tool_rl_bench_unties_a_copy_with_the_same_function_and_keys_runs_by_settings(tmp_path: Path) -> None:
    """bench_learning_tool_agent.py --untie: the copy's output layer is its own parameter, equal to
    the embedding, so the copy computes the same logits; runs of other settings are kept apart."""
    import sys

    import torch
    from transformers import AutoModelForCausalLM

    from longcat_plugins.learning.assets import build_model, build_tokenizer

    sys.path.insert(0, str(REPO / "bench"))
    try:
        from bench_learning_tool_agent import _key, _untied_copy
    finally:
        sys.path.remove(str(REPO / "bench"))
    tied = tmp_path / "model"
    tied.mkdir()
    build_tokenizer(tied, 0, 300)
    build_model(tied, "tiny", 0, tie_embeddings=True)
    untied = _untied_copy(tied)
    assert untied == tmp_path / "model-untied" and not (tmp_path / "model-untied.tmp").exists()
    a, b = AutoModelForCausalLM.from_pretrained(tied), AutoModelForCausalLM.from_pretrained(untied)
    assert b.config.tie_word_embeddings is False
    assert b.lm_head.weight.data_ptr() != b.model.embed_tokens.weight.data_ptr()
    assert torch.equal(b.lm_head.weight, a.model.embed_tokens.weight)
    x = torch.randint(0, 300, (2, 12))
    assert torch.equal(a(x).logits, b(x).logits)
    assert _untied_copy(tied) == untied  # built once
    with pytest.raises(SystemExit, match="already untied"):
        _untied_copy(untied)

    run = {"seed": 0, "lr": 3e-4, "warm_start": {"plan": 1}, "settings": ["data.seed=0", "x=1"]}
    assert _key(run) == _key({**run, "settings": ["data.seed=5", "x=1"]})  # the seed's own keys aside
    assert _key(run) != _key({**run, "settings": ["data.seed=0", "x=2"]})
    assert _key(run) != _key({**run, "lr": 1e-3})
