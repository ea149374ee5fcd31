"""The dispatch planner (what verl generates under ``trainer_mode=dora``), over many seeds:
per-domain rollout quotas hold and the issued mix follows the targets, a checkpoint taken at
any point resumes without losing or repeating a prompt row (a real ``StatefulDataLoader`` as
the source), and pass-rate oversampling starts the number of groups the formula gives for the
observed pass rates (a float64 reference written from the report's rule)."""

from __future__ import annotations

import io
import itertools
import random
from collections import Counter
from pathlib import Path

import pytest
import torch
from torch.utils.data import Dataset
from torchdata.stateful_dataloader import StatefulDataLoader

from longcat_plugins.schedulers.dispatch import ANY_DOMAIN, DispatchPlanner, dispatch_window
from longcat_plugins.schedulers.settings import DoraSettings

SEEDS = range(20)
BATCH = 16


class Rows(Dataset):
    """A prompt source: row i has a domain drawn with the given weights and task id i."""

    def __init__(self, n: int, weights: dict[str, float], seed: int) -> None:
        rng = random.Random(seed)
        names = sorted(weights)
        self.domains = rng.choices(names, [weights[d] for d in names], k=n)

    def __len__(self) -> int:
        return len(self.domains)

    def __getitem__(self, i: int) -> tuple[str, str, int]:
        return self.domains[i], f"task{i}", i


def loader(rows: Rows) -> StatefulDataLoader:
    return StatefulDataLoader(rows, batch_size=1, collate_fn=lambda items: items[0])


class Uids:
    """Group ids as verl mints them (fresh per group), countable so a resumed run can match."""

    def __init__(self, n: int = 0) -> None:
        self.n = n

    def __call__(self) -> str:
        self.n += 1
        return f"g{self.n}"


def planner_over(
    dl: StatefulDataLoader, settings: DoraSettings, window: int, uids: Uids | None = None, lookahead: int = 0
) -> DispatchPlanner:
    it = iter(dl)
    return DispatchPlanner(
        settings.dispatch_config(BATCH, window),
        lambda: next(it),
        window,
        lookahead=lookahead or window,
        new_uid=uids or Uids(),
    )


def consume(planner: DispatchPlanner, live: set[str], rng: random.Random, n: int) -> list[str]:
    """verl's side: ``n`` finished groups taken for training, some evicted, the step's end."""
    waiting = sorted(uid for uid in live if uid not in planner.taken)
    taken = rng.sample(waiting, min(n, len(waiting)))
    planner.take(taken)
    evicted = [uid for uid in waiting if uid not in taken and rng.random() < 0.05]
    live.difference_update(taken + evicted)
    return taken


@pytest.mark.parametrize("seed", SEEDS)
def test_quotas_hold_and_the_issued_mix_follows_the_targets(seed: int) -> None:
    rng = random.Random(seed)
    ratios = {"math": rng.choice([1, 2, 3]), "code": 1, "tool": rng.choice([1, 4])}
    over = {"code": rng.choice([1.0, 1.5, 2.0])}
    settings = DoraSettings(domain_ratios=ratios, domain_oversampling=over)
    window = dispatch_window(BATCH, rng.choice([0, 1, 2]))
    # the source holds the domains in the target mix, shuffled: runs of one domain make the
    # planner read ahead for the others, and the issued mix still follows the quotas
    weights = {d: ratios[d] * over.get(d, 1.0) for d in ratios}
    planner = planner_over(loader(Rows(4000, weights, seed)), settings, window, lookahead=4 * window)
    quota = planner.quotas.quota
    assert sum(quota.values()) >= window
    live: set[str] = set()
    issued: Counter[str] = Counter()
    for _ in range(60):
        issues = planner.plan(live)
        live |= {i.uid for i in issues}
        issued.update(i.domain for i in issues)
        outstanding = planner.outstanding()
        assert all(outstanding[d] <= quota[d] for d in quota), (outstanding, quota)
        assert sum(outstanding.values()) >= window  # never starves verl's window
        consume(planner, live, rng, BATCH)
    # groups are consumed in proportion to what is outstanding, so issuance follows the quotas
    total = sum(issued.values())
    for d in ratios:
        assert abs(issued[d] / total - weights[d] / sum(weights.values())) <= 0.05, (issued, weights)
    metrics = planner.metrics()
    assert metrics["dora/dispatch/window_fallbacks"] == 0.0
    assert sum(metrics[f"dora/dispatch/{d}/issued_total"] for d in ratios) == total


