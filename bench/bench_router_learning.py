"""Does the shipped router recipe learn, with stock ``grpo`` and a reward that raises on part of
the batch? (issue 32: an invalid sample must never turn a step's loss NaN, and the recipe must learn.)

``configs/reward_router_cpu.yaml`` (``longcat_router`` + verl's stock ``grpo``) on the arithmetic
warm start (``tiny32``, the demo's batch and seeds): the warm start's training prompts are routed
to ``arithmetic_exact``, and one prompt in eight is relabelled ``boom/...`` and routed to a user
reward (``reward.custom_reward_function``) that raises on it, so 12.5% of the samples are invalid
on average (NaN, masked out of grpo's advantages by longcat-plugins; the loader shuffles, so a
step holds up to a third: the failure stop is raised to 0.5 for this run). Greedy held-out exact match
(``arithmetic_exact``) before training and every 3 steps; the file records it with the failure
counts, the losses and the provenance.

    .venv/bin/python bench/bench_router_learning.py [--steps 12] [--out bench/results/router_learning.json]
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import textwrap
from pathlib import Path

from provenance import REPO, provenance

RAISING = '''
def picky(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    """A user's reward that cannot handle one data source (the boom/ rows routed to it)."""
    if data_source.startswith("boom"):
        raise ValueError(f"picky cannot score {data_source}")
    return float(solution_str.strip() == f"The answer is {ground_truth}.")
'''


def _finite(value: float | None) -> float | None:
    return value if value is not None and math.isfinite(value) else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "router_learning.json")
    args = parser.parse_args()

    import pandas as pd

    from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start
    from longcat_plugins.learning.demos import WARM_OVERRIDES, WARM_TEST_FREQ
    from longcat_plugins.runtime.launch import heldout_accuracy, resolve_config, run_training

    warm = ensure_warm_start(None, size="tiny32")
    with tempfile.TemporaryDirectory(prefix="longcat-router-") as work:
        root = Path(work)
        train = pd.read_parquet(warm.train)
        train["data_source"] = [
            "boom/arithmetic" if i % 8 == 7 else source for i, source in enumerate(train["data_source"])
        ]
        train.to_parquet(root / "train.parquet")
        (root / "picky.py").write_text(textwrap.dedent(RAISING))
        overrides = [
            *(o for o in WARM_OVERRIDES if not o.startswith("reward.custom_reward_function")),
            f"actor_rollout_ref.model.path={warm.model}",
            f"data.train_files={root / 'train.parquet'}",
            f"data.val_files={warm.val}",
            f"reward.custom_reward_function.path={root / 'picky.py'}",
            "reward.custom_reward_function.name=picky",
            "~longcat.settings.reward.longcat_router.routes",
            "+longcat.settings.reward.longcat_router.routes={longcat*: arithmetic_exact, boom*: custom}",
            # the loader shuffles: a step draws 1 in 8 boom rows on average, up to a third (measured)
            "+longcat.settings.reward.failures.max_failed_share=0.5",
            f"trainer.total_training_steps={args.steps}",
            f"trainer.test_freq={WARM_TEST_FREQ}",
            "trainer.save_freq=-1",
        ]
        result = run_training(resolve_config("reward_router_cpu"), overrides, root / "run")
        if result.returncode != 0:
            raise SystemExit(f"the run failed (exit {result.returncode}):\n{result.log.read_text()[-4000:]}")
    trained = [s for s in result.steps if "actor/pg_loss" in s]
    accuracy = heldout_accuracy(result.steps)
    record = {
        "provenance": provenance(seeds=[0]),
        "what": "reward_router_cpu (longcat_router + stock grpo) on the tiny32 arithmetic warm start, demo batch "
        "and seeds; 1 prompt in 8 routed to a user reward that raises",
        "steps": len(trained),
        "acc_before": accuracy[0] if accuracy else None,
        "acc_after": accuracy[1] if accuracy else None,
        "losses_finite": all(math.isfinite(s["actor/pg_loss"]) for s in trained),
        "grad_norm_min": min(s["actor/grad_norm"] for s in trained),
        "failed_per_step": [s.get("longcat/reward/failed/custom") for s in trained],
        "invalid_share_per_step": [s.get("longcat/reward/invalid_share") for s in trained],
        # verl's own score mean includes the NaN of invalid samples (docs/rewards.md)
        "score_mean_per_step": [_finite(s.get("critic/score/mean")) for s in trained],
    }
    args.out.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()
