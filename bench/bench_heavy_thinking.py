"""Heavy thinking vs plain sampling at equal generated tokens, on the warm start's held-out questions.

A model (``--model``, an HF checkpoint directory; default: the warm start,
:func:`longcat_plugins.learning.arithmetic_warmstart.ensure_warm_start`, the tiny model SFT-ed on
``What is a+b-c?``) answers the warm start's 64 held-out questions in three modes, in-process
with plain transformers ``generate`` (sampled at temperature 1, like the rollout):

- ``sampling``, ``k`` = 1: one sample per question; pass@1 = share of exact answers;
- ``sampling``, ``k`` = K+1: K+1 samples per question and the majority answer
  (self-consistency, the report's baseline; ties to the earliest): about the tokens of
- ``heavy_thinking``, ``k`` = K: :func:`longcat_plugins.environments.heavy_thinking.heavy_think`, the
  agent loop's own orchestration (K trajectories, then the summary over their answers, with the
  ``heavy_thinking_cpu`` recipe's template and answer cut); the summary's response is the answer.

Exact match is the learning bench's reward (``arithmetic_exact``). ``generated_tokens`` is the
total of new tokens over the 64 questions (up to and including the end token), every stage counted.
``form`` is the share of final answers in the credited ``The answer is N.`` form (any N), and
``candidate_pass_at_1`` (k > 1) the mean exact match of the k samples or of the K trajectories the
answer was chosen from (what the majority vote or the summary had to work with).

Each record names its ``model`` (``--label``; default ``warm`` for the warm start, else the
checkpoint's run directory name, see :func:`model_label`) and ``model_path``. ``--append`` keeps the
rows already in ``--out`` and replaces only those with the same (model, mode, k, seed); rows without
a ``model`` predate the field and were measured on the warm start.

    .venv/bin/python bench/bench_heavy_thinking.py [--model DIR [--label NAME]] [--seeds 0,1,2]
        [--widths 2,4] [--out bench/results/heavy_thinking.json] [--append]

The RL checkpoints are trained by ``bench/bench_heavy_thinking_rl.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from pathlib import Path
from typing import Any

from provenance import earlier, provenance, stamp  # bench/provenance.py: the record every bench writes

MAX_NEW_TOKENS = 12  # the learning bench's response length (data.max_response_length)
ANSWER_MAX_CHARS = 40  # heavy_thinking_cpu.yaml's answer cut
#: the label of rows measured on the default warm start (and of rows without a ``model``)
WARM_LABEL = "warm"
#: path parts of a verl checkpoint export that say nothing about which run it is
_EXPORT_PARTS = ("huggingface", "actor", "checkpoints")


def model_label(path: Path) -> str:
    """A short name for a checkpoint: the first directory up from ``path`` that is not part of
    verl's export layout (``<run>/checkpoints/global_step_N/actor/huggingface`` -> ``<run>``)."""
    for part in reversed(path.resolve().parts):
        if part not in _EXPORT_PARTS and not part.startswith("global_step_"):
            return part
    raise ValueError(f"--model: cannot name {path}; give --label")


def row_key(row: dict) -> tuple[str, str, int, int]:
    """What one row measures: (model, mode, k, seed); a row without ``model`` is a warm-start row."""
    return (row.get("model", WARM_LABEL), row["mode"], row["k"], row["seed"])


def merge_runs(old: list[dict], new: list[dict]) -> list[dict]:
    """``old`` with the rows of ``new`` added, each replacing the old row with its key; sorted."""
    replaced = {row_key(r) for r in new}
    runs = [r for r in old if row_key(r) not in replaced] + list(new)
    return sorted(runs, key=row_key)


class _Gen:
    def __init__(self, text: str, tokens: int) -> None:
        self.text, self.tokens = text, tokens


class BatchedGenerator:
    """``generate(messages, max_tokens, tag)`` for :func:`heavy_think`: requests that arrive in the
    same event-loop turn are sampled in one left-padded ``model.generate`` batch."""

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model, self.tokenizer = model, tokenizer
        self.pending: list[tuple[list[dict[str, Any]], int, asyncio.Future]] = []
        self.flusher: asyncio.Task | None = None
        self.tokens = 0

    async def generate(self, messages: list[dict[str, Any]], max_tokens: int, tag: str) -> _Gen:
        future = asyncio.get_running_loop().create_future()
        self.pending.append((messages, max_tokens, future))
        if self.flusher is None or self.flusher.done():
            self.flusher = asyncio.ensure_future(self._flush())
        return await future

    async def _flush(self) -> None:
        for _ in range(4):  # let every runnable coroutine queue its request first
            await asyncio.sleep(0)
        batch, self.pending = self.pending, []
        texts = [self.tokenizer.apply_chat_template(m, add_generation_prompt=True, tokenize=False) for m, _, _ in batch]
        for (_, _, future), (text, tokens) in zip(batch, self.sample(texts, max(b[1] for b in batch)), strict=True):
            future.set_result(_Gen(text, tokens))

    def sample(self, texts: list[str], max_tokens: int) -> list[tuple[str, int]]:
        import torch

        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.no_grad():
            out = self.model.generate(
                **enc,
                max_new_tokens=max_tokens,
                do_sample=True,
                temperature=1.0,
                top_p=None,
                top_k=None,
                pad_token_id=self.tokenizer.pad_token_id,
                eos_token_id=self.tokenizer.eos_token_id,
            )
        results = []
        for row in out[:, enc["input_ids"].shape[1] :].tolist():
            ids = row[: row.index(self.tokenizer.eos_token_id) + 1] if self.tokenizer.eos_token_id in row else row
            self.tokens += len(ids)
            results.append((self.tokenizer.decode(ids, skip_special_tokens=True), len(ids)))
        return results


