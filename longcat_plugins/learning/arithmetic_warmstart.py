"""The arithmetic warm start (:mod:`.warmstart`'s base on the ``chain`` task): a tiny model
supervised-fine-tuned (with verl's SFT trainer) until it is *partly* right, so GRPO has signal to learn from.

A random-init model almost never answers exactly, so every group's rewards are equal and
GRPO's advantages are zero. A warm start answers some held-out questions right greedily and
many more right when sampling (pass@8 well above greedy accuracy): RL can then turn sampled
successes into greedy ones, and that is visible as held-out exact-match accuracy rising.

The task is the ``chain`` arithmetic variant (``a+b-c``, operands 0..9): its 1000 questions are
shuffled by seed and split into a held-out validation set and a training set; SFT sees the
training questions with their golden answers. Everything lands in one cache directory keyed
by task, size, seed and SFT hyperparameters, built in a temporary directory and renamed when
complete.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import asdict
from itertools import product
from pathlib import Path

from longcat_plugins.learning.assets import (
    CHAIN_MAX,
    answer_text,
    build_model,
    build_tokenizer,
    building,
    chain_problem,
    check_size,
    default_cache_dir,
    write_rl_rows,
)
from longcat_plugins.learning.sft import SFTConfig, run_sft
from longcat_plugins.learning.warmstart import WarmStart

TASK = "chain"
#: the SFT that makes the tiny model's arithmetic mostly right (70% of held-out answers) while
#: it answers in the credited form less than half the time: 30% exact, inside the 10-60% band
#: (measured with bench/bench_warm_starts.py, see docs/learning.md)
DEFAULT_SFT = SFTConfig(epochs=32, lr=3e-3, batch_size=32, max_length=48, seed=1)
N_VAL = 64
#: share of SFT targets in the verifiable answer form (the rest are worked equations): below
#: one half, so the warm start often answers in the uncredited form
ANSWER_SHARE = 0.3
#: A6 self-verification in the tiny recipes' lengths (32 prompt, 12-16 response tokens): the
#: prompt a verification phase shows (``{problem}``: the question, ``{solution}``: one response)
#: and its two verdicts, in the answer form the warm start already writes
VERIFY_PROMPT = "{problem} {solution} Right?"
VERDICT_CORRECT, VERDICT_INCORRECT = answer_text(1), answer_text(0)


def split_questions(seed: int, n_val: int = N_VAL) -> tuple[list[tuple[int, int, int]], list[tuple[int, int, int]]]:
    """All ``chain`` operand triples, shuffled by ``seed``: (train, held-out validation)."""
    triples = list(product(range(CHAIN_MAX + 1), repeat=3))
    random.Random(seed).shuffle(triples)
    return triples[n_val:], triples[:n_val]


def write_rl_parquet(path: Path, triples: list[tuple[int, int, int]], split: str) -> None:
    """verl's RL dataset format (prompt, reward_model.ground_truth) for these questions."""
    write_rl_rows(path, [chain_problem(*triple) for triple in triples], split)


def teacher_answer(triple: tuple[int, int, int], rng: random.Random, share: float) -> str:
    """The SFT target: the required ``The answer is N.`` with probability ``share``, otherwise
    the worked equation ``a+b-c = N.`` (right, but not the form the exact-match reward credits):
    the warm start imitates a teacher that does not always answer in the verifiable form."""
    a, b, c = triple
    answer = a + b - c
    return answer_text(answer) if rng.random() < share else f"{a}+{b}-{c} = {answer}."


def candidate_solution(triple: tuple[int, int, int], rng: random.Random) -> tuple[str, bool]:
    """A solution to judge, shaped like the warm start's own responses, and whether the
    exact-match reward credits it: half the time the credited form with the right answer; else the
    credited form with a near miss (off by 1-3), or the worked equation ``a+b-c = N.``, which is
    never credited however right its number (the verdict follows the reward, not the arithmetic)."""
    a, b, c = triple
    answer = a + b - c
    kind = rng.random()
    if kind < 0.5:
        return answer_text(answer), True
    if kind < 0.75:
        return answer_text(answer + rng.choice((-3, -2, -1, 1, 2, 3))), False
    return f"{a}+{b}-{c} = {answer if rng.random() < 0.5 else answer + rng.choice((-1, 1))}.", False


