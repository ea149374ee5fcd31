"""Which warm start gives RL something to learn, and what? For each candidate SFT (model size,
epochs, lr, share of targets in the credited answer form), build it with
:func:`longcat_plugins.learning.arithmetic_warmstart.ensure_warm_start` (verl's SFT trainer, cached) and
measure on the held-out questions, in-process with plain transformers:

- greedy: ``exact`` (exact match, the reward), ``form`` (share in the credited
  ``The answer is N.`` form, any N) and ``arith`` (share whose final answer is right in either
  taught form), see :func:`longcat_plugins.learning.arithmetic_warmstart.answer_shares`;
- sampled (8 per question, temperature 1): the same three shares, and pass@8 of exact match.

``form`` well below 1 with ``arith`` high means RL can gain by learning the answer form; ``arith``
well below 1 means it has to learn arithmetic to gain.

    .venv/bin/python bench/bench_warm_starts.py [--candidates tiny:32:3e-3:0.3,...]
        [--out bench/results/warm_starts.json] [--append]

A candidate is ``size:epochs:lr:share``; the other SFT values are ``DEFAULT_SFT``'s. ``build_s`` is
the time of the (cached) build: near 0 when the candidate was already in the cache.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from provenance import earlier, provenance, stamp  # bench/provenance.py: the record every bench writes

sys.path.insert(0, str(Path(__file__).resolve().parent))

DEFAULT_CANDIDATES = "tiny:8:3e-3:0.5,tiny:16:3e-3:0.5,small:8:1e-3:0.5,tiny:32:3e-3:0.5,tiny:32:3e-3:0.3"


def measure(size: str, epochs: int, lr: float, share: float, seed: int = 0) -> dict:
    from bench_learning import pass_at_k

    from longcat_plugins.learning.arithmetic_warmstart import (
        DEFAULT_SFT,
        answer_shares,
        ensure_warm_start,
        sample_answers,
    )
    from longcat_plugins.rewards.arithmetic import exact_answer

    start = time.monotonic()
    built = ensure_warm_start(size=size, seed=seed, sft=replace(DEFAULT_SFT, epochs=epochs, lr=lr), share=share)
    build_s = time.monotonic() - start
    greedy, answers = sample_answers(built.model, built.val)
    sampled, _ = sample_answers(built.model, built.val, n=8, do_sample=True, seed=seed)
    flat = [s for group in sampled for s in group]
    flat_answers = [a for group, a in zip(sampled, answers, strict=True) for _ in group]
    counts = [sum(exact_answer(s) == a for s in group) for group, a in zip(sampled, answers, strict=True)]
    return {
        "size": size,
        "epochs": epochs,
        "lr": lr,
        "share": share,
        "build_s": round(build_s, 1),
        "greedy": answer_shares([g[0] for g in greedy], answers),
        "sampled": answer_shares(flat, flat_answers),
        "pass_at_8": sum(pass_at_k(8, c, 8) for c in counts) / len(counts),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--candidates", default=DEFAULT_CANDIDATES, help="comma-separated size:epochs:lr:share")
    parser.add_argument("--out", default="bench/results/warm_starts.json")
    parser.add_argument("--append", action="store_true", help="add to the candidates already in --out")
    args = parser.parse_args()
    candidates = []
    for spec in args.candidates.split(","):
        try:
            size, epochs, lr, share = spec.split(":")
            candidates.append((size, int(epochs), float(lr), float(share)))
        except ValueError:
            parser.error(f"--candidates: {spec!r} is not size:epochs:lr:share")
    out = Path(args.out)
    origin, kept = provenance(seeds=[0]), earlier(out, args.append)
    records = json.loads(out.read_text())["candidates"] if args.append and out.exists() else []
    for candidate in candidates:
        record = measure(*candidate)
        records.append(record)
        print(json.dumps(record), flush=True)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(stamp({"candidates": records}, origin, kept), indent=2))


if __name__ == "__main__":
    main()
