"""``reward:passk``: pass@k / pass^k / avg@k added to verl's own validation metrics, through the
real ``_val_metrics_update`` of both trainers, checked against a float64 reference."""

from __future__ import annotations

import logging
import math
import types
from pathlib import Path

import pytest

from longcat_plugins.evaluation import verl_metrics
from longcat_plugins.evaluation.verl_metrics import PassKSettings, check_config, validation_metrics
from longcat_plugins.host import Host, set_host
from longcat_plugins.selection import Selection


def ref_pass(n: int, c: int, k: int) -> float:
    return 1.0 - math.comb(n - c, k) / math.comb(n, k)


def ref_hat(n: int, c: int, k: int) -> float:
    return math.comb(c, k) / math.comb(n, k)


def synthetic_batch() -> tuple[list[str], list[str], dict[str, list]]:
    """Two data sources, n = 4 samples per prompt, interleaved as verl repeats them.

    ``math`` carries ``acc`` (its score is partial credit: 0.9 is *not* correct), ``plain``
    has only the score. Correct counts: m1: 3, m2: 0, p1: 4, p2: 1.
    """
    rows = [
        ("math", "m1", 1.0, 1.0), ("math", "m1", 0.9, 0.0), ("math", "m1", 1.0, 1.0), ("math", "m1", 1.0, 1.0),
        ("math", "m2", 0.9, 0.0), ("math", "m2", 0.5, 0.0), ("math", "m2", 0.0, 0.0), ("math", "m2", 0.9, 0.0),
        ("plain", "p1", 1.0, None), ("plain", "p1", 1.0, None), ("plain", "p1", 1.0, None), ("plain", "p1", 1.0, None),
        ("plain", "p2", 0.3, None), ("plain", "p2", 1.0, None), ("plain", "p2", 0.99, None), ("plain", "p2", 0.0, None),
    ]  # fmt: skip
    sources = [r[0] for r in rows]
    uids = [r[1] for r in rows]
    infos = {"reward": [r[2] for r in rows], "acc": [r[3] for r in rows]}
    return sources, uids, infos


def expected(counts: list[int], n: int, k: int) -> dict[str, float]:
    return {
        f"pass@{k}": sum(ref_pass(n, c, k) for c in counts) / len(counts),
        f"pass^{k}": sum(ref_hat(n, c, k) for c in counts) / len(counts),
        f"avg@{k}": sum(c / n for c in counts) / len(counts),
    }


def check_against_reference(metrics: dict[str, float], ks: list[int]) -> None:
    for source, counts in (("math", [3, 0]), ("plain", [4, 1])):
        for k in ks:
            for name, want in expected(counts, 4, k).items():
                assert metrics[f"longcat/val/{source}/{name}"] == pytest.approx(want, rel=1e-12), (source, name)
        assert metrics[f"longcat/val/{source}/n"] == 4.0


@pytest.fixture
def default_host() -> None:
    set_host(Host(Selection()).load())
    yield
    set_host(None)


def test_pure_function_matches_reference() -> None:
    sources, uids, infos = synthetic_batch()
    got = validation_metrics(sources, uids, infos, PassKSettings())
    check_against_reference(got, [1, 2, 4])
    assert not any(k.endswith("@8") for k in got)
    assert got["longcat/val/math/pass@1"] == pytest.approx(3 / 8)  # partial credit never counts


def test_threshold_and_explicit_ks() -> None:
    sources, uids, infos = synthetic_batch()
    got = validation_metrics(sources, uids, infos, PassKSettings(ks=[2], threshold=0.95))
    # plain p2 now has 2 correct (1.0 and 0.99); math still judged by acc
    assert got["longcat/val/plain/pass@2"] == pytest.approx((ref_pass(4, 4, 2) + ref_pass(4, 2, 2)) / 2)
    assert got["longcat/val/math/pass@2"] == pytest.approx((ref_pass(4, 3, 2) + ref_pass(4, 0, 2)) / 2)
    assert "longcat/val/plain/pass@1" not in got


