"""`longcat-plugins fuse CONFIG.yaml` as a user runs it: key-path errors, the summary, the
output-directory rules, and a third-party method installed as a real distribution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from click.testing import CliRunner
from conftest import make_dist, run_cli
from test_fusion_support import random_family, read_checkpoint, write_family

from longcat_plugins.cli import main


@pytest.fixture
def inputs(tmp_path: Path) -> tuple[dict, list[dict], Path, list[Path]]:
    base, experts = random_family(n_experts=2, seed=3)
    base_dir, expert_dirs = write_family(tmp_path / "in", base, experts, shards=2)
    return base, experts, base_dir, expert_dirs


def write_config(path: Path, **data: object) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def good_config(tmp_path: Path, inputs: tuple, **overrides: object) -> Path:
    _, _, base_dir, expert_dirs = inputs
    data = {
        "base": str(base_dir),
        "experts": [
            {"path": str(expert_dirs[0]), "weight": 1.0, "name": "math"},
            {"path": str(expert_dirs[1]), "weight": 0.5, "name": "code"},
        ],
        "method": "longcat",
        "params": {"normalize": "global", "drop_rate": 0.5, "erase": True},
        "output": str(tmp_path / "fused"),
        "seed": 3,
        **overrides,
    }
    return write_config(tmp_path / "fuse.yaml", **data)


def invoke(*args: str) -> object:
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "200"})


def test_fuse_prints_progress_and_summary(tmp_path: Path, inputs: tuple) -> None:
    config = good_config(tmp_path, inputs)
    result = invoke("fuse", str(config), "--report", str(tmp_path / "report.json"))
    assert result.exit_code == 0, result.output
    for text in ("math", "code", "dropped %", "erased %", "‖θ−θ_base‖", "tensors merged", "norm pass", "merge"):
        assert text in result.output, text
    report = json.loads((tmp_path / "report.json").read_text())
    assert [e["name"] for e in report["experts"]] == ["math", "code"]
    assert 0.4 < report["experts"][0]["fractions"]["dropped"] < 0.6
    assert (tmp_path / "fused" / "model.safetensors.index.json").exists()


def test_existing_output_needs_overwrite(tmp_path: Path, inputs: tuple) -> None:
    config = good_config(tmp_path, inputs)
    (tmp_path / "fused").mkdir()
    refused = invoke("fuse", str(config))
    assert refused.exit_code == 2 and "already exists" in refused.output and "--overwrite" in refused.output
    assert list((tmp_path / "fused").iterdir()) == []
    assert invoke("fuse", str(config), "--overwrite", "--prefetch").exit_code == 0
    assert (tmp_path / "fused" / "fusion.json").exists()


def test_dry_run_writes_nothing(tmp_path: Path, inputs: tuple) -> None:
    config = good_config(tmp_path, inputs, params=None)  # `params:` left empty: the method's defaults
    result = invoke("fuse", str(config), "--dry-run")
    assert result.exit_code == 0 and "nothing written" in result.output, result.output
    assert not (tmp_path / "fused").exists()


def test_config_errors_name_their_key_paths(tmp_path: Path, inputs: tuple) -> None:
    _, _, base_dir, expert_dirs = inputs
    config = write_config(
        tmp_path / "bad.yaml",
        experts=[{"path": str(expert_dirs[0]), "weight": "heavy"}, {"pth": str(expert_dirs[1])}],
        output=str(tmp_path / "fused"),
        seed="zero",
        metod="longcat",
    )
    result = invoke("fuse", str(config))
    assert result.exit_code == 2
    for text in (
        "bad.yaml",
        "base: required key is missing",
        "experts[0].weight: expected float, got str 'heavy'",
        "experts[1].pth: unknown key (did you mean 'path'?)",
        "experts[1].path: required key is missing",
        "seed: expected int",
        "metod: unknown key (did you mean 'method'?)",
    ):
        assert text in result.output, (text, result.output)
    assert not (tmp_path / "fused").exists()


def test_method_and_params_errors_name_their_key_paths(tmp_path: Path, inputs: tuple) -> None:
    unknown = invoke("fuse", str(good_config(tmp_path, inputs, method="dare_tie")))
    assert unknown.exit_code == 2
    assert "method: unknown fusion component 'dare_tie'" in unknown.output and "longcat" in unknown.output
    bad = invoke("fuse", str(good_config(tmp_path, inputs, params={"drop_rate": 2.0, "normalise": "global"})))
    assert bad.exit_code == 2
    assert "params.normalise: unknown key (did you mean 'normalize'?)" in bad.output
    assert not (tmp_path / "fused").exists()


def test_bad_checkpoints_through_the_cli(tmp_path: Path, inputs: tuple) -> None:
    _, _, _, expert_dirs = inputs
    shard = expert_dirs[1] / "model-00001-of-00002.safetensors"
    shard.write_bytes(shard.read_bytes()[:-4])
    result = invoke("fuse", str(good_config(tmp_path, inputs)))
    assert result.exit_code == 2
    assert "experts[1]" in result.output and "truncated" in result.output and "nothing was written" in result.output
    assert not (tmp_path / "fused").exists()


def test_invalid_yaml_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "broken.yaml").write_text("base: [unclosed\n")
    broken = invoke("fuse", str(tmp_path / "broken.yaml"))
    assert broken.exit_code == 2 and "invalid YAML" in broken.output
    missing = invoke("fuse", str(tmp_path / "absent.yaml"))
    assert missing.exit_code == 2 and "cannot read" in missing.output


PLUGIN = """
    import torch
    from longcat_plugins import FusionMethod, hookimpl

    def midpoint(base, experts, weights, ctx, *, towards: float = 0.5):
        '''Moves the base towards the experts' mean by ``towards``.'''
        mean = torch.stack(experts).mean(dim=0)
        return base + towards * (mean - base), {}

    @hookimpl
    def register_fusion_methods():
        return [FusionMethod("midpoint", midpoint)]
"""


def test_third_party_method_installed_as_a_distribution(fake_site: Path, tmp_path: Path, inputs: tuple) -> None:
    base, experts, _, _ = inputs
    make_dist(fake_site, "acme-merge", {"acme_merge": PLUGIN}, {"acme": "acme_merge"})
    config = good_config(tmp_path, inputs, method="midpoint", params={"towards": 1.0})
    proc = run_cli("fuse", str(config))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "fused with midpoint" in proc.stdout
    got = read_checkpoint(tmp_path / "fused")
    for name, b in base.items():
        want = b + 1.0 * (torch.stack([e[name] for e in experts]).mean(dim=0) - b)
        torch.testing.assert_close(got[name], want, rtol=1e-6, atol=1e-6)
    listed = run_cli("list")
    assert "fusion:midpoint" in listed.stdout
