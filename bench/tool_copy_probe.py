"""Does a tool-use warm start learn to copy? A fast diagnostic outside the full build.

A full candidate build (:func:`longcat_plugins.learning.tool_warmstart.ensure_tool_warm_start`)
costs 7-10 minutes of verl SFT and a played probe; this measures the one skill the candidates
lack, copying a value into a call, in seconds per evaluation. It takes the plan's own data
(:func:`~longcat_plugins.learning.tool_warmstart.prepare_data`: the same golden trajectories,
re-valued copies, tokenizer and random base model; reused from the plan's built warm start
when there is one), tokenizes them with verl's own ``MultiTurnSFTDataset`` (so the loss mask
is verl's: assistant tokens only, the ``<|assistant|>`` prompt excluded), trains the model with
a plain torch loop shaped like verl's SFT (AdamW, weight decay 0.01, gradient clip 1.0,
warm-up then cosine decay to 0, token-mean loss over the batch) and, every ``--eval-every``
updates, scores the held-out environments' golden trajectories **teacher-forced** (argmax at
each target position, no generation):

- ``copy_user``: at the positions whose target is a one-token value the user's message states
  (the first call's argument), the share predicted right;
- ``copy_tool``: the same for values only a tool result states (the record id the next call uses);
- ``first_call``: the share of held-out trajectories whose whole first assistant turn (the call,
  tool and arguments) is predicted right;
- ``all_turns``: the share whose every assistant token is predicted right (a proxy for success);
- ``asst_acc``: the share of all assistant tokens predicted right.

What can vary (``--variants``, ``name=key:value,key:value;...``): ``lr``, ``batch``, ``updates``,
``tie`` (tied input/output embeddings: the copy circuit ``e_v -> e_v`` is then the same for every
value, rather than learned per value token), ``size`` (a :data:`SIZES` name), ``hidden``,
``layers``, ``heads``, ``loss`` (``assistant``: verl's mask; ``all``: every token).
``seed`` (init and data order). ``--score DIR`` also scores a trained checkpoint, e.g. the plan's
verl-built model, on the same positions. A data plan is a ``bench_tool_warm_starts`` candidate (``size:sft_steps:train_envs[:flags]``;
value pools, ``vpN``, are required: the copy positions are the one-token values).

    .venv/bin/python bench/tool_copy_probe.py --plan tiny:2000:400:rv4:vp200 \\
        --variants "base=;tied=tie:1" --updates 1500 --eval-every 250 [--append]

Writes ``bench/results/tool_copy_probe.json`` (``{"runs": [...]}``: plan, variant settings, the
curve of the shares above and the training loss by update, wall seconds).
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from provenance import provenance, stamp  # bench/provenance.py: the record every bench writes

sys.path.insert(0, str(Path(__file__).resolve().parent))

OUT = Path(__file__).resolve().parent / "results" / "tool_copy_probe.json"
#: a variant's settings and their defaults (the plan's values where it has them)
SETTINGS = ("lr", "batch", "updates", "tie", "size", "hidden", "layers", "heads", "loss", "seed")


def data_root(cache: Path, plan: Any) -> Path:
    """The plan's built warm start if there is one, else its data alone built (once) under ``cache``."""
    from longcat_plugins.learning.assets import building
    from longcat_plugins.learning.tool_warmstart import _fix_env_paths, prepare_data

    built = cache / f"toolwarm-{plan.size}-seed{plan.seed}-{plan.key()}"
    if (built / "sft.parquet").exists():
        return built
    root = cache / f"toolcopy-data-{plan.size}-seed{plan.seed}-{plan.key()}"
    if (root / "sft.parquet").exists():
        return root
    with building(root) as tmp:
        prepare_data(tmp, plan)
        _fix_env_paths(tmp, root.resolve())
    return root