def verification_messages(triple: tuple[int, int, int], rng: random.Random) -> list[dict[str, str]]:
    """One A6 verification conversation: the phase's prompt (:data:`VERIFY_PROMPT`) on a
    :func:`candidate_solution`, answered with the verdict the reward's truth gives."""
    from longcat_plugins.data.selfverify import fill_prompt

    question, _ = chain_problem(*triple)
    solution, correct = candidate_solution(triple, rng)
    verdict = VERDICT_CORRECT if correct else VERDICT_INCORRECT
    return [
        {"role": "user", "content": fill_prompt(VERIFY_PROMPT, question, solution)},
        {"role": "assistant", "content": verdict},
    ]


def write_sft_parquet(
    path: Path, triples: list[tuple[int, int, int]], seed: int, share: float = ANSWER_SHARE, verdicts: float = 0.0
) -> None:
    """verl's SFT format (a ``messages`` conversation) with the teacher's answers; with
    ``verdicts`` > 0, that share of the questions also appears as a verification conversation
    (:func:`verification_messages`), drawn from its own random stream so the answers are the same."""
    import pandas as pd

    rng = random.Random(seed)
    rows = []
    for triple in triples:
        question, _ = chain_problem(*triple)
        rows.append(
            {
                "messages": [
                    {"role": "user", "content": question},
                    {"role": "assistant", "content": teacher_answer(triple, rng, share)},
                ]
            }
        )
    if verdicts > 0:
        judge = random.Random(f"verdicts-{seed}")
        picked = judge.sample(triples, round(verdicts * len(triples)))
        rows += [{"messages": verification_messages(triple, judge)} for triple in picked]
        random.Random(f"order-{seed}").shuffle(rows)
    pd.DataFrame(rows).to_parquet(path)


def ensure_warm_start(
    cache_dir: Path | None = None,
    size: str = "tiny",
    seed: int = 0,
    sft: SFTConfig = DEFAULT_SFT,
    n_val: int = N_VAL,
    share: float = ANSWER_SHARE,
    verdicts: float = 0.0,
) -> WarmStart:
    """Build (once) and return a warm-started model with its RL train/validation parquets.

    ``Assets.model`` is the SFT checkpoint; ``root/base`` the random-init model it started from;
    ``root/warm.json`` records the key and the checkpoint's greedy held-out accuracy.
    ``verdicts`` > 0: the SFT data also teach A6's verification task on that share of the
    training questions (:func:`verification_messages`), so the warm start writes verdicts;
    ``warm.json`` then records their greedy accuracy on the held-out questions.
    """
    check_size(size)
    if not 0.0 <= verdicts <= 1.0:
        raise ValueError(f"verdicts must be a share in [0, 1], got {verdicts!r}")
    judge = f"-vd{verdicts:g}" if verdicts else ""
    root = (cache_dir or default_cache_dir()) / f"warm-{TASK}-{size}-seed{seed}-v{n_val}-a{share:g}{judge}-{sft.key()}"
    assets = WarmStart(
        root, root / "model", root / "train.parquet", root / "val.parquet", base=root / "base", sft=root / "sft.parquet"
    )
    if assets.exists() and (root / "warm.json").exists():
        return assets
    with building(root) as tmp:
        train, val = split_questions(seed, n_val)
        (tmp / "base").mkdir()
        build_tokenizer(tmp / "base", seed, task=TASK)
        build_model(tmp / "base", size, seed)
        write_rl_parquet(tmp / "train.parquet", train, "train")
        write_rl_parquet(tmp / "val.parquet", val, "test")
        write_sft_parquet(tmp / "sft.parquet", train, seed, share, verdicts)
        run_sft(tmp / "base", tmp / "sft.parquet", tmp / "model", sft)
        accuracy = greedy_accuracy(tmp / "model", tmp / "val.parquet")
        meta = {
            "task": TASK,
            "size": size,
            "seed": seed,
            "n_val": n_val,
            "sft": asdict(sft),
            "val_greedy_acc": accuracy,
        }
        if verdicts:
            meta |= {"verdicts": verdicts, **verdict_probe(tmp / "model", val, seed)}
        (tmp / "warm.json").write_text(json.dumps(meta, indent=2))
    return assets


def _questions(parquet: Path) -> tuple[list[str], list[str]]:
    import pandas as pd

    frame = pd.read_parquet(parquet)
    prompts = [list(p)[-1]["content"] for p in frame["prompt"]]
    answers = [str(r["ground_truth"]) for r in frame["reward_model"]]
    return prompts, answers


