"""Why did a learning run fall back? The per-step verl metrics that tell an off-policy drift from
noise, pulled from a run's own ``metrics.jsonl`` (verl's file logger).

    .venv/bin/python bench/learning_diagnostics.py RUN_DIR [RUN_DIR ...] \
        [-o bench/results/learning_diagnostics.json]

``bench/bench_learning.py`` keeps every run directory (it prints where) and stores the same
records per run in ``learning_curves.json`` (``train``); this command reads run directories
measured before it did. Per step: the mean training reward, verl's PPO ratio statistics
(``actor/ppo_kl``, ``actor/pg_clipfrac``: both 0 when ``old_log_prob`` is recomputed on the
weights being trained and there is one update per batch), ``rollout_corr/kl`` (the rollout's
log-probs against the recomputed ones: the off-policy gap of a stale batch that nothing corrects
unless ``algorithm.rollout_correction`` is on) and the share of responses cut at the length
limit (a policy that stopped emitting EOS), and for ``dora`` the batch's mean staleness.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from provenance import provenance, stamp  # bench/provenance.py: the record every bench writes

#: record key -> verl metric
TRAIN_METRICS: dict[str, str] = {
    "score": "critic/score/mean",
    "ppo_kl": "actor/ppo_kl",
    "pg_clipfrac": "actor/pg_clipfrac",
    "rollout_corr_kl": "rollout_corr/kl",
    "clip_ratio": "response_length/clip_ratio",
    "staleness": "dora/staleness/mean",
}


def train_diagnostics(steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One record per training step (steps without a reward, such as step 0's validation, are skipped)."""
    out = []
    for record in sorted(steps, key=lambda s: s["step"]):
        if TRAIN_METRICS["score"] not in record:
            continue
        row: dict[str, Any] = {"step": record["step"]}
        for key, metric in TRAIN_METRICS.items():
            value = record.get(metric)
            row[key] = None if value is None else round(float(value), 5)
        out.append(row)
    return out


def read_steps(run_dir: Path) -> list[dict[str, Any]]:
    """verl's file logger writes one JSON object per step: ``{"step": n, "data": {...}}``."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        raise SystemExit(f"learning_diagnostics: {run_dir} has no metrics.jsonl (not a run directory)")
    steps = []
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            steps.append({"step": record["step"], **record.get("data", {})})
    return steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run_dirs", nargs="+", type=Path)
    parser.add_argument("-o", "--out", type=Path, default=Path("bench/results/learning_diagnostics.json"))
    args = parser.parse_args()
    runs = [{"run_dir": f"{d.parent.name}/{d.name}", "train": train_diagnostics(read_steps(d))} for d in args.run_dirs]
    # the record of this summary; the training runs' own commands are in their run dirs
    args.out.write_text(json.dumps(stamp({"runs": runs}, provenance(seeds=[])), indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