def heldout_rows(root: Path, max_length: int) -> Path:
    """The held-out environments' golden trajectories (rendered as the SFT rows are), cached in ``root``."""
    from longcat_plugins.environments.golden import sft_rows, task_infos, write_sft_parquet
    from longcat_plugins.learning.tool_warmstart import RENDER, fitting_rows
    from longcat_plugins.learning.warmstart import TOOL_CHAT_TEMPLATE

    out = root / "heldout-sft.parquet"
    if not out.exists():

        class _NoTemplateTools:  # as prepare_data renders: tools go to the system prompt
            chat_template = TOOL_CHAT_TEMPLATE

        rows = sft_rows(task_infos(root / "envs-val" / "tasks.parquet"), _NoTemplateTools(), RENDER)
        write_sft_parquet(fitting_rows(rows, root / "base", max_length), out)
    return out


def tokenized(parquet: Path, tokenizer: Any, max_length: int) -> list[dict[str, Any]]:
    """Every row as verl's ``MultiTurnSFTDataset`` gives it (ids and loss mask), with its messages
    (cached next to the parquet: tokenizing thousands of rows takes most of a minute)."""
    import pandas as pd
    import torch
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    cache = parquet.with_name(f"{parquet.stem}.probe-tokens-{max_length}.pt")
    if cache.exists():
        return torch.load(cache)
    data = MultiTurnSFTDataset(
        str(parquet), tokenizer, {"max_length": max_length, "pad_mode": "no_padding", "truncation": "error"}
    )
    messages = pd.read_parquet(parquet)["messages"]
    rows = [{**data[i], "messages": [dict(m) for m in messages[i]]} for i in range(len(data))]
    torch.save(rows, cache.with_suffix(".tmp"))
    cache.with_suffix(".tmp").replace(cache)
    return rows


def copy_marks(row: dict[str, Any], value_ids: dict[int, str]) -> dict[str, list[int]]:
    """Target positions of a held-out row: one-token values stated by the user / only by a tool;
    the first assistant turn's positions; all assistant positions."""
    ids, mask = row["input_ids"].tolist(), row["loss_mask"].tolist()
    user = row["messages"][1]["content"]
    tools = "".join(m["content"] for m in row["messages"] if m["role"] == "tool")
    asst = [t for t in range(1, len(ids)) if mask[t]]
    first: list[int] = []
    for t in asst:  # the first assistant turn: the first run of consecutive trained positions
        if first and t != first[-1] + 1:
            break
        first.append(t)
    marks: dict[str, list[int]] = {"copy_user": [], "copy_tool": [], "first": first, "asst": asst}
    for t in asst:
        value = value_ids.get(ids[t])
        if value is not None and value in user:
            marks["copy_user"].append(t)
        elif value is not None and value in tools:
            marks["copy_tool"].append(t)
    return marks


