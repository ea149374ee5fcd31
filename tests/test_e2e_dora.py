"""DORA end to end on the CPU runtime: ``trainer.v1.trainer_mode=dora`` through stock
``verl.trainer.main_ppo`` with two standalone ``hf`` replicas and a long-tailed workload.

Two Ray runs, each the production shape of two features at once (a Ray run's cost is mostly
start-up, worker imports and model loads, so each run carries as much as it can show):

- multi-version streaming (migration, dispatch quotas, pass-rate oversampling, replay) on a
  two-node Ray cluster, the trainer on one node and both replicas on the other;
- the elastic group (the hybrid replica on the training device, lent and reclaimed) beside
  standalone replicas that each hold one weights version (the vLLM/SGLang path).

Asserted from verl's own metrics and from the two traces (the rollout servers' weight updates
and batches, the trainer's per-step record)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from ray.cluster_utils import Cluster

from longcat_plugins.learning.assets import Assets
from longcat_plugins.runtime.launch import STEP_LINE, configs_dir, run_training
from longcat_plugins.schedulers.workload import AGENT_NAME, write_skewed_dataset

pytestmark = [pytest.mark.slow, pytest.mark.ray]

STEPS = 4
BOUND = 1


def train_dora(
    tiny_assets: Assets,
    tmp_path: Path,
    ray_tmp: Path | None,
    steps: int,
    *overrides: str,
    warmup_batches: int = 2,
    on_line: Callable[[str], None] | None = None,
) -> tuple:
    """Run dora_cpu.yaml on the long-tailed workload; return (result, trainer trace, rollout trace).
    ``ray_tmp=None``: the overrides join a running cluster instead of starting one."""
    skewed = write_skewed_dataset(tiny_assets.train, tmp_path / "skewed.parquet", long_tokens=384, short_tokens=8)
    run_dir = tmp_path / "run"
    dora_trace = run_dir / "dora_trace.jsonl"
    rollout_trace = run_dir / "rollout_trace.jsonl"
    result = run_training(
        configs_dir() / "dora_cpu.yaml",
        [
            f"data.train_files={skewed}",
            f"data.val_files={tiny_assets.val}",
            f"actor_rollout_ref.model.path={tiny_assets.model}",
            *([f"+ray_kwargs.ray_init._temp_dir={ray_tmp}"] if ray_tmp is not None else []),
            f"trainer.total_training_steps={steps}",
            "data.max_response_length=384",
            f"actor_rollout_ref.rollout.agent.agent_loop_config_path={configs_dir() / 'agent_loops' / 'skewed.yaml'}",
            f"actor_rollout_ref.rollout.agent.default_agent_loop={AGENT_NAME}",
            f"trainer.v1.separate_async.num_warmup_batches={warmup_batches}",
            f"longcat.settings.scheduler.dora.staleness={BOUND}",
            *overrides,
        ],
        run_dir,
        on_line=on_line,
        env={"LONGCAT_HF_ROLLOUT_TRACE": str(rollout_trace), "LONGCAT_DORA_TRACE": str(dora_trace)},
    )
    assert result.returncode == 0, result.log.read_text()[-5000:]
    assert [s["step"] for s in result.steps] == list(range(1, steps + 1))
    # the standalone replicas started beside the trainer's engines (prestart_replicas, the default)
    assert result.steps[0]["dora/startup/replicas_prestarted"] == 1.0, result.steps[0]
    assert result.steps[0]["dora/startup/replicas_create_s"] > 0.0
    assert result.steps[0]["dora/startup/agent_loops_prestarted"] == 1.0, "created before the first weight sync"
    assert "dora/startup/replicas_prestarted" not in result.steps[-1], "logged with the first step only"
    steps_trace = [json.loads(line) for line in dora_trace.read_text().splitlines()]
    rollout = [json.loads(line) for line in rollout_trace.read_text().splitlines()]
    return result, steps_trace, rollout


#: dispatch by the core's rollout quotas: domains are the skewed budgets (every 4th row long);
#: the quotas want 1 long group in 8, half the data's share, so the dataloader order cannot pass
DISPATCH = (
    "+longcat.settings.scheduler.dora.domain_key=extra_info.length",
    "+longcat.settings.scheduler.dora.domain_ratios={long:1,short:7}",
)


#: pass-rate oversampling: a prompt whose pass rate is 0 (every unseen prompt, and the tiny
#: model's) starts 2 groups
OVERSAMPLING = (
    "+longcat.settings.scheduler.dora.oversampling_max=2",
    "+longcat.settings.scheduler.dora.default_pass_rate=0.0",
)

#: D2 replay: one group of each 4-group batch drawn from the stale groups kept for reuse
REPLAY = ("+longcat.settings.scheduler.dora.reuse_ratio=0.25",)
GROUP = 4  # samples per group (dora_cpu.yaml's rollout.n)


def test_dora_streams_on_two_ray_nodes(tiny_assets: Assets, tmp_path: Path, two_nodes: Cluster) -> None:
    """Multi-version streaming across two Ray nodes: the trainer's workers on one node, both
    standalone replicas on the other. Weights (object store), routing (the balancer, executing
    migrations), dispatch (quotas over two domains, pass-rate oversampling) and the samples
    (agent loops, replay buffer with D2 replay) cross between them; every replica holds a second
    version while a batch on the first finishes, every fresh sample is within the bound, training
    takes batches while other prompts still generate."""
    trainer_node = two_nodes.head_node.node_id
    (rollout_node,) = [node.node_id for node in two_nodes.worker_nodes]
    alive: dict[str, dict] = {}

    def snapshot(line: str) -> None:
        # while the job runs (its actors die with it): every live actor and its node, per step
        if STEP_LINE.search(line):
            alive.update(two_nodes.global_state.actor_table(None, actor_state_name="ALIVE"))

    # a low rebalance threshold: the core's balancer plans migrations as soon as two replicas'
    # loads differ by two, so the executed-migration path runs in a few steps
    result, steps, rollout = train_dora(
        tiny_assets,
        tmp_path,
        None,
        STEPS,
        f"+ray_kwargs.ray_init.address={two_nodes.address}",
        "~ray_kwargs.ray_init.num_cpus",
        "~ray_kwargs.ray_init.num_gpus",
        f"+longcat.settings.scheduler.dora.node_resources.global_pool={TRAINER_NODE}",
        "+longcat.settings.scheduler.dora.rebalance_threshold=0.125",
        *DISPATCH,
        *OVERSAMPLING,
        *REPLAY,
        on_line=snapshot,
    )
    # placement, from the GCS actor table (Ray's state): trainer workers and replicas apart
    where = [(a["Name"] or a["ActorClassName"], a["Address"]["NodeID"]) for a in alive.values()]
    servers = {name: node for name, node in where if name.startswith("hf_server_")}
    workers = [node for name, node in where if name.startswith("rollout_standalone_")]
    trainer = [node for name, node in where if "WorkerDict" in name]
    assert servers == {"hf_server_0_0": rollout_node, "hf_server_1_0": rollout_node}, where
    assert len(workers) == 2 and set(workers) == {rollout_node}, where
    assert trainer and set(trainer) == {trainer_node}, where

    # weights crossed nodes: both remote replicas loaded every version (object_store engine, no
    # abort), each a new digest; multi-version: an update landed while a batch on the previous
    # version still ran
    updates = [r for r in rollout if r["event"] == "update"]
    batches = [r for r in rollout if r["event"] == "batch"]
    assert {u["replica"] for u in updates} == {0, 1}
    for replica in (0, 1):
        mine = [u for u in updates if u["replica"] == replica]
        assert [u["global_steps"] for u in mine] == list(range(0, STEPS + 1)), mine
        assert len({u["digest"] for u in mine}) == STEPS + 1, mine
    assert any(len(u["versions_held"]) == 2 for u in updates), updates

    # every trained sample came back with the version that generated it: the fresh ones within
    # the bound, the replayed groups' (D2) counted apart; several versions streamed in; the
    # trainer read both remote replicas' version state
    trained_versions = set()
    for record in steps:
        versions = record["versions"]
        replayed = record.get("replayed_groups", [])
        assert len(versions) + GROUP * len(replayed) == 16 and all(isinstance(v, int) for v in versions), record
        assert max((record["step"] - 1) - v for v in versions) <= BOUND, record
        assert set(record["replicas"]) == {"hf-replica-0", "hf-replica-1"}, record
        trained_versions.update(versions)
    assert len(trained_versions) >= 3, trained_versions

    # streaming: training took a batch while other prompts were still generating (no barrier on
    # the batch's slowest rollout), and the rollout servers kept decoding after that moment
    streamed = [r for r in steps[1:] if r["inflight_prompts"] > 0]
    assert streamed, steps
    for record in streamed:
        assert any(b["end"] > record["sampled_at"] for b in batches), record

    # verl's metrics: one version per sample; the bound on every fresh sample (verl's staleness
    # metric counts replayed samples too, older than the bound by design); the DORA metrics
    replayed_total = 0.0
    for metrics in result.steps:
        assert metrics["training/off_policy/trajectory_spans/max"] == 1, "one version per sample"
        assert metrics["dora/staleness/max"] <= BOUND
        replayed_total += metrics["dora/replay/replayed"]
        if metrics["dora/replay/replayed"] == 0:
            assert metrics["training/off_policy/trajectory_staleness/max"] <= BOUND
        else:
            assert metrics["dora/replay/staleness/max"] > BOUND
        for key in ("dora/staleness/max", "dora/wait_s", "dora/request_load_ratio", "dora/rollout_busy_ratio"):
            assert math.isfinite(metrics[key]), key
        assert math.isfinite(metrics["actor/pg_loss"]) and metrics["actor/grad_norm"] > 0
        # S3 in verl: the two-phase per-replica cap (8, then 4 after a rebalance) bounds every replica
        assert metrics["dora/lb/cap"] in (4.0, 8.0), metrics["dora/lb/cap"]
        assert 0 < metrics["dora/lb/peak_inflight"] <= 8, metrics["dora/lb/peak_inflight"]
        assert math.isfinite(metrics["dora/lb/stale_aborted"])
    assert any(m["dora/request_load_ratio"] > 0 for m in result.steps)
    assert any(k.startswith("dora/lb/inflight/") for k in result.steps[-1]), sorted(result.steps[-1])
    # migration executed: planned moves were stopped on their source and continued elsewhere on
    # the same version (trajectory_spans == 1 above: every migrated sample is still one version;
    # the continuation from a prefix is checked token by token in tests/test_sched_migrate.py)
    total = {k: sum(m[f"dora/lb/{k}"] for m in result.steps) for k in ("planned_migrations", "executed_migrations")}
    assert total["planned_migrations"] > 0 and total["executed_migrations"] > 0, total

    # D2 replay: every stale group verl evicted was kept (no online filter here), and once kept
    # groups exist each later batch takes round(0.25 * 4) = 1 of them, each once
    buffered = sum(m["dora/replay/buffered"] for m in result.steps)
    evicted = sum(m.get("dora/evicted_stale_groups", 0.0) for m in result.steps)
    assert buffered == evicted, (buffered, evicted)
    assert all(m["dora/replay/replayed"] <= 1 for m in result.steps)
    replayed_uids = [uid for record in steps for uid in record.get("replayed_groups", [])]
    assert len(replayed_uids) == len(set(replayed_uids)) == replayed_total
    for before, metrics in zip(result.steps, result.steps[1:], strict=False):
        if before["dora/replay/size"] > 0:
            assert metrics["dora/replay/replayed"] == 1, (before, metrics)

    # the core decided what verl generated: at no step end did a domain have more groups
    # outstanding than its rollout quota (2 long, 11 short over the 12-group window: batches of 4
    # groups, 2 warm-up batches), where the dataloader's order keeps 3 of 12 long ones outstanding
    last = result.steps[-1]
    issued = {d: last[f"dora/dispatch/{d}/issued_total"] for d in ("long", "short")}
    assert sum(issued.values()) >= STEPS * 4 and issued["long"] > 0, issued
    assert sum(m["dora/dispatch/long/issued"] + m["dora/dispatch/short/issued"] for m in result.steps) == sum(
        issued.values()
    )
    for metrics in result.steps:
        assert (metrics["dora/dispatch/long/quota"], metrics["dora/dispatch/short/quota"]) == (2.0, 11.0)
        for d in ("long", "short"):
            # exact: a prompt's extra copies count against its domain's quota and are capped at its room
            assert metrics[f"dora/dispatch/{d}/outstanding"] <= metrics[f"dora/dispatch/{d}/quota"], metrics
        assert metrics["dora/dispatch/window_fallbacks"] == 0.0
        # each copy is its own verl group: 4 groups of 4 samples per batch (the replayed one
        # included), never a merged group
        fresh = metrics["dora/domain/long/trained_groups"] + metrics["dora/domain/short/trained_groups"]
        assert fresh + metrics["dora/replay/replayed"] == 4, metrics
    # pass-rate oversampling ran in verl: prompts started extra groups, counted as issued groups
    # (copies a full quota had no room for are counted as capped, never issued)
    assert last["dora/dispatch/oversampled_prompts"] > 0 and last["dora/dispatch/extra_groups"] > 0, last
    assert sum(issued.values()) == last["dora/dispatch/prompts_total"] + last["dora/dispatch/extra_groups"]
    assert math.isfinite(last["dora/dispatch/capped_groups"])
    print(
        "dispatch:",
        issued,
        last["dora/dispatch/capped_groups"],
        [m["dora/dispatch/long/outstanding"] for m in result.steps],
        "replay:",
        [(m["dora/replay/buffered"], m["dora/replay/replayed"], m["dora/replay/size"]) for m in result.steps],
        "versions:",
        sorted(trained_versions),
    )


def test_dora_elastic_group_lent_beside_single_version_replicas(
    tiny_assets: Assets, tmp_path: Path, ray_tmp: Path
) -> None:
    """The GPU production shape: the elastic group (the hybrid replica on the training device)
    lent and reclaimed while the two standalone replicas each hold one weights version
    (replica-granular versioning, the vLLM/SGLang path, on ``hf`` replicas forced to one version).

    Elastic: the group is never lent when the next batch is already ready, lent when a step ends
    short of it, reclaimed for training, and gets weights exactly at the steps it was lent.
    Single-version: every replica (the lent one included) held exactly one version at every
    moment and ran every batch on it, both standalone replicas rolled to new versions, and every
    request the standalone servers aborted was one the roller aborted because its version left
    the window. Every trained sample spans one version within the bound."""
    steps = 4
    result, trace, rollout = train_dora(
        tiny_assets,
        tmp_path,
        ray_tmp,
        steps,
        "actor_rollout_ref.hybrid_engine=true",
        "trainer.v1.separate_async.hybrid_rollout.enable_switch=true",
        "longcat.settings.scheduler.dora.single_version_replicas=true",
        # one batch of prefetch: after a step the next batch is still generating, so the trainer
        # would idle and the group is worth lending (two batches ahead on a loaded machine, the
        # standalone group alone keeps the next batch full and lending never pays)
        warmup_batches=1,
    )
    # -- elastic ---------------------------------------------------------------------------------
    decisions = [(m["dora/elastic/ready_groups"], m["dora/elastic/lend"]) for m in result.steps]
    for ready, lend in decisions:
        if ready >= 4:
            assert lend == 0.0, decisions  # next batch already full: no lending
    # Lending pays only when a step ends before the standalone group has generated the next
    # batch, which is the machine's timing: on a loaded 2-core machine a slow training step can
    # leave the next batch full after every step, and then lending rightly never happens. When
    # some step (not the last) ended short, the group was lent.
    short = [step for step, (ready, _) in enumerate(decisions[:-1], start=1) if ready < 4]
    if short:
        assert any(lend == 1.0 for _, lend in decisions), decisions
    assert any("timing_s/switch_to_trainer" in m for m in result.steps), "the elastic group was reclaimed"
    # three replicas (the hybrid one is rank 0); the elastic one gets weights only when lent
    updates = [r for r in rollout if r["event"] == "update"]
    assert {u["replica"] for u in updates} == {0, 1, 2}
    elastic_versions = [u["global_steps"] for u in updates if u["replica"] == 0]
    lent_after = [step for step, (_, lend) in enumerate(decisions, start=1) if lend == 1.0]
    assert elastic_versions == [0, *lent_after], (elastic_versions, decisions)

    # -- single-version replicas -----------------------------------------------------------------
    assert all(u["versions_held"] == [u["version"]] for u in updates), "one version per replica"
    for replica in (1, 2):
        versions = [u["global_steps"] for u in updates if u["replica"] == replica]
        assert versions[0] == 0 and versions == sorted(versions) and len(versions) >= 2, (replica, versions)
    # batches ran on the one version the replica held when they started
    for replica in (0, 1, 2):
        held = None
        for event in sorted(
            (r for r in rollout if r["replica"] == replica), key=lambda r: r.get("time", r.get("start"))
        ):
            if event["event"] == "update":
                held = event["version"]
            else:
                assert event["version"] == held, event
    last = result.steps[-1]
    assert last["dora/replica/max_versions_held"] == 1.0
    # rolling: some replica loaded outside a weight sync (drained, or kept back while another
    # loaded), unless on this machine's timing every roll was cut short by the window (aborts)
    assert last["dora/replica/catch_up_loads"] > 0 or last["dora/replica/aborted_requests"] > 0, last
    # no standalone restart that did not leave the window: every such abort was the roller's (the
    # elastic group's aborts at reclaim are counted apart)
    assert last["dora/replica/server_aborts"] <= last["dora/replica/aborted_requests"], last
    assert math.isfinite(last["dora/replica/elastic_aborts"])
    for record in trace:
        assert max((record["step"] - 1) - v for v in record["versions"]) <= BOUND, record
    for metrics in result.steps:
        assert metrics["training/off_policy/trajectory_spans/max"] == 1, "one version per sample"
        assert metrics["training/off_policy/trajectory_staleness/max"] <= BOUND
        assert math.isfinite(metrics["actor/pg_loss"])
    print("elastic:", decisions, "replica:", {k: v for k, v in last.items() if k.startswith("dora/replica/")})


# -- two Ray nodes -------------------------------------------------------------------------------

#: the custom resource that marks the training node (``node_resources`` pins verl's trainer pool to it)
TRAINER_NODE = "longcat_trainer_node"


@pytest.fixture
def two_nodes(ray_tmp: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """Two raylets on this machine: the head is the training node (1 logical GPU and the
    ``TRAINER_NODE`` resource), the second the rollout node (2 logical GPUs). Every Ray file,
    the cluster-address file included, stays under ``ray_tmp`` (``RAY_TMPDIR``), so no other
    Ray on the machine can find or join this cluster."""
    monkeypatch.setenv("RAY_TMPDIR", str(ray_tmp))
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 8,
            "num_gpus": 1,
            "resources": {TRAINER_NODE: 1},
            "include_dashboard": False,
            "object_store_memory": 200 * 2**20,
        },
    )
    try:
        cluster.add_node(num_cpus=8, num_gpus=2, object_store_memory=200 * 2**20)
        yield cluster
    finally:
        cluster.shutdown()