def sample_answers(
    model_dir: Path, parquet: Path, n: int = 1, do_sample: bool = False, max_new_tokens: int = 16, seed: int = 0
) -> tuple[list[list[str]], list[str]]:
    """``n`` decoded responses per validation question (greedy or sampled at temperature 1)
    with plain transformers, in-process: a quick check of a checkpoint, no Ray."""
    prompts, answers = _questions(parquet)
    return generate(model_dir, prompts, n, do_sample, max_new_tokens, seed), answers


def generate(
    model_dir: Path, prompts: list[str], n: int = 1, do_sample: bool = False, max_new_tokens: int = 16, seed: int = 0
) -> list[list[str]]:
    """``n`` decoded responses per user message, through the checkpoint's chat template."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    model = AutoModelForCausalLM.from_pretrained(model_dir, attn_implementation="sdpa").eval()
    texts = [
        tokenizer.apply_chat_template([{"role": "user", "content": p}], add_generation_prompt=True, tokenize=False)
        for p in prompts
    ]
    batch = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    torch.manual_seed(seed)
    with torch.no_grad():
        out = model.generate(
            **batch,
            max_new_tokens=max_new_tokens,
            do_sample=do_sample,
            temperature=1.0 if do_sample else None,
            top_p=None,
            top_k=None,
            num_return_sequences=n,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    decoded = tokenizer.batch_decode(out[:, batch["input_ids"].shape[1] :], skip_special_tokens=True)
    return [decoded[i * n : (i + 1) * n] for i in range(len(prompts))]


def verdict_probe(model_dir: Path, triples: list[tuple[int, int, int]], seed: int = 0) -> dict[str, float]:
    """The checkpoint as A6's verifier: greedy verdicts on one :func:`candidate_solution` per
    question (held-out ones, a fixed draw per seed). ``verdict_acc``: the share of right verdicts
    (RISE's +1), ``verdict_unparseable``: not exactly one verdict (-1), ``verdict_constant``: the
    share of the commoner verdict among parseable ones (1.0: it always says the same)."""
    from longcat_plugins.data.selfverify import parse_verdict

    rng = random.Random(f"probe-{seed}")
    conversations = [verification_messages(triple, rng) for triple in triples]
    responses = [r[0] for r in generate(model_dir, [user["content"] for user, _ in conversations])]
    said = [parse_verdict(r, VERDICT_CORRECT, VERDICT_INCORRECT) for r in responses]
    targets = [parse_verdict(verdict["content"], VERDICT_CORRECT, VERDICT_INCORRECT) for _, verdict in conversations]
    parsed = [v for v in said if v is not None]
    right = sum(v is not None and v == t for v, t in zip(said, targets, strict=True))
    common = max((parsed.count(v) for v in set(parsed)), default=0)
    return {
        "verdict_acc": right / len(triples),
        "verdict_unparseable": (len(said) - len(parsed)) / len(triples),
        "verdict_constant": common / len(parsed) if parsed else 0.0,
    }


#: the number a response gives as its final answer, in either taught form (``The answer is N.``
#: or ``... = N.``): the last ``is N`` / ``= N`` in the text
_FINAL = re.compile(r"(?:\bis|=)\s*(-?\d+)")


def final_number(response: str) -> str | None:
    """The response's final answer in any form, or ``None`` (for the arithmetic share only)."""
    found = _FINAL.findall(response or "")
    return str(int(found[-1])) if found else None


def answer_shares(responses: list[str], answers: list[str]) -> dict[str, float]:
    """Split exact match into what it needs: ``form``, the share of responses in the credited
    ``The answer is N.`` form (any N); ``arith``, the share whose final answer, in any form, is
    right; ``exact``, both at once. Tells whether RL would learn the form, the arithmetic or both."""
    from longcat_plugins.rewards.arithmetic import exact_answer

    if not responses or len(responses) != len(answers):
        raise ValueError(f"answer_shares: {len(responses)} responses for {len(answers)} answers")
    n = len(responses)
    form = sum(exact_answer(r) is not None for r in responses) / n
    arith = sum(final_number(r) == a for r, a in zip(responses, answers, strict=True)) / n
    exact = sum(exact_answer(r) == a for r, a in zip(responses, answers, strict=True)) / n
    return {"form": form, "arith": arith, "exact": exact}


def greedy_accuracy(model_dir: Path, parquet: Path) -> float:
    """Greedy exact-match accuracy (the reward's ``The answer is N.`` form) on ``parquet``."""
    from longcat_plugins.rewards.arithmetic import exact_answer

    responses, answers = sample_answers(model_dir, parquet)
    return sum(exact_answer(r[0]) == a for r, a in zip(responses, answers, strict=True)) / len(answers)
