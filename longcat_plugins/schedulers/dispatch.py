"""Which prompt verl generates next, decided by the scheduler core (S4, D5 in verl's trainer).

verl's v1 trainer submits whatever its dataloader yields next, a whole batch at the start of
every step. In ``trainer_mode=dora`` :class:`DispatchPlanner` decides instead, with the core's
functions: the dataloader stays the source of prompt rows (read through a bounded lookahead
pool, so the order of the source is kept within a domain), and

- **which domain** starts next is :meth:`DomainQuotas.choose_domain` over the groups each domain
  has outstanding (submitted and not yet taken for training), against the core's per-domain
  rollout quotas (``domain_ratios`` x ``domain_oversampling`` x outstanding batches);
- **how many groups** a prompt gets is the core's pass-rate coefficient
  (:func:`oversampling_coefficient`, D5) of the prompt's running pass rate
  (:class:`~longcat_plugins.data.stats.TaskStats`, fed the rewards of trained groups), capped
  at what its domain's quota has left (:func:`copies_within_quota`: every copy counts against
  the quota, so a quota is never passed by a prompt's extra copies; the first copy always
  starts); each copy is its own verl prompt group (own uid), so group-normalised advantages
  treat them apart;
- **when**: :meth:`plan` tops outstanding work up to the quotas, so it is called whenever
  capacity may have freed (a batch taken, groups evicted) and issues exactly what freed.

The planner is pure (no verl, no Ray): the trainer adapts it to verl's seams, and its state
(pool rows, outstanding groups, counters, pass rates) is saved beside verl's ``data.pt`` so a
resumed run neither loses nor repeats a prompt row.
"""

from __future__ import annotations

import math
import uuid
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from longcat_plugins.data.stats import TaskStats
from longcat_plugins.schedulers.core.config import DoraConfig
from longcat_plugins.schedulers.core.oversampling import oversampling_coefficient
from longcat_plugins.schedulers.core.quotas import DomainQuotas

T = TypeVar("T")

#: the one bucket when no ``domain_ratios`` are set (every row is one domain, source order)
ANY_DOMAIN = "*"
PREFIX = "dora/dispatch"


@dataclass(frozen=True)
class Issue(Generic[T]):
    """One prompt group to submit: a fresh uid for ``payload`` (copy ``copy`` of its task)."""

    uid: str
    domain: str
    task: str
    payload: T
    copy: int


