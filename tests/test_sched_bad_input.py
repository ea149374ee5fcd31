"""Bad DORA input stops a run with exit 2 naming the key, before Ray starts: a staleness bound
below 0, a per-domain quota naming a domain the data does not have, and replica-granular
versioning with fewer than two replicas or no window."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from conftest import run_cli

from longcat_plugins.runtime.launch import configs_dir, run_training
from longcat_plugins.schedulers.settings import DoraSettings

RECIPE = str(configs_dir() / "dora_cpu.yaml")
KEY = "longcat.settings.scheduler.dora"


def domains_parquet(tmp_path: Path) -> Path:
    path = tmp_path / "domains.parquet"
    pd.DataFrame({
        "data_source": ["math", "code", "math"],
        "prompt": [[{"role": "user", "content": "1+1"}]] * 3,
        "extra_info": [{"domain": "alg"}, {"domain": "geo"}, {"domain": "alg"}],
    }).to_parquet(path)  # fmt: skip
    return path


def test_staleness_below_zero_exits_2_naming_the_key() -> None:
    bad = run_cli("validate", RECIPE, f"{KEY}.staleness=-1")
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2, out
    line = next(line for line in out.splitlines() if KEY in line)
    assert "staleness must be an integer >= 0, got -1" in line, out


def test_a_domain_quota_naming_an_unknown_domain_exits_2_naming_it(tmp_path: Path) -> None:
    data = domains_parquet(tmp_path)
    ok = run_cli("validate", RECIPE, f"data.train_files={data}", f"+{KEY}.domain_ratios={{math: 1, code: 1}}")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run_cli("validate", RECIPE, f"data.train_files={data}", f"+{KEY}.domain_ratios={{math: 1, cdoe: 1}}")
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2, out
    assert f"{KEY}.domain_ratios.cdoe" in out and "'code'" in out and "'math'" in out
    # a dotted domain_key reads a field of a struct column
    nested = run_cli(
        "validate",
        RECIPE,
        f"data.train_files={data}",
        f"+{KEY}.domain_key=extra_info.domain",
        f"+{KEY}.domain_ratios={{alg: 1, math: 1}}",
    )
    assert nested.returncode == 2 and f"{KEY}.domain_ratios.math" in nested.stdout + nested.stderr
    assert f"{KEY}.domain_ratios.alg" not in nested.stdout + nested.stderr


def test_a_domain_oversampling_quota_naming_an_unknown_domain_exits_2_naming_it(tmp_path: Path) -> None:
    data = domains_parquet(tmp_path)
    bad = run_cli(
        "validate",
        RECIPE,
        f"data.train_files={data}",
        f"+{KEY}.domain_ratios={{math: 1, code: 1}}",
        f"+{KEY}.domain_oversampling={{cdoe: 2}}",
    )
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2 and f"{KEY}.domain_oversampling.cdoe: no such domain" in out, out


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"domain_oversampling": {"code": 2}}, "domain_oversampling.code: needs domain_ratios"),
        ({"dispatch": "fifo"}, "dispatch must be one of"),
        ({"oversampling_min": 3, "oversampling_max": 2}, f"{KEY}.oversampling_max must be >= oversampling_min"),
        ({"default_pass_rate": 1.5}, f"{KEY}.default_pass_rate must be a number in"),
    ],
)
def test_bad_dispatch_settings_name_their_key(values: dict, message: str) -> None:
    """The host reports these with the section's path (exit 2, as the case above)."""
    with pytest.raises(ValueError, match=re.escape(message)):
        DoraSettings(**values)


def test_the_real_entry_point_stops_before_ray(tmp_path: Path, ray_tmp: Path) -> None:
    """Stock verl main_ppo with the recipe: the Hydra callback refuses it and no Ray session
    is ever created."""
    data = domains_parquet(tmp_path)
    result = run_training(
        configs_dir() / "dora_cpu.yaml",
        [
            f"data.train_files={data}",
            f"data.val_files={data}",
            f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
            f"+{KEY}.domain_ratios={{math: 1, cdoe: 1}}",
            f"{KEY}.staleness=-1",
        ],
        tmp_path / "run",
    )
    log = result.log.read_text()
    assert result.returncode == 2, log[-3000:]
    assert f"{KEY}" in log and "staleness" in log
    assert not any(ray_tmp.iterdir()), list(ray_tmp.iterdir())


def test_single_version_replicas_with_too_few_replicas_or_no_window_exit_2_naming_the_key() -> None:
    """Replica-granular versioning needs a second replica to serve while one loads, and the
    version it serves (one behind) inside the window."""
    flag = f"{KEY}.single_version_replicas=true"
    bad = run_cli("validate", RECIPE, flag, "actor_rollout_ref.rollout.n_gpus_per_node=1")
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2, out
    assert f"{KEY}.single_version_replicas: needs at least 2 standalone replicas" in out and "got 1" in out, out
    bad = run_cli("validate", RECIPE, flag, f"{KEY}.staleness=0")
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2, out
    assert KEY in out and "staleness must be >= 1 with single_version_replicas (got 0)" in out, out
