"""The outside plugin of docs/writing-plugins.md (a loss, a reward and a fusion method with
settings), written from the docs alone: it is the code the page prints, it is small, it installs
as a real distribution, and each component works where verl (or the fuse engine) calls it."""

from __future__ import annotations

import ast
import importlib.metadata
import math
import sys
from pathlib import Path

import pytest
import torch
from conftest import REPO, make_dist
from test_fusion_support import random_family, read_checkpoint, write_family

from longcat_plugins.config import ConfigError
from longcat_plugins.host import ENTRY_POINT_GROUP, Host
from longcat_plugins.selection import Selection
from longcat_plugins.testing import HostFactory

PLUGIN_FILE = REPO / "tests" / "outside_plugin" / "outside_plugin.py"
sys.path.insert(0, str(PLUGIN_FILE.parent))
import outside_plugin  # noqa: E402


def code_lines(source: str) -> int:
    """Lines holding code: not blank, not a comment, not part of a docstring."""
    doc_lines: set[int] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef) and ast.get_docstring(node) is not None:
            first = node.body[0]
            doc_lines.update(range(first.lineno, (first.end_lineno or first.lineno) + 1))
    return sum(
        1
        for i, line in enumerate(source.splitlines(), 1)
        if line.strip() and not line.strip().startswith("#") and i not in doc_lines
    )


def test_the_docs_print_this_plugin_and_it_is_small() -> None:
    source = PLUGIN_FILE.read_text()
    page = (REPO / "docs" / "writing-plugins.md").read_text()
    block = page.split("<!-- outside-plugin: tests/outside_plugin/outside_plugin.py -->", 1)[1]
    block = block.split("<!-- /outside-plugin -->", 1)[0].strip()
    assert block == f"```python\n{source.rstrip()}\n```", "docs/writing-plugins.md must print the tested plugin"
    assert code_lines(source) <= 60


def test_installed_as_a_distribution_it_is_discovered(fake_site: Path) -> None:
    make_dist(
        fake_site,
        "outside-plugin",
        {"outside_plugin_dist": PLUGIN_FILE.read_text()},
        {"outside": "outside_plugin_dist"},
    )
    eps = [
        ep
        for d in importlib.metadata.distributions(path=[str(fake_site)])
        for ep in d.entry_points
        if ep.group == ENTRY_POINT_GROUP
    ]
    host = Host(Selection()).load(eps)
    assert not host.problems, host.problems
    assert {c.ref for c in host.components()} == {
        "algorithm:clipped_reinforce",
        "reward:last_line",
        "fusion:mean_delta",
    }


def test_the_loss_in_verl_reads_its_knobs_from_policy_loss(longcat_host: HostFactory) -> None:
    from omegaconf import OmegaConf
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    from verl.utils.config import omega_conf_to_dataclass
    from verl.workers.config.actor import ActorConfig

    longcat_host(outside_plugin, activate=True)
    section = {"_target_": "outside_plugin.ClippedReinforceConfig", "loss_mode": "clipped_reinforce", "max_ratio": 1.5}
    policy_loss = omega_conf_to_dataclass(OmegaConf.create(section))  # as verl builds actor.policy_loss
    config = ActorConfig(strategy="fsdp", rollout_n=1, ppo_micro_batch_size_per_gpu=1, policy_loss=policy_loss)
    gen = torch.Generator().manual_seed(0)
    old = torch.randn(3, 5, generator=gen, dtype=torch.float64) * 0.1
    new = (old + torch.randn(3, 5, generator=gen, dtype=torch.float64)).requires_grad_()
    adv = torch.randn(3, 5, generator=gen, dtype=torch.float64)
    mask = torch.rand(3, 5, generator=gen) > 0.3
    loss, metrics = get_policy_loss_fn("clipped_reinforce")(old, new, adv, mask, "token-mean", config, None)
    # float64 reference from the formula: token mean of -A · min(exp(new - old), 1.5)
    ratio = [
        [min(math.exp(n - o), 1.5) for n, o in zip(nr, orow, strict=True)]
        for nr, orow in zip(new.tolist(), old.tolist(), strict=True)
    ]
    terms = [
        -a * r
        for ar, rr, mr in zip(adv.tolist(), ratio, mask.tolist(), strict=True)
        for a, r, m in zip(ar, rr, mr, strict=True)
        if m
    ]
    assert float(loss) == pytest.approx(sum(terms) / len(terms), rel=1e-12)
    capped = [r >= 1.5 for rr, mr in zip(ratio, mask.tolist(), strict=True) for r, m in zip(rr, mr, strict=True) if m]
    assert metrics["actor/capped_fraction"] == pytest.approx(sum(capped) / len(capped))
    loss.backward()
    assert new.grad is not None and torch.isfinite(new.grad).all()


def test_the_reward_reads_its_settings_where_verl_finds_it(longcat_host: HostFactory) -> None:
    import importlib

    longcat_host(outside_plugin, activate=True, settings={"reward": {"last_line": {"credit": 0.5}}})
    fn = importlib.import_module("longcat_plugins.reward_functions").last_line  # verl's pkg:// lookup
    assert fn is outside_plugin.last_line
    assert fn(data_source="x", solution_str="so the answer is\nParis\n", ground_truth="paris", extra_info={}) == 0.5
    assert fn("x", "Paris is it", "paris") == 0.0  # not the last line on its own
    assert fn("x", "", "") == 0.0  # nothing answered, nothing credited
    # per-call kwargs (verl's reward_kwargs) override the settings; unrelated ones are ignored
    assert fn("x", "Paris", "paris", ignore_case=False, reward_router_address=None) == 0.0
    longcat_host(outside_plugin, activate=True, settings={"reward": {"last_line": {"ignore_case": False}}})
    assert fn("x", "Paris", "paris") == 0.0 and fn("x", "paris", "paris") == 1.0


def test_bad_settings_fail_with_their_key_path(longcat_host: HostFactory) -> None:
    with pytest.raises(ConfigError, match=r"longcat\.settings\.reward\.last_line\.credit: expected float"):
        longcat_host(outside_plugin, settings={"reward": {"last_line": {"credit": "full"}}})
    with pytest.raises(ConfigError, match=r"actor_rollout_ref\.actor\.policy_loss"):
        longcat_host(outside_plugin, settings={"algorithm": {"clipped_reinforce": {"max_ratio": 3.0}}})


def test_the_fusion_method_merges_with_its_params(tmp_path: Path, longcat_host_factory: HostFactory) -> None:
    from longcat_plugins.fusion import fuse

    base, experts = random_family(n_experts=2, seed=7)
    base_dir, expert_dirs = write_family(tmp_path / "in", base, experts, shards=2)
    host = longcat_host_factory(outside_plugin, builtins=True)
    fuse(
        base_dir,
        [(expert_dirs[0], 1.0), (expert_dirs[1], 3.0)],
        tmp_path / "out",
        method="mean_delta",
        params={"scale": 0.5},
        host=host,
    )
    got = read_checkpoint(tmp_path / "out")
    for name, b in base.items():
        b64 = b.double()
        want = b64 + 0.5 * (1.0 * (experts[0][name].double() - b64) + 3.0 * (experts[1][name].double() - b64)) / 4.0
        torch.testing.assert_close(got[name].double(), want, rtol=1e-6, atol=1e-6)
