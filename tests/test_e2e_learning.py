"""The demo that learns, end to end: verl's SFT builds the default warm start (once per
session), then ``longcat-plugins demo`` runs GRPO on it with verl's real trainer and greedy
held-out validation; it prints the held-out accuracy line, starts inside the 10-60% band, and
its held-out greedy accuracy and training reward must rise."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from conftest import learning_by_step, run_cli

from longcat_plugins.runtime.launch import read_metrics

pytestmark = [pytest.mark.slow, pytest.mark.ray]

#: the smallest rise of the mean training reward (exact match on the training prompts), last 4
#: steps over the first 4, as before the warm start changed (it rose in every run measured since)
MIN_REWARD_RISE = 0.02
#: the smallest held-out rise, in points, after the demo's 12 steps. Measured on the default warm
#: start (bench/results/learning*_curves.json: 10 runs of vanilla (sync and dora), triplet_clip and longcat_gspo,
#: constant and cosine lr, 20 and 30 steps), the smallest rise at any validation from step 5 on
#: was +18.8 (constant-lr vanilla seed 2 at step 10; a 64-question validation is noisy: one
#: question is 1.6 points), so 15 holds in every run measured with some room
MIN_HELDOUT_RISE = 15.0
LINE = re.compile(r"held-out accuracy: (\d+\.\d)% -> (\d+\.\d)%")


@pytest.fixture(scope="session")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The default warm start, built by verl's SFT trainer once per session."""
    from longcat_plugins.learning.arithmetic_warmstart import ensure_warm_start

    cache = tmp_path_factory.mktemp("warm-cache")
    built = ensure_warm_start(cache)
    assert (built.model / "model.safetensors").exists()
    return cache


def run_demo(args: list[str], warm_cache: Path, out: Path, ray_tmp: Path, timeout: int) -> tuple[float, float]:
    """``longcat-plugins demo`` on the session's warm start; its held-out accuracy before and after (%)."""
    proc = run_cli(
        "demo",
        *args,
        "--cache-dir",
        str(warm_cache),
        "--out",
        str(out),
        f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
        timeout=timeout,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    match = LINE.search(proc.stdout)
    assert match, proc.stdout[-2000:]
    return float(match.group(1)), float(match.group(2))


def test_demo_learns_from_the_warm_start(warm_cache: Path, tmp_path: Path, ray_tmp: Path) -> None:
    before, after = run_demo([], warm_cache, tmp_path / "run", ray_tmp, timeout=900)
    assert 10.0 <= before <= 60.0, f"the warm start is outside the 10-60% band: {before}%"
    steps = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert after - before >= MIN_HELDOUT_RISE, f"held-out accuracy {before}% -> {after}%; {learning_by_step(steps)}"
    scores = [s["critic/score/mean"] for s in steps if "critic/score/mean" in s]
    assert len(scores) == 12, scores
    early, late = sum(scores[:4]) / 4, sum(scores[-4:]) / 4
    assert late - early >= MIN_REWARD_RISE, f"training reward {early:.3f} -> {late:.3f}: {scores}"


def test_the_system_recipe_learns_with_every_component_acting(warm_cache: Path, tmp_path: Path, ray_tmp: Path) -> None:
    """``demo --recipe longcat``: the paper's system as one (DORA, the triplet-clip objective, the
    step planner's strategies under DORA, online filtering, replay, self-verification, the reward
    router) on the warm start that also writes verdicts (built here in the session's cache). Its
    held-out accuracy rises like the plain demo's, and every component's own metrics show it
    acted in the run (:mod:`longcat_plugins.evaluation.system`), not merely that it was enabled."""
    from longcat_plugins.evaluation.system import EVIDENCE, components_active

    before, after = run_demo(["--recipe", "longcat"], warm_cache, tmp_path / "run", ray_tmp, timeout=1500)
    steps = read_metrics(tmp_path / "run" / "metrics.jsonl")
    assert after - before >= MIN_HELDOUT_RISE, f"held-out accuracy {before}% -> {after}%; {learning_by_step(steps)}"
    active = components_active(steps)
    assert active == list(EVIDENCE), {name: EVIDENCE[name][0] for name in EVIDENCE if name not in active}
