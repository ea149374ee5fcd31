"""Rewards that raise are counted and loud, in every recipe (issue 32).

Stock verl 0.9.1 lets a reward that raises vanish: in the v1 trainer the agent-loop session
fails, its whole group is marked ``failure`` and dropped from the batch; the run keeps going
and exits 0 with nothing in the metrics. Here:

* **In the reward-loop worker** (every manager, stock or ours, every
  ``reward.custom_reward_function``): ``RewardLoopWorker.compute_score`` is wrapped so an
  exception becomes an invalid sample (score NaN, ``longcat_reward_valid = 0``,
  ``longcat_reward_failed = 1``, the traceback's tail in ``longcat_reward_error``) and the first
  failure of each reward in each worker is logged at WARNING with its traceback. Every sample
  leaves the worker with the same ``longcat_reward_*`` keys (verl stacks extra info by the first
  sample's keys). Our own managers catch a failing reward themselves and report it the same way.
* **In the trainer, each step, before the update**: the samples of the step are counted per
  reward; ``longcat/reward/failed/<name>`` (samples whose reward raised) joins verl's metrics,
  the first error of each reward is logged once, and when more than
  ``longcat.settings.reward.failures.max_failed_share`` of the step's samples failed (default
  0.2) the trainer raises :class:`RewardFailuresError` naming the reward: the run exits non-zero.
  A :class:`~longcat_plugins.rewards.result.RewardSetupError` is never masked: it ends the run
  at once, as before.

The NaN scores themselves are masked out of every estimator's advantages by
:mod:`longcat_plugins.algorithms.masking`.

The seams (applied right after verl imports each module, for the verl releases in
:data:`TESTED_VERL` and only where the wrapped method still has the parameters it was written
for; otherwise verl is left alone and a warning says why):
``verl.experimental.reward_loop.reward_loop.RewardLoopWorker.compute_score`` and
``verl.trainer.ppo.v1.trainer_base.PPOTrainer._compute_advantage`` (v1 trainers: its
``extra_fields`` are read from the TransferQueue). The legacy trainer keeps the extra info in its
batch; :mod:`.masking` counts it there (the step stops the same way; its metrics are not logged).
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from longcat_plugins.rewards.result import ERROR_KEY, FAILED_KEY, NAME_KEY, VALID_KEY, RewardSetupError, failed
from longcat_plugins.verl_version import TESTED_VERL, verl_is_tested

logger = logging.getLogger(__name__)

#: metric key prefix: ``longcat/reward/failed/<reward name>`` = samples of the step whose reward raised
PREFIX = "longcat/reward/failed"
#: ``longcat/reward/invalid_share``: share of the step's samples without a valid score (raised or undecidable)
INVALID_SHARE = "longcat/reward/invalid_share"
#: ``longcat/reward/scored/<name>``: samples of the step each reward scored (the router's routes)
SCORED = "longcat/reward/scored"
SETTINGS_PATH = "longcat.settings.reward.failures"
WORKER_MODULE = "verl.experimental.reward_loop.reward_loop"
TRAINER_MODULE = "verl.trainer.ppo.v1.trainer_base"
#: seam -> applied (for tests and ``doctor``)
APPLIED: dict[str, bool] = {}
#: reward names whose first failure this process has already logged
_warned: set[str] = set()


@dataclass(frozen=True)
class FailureSettings:
    """``longcat.settings.reward.failures``."""

    #: stop the run when more than this share of one training step's samples come from a reward
    #: that raised (0: stop at the first failure; 1: never stop, only count)
    max_failed_share: float = 0.2

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_failed_share <= 1.0:
            raise ValueError(f"max_failed_share must be in [0, 1], got {self.max_failed_share!r}")


class RewardFailuresError(RuntimeError):
    """Too many samples of one training step come from a reward that raised."""


class FailureGuard:
    """Rewards that raise: invalid samples, longcat/reward/failed/<name>, the run stops above a share."""

    settings = FailureSettings


def settings() -> FailureSettings:
    """This process's settings; where ``reward:failures`` is disabled, failures are still counted
    and masked but never stop a run."""
    from longcat_plugins.host import UnknownComponentError, get_host

    try:
        found = get_host().settings_for("reward", "failures")
    except UnknownComponentError:
        return FailureSettings(max_failed_share=1.0)
    return found if isinstance(found, FailureSettings) else FailureSettings()


def warn_first(name: str, error: str) -> None:
    """Log the first failure of reward ``name`` in this process, with its traceback."""
    if name in _warned:
        return
    _warned.add(name)
    logger.warning(
        "longcat-plugins: reward %r raised; its samples are invalid (NaN, masked out of the loss) and counted "
        "in %s/%s. First failure:\n%s",
        name,
        PREFIX,
        name,
        error,
    )


def reward_name(config: Any) -> str:
    """The reward a verl reward-loop worker runs: the ``reward.custom_reward_function`` name, the
    reward model, or the manager (``naive`` scores with verl's ``default_compute_score``)."""
    from omegaconf import OmegaConf

    custom = OmegaConf.select(config, "reward.custom_reward_function", default=None) or {}
    if custom.get("path"):
        return str(custom.get("name") or "compute_score")
    if OmegaConf.select(config, "reward.reward_model.enable", default=False):
        return "reward_model"
    return str(OmegaConf.select(config, "reward.reward_manager.name", default=None) or "naive")


def normalised(output: Mapping[str, Any], name: str) -> dict[str, Any]:
    """A worker's result with the ``longcat_reward_*`` keys every sample carries (a manager's own
    values win): a finite score is valid, a non-finite one invalid, neither failed."""
    out = dict(output)
    info = dict(out.get("reward_extra_info") or {})
    try:
        finite = math.isfinite(float(out.get("reward_score")))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        finite = False
    info.setdefault(VALID_KEY, 1.0 if finite else 0.0)
    info.setdefault(ERROR_KEY, "" if finite else f"{name}: non-finite score")
    info.setdefault(NAME_KEY, name)
    info.setdefault(FAILED_KEY, 0.0)
    out["reward_extra_info"] = info
    return out


class FailedInfo(dict):  # type: ignore[type-arg]
    """A failed sample's extra info: ``None`` for any key it lacks. verl stacks extra info by the
    first sample's keys (``info[key]`` for every sample), and a failed sample cannot know the keys
    the reward returns when it works (a user's dict reward: ``pred``, ...)."""

    def __missing__(self, key: str) -> None:
        return None


def failed_output(name: str, exc: BaseException) -> dict[str, Any]:
    """What the worker returns for a sample whose reward raised."""
    info = failed(name, exc)
    info.pop("score")
    info[NAME_KEY] = name
    warn_first(name, info[ERROR_KEY])
    return {"reward_score": math.nan, "reward_extra_info": FailedInfo(info)}


# -- counting, per training step ------------------------------------------------------------------


@dataclass
class StepFailures:
    """What one training step's samples say about their rewards."""

    samples: int
    invalid: int
    #: reward name -> samples whose reward raised (every name seen, 0 included)
    failed: dict[str, int]
    #: reward name -> the first error of the step
    first_error: dict[str, str]
    #: reward name -> samples it scored (the router's routes, one name without a router)
    scored: dict[str, int] = field(default_factory=dict)

    @property
    def failed_total(self) -> int:
        return sum(self.failed.values())

    def metrics(self) -> dict[str, float]:
        out = {f"{PREFIX}/{name}": float(n) for name, n in sorted(self.failed.items())}
        out.update({f"{SCORED}/{name}": float(n) for name, n in sorted(self.scored.items())})
        if self.samples:
            out[INVALID_SHARE] = self.invalid / self.samples
        return out


def count(infos: Iterable[Mapping[str, Any] | None]) -> StepFailures:
    """Count the step's samples from their ``reward_extra_info`` dicts (``None``: no info)."""
    samples = invalid = 0
    failures: dict[str, int] = {}
    first: dict[str, str] = {}
    scored: dict[str, int] = {}
    for info in infos:
        samples += 1
        if not isinstance(info, Mapping) or NAME_KEY not in info:
            continue
        name = str(info[NAME_KEY])
        failures.setdefault(name, 0)
        scored[name] = scored.get(name, 0) + 1
        if not _flag(info.get(VALID_KEY, 1.0)):
            invalid += 1
        if _flag(info.get(FAILED_KEY, 0.0)):
            failures[name] += 1
            first.setdefault(name, str(info.get(ERROR_KEY, "")))
    return StepFailures(samples, invalid, failures, first, scored)


def _flag(value: Any) -> bool:
    try:
        return bool(float(value))
    except (TypeError, ValueError):
        return bool(value)


def enforce(step: StepFailures, where: str, limit: FailureSettings | None = None) -> None:
    """Log each failing reward's first error once; raise :class:`RewardFailuresError` above the share."""
    for name, error in step.first_error.items():
        warn_first(name, error)
    limit = limit or settings()
    if not step.samples or step.failed_total / step.samples <= limit.max_failed_share:
        return
    worst = sorted(((n, k) for n, k in step.failed.items() if k), key=lambda x: -x[1])
    named = ", ".join(f"reward {n!r} raised on {k} of {step.samples} samples" for n, k in worst)
    first = step.first_error[worst[0][0]].strip()
    raise RewardFailuresError(
        f"{where}: {named} ({step.failed_total / step.samples:.0%} of the step > "
        f"{SETTINGS_PATH}.max_failed_share = {limit.max_failed_share:g}); stopping rather than training on "
        f"what is left. Fix the reward (first error below), or raise {SETTINGS_PATH}.max_failed_share.\n{first}"
    )


# -- the seams --------------------------------------------------------------------------------------


def _params_ok(fn: Any, expected: tuple[str, ...], what: str) -> bool:
    if not verl_is_tested():
        logger.warning("longcat-plugins: %s left as verl has it: verl is outside %s", what, TESTED_VERL)
        return False
    params = tuple(inspect.signature(fn).parameters)
    if params[: len(expected)] != expected:
        logger.warning("longcat-plugins: %s left as verl has it: its parameters are %s, not %s", what, params, expected)
        return False
    return True


def wrap_worker(module: ModuleType) -> None:
    """Post-import hook: a reward that raises in ``RewardLoopWorker`` is an invalid sample (idempotent)."""
    cls = getattr(module, "RewardLoopWorker", None)
    original = getattr(cls, "compute_score", None)
    if original is None or getattr(original, "__longcat_failures__", False):
        return
    if not _params_ok(original, ("self", "data"), "RewardLoopWorker.compute_score (failing rewards)"):
        return

    @functools.wraps(original)
    async def compute_score(self: Any, data: Any) -> dict[str, Any]:
        name = reward_name(self.config)
        try:
            output = await original(self, data)
        except RewardSetupError:
            raise  # the reward cannot work at all: never train on masked samples
        except Exception as exc:  # noqa: BLE001 - a failing reward is an invalid sample; Ctrl-C still stops
            return failed_output(name, exc)
        return normalised(output, name)

    compute_score.__longcat_failures__ = True  # type: ignore[attr-defined]
    cls.compute_score = compute_score  # type: ignore[union-attr]
    APPLIED[module.__name__] = True


def wrap_trainer(module: ModuleType) -> None:
    """Post-import hook: count a v1 training step's failed rewards before its update (idempotent)."""
    cls = getattr(module, "PPOTrainer", None)
    original = getattr(cls, "_compute_advantage", None)
    tq = getattr(module, "tq", None)
    if original is None or tq is None or getattr(original, "__longcat_failures__", False):
        return
    if not _params_ok(original, ("self", "batch", "metrics"), "PPOTrainer._compute_advantage (failing rewards)"):
        return

    @functools.wraps(original)
    def _compute_advantage(self: Any, batch: Any, metrics: dict[str, Any], *a: Any, **kw: Any) -> Any:
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=["extra_fields"])
        fields = data.pop("extra_fields").tolist()
        padding = [bool(tag.get("is_padding", False)) for tag in batch.tags] if batch.tags else [False] * len(fields)
        step = count(
            (f.get("reward_extra_info") if isinstance(f, Mapping) else None)
            for f, pad in zip(fields, padding, strict=False)
            if not pad
        )
        metrics.update(step.metrics())
        enforce(step, f"training step {getattr(self, 'global_steps', '?')}")
        return original(self, batch, metrics, *a, **kw)

    _compute_advantage.__longcat_failures__ = True  # type: ignore[attr-defined]
    cls._compute_advantage = _compute_advantage  # type: ignore[union-attr]
    APPLIED[module.__name__] = True


def install() -> None:
    """Arrange the wrapping for whenever each verl module is imported."""
    from longcat_plugins.import_hooks import when_imported

    when_imported(WORKER_MODULE, wrap_worker)
    when_imported(TRAINER_MODULE, wrap_trainer)
