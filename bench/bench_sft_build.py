"""How long does the default warm start's SFT take, and does tokenizing each example once
(:class:`longcat_plugins.learning.sft_dataset.CachedMultiTurnSFTDataset`, what
:func:`longcat_plugins.learning.sft.run_sft` uses) change the weights it trains?

Builds the default warm start's inputs exactly as
:func:`longcat_plugins.learning.arithmetic_warmstart.ensure_warm_start` does (tokenizer, random-init base,
SFT parquet, seed 0), then runs verl's SFT trainer with ``DEFAULT_SFT`` twice: with verl's own
``MultiTurnSFTDataset`` (``plain``, every example re-tokenized every epoch) and with the cached
dataset (``cached``). Records each run's wall-clock and the SHA-256 of its
``model.safetensors``; with ``--reference DIR`` also the hash of an existing warm start's model
(e.g. the one in the asset cache, built before the change).

    .venv/bin/python bench/bench_sft_build.py [--reference $LONGCAT_CACHE/warm-chain-tiny-...]
        [--out bench/results/sft_build.json]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from provenance import provenance  # bench/provenance.py: the record every bench writes

#: verl's own dataset: the override that undoes run_sft's ``data.custom_cls`` choice
PLAIN = ["data.custom_cls.path=null", "data.custom_cls.name=null"]


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--reference", type=Path, default=None, help="an existing warm start's directory")
    parser.add_argument("--out", default="bench/results/sft_build.json")
    args = parser.parse_args()
    if args.reference is not None and not (args.reference / "model" / "model.safetensors").is_file():
        parser.error(f"--reference: {str(args.reference)!r} has no model/model.safetensors")

    from longcat_plugins.learning.arithmetic_warmstart import DEFAULT_SFT, TASK, split_questions, write_sft_parquet
    from longcat_plugins.learning.assets import build_model, build_tokenizer
    from longcat_plugins.learning.sft import run_sft

    seed, size = 0, "tiny"
    origin = provenance(seeds=[seed])
    runs = []
    with tempfile.TemporaryDirectory(prefix="longcat-sft-build-") as work:
        root = Path(work)
        (root / "base").mkdir()
        build_tokenizer(root / "base", seed, task=TASK)
        build_model(root / "base", size, seed)
        train, _ = split_questions(seed)
        write_sft_parquet(root / "sft.parquet", train, seed)
        for name, overrides in (("plain", PLAIN), ("cached", [])):
            start = time.monotonic()
            model = run_sft(root / "base", root / "sft.parquet", root / name, DEFAULT_SFT, overrides)
            wall = time.monotonic() - start
            runs.append({"dataset": name, "wall_s": round(wall, 1), "sha256": sha256(model / "model.safetensors")})
            print(f"{name}: {wall:.1f}s, {runs[-1]['sha256'][:16]}", flush=True)
    result = {
        "provenance": origin,
        "size": size,
        "warm_start_seed": seed,
        "sft": asdict(DEFAULT_SFT),
        "runs": runs,
        "identical": len({r["sha256"] for r in runs}) == 1,
    }
    if args.reference is not None:
        result["reference"] = {
            "path": args.reference.name,
            "sha256": sha256(args.reference / "model" / "model.safetensors"),
        }
        result["identical_to_reference"] = all(r["sha256"] == result["reference"]["sha256"] for r in runs)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print(json.dumps({k: v for k, v in result.items() if k != "sft"}, indent=2))


if __name__ == "__main__":
    main()
