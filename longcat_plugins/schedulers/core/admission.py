"""Admission control on versions: whether a new request may start now (against length censoring).

Under a staleness bound a request that starts on version ``v`` is useful only if it finishes
before the last batch that may still train ``v``; a request still running when ``v`` leaves the
window is stopped and its prompt regenerated (``dora/censored_share``). Long responses are the
ones that outlive their window, so without admission control a DORA trainer trains a shorter
mix than a synchronous one (length censoring). An admission policy decides, for every new
request (never a migrated continuation), whether it starts now or waits for the next version:

- ``none``: always start (the behaviour before admission control); the setting's own value, no
  policy is asked (component names are unique per family and the balancer ``none`` has it).
- ``version_window``: the report's rule (2601 report §3.2, "we limit new requests to the older
  model version"): start only on a version with at least ``window`` later batches left in its
  window, so a request started late in a step waits and starts on the newest version.
- ``length_aware``: the prompt's length history (an EMA of its previous responses) against the
  tokens one request decodes per training step: a prompt known to finish within the window the
  version has left starts at once, a long one waits for a version with enough window left; a
  prompt with no history is held as by ``version_window``.

The window is counted in batches, in verl's numbering (the trainer trains version ``s - 1`` at
step ``s``; a sample of ``v`` is fresh at step ``s`` while ``s - 1 - v <= staleness``):
:func:`batches_left` is the number of batches *after the one now being filled* that may still
train a sample of ``v``. A request on the newest version has ``staleness`` of them while the
trainer waits for its batch, ``staleness - 1`` once it has taken it and is updating. ``window``
therefore lies in ``[1, staleness]`` (larger would hold every request for ever).

A policy is a function ``(AdmissionContext) -> bool``. A plugin ships one as a
:class:`~longcat_plugins.components.DoraAdmission` from its ``register_schedulers`` hook, selected
by ``longcat.settings.scheduler.dora.admission``; every enabled one enters :data:`ADMISSIONS` on its
first lookup with :func:`admission_policy` (:mod:`.registry`). :func:`register_admission`
registers one directly, for Python use of the core without the plugin host.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from longcat_plugins.schedulers.core.registry import Registry


@dataclass(frozen=True)
class AdmissionContext:
    """What an admission policy sees for one new request."""

    #: the weights version the request would run on
    version: int
    #: batches after the one now being filled that may still train a sample of ``version``
    batches_left: int
    staleness: int
    #: ``admission_window``: batches a request should have left (``version_window``'s threshold)
    window: int
    #: the trainer has taken its batch and is updating (a new version is imminent)
    training: bool
    #: the prompt's expected response length in tokens (its history), None if never seen
    expected_tokens: float | None = None
    #: tokens one request decodes per training step (observed), None until measured
    tokens_per_step: float | None = None


AdmissionPolicy = Callable[[AdmissionContext], bool]
_REGISTRY: Registry[AdmissionPolicy] = Registry("dora_admission", "admission policy")
#: filled from the host's ``DoraAdmission`` components on lookup (and by :func:`register_admission`);
#: read it through :func:`admission_policy`
ADMISSIONS: dict[str, AdmissionPolicy] = _REGISTRY.entries
#: the registering decorator
register_admission = _REGISTRY.register


#: the ``admission`` value that asks no policy (every request starts at once)
NO_ADMISSION = "none"


def admission_names() -> list[str]:
    """Every valid ``admission`` value: ``none`` and each registered policy, built-in and third-party."""
    return [NO_ADMISSION, *_REGISTRY.names()]


def admission_policy(name: str) -> AdmissionPolicy:
    """The admission policy registered as ``name`` (``none``: :func:`admit_none`); an unknown name
    is an error listing the choices."""
    if name == NO_ADMISSION:
        return admit_none
    return _REGISTRY.get(name)


def batches_left(version: int, staleness: int, next_batch_step: int) -> int:
    """Batches after step ``next_batch_step`` (the batch now being filled, verl's numbering) that
    may still train a sample of ``version``: the last is step ``version + staleness + 1``."""
    return version + staleness + 1 - next_batch_step


def admit_none(ctx: AdmissionContext) -> bool:
    """Always start (no admission control)."""
    return True


def version_window(ctx: AdmissionContext) -> bool:
    """Start only on a version with at least ``window`` later batches left in its window."""
    return ctx.batches_left >= ctx.window


def length_aware(ctx: AdmissionContext) -> bool:
    """Start a prompt only on a version with enough window left to finish it (its length history).

    It starts at once if its history says it finishes in the window left, else waits for a
    version with more window; a prompt with no history (or no rate yet) waits as ``version_window``."""
    if ctx.expected_tokens is None or not ctx.tokens_per_step:
        return version_window(ctx)
    if ctx.batches_left >= ctx.staleness:  # the most window a new request can ever get: never starve
        return True
    # the step now running counts as one: a request that starts now has (at most) its remainder
    return ctx.expected_tokens <= (ctx.batches_left + 1) * ctx.tokens_per_step


class LengthHistory:
    """Per-prompt expected response length: an EMA of its finished responses; a response stopped
    early (censored) says only that the answer is at least that long, so it can only raise it."""

    def __init__(self, momentum: float = 0.5, capacity: int = 100_000) -> None:
        if not 0.0 < momentum <= 1.0:
            raise ValueError(f"length history momentum must be in (0, 1], got {momentum!r}")
        self.momentum = momentum
        self.capacity = capacity
        self.expected: dict[str, float] = {}

    def get(self, prompt: str | None) -> float | None:
        return None if prompt is None else self.expected.get(prompt)

    def observe(self, prompt: str, tokens: int, complete: bool = True) -> float:
        """Record a response of ``tokens`` (``complete=False``: stopped early, a lower bound)."""
        old = self.expected.get(prompt)
        if old is None:
            new = float(tokens)
        elif complete:
            new = (1.0 - self.momentum) * old + self.momentum * float(tokens)
        else:
            new = max(old, float(tokens))
        self.expected.pop(prompt, None)
        self.expected[prompt] = new  # newest last: the oldest is forgotten first
        while len(self.expected) > self.capacity:
            del self.expected[next(iter(self.expected))]
        return new


class DecodeRate:
    """Tokens one request decodes per training step, observed: the median per-request decode rate
    (tokens over the seconds the request ran) times the median time between published versions."""

    def __init__(self, rates: int = 64, steps: int = 8) -> None:
        self._rates: deque[float] = deque(maxlen=rates)
        self._step_s: deque[float] = deque(maxlen=steps)
        self._last: float | None = None

    def observe(self, tokens: int, seconds: float) -> None:
        """A request decoded ``tokens`` in ``seconds`` (ignored unless both are positive)."""
        if tokens > 0 and seconds > 0:
            self._rates.append(tokens / seconds)

    def step(self, now: float) -> None:
        """A version was published at ``now`` (the step time is the gap since the last one)."""
        if self._last is not None and now > self._last:
            self._step_s.append(now - self._last)
        self._last = now

    def tokens_per_step(self) -> float | None:
        """None until a rate and a step time were both observed."""
        if not self._rates or not self._step_s:
            return None
        return statistics.median(self._rates) * statistics.median(self._step_s)