@pytest.mark.parametrize("seed", SEEDS)
def test_a_source_short_of_a_domain_never_stalls_the_window(seed: int) -> None:
    """Quotas hold except where the pool has no row of an open domain and verl's window is not
    full: then the oldest row is issued over its quota (counted), never a stall."""
    rng = random.Random(seed)
    settings = DoraSettings(domain_ratios={"math": 1, "code": 1, "tool": 1})
    window = dispatch_window(BATCH, 1)
    rare = rng.choice([0.01, 0.05, 0.2])
    planner = planner_over(
        loader(Rows(6000, {"math": 1.0, "code": 1.0, "tool": rare}, seed)), settings, window, lookahead=window
    )
    live: set[str] = set()
    seen = 0
    for _ in range(40):
        before = planner.counters["window_fallbacks"]
        issues = planner.plan(live)
        live |= {i.uid for i in issues}
        seen += len(issues)
        outstanding = planner.outstanding()
        assert sum(outstanding.values()) >= window
        if planner.counters["window_fallbacks"] == before:
            assert all(outstanding[d] <= planner.quotas.quota[d] for d in outstanding), outstanding
        assert len(planner.pool) <= window
        consume(planner, live, rng, BATCH)
    assert seen >= 40 * BATCH


def test_without_ratios_the_source_order_is_kept() -> None:
    planner = planner_over(loader(Rows(200, {"a": 1, "b": 1}, 0)), DoraSettings(), 32)
    issues = planner.plan(set())
    assert [i.payload for i in issues] == list(range(32)) and {i.domain for i in issues} == {ANY_DOMAIN}
    planner.take([i.uid for i in issues[:16]])
    assert [i.payload for i in planner.plan({i.uid for i in issues})] == list(range(32, 48))


def roundtrip(state: dict, path: Path) -> dict:
    """Through a file, as the trainer saves it beside verl's data.pt."""
    torch.save(state, path)
    return torch.load(path, weights_only=False)


