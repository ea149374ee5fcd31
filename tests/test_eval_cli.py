"""``longcat-plugins eval`` and ``plot``: bad input fails with exit 2 naming the argument and
writes nothing; ``plot`` draws runs from verl's own file-logger output."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from longcat_plugins.cli import main
from longcat_plugins.evaluation.evaluate import collect, merge_overrides
from longcat_plugins.evaluation.target import TargetError, resolve


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(args))
    return result.exit_code, result.output + (result.stderr if result.stderr_bytes is not None else "")


def write_verl_metrics(run_dir: Path, records: list[tuple[int, dict]], monkeypatch: pytest.MonkeyPatch) -> None:
    """The metrics file as verl's own ``file`` logger writes it."""
    from verl.utils.tracking import FileLogger

    run_dir.mkdir(parents=True, exist_ok=True)
    monkeypatch.setenv("VERL_FILE_LOGGER_PATH", str(run_dir / "metrics.jsonl"))
    logger = FileLogger("p", "e")
    for step, data in records:
        logger.log(data, step)
    logger.finish()


def test_eval_rejects_a_path_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    code, text = invoke("eval", str(tmp_path / "missing"), "-o", str(out), "--work-dir", str(tmp_path / "w"))
    assert code == 2 and "CHECKPOINT_OR_RUN" in text and "does not exist" in text
    (tmp_path / "empty").mkdir()
    code, text = invoke("eval", str(tmp_path / "empty"), "-o", str(out), "--work-dir", str(tmp_path / "w"))
    assert code == 2 and "is neither a run directory" in text
    assert not out.exists() and not (tmp_path / "w").exists()


def test_eval_rejects_k_larger_than_n(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    code, text = invoke("eval", str(tmp_path), "--n", "4", "--k", "1,8", "-o", str(out))
    assert code == 2 and "--k: k=8 is larger than n=4" in text
    assert not out.exists()


def test_eval_rejects_a_run_without_checkpoints(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    run = tmp_path / "run"
    write_verl_metrics(run, [(1, {"critic/score/mean": 0.5})], monkeypatch)
    out = tmp_path / "out.json"
    code, text = invoke("eval", str(run), "-o", str(out), "--work-dir", str(tmp_path / "w"))
    assert code == 2 and "run directory without checkpoints" in text and str(run) in text.replace("\n", "")
    assert not out.exists() and not (tmp_path / "w").exists()


def test_resolve_finds_the_latest_actor_checkpoint(tmp_path: Path) -> None:
    run = tmp_path / "run"
    (run / "hydra" / ".hydra").mkdir(parents=True)
    (run / "hydra" / ".hydra" / "config.yaml").write_text("{}\n")
    for step in (2, 10, 4):
        actor = run / "checkpoints" / f"global_step_{step}" / "actor"
        (actor / "huggingface").mkdir(parents=True)
        (actor / "huggingface" / "config.json").write_text("{}")
        (actor / "model_world_size_1_rank_0.pt").write_bytes(b"")
    target = resolve(str(run))
    assert (target.kind, target.step) == ("run", 10)
    assert target.checkpoint == (run / "checkpoints" / "global_step_10" / "actor").resolve()
    direct = resolve(str(run / "checkpoints" / "global_step_4"))
    assert (direct.kind, direct.step) == ("actor", 4)
    with pytest.raises(TargetError, match="is a file"):
        resolve(str(run / "hydra" / ".hydra" / "config.yaml"))


def test_merge_overrides_drops_the_runs_own_keys() -> None:
    run = ["data.train_files=/a", "actor_rollout_ref.model.path=/m", "trainer.default_local_dir=/c", "+x.y=1"]
    ours = ["actor_rollout_ref.model.path=/merged", "++longcat.settings.reward.passk.ks=[1]"]
    assert merge_overrides(run, ours) == ["data.train_files=/a", "+x.y=1", *ours]
    # a key the user passes again (here with Hydra's append prefix) replaces the run's own
    assert merge_overrides(run, ["x.y=2", *ours]) == ["data.train_files=/a", "x.y=2", *ours]


def test_collect_reads_the_validation_record() -> None:
    steps = [
        {"step": 0, "longcat/val/a/pass@1": 0.5, "longcat/val/a/pass^4": 0.1, "longcat/val/a/pass@2": 0.7,
         "longcat/val/a/n": 4.0, "val-core/a/acc/mean@4": 0.5},
    ]  # fmt: skip
    assert collect(steps, [1, 4]) == {"a": {"pass@1": 0.5, "pass^4": 0.1, "n": 4.0}}
    assert collect([{"step": 1, "critic/score/mean": 1.0}], [1]) == {}


def test_plot_rejects_a_run_without_metrics(tmp_path: Path) -> None:
    (tmp_path / "run").mkdir()
    out = tmp_path / "p.png"
    code, text = invoke("plot", str(tmp_path / "run"), "-o", str(out))
    assert code == 2 and "RUN_DIR" in text and "has no metrics.jsonl" in text and "run" in text
    assert not out.exists()


def test_plot_draws_two_runs_from_verls_file_logger(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for name, lift in (("a", 0.0), ("b", 0.2)):
        records = [
            (step, {
                "critic/score/mean": 0.1 * step + lift,
                "response_length/mean": 10.0 + step,
                "longcat/triplet_clip/clip_frac": 0.01 * step,
            })
            for step in (1, 2, 3)
        ] + [(3, {"val-core/arith/acc/mean@4": 0.3 + lift, "longcat/val/arith/pass@1": 0.3 + lift,
                  "longcat/val/arith/pass@4": 0.6 + lift, "longcat/val/arith/pass^4": 0.1})]  # fmt: skip
        write_verl_metrics(tmp_path / name, records, monkeypatch)
    out = tmp_path / "plots" / "runs.png"
    code, text = invoke("plot", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(out))
    assert code == 0, text
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for panel in ("reward", "validation accuracy", "pass@k", "response length", "longcat/triplet_clip/clip_frac"):
        assert panel in text
    assert not list(out.parent.glob(".*tmp*"))