def build_model(base: Path, s: dict[str, Any], seed: int) -> Any:
    """The plan's random base model, or one of another shape (same vocabulary) for a variant."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, LlamaForCausalLM

    from longcat_plugins.learning.assets import SIZES

    config = AutoConfig.from_pretrained(base)
    spec = SIZES[s["size"]]
    shape = {
        "hidden_size": s["hidden"] or spec.hidden_size,
        "intermediate_size": 2 * (s["hidden"] or spec.hidden_size) if s["hidden"] else spec.intermediate_size,
        "num_hidden_layers": s["layers"] or spec.num_hidden_layers,
        "num_attention_heads": s["heads"] or spec.num_attention_heads,
        "num_key_value_heads": s["heads"] or spec.num_attention_heads,
    }
    same = all(getattr(config, k) == v for k, v in shape.items()) and not s["tie"]
    if same:  # bitwise the weights verl's SFT starts from
        return AutoModelForCausalLM.from_pretrained(base)
    for k, v in shape.items():
        setattr(config, k, v)
    config.tie_word_embeddings = bool(s["tie"])
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


def batch_of(rows: list[dict[str, Any]], pad: int) -> tuple[Any, Any, Any]:
    import torch

    n = max(len(r["input_ids"]) for r in rows)
    ids = torch.full((len(rows), n), pad, dtype=torch.long)
    att = torch.zeros((len(rows), n), dtype=torch.long)
    mask = torch.zeros((len(rows), n), dtype=torch.float32)
    for i, r in enumerate(rows):
        k = len(r["input_ids"])
        ids[i, :k], att[i, :k], mask[i, :k] = r["input_ids"], 1, r["loss_mask"].float()
    return ids, att, mask


def evaluate(model: Any, rows: list[dict[str, Any]], marks: list[dict[str, list[int]]], pad: int) -> dict[str, float]:
    """Teacher-forced shares on the held-out rows (see the module doc)."""
    import torch

    hits = {"copy_user": [0, 0], "copy_tool": [0, 0], "asst": [0, 0]}
    first = all_turns = 0
    model.eval()
    with torch.no_grad():
        for start in range(0, len(rows), 16):
            chunk = rows[start : start + 16]
            ids, att, _ = batch_of(chunk, pad)
            pred = model(input_ids=ids, attention_mask=att).logits.argmax(-1)
            for i in range(len(chunk)):
                m = marks[start + i]
                right = {t: bool(pred[i, t - 1] == ids[i, t]) for t in m["asst"]}
                for key in hits:
                    hits[key][0] += sum(right[t] for t in m[key])
                    hits[key][1] += len(m[key])
                first += all(right[t] for t in m["first"])
                all_turns += all(right.values())
    model.train()
    shares = {k: round(h / n, 4) if n else None for k, (h, n) in hits.items()}
    return {
        "copy_user": shares["copy_user"],
        "copy_tool": shares["copy_tool"],
        "first_call": round(first / len(rows), 4),
        "all_turns": round(all_turns / len(rows), 4),
        "asst_acc": shares["asst"],
    }


def run_variant(
    name: str,
    s: dict[str, Any],
    train: list[dict[str, Any]],
    held: list[dict[str, Any]],
    marks: list,
    base: Path,
    seed: int,
    eval_every: int,
    pad: int,
) -> dict[str, Any]:
    import torch

    torch.manual_seed(seed)
    model = build_model(base, s, seed)
    model.train()
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    rest = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [{"params": decay, "weight_decay": 0.01}, {"params": rest, "weight_decay": 0.01}],
        lr=s["lr"],
        betas=(0.9, 0.999),
    )
    warmup, total = 10, s["updates"]
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt,
        lambda u: (
            (u + 1) / warmup if u < warmup else 0.5 * (1 + math.cos(math.pi * (u - warmup) / max(1, total - warmup)))
        ),
    )
    rng = random.Random(seed)
    order: list[int] = []
    curve = [{"update": 0, **evaluate(model, held, marks, pad)}]
    print(name, curve[-1], flush=True)
    start, losses = time.perf_counter(), []
    for update in range(1, total + 1):
        if len(order) < s["batch"]:
            fresh = list(range(len(train)))
            rng.shuffle(fresh)
            order += fresh
        picked, order = order[: s["batch"]], order[s["batch"] :]
        ids, att, mask = batch_of([train[i] for i in picked], pad)
        if s["loss"] == "all":
            mask = att.float()
        logits = model(input_ids=ids, attention_mask=att).logits[:, :-1]
        target, weight = ids[:, 1:], mask[:, 1:]
        nll = torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.shape[-1]), target.reshape(-1), reduction="none"
        )
        loss = (nll * weight.reshape(-1)).sum() / weight.sum()
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        losses.append(loss.item())
        if update % eval_every == 0 or update == total:
            row = {"update": update, "loss": round(sum(losses) / len(losses), 4), **evaluate(model, held, marks, pad)}
            row["train_s"] = round(time.perf_counter() - start, 1)
            curve.append(row)
            losses = []
            print(name, row, flush=True)
    return {"variant": name, "settings": s, "curve": curve, "wall_s": round(time.perf_counter() - start, 1)}


def parse_variants(text: str, defaults: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, body = part.partition("=")
        s = dict(defaults)
        for item in filter(None, body.split(",")):
            key, _, value = item.partition(":")
            if key not in SETTINGS:
                raise SystemExit(f"--variants: {name}: unknown setting {key!r} (known: {', '.join(SETTINGS)})")
            s[key] = value if key in ("size", "loss") else (float(value) if key == "lr" else int(value))
        if s["loss"] not in ("assistant", "all"):
            raise SystemExit(f"--variants: {name}: loss must be 'assistant' or 'all', got {s['loss']!r}")
        out.append((name, s))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--plan", default="tiny:2000:400:rv4:vp200", help="a bench_tool_warm_starts candidate")
    parser.add_argument(
        "--variants", default="base=", help="name=key:value,...;name=... (keys: " + ", ".join(SETTINGS) + ")"
    )
    parser.add_argument("--updates", type=int, default=None, help="default: the plan's sft_steps")
    parser.add_argument("--eval-every", type=int, default=250)
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--append", action="store_true", help="add to the runs already in --out")
    parser.add_argument("--score", type=Path, default=None, help="also score this trained checkpoint (no training)")
    args = parser.parse_args()

    import torch
    from bench_tool_warm_starts import parse_candidate
    from transformers import AutoTokenizer

    from longcat_plugins.learning.assets import default_cache_dir
    from longcat_plugins.learning.tool_warmstart import value_tokens

    plan = parse_candidate(args.plan)
    if not plan.value_pool:
        raise SystemExit(f"--plan: {args.plan!r} has no value pool (vpN): the copy positions are one-token values")
    defaults = {
        "lr": plan.sft_lr,
        "batch": plan.sft_batch_size,
        "updates": args.updates or plan.sft_steps,
        "tie": int(plan.tie_embeddings),
        "size": plan.size,
        "hidden": plan.hidden_size,
        "layers": 0,
        "heads": 0,
        "loss": "assistant",
        "seed": plan.seed,
    }
    variants = parse_variants(args.variants, defaults)
    origin = provenance(seeds=sorted({int(s.get("seed", 0)) for _, s in variants}))
    torch.set_num_threads(2)
    t0 = time.perf_counter()
    root = data_root(args.cache_dir or default_cache_dir(), plan)
    tok = AutoTokenizer.from_pretrained(root / "base")
    train = tokenized(root / "sft.parquet", tok, plan.sft_max_length)
    held = tokenized(heldout_rows(root, plan.sft_max_length), tok, plan.sft_max_length)
    value_ids = {tok.convert_tokens_to_ids(v): v for v in value_tokens(plan.value_pool)}
    marks = [copy_marks(r, value_ids) for r in held]
    print(
        f"data {root.name}: {len(train)} train rows, {len(held)} held-out rows ({time.perf_counter() - t0:.0f}s)",
        flush=True,
    )
    runs = json.loads(args.out.read_text())["runs"] if args.append and args.out.exists() else []
    if args.score:  # a trained checkpoint (e.g. the plan's verl SFT model), scored, not trained
        from transformers import AutoModelForCausalLM

        scores = evaluate(AutoModelForCausalLM.from_pretrained(args.score), held, marks, tok.pad_token_id)
        print("score", args.score, scores, flush=True)
        runs.append(
            {
                "plan": asdict(plan),
                "heldout_rows": len(held),
                "variant": "checkpoint",
                "scored": str(args.score),
                "curve": [scores],
            }
        )
    for name, s in variants:
        run = run_variant(name, s, train, held, marks, root / "base", s["seed"], args.eval_every, tok.pad_token_id)
        runs.append({"plan": asdict(plan), "train_rows": len(train), "heldout_rows": len(held), **run})
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(stamp({"runs": runs}, origin), indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
