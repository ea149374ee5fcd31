"""Admission control against length censoring (issue 31 item 4): the policies' decisions, the
load balancer holding a refused request until the trainer publishes a version, the censoring
and trained-length metrics, and bad input (unknown name, a window larger than the bound).

The decisions are worked out by hand from verl's numbering (the trainer trains version ``s - 1``
at step ``s``; a sample of ``v`` is fresh at step ``s`` while ``s - 1 - v <= staleness``), not
read back from the code under test."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from conftest import run_cli

from longcat_plugins.runtime.launch import configs_dir
from longcat_plugins.schedulers.core.admission import (
    AdmissionContext,
    LengthHistory,
    admission_names,
    admission_policy,
    batches_left,
    length_aware,
    version_window,
)
from longcat_plugins.schedulers.core.config import ConfigError, DoraConfig
from longcat_plugins.schedulers.lengths import trained_length_metrics
from longcat_plugins.schedulers.load_balancer import PROMPT_FIELD, DoraLoadBalancer
from longcat_plugins.schedulers.settings import DoraSettings

RECIPE = str(configs_dir() / "dora_cpu.yaml")
KEY = "longcat.settings.scheduler.dora"


def ctx(version: int, next_batch: int, staleness: int = 1, window: int = 1, **kw: object) -> AdmissionContext:
    return AdmissionContext(
        version=version,
        batches_left=batches_left(version, staleness, next_batch),
        staleness=staleness,
        window=window,
        training=next_batch > version + 1,
        **kw,  # type: ignore[arg-type]
    )


def test_batches_left_counts_the_later_batches_that_may_still_train_the_version() -> None:
    # staleness 1: version 4 is trained fresh at steps 5 and 6 (6 - 1 - 4 = 1), not at 7
    assert batches_left(4, 1, 5) == 1  # the trainer fills step 5's batch: step 6 is left after it
    assert batches_left(4, 1, 6) == 0  # it took step 5's batch: only the batch being filled (6) is left
    assert batches_left(4, 3, 6) == 2  # staleness 3: steps 7 and 8 after 6


def test_version_window_refuses_a_version_about_to_leave_and_allows_the_newest() -> None:
    # the trainer took step 5's batch and updates version 4: a request on 4 could only make step 6
    assert not version_window(ctx(4, 6))
    # version 5 published, the trainer fills step 6: a request on the newest version has step 7 too
    assert version_window(ctx(5, 6))
    # a larger window holds longer: staleness 3, window 3 admits only while the newest is not updating
    assert version_window(ctx(5, 6, staleness=3, window=3))
    assert not version_window(ctx(5, 7, staleness=3, window=3))
    assert version_window(ctx(5, 7, staleness=3, window=2))
    assert admission_policy("none")(ctx(4, 6)) is True  # no admission control: today's behaviour


def test_length_aware_starts_a_prompt_where_its_history_says_it_can_finish() -> None:
    updating = {"version": 4, "next_batch": 6}  # the newest version is about to be superseded
    rate = {"tokens_per_step": 100.0}
    # a short prompt (history 40 tokens, 100 decoded per step) fits in the step now running
    assert length_aware(ctx(**updating, expected_tokens=40.0, **rate))
    # a long one (300 tokens, 3 steps) waits for the newest version ...
    assert not length_aware(ctx(**updating, expected_tokens=300.0, **rate))
    # ... and starts on it, even though it may not finish (the most window a request can get: never starve)
    assert length_aware(ctx(5, 6, expected_tokens=300.0, **rate))
    # no history, or no decode rate yet: held as version_window holds
    assert not length_aware(ctx(**updating, expected_tokens=None, **rate))
    assert not length_aware(ctx(**updating, expected_tokens=40.0, tokens_per_step=None))
    assert length_aware(ctx(5, 6, expected_tokens=None, tokens_per_step=None))
    # staleness 3, the trainer updating version 5 (batches_left 2): 250 tokens fit in 3 steps of 100, 350 do not
    assert length_aware(ctx(5, 7, staleness=3, expected_tokens=250.0, **rate))
    assert not length_aware(ctx(5, 7, staleness=3, expected_tokens=350.0, **rate))


def test_length_history_is_an_ema_and_a_censored_response_only_raises_it() -> None:
    history = LengthHistory(momentum=0.5)
    assert history.get("p") is None and history.get(None) is None
    assert history.observe("p", 8) == 8.0
    assert history.observe("p", 16) == 12.0  # 0.5 * 8 + 0.5 * 16
    assert history.observe("p", 4, complete=False) == 12.0  # stopped at 4 tokens: at least 4, says nothing new
    assert history.observe("p", 40, complete=False) == 40.0  # stopped at 40: at least 40
    small = LengthHistory(capacity=2)
    for prompt in ("a", "b", "c"):
        small.observe(prompt, 1)
    assert sorted(small.expected) == ["b", "c"]  # the oldest is forgotten first
    with pytest.raises(ValueError, match="momentum"):
        LengthHistory(momentum=0.0)


def test_trained_length_metrics_against_an_independent_percentile() -> None:
    lengths = [8, 8, 8, 384, 8, 8, 8, 200, 8, 8, 8, 8, 8, 8, 8, 376]
    out = trained_length_metrics(lengths)
    ordered = sorted(float(x) for x in lengths)
    rank = 0.9 * (len(ordered) - 1)  # linear interpolation between closest ranks
    low = int(rank)
    p90 = ordered[low] + (rank - low) * (ordered[low + 1] - ordered[low])
    assert out["dora/trained_len_p90"] == pytest.approx(p90, rel=1e-12)
    assert out["dora/trained_len_mean"] == pytest.approx(sum(lengths) / len(lengths), rel=1e-12)
    assert out["dora/trained_len_max"] == 384.0
    assert trained_length_metrics([]) == {}
    assert np.isfinite(list(out.values())).all()


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def make(admission: str, staleness: int = 1) -> tuple[DoraLoadBalancer, Clock]:
    clock = Clock()
    config = DoraConfig(staleness=staleness, admission=admission, admission_window=1)
    return DoraLoadBalancer({"a": "handle-a", "b": "handle-b"}, config=config, clock=clock), clock


def test_the_balancer_holds_new_requests_while_the_newest_version_is_superseded() -> None:
    async def scenario() -> None:
        lb, clock = make("version_window")
        assert lb.require_acquire_fields() == ["dora_version", PROMPT_FIELD]
        await lb.acquire_server("r0")  # version 0, step 1's batch being filled: admitted
        await lb.begin_training(1)  # step 1's batch taken: version 0 has no later batch left
        held = asyncio.create_task(lb.acquire_server("r1"))
        await settle()
        assert not held.done(), "a new request on the version being superseded must wait"
        # a migrated continuation pinned to its version is never held (it already started)
        assert (await lb.acquire_server("r0-moved", dora_version=0))[0] in ("a", "b")
        clock.now = 3.0
        metrics = await lb.end_step(1)  # version 1 published: the held request starts on it
        await asyncio.wait_for(held, 1.0)
        assert metrics["dora/lb/held_requests"] == 1.0
        assert metrics["dora/lb/started_requests"] == 1.0  # r0 (the continuation is not a start)
        after = lb.get_lb_metrics()  # r1 started in the new step, after 3 s held
        assert after["dora/lb/started_requests"] == 1.0 and after["dora/lb/held_s"] == 3.0

    asyncio.run(scenario())


def test_length_aware_in_the_balancer_reads_the_prompts_history_and_the_decode_rate() -> None:
    async def scenario() -> None:
        lb, clock = make("length_aware")
        await lb.end_step(None)  # step timing starts
        clock.now = 2.0
        await lb.end_step(None)  # one step of 2 s
        await lb.observe("short", 10, 0.5)  # 20 tokens/s per request -> 40 tokens per step
        await lb.observe("long", 200, 10.0)  # 20 tokens/s again
        assert lb.tokens_per_step() == 40.0
        await lb.begin_training(1)
        short = await asyncio.wait_for(lb.acquire_server("s", **{PROMPT_FIELD: "short"}), 1.0)
        assert short[0] in ("a", "b")  # 10 tokens fit in the step now running
        long = asyncio.create_task(lb.acquire_server("l", **{PROMPT_FIELD: "long"}))
        unknown = asyncio.create_task(lb.acquire_server("u", **{PROMPT_FIELD: "never-seen"}))
        await settle()
        assert not long.done() and not unknown.done()
        await lb.end_step(1)
        await asyncio.wait_for(asyncio.gather(long, unknown), 1.0)

    asyncio.run(scenario())


def test_stale_stops_are_counted_with_their_lengths_as_censoring() -> None:
    class Server:
        def __init__(self, stopped: list[str], tokens: list[int]) -> None:
            self.result = {"stopped": stopped, "tokens": tokens}
            self.stop_stale = self

        async def remote(self, latest: int, staleness: int) -> dict:
            return self.result

    async def scenario() -> None:
        servers = {"a": Server(["r0", "r1"], [120, 60]), "b": Server([], [])}
        lb = DoraLoadBalancer(servers, config=DoraConfig(staleness=1), stop_requests=True, staleness=1)
        for i in range(4):
            await lb.acquire_server(f"r{i}")
        metrics = await lb.end_step(2)
        assert metrics["dora/lb/stale_aborted"] == 2.0 and metrics["dora/lb/started_requests"] == 4.0
        assert metrics["dora/censored_share"] == 0.5
        assert metrics["dora/censored_len_mean"] == 90.0 and metrics["dora/censored_len_max"] == 120.0

    asyncio.run(scenario())


def test_bad_admission_settings_name_the_key() -> None:
    with pytest.raises(ConfigError, match=rf"{KEY}.admission must be one of \['none', 'length_aware', 'version_wi"):
        DoraSettings(admission="version_windw")
    with pytest.raises(ConfigError, match=rf"{KEY}.admission_window must be <= staleness \(1\)"):
        DoraSettings(admission="version_window", admission_window=2)
    with pytest.raises(ConfigError, match=rf"{KEY}.admission_window must be an integer >= 1"):
        DoraSettings(admission="version_window", admission_window=0)
    with pytest.raises(ValueError, match="needs load_balancer: dora"):
        DoraSettings(admission="length_aware", load_balancer="verl")
    assert (
        DoraSettings(staleness=2, admission="length_aware", admission_window=2).balancer_config().admission_window == 2
    )
    assert "none" in admission_names()


@pytest.mark.parametrize(
    ("overrides", "key", "says"),
    [
        ([f"+{KEY}.admission=version_windw"], f"{KEY}.admission", "'length_aware'"),
        ([f"+{KEY}.admission=version_window", f"+{KEY}.admission_window=2"], f"{KEY}.admission_window", "<= staleness"),
    ],
)
def test_bad_admission_input_exits_2_before_ray_naming_the_key(overrides: list[str], key: str, says: str) -> None:
    bad = run_cli("validate", RECIPE, *overrides)
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2, out
    line = next(line for line in out.splitlines() if key in line)
    assert says in line, out
    assert "ray.init" not in out


def test_the_documented_no_admission_value_validates_when_written_out() -> None:
    """``admission: none`` is the setting's own value (no component has the name): a recipe that
    writes it out validates, and an unknown name's choices list it beside the policies."""
    ok = run_cli("validate", RECIPE, f"+{KEY}.admission=none")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = run_cli("validate", RECIPE, f"+{KEY}.admission=nnone")
    out = bad.stdout + bad.stderr
    assert bad.returncode == 2, out
    line = next(line for line in out.splitlines() if f"{KEY}.admission: unknown" in line)
    assert "choices: length_aware, none, version_window" in line or "did you mean 'none'" in line, out