def test_k_larger_than_n_is_left_out_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    sources, uids, infos = synthetic_batch()
    with caplog.at_level(logging.WARNING):
        got = validation_metrics(sources, uids, infos, PassKSettings(ks=[2, 8]))
    assert "longcat/val/math/pass@2" in got and "longcat/val/math/pass@8" not in got
    assert "k=8 larger than its 4 samples per prompt" in caplog.text


@pytest.mark.parametrize("trainer", ["legacy", "v1"])
def test_through_verls_val_metrics_update(trainer: str, default_host: None) -> None:
    """verl's own method, wrapped by the bridge's import hook: verl's keys stay, ours are added."""
    import verl  # noqa: F401 - installs the bridge (and with it the seam)

    if trainer == "legacy":
        from verl.trainer.ppo.ray_trainer import RayPPOTrainer as cls
    else:
        from verl.trainer.ppo.v1.trainer_base import PPOTrainer as cls
    assert getattr(cls._val_metrics_update, "__longcat_passk__", False), "the seam was not installed"
    sources, uids, infos = synthetic_batch()
    metrics = cls._val_metrics_update(None, sources, uids, {k: list(v) for k, v in infos.items()}, [])
    assert metrics["val-core/math/acc/mean@4"] == pytest.approx(3 / 8)  # verl's own, unchanged
    check_against_reference(metrics, [1, 2, 4])


def test_v1_failed_sessions_count_as_wrong(default_host: None) -> None:
    """The v1 trainer passes the expected sessions per prompt; one that produced nothing is a miss."""
    import verl  # noqa: F401
    from verl.trainer.ppo.v1.trainer_base import PPOTrainer

    sources, uids, infos = ["math"] * 3, ["u"] * 3, {"reward": [1.0, 1.0, 1.0], "acc": [1.0, 1.0, 1.0]}
    expected_counts = {("math", "u"): 4, ("math", "nothing"): 4}  # every session of "nothing" failed
    metrics = PPOTrainer._val_metrics_update(None, sources, uids, infos, [], expected_acc_counts=expected_counts)
    assert metrics["longcat/val/math/n"] == 4.0
    assert metrics["longcat/val/math/pass^4"] == 0.0
    assert metrics["longcat/val/math/avg@1"] == pytest.approx((3 / 4 + 0) / 2)
    assert metrics["longcat/val/math/pass@4"] == pytest.approx((1 + 0) / 2)
    assert metrics["val-core/math/acc/mean@4"] == pytest.approx(3 / 8)  # verl counts the misses the same way


def test_disabled_component_adds_nothing() -> None:
    import verl  # noqa: F401
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    set_host(Host(Selection.from_section({"disable": ["reward:passk"]})).load())
    try:
        sources, uids, infos = synthetic_batch()
        metrics = RayPPOTrainer._val_metrics_update(None, sources, uids, infos, [])
    finally:
        set_host(None)
    assert "val-core/math/acc/mean@4" in metrics
    assert not any(k.startswith("longcat/") for k in metrics)


def test_settings_from_the_longcat_section() -> None:
    import verl  # noqa: F401
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    set_host(Host(Selection.from_section({"settings": {"reward": {"passk": {"ks": [3]}}}})).load())
    try:
        sources, uids, infos = synthetic_batch()
        metrics = RayPPOTrainer._val_metrics_update(None, sources, uids, infos, [])
    finally:
        set_host(None)
    ours = sorted(k for k in metrics if k.startswith("longcat/val/math/"))
    assert ours == [
        "longcat/val/math/avg@3",
        "longcat/val/math/n",
        "longcat/val/math/pass@3",
        "longcat/val/math/pass^3",
    ]


def test_seam_refuses_a_changed_signature(caplog: pytest.LogCaptureFixture) -> None:
    """A verl whose method no longer takes these parameters is left alone, with a warning."""

    class Trainer:
        def _val_metrics_update(self, sources, uids):  # noqa: ANN001, ANN202
            return {}

    module = types.ModuleType("verl.trainer.ppo.ray_trainer")
    module.RayPPOTrainer = Trainer
    with caplog.at_level(logging.WARNING):
        verl_metrics.wrap_trainer(module)
    assert not getattr(Trainer._val_metrics_update, "__longcat_passk__", False)
    assert "not the signature they were written for" in caplog.text