class DispatchPlanner(Generic[T]):
    """Rollout quotas, pass-rate oversampling and the source pool of one training run.

    ``fetch()`` returns the next ``(domain, task id, payload)`` of the prompt source (it never
    runs dry: verl's dataloader starts a new epoch). ``window`` is the number of groups verl
    keeps outstanding without quotas (its prefetch window, ``(num_warmup_batches + 1) x
    batch``): below it the planner always issues, so a domain the source cannot supply never
    stalls training."""

    def __init__(
        self,
        config: DoraConfig,
        fetch: Callable[[], tuple[str, str, T]],
        window: int,
        lookahead: int,
        new_uid: Callable[[], str] = lambda: str(uuid.uuid4()),
    ) -> None:
        self.config = config
        self.domains = sorted(config.domain_ratios) or [ANY_DOMAIN]
        self.quotas = DomainQuotas(config, self.domains)
        self.fetch = fetch
        self.window = int(window)
        self.lookahead = max(1, int(lookahead))
        self.new_uid = new_uid
        self.stats = TaskStats(prior=config.default_pass_rate, momentum=config.pass_rate_momentum)
        self.pool: list[tuple[str, str, T]] = []
        #: uid -> (domain, task) of every group issued and not yet gone from verl's queue
        self.groups: dict[str, tuple[str, str]] = {}
        #: issued groups taken for training (they stay in verl's queue until the step ends)
        self.taken: set[str] = set()
        self.issued: Counter[str] = Counter()
        self.issued_since: Counter[str] = Counter()
        self.counters: Counter[str] = Counter()

    # -- decisions -------------------------------------------------------------------------------

    def domain_of(self, domain: str) -> str:
        """The quota bucket of a row's domain; a domain the quotas do not name is an error."""
        if self.domains == [ANY_DOMAIN]:
            return ANY_DOMAIN
        if domain not in self.quotas.quota:
            raise ValueError(
                f"dispatch: prompt domain {domain!r} is not named in domain_ratios (it names {self.domains})"
            )
        return domain

    def outstanding(self) -> Counter[str]:
        """Groups per domain issued and not yet taken for training."""
        return Counter(domain for uid, (domain, _) in self.groups.items() if uid not in self.taken)

    def plan(self, live: Iterable[str]) -> list[Issue[T]]:
        """Top outstanding work up to the quotas. ``live``: the prompt uids still in verl's queue
        (pending, running, finished or failed); issued groups not among them are gone (trained
        or evicted) and free their quota."""
        self._forget(set(live))
        out: list[Issue[T]] = []
        while True:
            outstanding = self.outstanding()
            total = sum(outstanding.values())
            domain = self.quotas.choose_domain(outstanding, self.domains)
            if domain is None and total >= self.window:
                return out
            row = self._take_row(domain, outstanding, total)
            if row is None:
                return out
            out.extend(self._issue(*row, room=self.quotas.quota[row[0]] - outstanding[row[0]]))

    def _take_row(self, domain: str | None, outstanding: Counter[str], total: int) -> tuple[str, str, T] | None:
        """The oldest pool row of ``domain`` (reading ahead up to ``lookahead`` rows); else of
        the domain the quotas choose among those the pool holds; below the window, the oldest."""
        if domain is not None:
            index = self._find(domain)
            if index is not None:
                return self.pool.pop(index)
        held = {d for d, _, _ in self.pool}
        other = self.quotas.choose_domain(outstanding, sorted(held))
        if other is not None:
            index = self._find(other)
            assert index is not None
            return self.pool.pop(index)
        if total < self.window:
            self.counters["window_fallbacks"] += 1
            if not self.pool:
                raw_domain, task, payload = self.fetch()
                return self.domain_of(str(raw_domain)), str(task), payload
            return self.pool.pop(0)
        return None

    def _find(self, domain: str) -> int | None:
        for i, (d, _, _) in enumerate(self.pool):
            if d == domain:
                return i
        while len(self.pool) < self.lookahead:
            raw_domain, task, payload = self.fetch()
            self.pool.append((self.domain_of(str(raw_domain)), str(task), payload))
            if self.pool[-1][0] == domain:
                return len(self.pool) - 1
        return None

    def _issue(self, domain: str, task: str, payload: T, room: int) -> list[Issue[T]]:
        cfg = self.config
        wanted = oversampling_coefficient(self.stats.pass_rate(task), cfg.oversampling_min, cfg.oversampling_max)
        k = copies_within_quota(wanted, room)
        self.counters["capped_groups"] += wanted - k
        issues = [Issue(self.new_uid(), domain, task, payload, j) for j in range(k)]
        for issue in issues:
            self.groups[issue.uid] = (domain, task)
        self.issued[domain] += k
        self.issued_since[domain] += k
        self.counters["prompts"] += 1
        if k > 1:
            self.counters["oversampled_prompts"] += 1
            self.counters["extra_groups"] += k - 1
        return issues

    def _forget(self, live: set[str]) -> None:
        for uid in [uid for uid in self.groups if uid not in live]:
            del self.groups[uid]
        self.taken &= live

    # -- the step planner's shape of an issue ----------------------------------------------------

    def withdraw(self, issue: Issue[T], back_to_pool: bool) -> None:
        """An issued group the trainer submits under other uids (the step planner reshaped its
        prompt: :meth:`register` them) or not at all (``back_to_pool``: the row returns to the
        front of the pool, to be offered again)."""
        if self.groups.pop(issue.uid, None) is None:
            return
        self.issued[issue.domain] -= 1
        self.issued_since[issue.domain] -= 1
        if back_to_pool and issue.copy == 0:
            self.pool.insert(0, (issue.domain, issue.task, issue.payload))
            self.counters["prompts"] -= 1
            self.counters["withdrawn_prompts"] += 1

    def register(self, uid: str, domain: str, task: str, prompt: bool = False) -> None:
        """A group the trainer submitted for an issued prompt (``prompt``: the first group of a
        borrowed row): outstanding until verl drops it."""
        self.groups[uid] = (domain, task)
        self.issued[domain] += 1
        self.issued_since[domain] += 1
        if prompt:
            self.counters["prompts"] += 1

    def borrow(self, n: int) -> list[tuple[str, str, T]]:
        """``n`` more source rows (the pool's first, then fresh ones) for the step planner to
        choose among beside the issued prompts; what it does not choose is :meth:`give_back`."""
        rows = self.pool[:n]
        del self.pool[:n]
        while len(rows) < n:
            raw_domain, task, payload = self.fetch()
            rows.append((self.domain_of(str(raw_domain)), str(task), payload))
        return rows

    def give_back(self, rows: list[tuple[str, str, T]]) -> None:
        """Borrowed rows not started: back to the front of the pool, in their order."""
        self.pool[:0] = rows
        self.counters["deferred_prompts"] += len(rows)

    # -- feedback --------------------------------------------------------------------------------

    def take(self, uids: Iterable[str]) -> None:
        """Groups verl took for a training batch: no longer outstanding (capacity freed now,
        before verl clears them at the step's end)."""
        self.taken |= {uid for uid in uids if uid in self.groups}

    def observe(self, uid: str, rewards: list[float | None]) -> float | None:
        """A finished group's rewards -> its task's pass rate (D5 reads it for the next copy)."""
        group = self.groups.get(uid)
        if group is None:
            return None
        return self.stats.observe(group[1], rewards, self.config.correct_threshold)

    # -- observability and state -----------------------------------------------------------------

    def metrics(self) -> dict[str, float]:
        """``dora/dispatch/*``: issued groups per domain (since the last call and in all) against
        the quota and target share, outstanding groups, oversampling counts."""
        outstanding = self.outstanding()
        total = max(1, sum(self.issued.values()))
        shares = self.quotas.shares
        out: dict[str, float] = {}
        for d in self.domains:
            out[f"{PREFIX}/{d}/issued"] = float(self.issued_since[d])
            out[f"{PREFIX}/{d}/issued_total"] = float(self.issued[d])
            out[f"{PREFIX}/{d}/quota"] = float(self.quotas.quota[d])
            out[f"{PREFIX}/{d}/outstanding"] = float(outstanding[d])
            out[f"{PREFIX}/{d}/issued_share"] = self.issued[d] / total
            out[f"{PREFIX}/{d}/target_share"] = float(shares[d])
        out[f"{PREFIX}/max_share_error"] = max(abs(self.issued[d] / total - shares[d]) for d in self.domains)
        out[f"{PREFIX}/prompts_total"] = float(self.counters["prompts"])
        out[f"{PREFIX}/oversampled_prompts"] = float(self.counters["oversampled_prompts"])
        out[f"{PREFIX}/extra_groups"] = float(self.counters["extra_groups"])
        out[f"{PREFIX}/capped_groups"] = float(self.counters["capped_groups"])
        out[f"{PREFIX}/window_fallbacks"] = float(self.counters["window_fallbacks"])
        out[f"{PREFIX}/withdrawn_prompts"] = float(self.counters["withdrawn_prompts"])
        out[f"{PREFIX}/deferred_prompts"] = float(self.counters["deferred_prompts"])
        out[f"{PREFIX}/pool_rows"] = float(len(self.pool))
        self.issued_since = Counter()
        return out

    def state_dict(self) -> dict[str, Any]:
        return {
            "pool": list(self.pool),
            "groups": dict(self.groups),
            "taken": sorted(self.taken),
            "issued": dict(self.issued),
            "counters": dict(self.counters),
            "stats": self.stats.state_dict(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.pool = [(str(d), str(t), p) for d, t, p in state["pool"]]
        self.groups = {str(u): (str(d), str(t)) for u, (d, t) in state["groups"].items()}
        self.taken = set(state["taken"])
        self.issued = Counter(state["issued"])
        self.counters = Counter(state["counters"])
        self.stats.load_state_dict(state["stats"])


def copies_within_quota(wanted: int, room: int) -> int:
    """Groups a prompt starts: its oversampling coefficient ``wanted``, capped at ``room`` (its
    domain's quota less the groups the domain has outstanding), and at least one (the prompt
    was chosen: under its quota, or issued over it by the window fallback, which is counted)."""
    return max(1, min(int(wanted), int(room)))


def dispatch_window(batch_size: int, num_warmup_batches: float) -> int:
    """Groups verl keeps outstanding: the batch being filled plus its warm-up batches."""
    return int(math.floor((1 + max(0.0, float(num_warmup_batches))) * batch_size))


__all__ = ["ANY_DOMAIN", "DispatchPlanner", "Issue", "copies_within_quota", "dispatch_window"]
