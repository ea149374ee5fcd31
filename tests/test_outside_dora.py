"""DORA's policies as plugins: an outside plugin (tests/outside_plugin/outside_dora.py, installed as
a real distribution) registers an eviction policy, a load balancer and an admission policy through
``register_schedulers``; they are selected by name in ``longcat.settings.scheduler.dora``, an
unknown name exits 2 before Ray listing the choices, and in verl's ``dora`` trainer the sampler
and the load balancer call them."""

from __future__ import annotations

import json
import os
import random
import sys
from collections import Counter
from pathlib import Path

import pytest
from conftest import REPO, make_dist, run_cli
from sched_helpers import FakeTQ, dora_buffer

from longcat_plugins.host import Host
from longcat_plugins.runtime.launch import configs_dir
from longcat_plugins.schedulers.core.admission import admission_policy
from longcat_plugins.schedulers.core.queue import is_fresh
from longcat_plugins.schedulers.core.versions import EVICTION_POLICIES, eviction_policy, register_eviction_policy
from longcat_plugins.schedulers.sampler import DoraReplayBuffer
from longcat_plugins.schedulers.settings import DoraSettings
from longcat_plugins.selection import Selection
from longcat_plugins.testing import HostFactory

PLUGIN_FILE = REPO / "tests" / "outside_plugin" / "outside_dora.py"
sys.path.insert(0, str(PLUGIN_FILE.parent))
import outside_dora  # noqa: E402

RECIPE = str(configs_dir() / "dora_cpu.yaml")
KEY = "longcat.settings.scheduler.dora"


def install(site: Path) -> None:
    make_dist(
        site, "outside-dora", {"outside_dora_dist": PLUGIN_FILE.read_text()}, {"outside_dora": "outside_dora_dist"}
    )


def sampler(settings: DoraSettings, staleness: int = 1) -> DoraReplayBuffer:
    """verl's replay buffer with our sampler over the in-memory TransferQueue, metadata read."""
    buffer = dora_buffer(lambda k: k, settings=settings, staleness=staleness)
    buffer._sync_metadata_from_transfer_queue()
    return buffer


def test_installed_it_is_discovered_beside_the_builtins(fake_site: Path) -> None:
    install(fake_site)
    host = Host(Selection()).load()
    assert not host.problems, host.problems
    evictions = {c.name: c.plugin for c in host.components(kind="dora_eviction_policy")}
    balancers = {c.name: c.plugin for c in host.components(kind="dora_balancer")}
    admissions = {c.name: c.plugin for c in host.components(kind="dora_admission")}
    assert admissions == {
        "version_window": "longcat.schedulers",
        "length_aware": "longcat.schedulers",
        "marked_admission": "outside_dora",
    }
    assert evictions == {
        "staleness_window": "longcat.schedulers",
        "idle_or_stale": "longcat.schedulers",
        "marked_window": "outside_dora",
        "freshest_only": "outside_dora",
    }
    assert balancers == {"greedy": "longcat.schedulers", "none": "longcat.schedulers", "marked_greedy": "outside_dora"}


def test_selected_by_name_the_bridge_registered_it(longcat_host: HostFactory) -> None:
    longcat_host(outside_dora, builtins=True, activate=True)
    assert eviction_policy("freshest_only") is outside_dora.freshest_only
    settings = DoraSettings(eviction="freshest_only", balancer="marked_greedy", admission="marked_admission")
    assert settings.core_config(4).eviction == "freshest_only"
    assert settings.balancer_config().balancer == "marked_greedy"
    assert settings.balancer_config().admission == "marked_admission"
    assert admission_policy("marked_admission") is outside_dora.marked_admission
    with pytest.raises(ValueError, match=r"admission must be one of .*'none'.*'marked_admission'.*'version_window'"):
        DoraSettings(admission="marked")
    with pytest.raises(ValueError, match=r"eviction must be one of .*'freshest_only'.*'staleness_window'"):
        DoraSettings(eviction="freshest")
    with pytest.raises(ValueError, match=r"balancer must be one of .*'greedy'.*'marked_greedy'"):
        DoraSettings(balancer="gredy")


