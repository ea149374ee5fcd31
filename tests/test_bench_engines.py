"""The engines bench's summary of its repeats: the spread the docs quote for the lane's
12-step learning test comes from this function."""

from __future__ import annotations

import pytest
from conftest import bench_module


def run(engine: str, before: float, curve: list[tuple[int, float]]) -> dict:
    return {"engine": engine, "acc_before": before, "acc_after": curve[-1][1], "val_curve": [list(c) for c in curve]}


def test_rise_summary_takes_each_engines_final_spread_and_its_worst_later_validation() -> None:
    bench = bench_module("bench_engines")
    runs = [
        run("hf", 0.2, [(0, 0.2), (3, 0.1), (6, 0.5), (9, 0.45), (12, 0.6)]),
        run("vllm", 0.2, [(0, 0.2), (3, 0.5), (6, 0.3), (9, 0.4), (12, 0.5)]),
        run("hf", 0.25, [(0, 0.25), (3, 0.3), (6, 0.4), (9, 0.5), (12, 0.55)]),
        run("vllm", 0.2, [(0, 0.2), (3, 0.3), (6, 0.45), (9, 0.4), (12, 0.25)]),
        run("vllm", 0.2, [(0, 0.2), (3, 0.3), (6, 0.5), (9, 0.55), (12, 0.6)]),
    ]
    out = bench.rise_summary(runs)
    assert list(out) == ["hf", "vllm"]
    hf, vllm = out["hf"], out["vllm"]
    assert hf["runs"] == 2 and vllm["runs"] == 3
    assert (hf["final_min"], hf["final_median"], hf["final_max"]) == pytest.approx((0.3, 0.35, 0.4))
    assert (vllm["final_min"], vllm["final_median"], vllm["final_max"]) == pytest.approx((0.05, 0.3, 0.4))
    # step 3's dip (hf: -0.1) is before the later validations; from step 6 on the worst is 0.15 / 0.05
    assert hf["min_at_any_later_validation"] == pytest.approx(0.15)
    assert vllm["min_at_any_later_validation"] == pytest.approx(0.05)
    assert hf["min_from_step"] == 6