@pytest.mark.parametrize("seed", SEEDS)
def test_resume_from_a_checkpoint_neither_loses_nor_repeats_a_prompt(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    settings = DoraSettings(domain_ratios={"math": 1, "code": 2, "tool": 1})
    rows = Rows(3000, {"math": 1, "code": 1, "tool": 2}, seed)
    window = dispatch_window(BATCH, 1)

    def run(planner: DispatchPlanner, live: set[str], steps: int, rng: random.Random) -> list[int]:
        out = []
        for _ in range(steps):
            issues = planner.plan(live)
            live |= {i.uid for i in issues}
            out += [i.payload for i in issues]
            consume(planner, live, rng, BATCH)
        return out

    dl = loader(rows)
    uids = Uids()
    planner = planner_over(dl, settings, window, uids)
    live: set[str] = set()
    before = run(planner, live, rng.randint(1, 12), rng)
    # the checkpoint: verl's dataloader state, the planner's state, the queue's uids, the rng
    data_state = roundtrip(dl.state_dict(), tmp_path / "data.pt")
    dispatch_state = roundtrip(planner.state_dict(), tmp_path / "dora_dispatch.pt")
    saved_live, saved_rng, saved_uids = set(live), rng.getstate(), uids.n
    steps_after = rng.randint(1, 12)
    rng.setstate(saved_rng)
    after = run(planner, live, steps_after, rng)

    resumed_dl = loader(rows)
    resumed_dl.load_state_dict(data_state)
    # the resumed process: verl restores its dataloader and the queue (the same uids), ours the planner
    resumed = planner_over(resumed_dl, settings, window, Uids(saved_uids))
    resumed.load_state_dict(dispatch_state)
    resumed_rng = random.Random()
    resumed_rng.setstate(saved_rng)
    resumed_after = run(resumed, set(saved_live), steps_after, resumed_rng)
    assert resumed_after == after  # the resumed run issues exactly what the uninterrupted one did
    issued = before + resumed_after
    assert len(issued) == len(set(issued)), "a prompt row issued twice"
    fetched = sorted(issued + [p for _, _, p in resumed.pool])
    assert fetched == list(range(len(fetched))), "a prompt row lost between the source and rollout"


def ema_reference(rewards: list[list[float]], prior: float, momentum: float) -> float:
    """The running pass rate, float64: p <- (1 - m) p + m * accuracy, accuracy = mean(r >= 1)."""
    p = float(prior)
    for group in rewards:
        accuracy = sum(1.0 for r in group if r >= 1.0) / len(group)
        p = (1.0 - momentum) * p + momentum * accuracy
    return p


def copies_reference(pass_rate: float, k_min: int, k_max: int, quota: int, outstanding: int) -> int:
    """The report's coefficient, float64: k = k_min + round((k_max - k_min) * (1 - p)); then the
    quota rule: at most the quota's room (quota - outstanding), at least the one group."""
    k = k_min + int(round((k_max - k_min) * (1.0 - float(pass_rate))))
    return max(1, min(k, quota - outstanding))


@pytest.mark.parametrize("seed", SEEDS)
def test_oversampling_follows_the_observed_pass_rates(seed: int) -> None:
    """Each prompt starts the number of groups the pass-rate rule gives, capped at what its
    quota has left; its copies count against the quota, which is never passed."""
    rng = random.Random(seed)
    k_min, k_max = rng.choice([(1, 3), (1, 4), (2, 5)])
    momentum, prior = rng.choice([0.3, 0.5, 1.0]), rng.choice([0.2, 0.5, 0.9])
    settings = DoraSettings(
        oversampling_min=k_min, oversampling_max=k_max, default_pass_rate=prior, pass_rate_momentum=momentum
    )
    # a window (= the one domain's quota) from below k_max to a few prompts' worth: some
    # prompts get every copy they want, others what is left
    window = rng.randint(1, 2 * k_max)
    tasks = [f"t{j}" for j in range(5)]
    difficulty = {t: rng.random() for t in tasks}
    source = itertools.cycle(tasks)
    planner = DispatchPlanner(settings.dispatch_config(window, window), lambda: ("x", next(source), 0), window, 1)
    assert planner.quotas.quota[ANY_DOMAIN] == window
    history: dict[str, list[list[float]]] = {t: [] for t in tasks}
    live: set[str] = set()
    oversampled = capped = 0
    for _ in range(40):
        issues = planner.plan(live)
        live |= {i.uid for i in issues}
        assert len(planner.outstanding()) == 1 and planner.outstanding()[ANY_DOMAIN] <= window, "quota passed"
        # the plan's prompts in order: each a run of copies 0..k-1 of one task
        prompts: list[list] = []
        for issue in issues:
            if issue.copy == 0:
                prompts.append([])
            prompts[-1].append(issue)
        outstanding = len(live) - len(issues)
        for copies in prompts:
            task = copies[0].task
            wanted = copies_reference(ema_reference(history[task], prior, momentum), k_min, k_max, 10**9, 0)
            k = copies_reference(ema_reference(history[task], prior, momentum), k_min, k_max, window, outstanding)
            assert len(copies) == k and {i.task for i in copies} == {task}, (len(copies), k, outstanding)
            assert [i.copy for i in copies] == list(range(k)) and len({i.uid for i in copies}) == k
            oversampled += k > 1
            capped += wanted - k
            outstanding += k
        # some groups finish (their rewards move the tasks' pass rates) and leave verl's queue
        done = rng.sample(sorted(live), rng.randint(1, len(live))) if live else []
        for uid in done:
            task = planner.groups[uid][1]
            group = [1.0 if rng.random() < difficulty[task] else 0.0 for _ in range(4)]
            planner.observe(uid, group)
            history[task].append(group)
        live -= set(done)
    metrics = planner.metrics()
    assert metrics["dora/dispatch/oversampled_prompts"] == float(oversampled)
    assert metrics["dora/dispatch/capped_groups"] == float(capped)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_prompts_copies_never_pass_a_domains_quota(seed: int) -> None:
    """Several domains, each with its own quota and oversampling: after every plan no domain
    has more groups outstanding than its quota (the copies count), and every prompt's copies
    are the coefficient capped at its domain's room when it was issued."""
    rng = random.Random(seed)
    ratios = {"math": rng.choice([1, 2]), "code": 1, "tool": rng.choice([1, 3])}
    settings = DoraSettings(
        domain_ratios=ratios, oversampling_min=1, oversampling_max=rng.choice([2, 3, 4]), default_pass_rate=0.0
    )
    window = dispatch_window(BATCH, rng.choice([0, 1]))
    planner = planner_over(loader(Rows(4000, ratios, seed)), settings, window, lookahead=4 * window)
    quota = planner.quotas.quota
    live: set[str] = set()
    for _ in range(30):
        # outstanding as the plan sees it: the issued groups still in verl's queue, not taken
        before = Counter(d for uid, (d, _) in planner.groups.items() if uid in live and uid not in planner.taken)
        fallbacks = planner.counters["window_fallbacks"]
        issues = planner.plan(live)
        live |= {i.uid for i in issues}
        outstanding = planner.outstanding()
        if planner.counters["window_fallbacks"] == fallbacks:
            assert all(outstanding[d] <= quota[d] for d in quota), (outstanding, quota)
        running = Counter(before)
        for issue in issues:
            if issue.copy == 0:
                k = sum(1 for j in issues if j.task == issue.task and j.payload == issue.payload)
                assert k == max(1, min(settings.oversampling_max, quota[issue.domain] - running[issue.domain]))
            running[issue.domain] += 1
        consume(planner, live, rng, BATCH)
    assert planner.counters["capped_groups"] > 0 and planner.counters["extra_groups"] > 0  # both paths ran


def test_a_domain_the_quotas_do_not_name_is_refused() -> None:
    settings = DoraSettings(domain_ratios={"math": 1, "code": 1})
    planner = DispatchPlanner(settings.dispatch_config(BATCH, BATCH), lambda: ("poetry", "t", 0), BATCH, BATCH)
    with pytest.raises(ValueError, match="'poetry' is not named in domain_ratios"):
        planner.plan(set())


def test_state_is_plain_enough_to_save() -> None:
    planner = planner_over(loader(Rows(100, {"a": 1}, 0)), DoraSettings(domain_ratios={"a": 1}), 16)
    planner.plan(set())
    buffer = io.BytesIO()
    torch.save(planner.state_dict(), buffer)
    assert buffer.tell() > 0