def groups(tq: FakeTQ, rng: random.Random, n: int, step: int) -> dict[str, int]:
    """``n`` finished groups of two trajectories each, versions drawn below ``step``; uid -> oldest."""
    oldest = {}
    for i in range(n):
        uid = f"g{i}"
        tq.prompt(uid, rng.randint(0, step), "finished")
        versions = [rng.randint(0, step - 1) for _ in range(2)]
        for session, version in enumerate(versions):
            tq.trajectory(uid, session, version)
        oldest[uid] = min(versions)
    return oldest


def test_the_sampler_evicts_what_the_selected_policy_names(
    tq: FakeTQ, longcat_host: HostFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    longcat_host(outside_dora, builtins=True, activate=True)
    rng = random.Random(7)
    step, bound = 6, 1
    oldest = groups(tq, rng, 40, step)
    # the default: exactly the groups outside the bound (the rule the sampler had built in)
    default = sampler(DoraSettings(staleness=bound), bound)._stale_terminal_keys(step, "train")
    assert default == {uid for uid, v in oldest.items() if not is_fresh(step - 1, v, bound)}
    assert default and default != set(oldest)
    # the plugin's policy: only the groups of the version being trained stay
    fresh_only = sampler(DoraSettings(staleness=bound, eviction="freshest_only"), bound)
    assert fresh_only._stale_terminal_keys(step, "train") == {uid for uid, v in oldest.items() if v != step - 1}
    # the context it saw: versions up to the trained one, finished groups per version
    seen: list[dict] = []
    monkeypatch.setattr(outside_dora, "_mark", seen.append)
    marked = sampler(DoraSettings(staleness=bound, eviction="marked_window"), bound)
    assert marked._stale_terminal_keys(step, "train") == default
    counts = Counter(oldest.values())
    assert seen == [
        {
            "kind": "eviction",
            "latest": step - 1,
            "live": sorted(set(counts) | {step - 1}),
            "evicted": sorted(v for v in counts if step - 1 - v > bound),
        }
    ]


def test_a_policy_that_keeps_a_stale_version_stops_the_sampler(tq: FakeTQ, longcat_host: HostFactory) -> None:
    longcat_host(outside_dora, builtins=True, activate=True)
    if "keep_all" not in EVICTION_POLICIES:
        register_eviction_policy("keep_all")(lambda ctx: [])
    groups(tq, random.Random(1), 10, 6)
    buffer = sampler(DoraSettings(staleness=1, eviction="keep_all"), 1)
    with pytest.raises(RuntimeError, match=rf"'keep_all' \({KEY}.eviction\) kept version\(s\) \[0, 1, 2, 3\]"):
        buffer._stale_terminal_keys(6, "train")


def test_an_unknown_name_exits_2_before_ray_listing_the_choices(fake_site: Path) -> None:
    install(fake_site)
    ok = run_cli(
        "validate",
        RECIPE,
        f"+{KEY}.eviction=marked_window",
        f"+{KEY}.balancer=marked_greedy",
        f"+{KEY}.admission=marked_admission",
    )
    assert ok.returncode == 0, ok.stdout + ok.stderr
    typo = run_cli("validate", RECIPE, f"+{KEY}.admission=marked_admision")
    assert typo.returncode == 2, typo.stdout + typo.stderr
    line = next(line for line in (typo.stdout + typo.stderr).splitlines() if f"{KEY}.admission" in line)
    assert "'marked_admission'" in line and "'version_window'" in line and "'none'" in line, line
    bad = run_cli("validate", RECIPE, f"+{KEY}.eviction=marked_windw", f"+{KEY}.balancer=marked_greedy")
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2, out
    line = next(line for line in out.splitlines() if f"{KEY}.eviction" in line)
    assert "'marked_window'" in line and "'staleness_window'" in line and "'freshest_only'" in line, out
    assert "Ray" not in out and "ray.init" not in out


@pytest.mark.slow
@pytest.mark.ray
def test_the_plugins_policies_run_inside_verls_dora_trainer(
    tiny_assets, tmp_path: Path, ray_tmp: Path, fake_site: Path
) -> None:
    """Two steps of dora_cpu.yaml with the outside plugin's policies selected: the sampler (in the
    trainer process) asked its eviction policy before the batches, and the DORA load balancer (a
    Ray actor) asked its balancer on every load change and its admission policy for new requests,
    holding those refused until the next version. The run's length metrics are sane: the trained
    lengths the trainer reports are those of its trained batch, and the censoring share is a share."""
    from test_e2e_dora import train_dora

    install(fake_site)
    marker = tmp_path / "marker.jsonl"
    import os

    os.environ["OUTSIDE_DORA_MARKER"] = str(marker)
    try:
        result, trace, _ = train_dora(
            tiny_assets,
            tmp_path,
            ray_tmp,
            2,
            f"+{KEY}.eviction=marked_window",
            f"+{KEY}.balancer=marked_greedy",
            f"+{KEY}.admission=marked_admission",
            warmup_batches=1,
        )
    finally:
        del os.environ["OUTSIDE_DORA_MARKER"]
    records = [json.loads(line) for line in marker.read_text().splitlines()]
    evictions = [r for r in records if r["kind"] == "eviction"]
    plans = [r for r in records if r["kind"] == "balancer"]
    assert evictions and plans, records[:5]
    # trained steps 1 and 2 update versions 0 and 1: the policy was asked while training each
    assert {r["latest"] for r in evictions} >= {0, 1}, evictions
    assert all(r["latest"] == max(r["live"]) for r in evictions)
    # the balancer ran in another process (the load balancer's Ray actor) and saw both replicas
    assert {r["pid"] for r in plans}.isdisjoint({r["pid"] for r in evictions})
    assert any(len(r["loads"]) == 2 for r in plans), plans[:5]
    assert [s["step"] for s in result.steps] == [1, 2]
    # admission: asked in the load balancer's actor; refused exactly while the trainer updated (the
    # newest version had no later batch left: staleness 1), admitted on the newest otherwise
    admissions = [r for r in records if r["kind"] == "admission"]
    assert admissions and {r["pid"] for r in admissions} <= {r["pid"] for r in plans}, admissions[:5]
    assert all(r["admitted"] == (r["batches_left"] == 1) for r in admissions), admissions[:10]
    assert any(not r["admitted"] for r in admissions), "a refill while the trainer updated must be held"
    held = sum(s["dora/lb/held_requests"] for s in result.steps)
    assert held >= 1, [s.get("dora/lb/held_requests") for s in result.steps]
    # the trained length metrics are those of the batch verl trained (its response_length/*)
    for step, record in zip(result.steps, trace, strict=True):
        lengths = record["trained_lengths"]
        assert len(lengths) == 16 and step["dora/trained_len_max"] == max(lengths) == step["response_length/max"]
        assert step["dora/trained_len_mean"] == pytest.approx(step["response_length/mean"], rel=1e-9)
        assert min(lengths) <= step["dora/trained_len_p90"] <= max(lengths)
        assert 0.0 <= step["dora/censored_share"] <= 1.0 and step["dora/lb/started_requests"] >= 0
        if step["dora/lb/stale_aborted"]:
            assert 0 < step["dora/censored_len_mean"] <= 384


def test_without_verl_the_core_takes_the_names_from_the_host(fake_site: Path) -> None:
    """The simulator and a Python DoraController have no verl (so no bridge): a selected name
    still resolves to the installed plugin's function, and the core never imports verl for it."""
    import subprocess

    install(fake_site)
    code = (
        "import sys\n"
        "from longcat_plugins.schedulers.core import DoraConfig\n"
        "from longcat_plugins.schedulers.core.balancer import balancer\n"
        "from longcat_plugins.schedulers.core.versions import VersionSet\n"
        "DoraConfig(eviction='freshest_only', balancer='marked_greedy')\n"
        "versions = VersionSet(0, 'freshest_only')\n"
        "versions.publish(1, 3, {})\n"
        "print(versions.publish(2, 3, {}), balancer('marked_greedy').__module__, 'verl' in sys.modules)\n"
    )
    # only this test's plugin on the path: another test's session plugin (the example plugin,
    # installed on PYTHONPATH for the whole worker) may import verl itself
    env = {**os.environ, "PYTHONPATH": str(fake_site)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["[1]", "outside_dora_dist", "False"], out.stdout + out.stderr