def run_mode(
    model: Any, tokenizer: Any, questions: list[str], answers: list[str], mode: str, k: int, seed: int
) -> dict:
    import torch

    from longcat_plugins.environments.heavy_thinking import HeavyThinkingSettings, heavy_think, majority_answer
    from longcat_plugins.rewards.arithmetic import compute_exact_score, exact_answer

    torch.manual_seed(seed)
    gen = BatchedGenerator(model, tokenizer)
    settings = HeavyThinkingSettings(k=k, answer_max_chars=ANSWER_MAX_CHARS)

    async def one(question: str) -> tuple[str, list[str]]:
        """The final answer to ``question`` and the candidates it was chosen from."""
        messages = [{"role": "user", "content": question}]
        if mode == "heavy_thinking":
            trace = await heavy_think(messages, gen.generate, settings, MAX_NEW_TOKENS, MAX_NEW_TOKENS)
            return trace.final, [g.text for g in trace.rounds[-1].parallel]
        samples = await asyncio.gather(*(gen.generate(messages, MAX_NEW_TOKENS, f"s{i}") for i in range(k)))
        return samples[majority_answer([s.text for s in samples])].text, [s.text for s in samples]

    async def all_questions() -> list[tuple[str, list[str]]]:
        return list(await asyncio.gather(*(one(q) for q in questions)))

    start = time.monotonic()
    got = asyncio.run(all_questions())
    correct = [compute_exact_score("", f, a)["score"] for (f, _), a in zip(got, answers, strict=True)]
    record = {
        "mode": mode,
        "k": k,
        "seed": seed,
        "generated_tokens": gen.tokens,
        "pass_at_1": sum(correct) / len(correct),
        "form": sum(exact_answer(f) is not None for f, _ in got) / len(got),
        "n_questions": len(questions),
        "wall_s": round(time.monotonic() - start, 2),
    }
    if k > 1:
        hits = [compute_exact_score("", c, a)["score"] for (_, cs), a in zip(got, answers, strict=True) for c in cs]
        record["candidate_pass_at_1"] = sum(hits) / len(hits)
    return record


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--widths", default="2,4", help="heavy-thinking widths K (sampling runs k=1 and k=K+1)")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "heavy_thinking.json")
    parser.add_argument("--append", action="store_true", help="add to the runs already in --out")
    parser.add_argument("--model", type=Path, help="an HF checkpoint directory (default: the warm start)")
    parser.add_argument("--label", help="the rows' model name (default: warm, or the checkpoint's run directory)")
    args = parser.parse_args()
    if args.model is not None and not (args.model / "config.json").is_file():
        parser.error(f"--model: {args.model} is not an HF checkpoint directory (no config.json)")

    from transformers import AutoModelForCausalLM, AutoTokenizer

    from longcat_plugins.learning.arithmetic_warmstart import _questions, ensure_warm_start

    built = ensure_warm_start()
    path = args.model.resolve() if args.model is not None else built.model
    label = args.label or (WARM_LABEL if args.model is None else model_label(args.model))
    tokenizer = AutoTokenizer.from_pretrained(path)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa").eval()
    questions, answers = _questions(built.val)

    old = json.loads(args.out.read_text())["runs"] if args.append and args.out.exists() else []
    origin = provenance(seeds=[int(s) for s in args.seeds.split(",")])
    kept = earlier(args.out, args.append)
    widths = [int(w) for w in args.widths.split(",")]
    plan = [("sampling", 1)] + [m for w in widths for m in (("sampling", w + 1), ("heavy_thinking", w))]
    new = []
    for seed in (int(s) for s in args.seeds.split(",")):
        for mode, k in plan:
            record = {
                "model": label,
                "model_path": str(path),
                **run_mode(model, tokenizer, questions, answers, mode, k, seed),
            }
            new.append(record)
            print(json.dumps(record), flush=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(stamp({"runs": merge_runs(old, new)}, origin, kept), indent=2) + "\n")


if __name__ == "__main__":
    main()