def test_the_controller_holds_new_groups_while_the_newest_version_is_superseded() -> None:
    """The Python controller (the simulator's scheduler) asks the same policies: with
    ``version_window`` no new group starts between taking a batch and publishing the next version."""
    from longcat_plugins.schedulers.core import DoraController, PromptRef

    config = DoraConfig(staleness=1, batch_size=1, group_size=1, admission="version_window", shuffle_prompts=False)
    ctrl = DoraController(config, [PromptRef(f"p{i}") for i in range(8)])
    first = ctrl.next_request("i0", 0.0)
    assert first is not None and first.version == 0
    ctrl.on_sample_finished(first.to_sample(0.5, finished_at=1.0), 1.0)
    assert ctrl.ready_batch(0, now=1.0) is not None  # the trainer updates version 0
    assert ctrl.next_request("i0", 1.5) is None  # version 0 has no later batch left: held
    ctrl.publish_version(1, now=2.0)
    started = ctrl.next_request("i0", 2.0)
    assert started is not None and started.version == 1  # the long request starts on the newest
    assert ctrl.stats.counters["admission_refused"] >= 1


def test_the_controller_length_aware_starts_a_known_short_prompt_while_training() -> None:
    from longcat_plugins.schedulers.core import DoraController, PromptRef

    config = DoraConfig(staleness=1, batch_size=2, group_size=1, admission="length_aware", shuffle_prompts=False)
    ctrl = DoraController(config, [PromptRef("short"), PromptRef("long")])
    ctrl.publish_version(1, now=0.0)
    ctrl.publish_version(2, now=10.0)  # one step of 10 s
    ctrl.observe_length("short", 20, 1.0)  # 20 tokens/s -> 200 tokens per step
    ctrl.observe_length("long", 600, 30.0)
    assert ctrl.rate.tokens_per_step() == 200.0
    a, b = ctrl.next_request("i0", 10.0), ctrl.next_request("i0", 10.0)
    for request in (a, b):
        ctrl.on_sample_finished(request.to_sample(0.5, finished_at=11.0), 11.0)
    assert ctrl.ready_batch(2, now=11.0) is not None  # training version 2
    # while version 2 trains only the short prompt starts (20 tokens fit in the step running, 600 do not)
    while_training = [r for r in (ctrl.next_request("i0", 11.5) for _ in range(4)) if r is not None]
    assert while_training and {r.uid for r in while_training} == {"short"}
    assert ctrl.stats.counters["admission_refused"] >= 1
    ctrl.publish_version(3, now=20.0)
    later = ctrl.next_request("i0", 20.0)  # the held long prompt is drawn first, on the newest version
    assert later is not None and later.uid == "long" and later.version == 3


def test_a_controller_state_saved_before_admission_existed_still_loads() -> None:
    from longcat_plugins.schedulers.core import DoraController, PromptRef

    prompts = [PromptRef(f"p{i}") for i in range(4)]
    state = DoraController(DoraConfig(batch_size=1, group_size=1), prompts).state_dict()
    for key in ("admission", "admission_window"):
        del state["config"][key]
    DoraController(DoraConfig(batch_size=1, group_size=1), prompts).load_state_dict(state)
    with pytest.raises(ConfigError, match=r"fields differ: \['admission'\]"):
        DoraController(DoraConfig(batch_size=1, group_size=1, admission="version_window"), prompts).load_state_dict(
            state
        )