def test_config_check_names_the_key() -> None:
    cfg = {
        "longcat": {"settings": {"reward": {"passk": {"ks": [1, 8]}}}},
        "actor_rollout_ref": {"rollout": {"val_kwargs": {"n": 4}}},
    }
    assert check_config(cfg) == [
        "longcat.settings.reward.passk.ks[1]: k=8 is larger than actor_rollout_ref.rollout.val_kwargs.n=4"
    ]
    with pytest.raises(ValueError, match=r"ks\[0\]: k must be >= 1"):
        PassKSettings(ks=[0])


def test_validate_rejects_k_larger_than_val_n(tmp_path: Path) -> None:
    """Before Ray starts: the whole-config check names the settings key and verl's key."""
    from click.testing import CliRunner

    from longcat_plugins.cli import main
    from longcat_plugins.runtime.launch import resolve_config

    args = [
        "validate",
        str(resolve_config("cpu_demo")),
        f"data.train_files={tmp_path}/t.parquet",
        f"data.val_files={tmp_path}/v.parquet",
        f"actor_rollout_ref.model.path={tmp_path}",
        "actor_rollout_ref.rollout.val_kwargs.n=4",
        "+longcat.settings.reward.passk.ks=[2,8]",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "longcat.settings.reward.passk.ks[1]: k=8 is larger than actor_rollout_ref.rollout.val_kwargs.n=4" in text
    args[-1] = "+longcat.settings.reward.passk.ks=[2,4]"
    assert CliRunner().invoke(main, args).exit_code == 0


def test_a_partial_acc_column_is_not_used() -> None:
    """verl keeps a key only some batches produced as a shorter list; judge by the score then."""
    sources, uids, infos = synthetic_batch()
    infos["acc"] = infos["acc"][:3]
    got = validation_metrics(sources, uids, infos, PassKSettings(ks=[1]))
    assert got["longcat/val/math/pass@1"] == pytest.approx(3 / 8)  # the 1.0 scores, not the 0.9s


METRIC_PLUGIN = """
    from dataclasses import dataclass

    from longcat_plugins import ValidationMetric, hookimpl

    @dataclass(frozen=True)
    class CountSettings:
        scale: float = 1.0

    class Count:
        '''Samples per validation pass.'''

        @staticmethod
        def compute(data_sources, sample_uids, infos, settings, expected_counts):
            return {"acme/val/samples": settings.scale * len(data_sources)}

    class Broken:
        '''Always raises.'''

        @staticmethod
        def compute(*args):
            raise RuntimeError("acme metric bug")

    @hookimpl
    def register_rewards():
        return [ValidationMetric("acme_count", Count, config=CountSettings), ValidationMetric("acme_broken", Broken)]
"""


def test_a_plugins_validation_metric_is_added_and_a_broken_one_reported(
    fake_site: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """``ValidationMetric`` is an extension point: any enabled one is computed, with its settings;
    one that raises is named in a warning and verl's metrics (and the others) still come back."""
    import verl  # noqa: F401
    from conftest import make_dist
    from verl.trainer.ppo.ray_trainer import RayPPOTrainer

    make_dist(fake_site, "acme-metrics", {"acme_metrics": METRIC_PLUGIN}, {"acme": "acme_metrics"})
    section = {"settings": {"reward": {"acme_count": {"scale": 0.5}}}}
    set_host(Host(Selection.from_section(section)).load())
    try:
        sources, uids, infos = synthetic_batch()
        with caplog.at_level(logging.WARNING):
            metrics = RayPPOTrainer._val_metrics_update(None, sources, uids, infos, [])
    finally:
        set_host(None)
    assert metrics["acme/val/samples"] == 8.0
    assert "val-core/math/acc/mean@4" in metrics and "longcat/val/math/pass@4" in metrics
    assert "reward:acme_broken (plugin 'acme') failed" in caplog.text and "acme metric bug" in caplog.text
