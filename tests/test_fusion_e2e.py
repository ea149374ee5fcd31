"""The domain-parallel recipe end to end on the CPU (examples/domain_parallel/run.py): two verl
GRPO runs on different domains from one SFT checkpoint, exported with verl.model_merger,
fused by `longcat-plugins fuse`, and a general verl run that starts from the fused model.
About 2.5 minutes on 2 cores."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO
from test_fusion_support import read_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.ray]


def test_domain_experts_fused_then_general_rl(tmp_path: Path) -> None:
    workdir = tmp_path / "dp"
    script = REPO / "examples" / "domain_parallel" / "run.py"
    proc = subprocess.run(
        [sys.executable, str(script), "--workdir", str(workdir), "--domain-steps", "2", "--general-steps", "1"],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    summary = json.loads((workdir / "summary.json").read_text())

    # each domain run trained for 2 steps and its expert moved away from the SFT checkpoint
    sft = read_checkpoint(workdir / "sft")
    experts = {d: read_checkpoint(workdir / "experts" / d) for d in ("addition", "subtraction")}
    for domain, state in experts.items():
        assert [s["step"] for s in summary["runs"][domain]["steps"]] == [1, 2]
        assert state.keys() == sft.keys() and all(t.dtype == torch.bfloat16 for t in state.values())
        assert any(not torch.equal(state[n], sft[n]) for n in sft), f"{domain} expert equals the SFT checkpoint"

    # the fusion used the example config's method and reports both experts
    report = summary["fusion"]
    assert report["method"] == "longcat" and report["settings"]["normalize"] == "global"
    assert [e["name"] for e in report["experts"]] == ["addition", "subtraction"]
    for expert in report["experts"]:
        assert expert["delta_norm"] > 0 and 0.4 < expert["fractions"]["dropped"] < 0.6
    fused_dir = Path(summary["fused"])
    fused = read_checkpoint(fused_dir)
    assert all(not torch.equal(fused[n], experts["addition"][n]) for n in sft if sft[n].numel() > 64)

    # the Python API with the same config reproduces the CLI's output bit for bit
    from longcat_plugins.fusion import load_config, run_config

    again = run_config(load_config(workdir / "fuse.yaml"), output=str(tmp_path / "again"))
    assert again.tensors_merged == len(sft)
    assert (tmp_path / "again" / "model.safetensors").read_bytes() == (fused_dir / "model.safetensors").read_bytes()

    # the fused checkpoint is a loadable HF model, and the general verl run started from it
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(fused_dir)
    tokenizer = AutoTokenizer.from_pretrained(fused_dir)
    ids = tokenizer("What is 2+3?", return_tensors="pt").input_ids
    assert torch.isfinite(model(ids).logits).all()
    general = summary["runs"]["general"]
    assert general["model"] == str(fused_dir)
    assert [s["step"] for s in general["steps"]] == [1]
    step = general["steps"][0]
    assert math.isfinite(step["actor/pg_loss"]) and step["actor/grad_norm"] > 0
    log = Path(general["log"]).read_text()
    assert f"'path': '{fused_dir}'" in log, "the general run did not load the fused model"
