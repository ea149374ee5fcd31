"""pass@k / pass^k / avg@k as validation metrics of every verl recipe (SPEC V1).

verl reports ``best@N``/``maj@N`` by bootstrap only. Both of its trainers (the legacy
``RayPPOTrainer`` in ``verl.trainer.ppo.ray_trainer`` and the v1 ``PPOTrainer`` in
``verl.trainer.ppo.v1.trainer_base``) funnel validation through one method,
``_val_metrics_update(data_sources, sample_uids, reward_extra_infos_dict, sample_turns, ...)``,
which turns the per-sample scores of ``val_kwargs.n`` samples per prompt into the logged dict.

The seam: right after each of those modules is imported (the bridge's post-import hook, so no
fork of verl and no import cost elsewhere), its base class's method is wrapped, for the verl
releases in :data:`TESTED_VERL` and only if the method still takes those parameters; otherwise
verl is left as it is and a warning says why. The wrapper calls verl's method unchanged and adds
``longcat/val/<data_source>/{pass@k,pass^k,avg@k}``; every trainer subclass (``dora``, recipes)
inherits it. It adds what every enabled ``val_metric`` component computes: the built-in
``reward:passk`` (disabling it turns the pass@k metrics off; its settings,
``longcat.settings.reward.passk``, choose k and the correctness threshold) and any a plugin ships.
"""

from __future__ import annotations

import functools
import inspect
import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

from longcat_plugins.evaluation.passk import default_ks, estimate
from longcat_plugins.verl_version import TESTED_VERL, verl_is_tested

logger = logging.getLogger(__name__)

#: the verl releases whose ``_val_metrics_update`` this wraps
#: metric key prefix (verl's own are ``val-core/...`` and ``val-aux/...``)
PREFIX = "longcat/val"
#: verl module -> the class whose ``_val_metrics_update`` is wrapped
SEAMS = {
    "verl.trainer.ppo.ray_trainer": "RayPPOTrainer",
    "verl.trainer.ppo.v1.trainer_base": "PPOTrainer",
}
_PARAMS = ("self", "data_sources", "sample_uids", "reward_extra_infos_dict", "sample_turns")
#: seam -> wrapped (for tests and ``doctor``)
APPLIED: dict[str, bool] = {}


@dataclass(frozen=True)
class PassKSettings:
    """``longcat.settings.reward.passk``."""

    #: the ks to report; empty: powers of two up to ``val_kwargs.n`` (and n itself)
    ks: list[int] = field(default_factory=list)
    #: a sample is correct when its ``acc`` (or, for a data source without ``acc``, its score) is >= this
    threshold: float = 1.0

    def __post_init__(self) -> None:
        for i, k in enumerate(self.ks):
            if k < 1:
                raise ValueError(f"ks[{i}]: k must be >= 1, got {k}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"threshold must be a finite number, got {self.threshold!r}")


def _correct(value: Any, threshold: float) -> bool:
    """Only a clear answer counts: a missing value (a failed session, no score) is wrong."""
    if value is None or isinstance(value, str):
        return False
    try:
        v = float(value)
    except (TypeError, ValueError):
        return False
    return math.isfinite(v) and v >= threshold


def validation_metrics(
    data_sources: Sequence[Any],
    sample_uids: Sequence[Any],
    infos: Mapping[str, Sequence[Any]],
    settings: PassKSettings | None = None,
    expected_counts: Mapping[tuple[str, str], int] | None = None,
) -> dict[str, float]:
    """``longcat/val/<data_source>/{pass@k,pass^k,avg@k}`` from one validation pass.

    ``infos`` is verl's ``reward_extra_infos_dict`` (``reward`` plus the reward's extra keys);
    a data source whose samples carry ``acc`` is judged by it, the others by ``reward``.
    ``expected_counts`` (the v1 trainer's ``expected_acc_counts``) adds the sessions that
    produced nothing as wrong samples, as verl does for ``acc``. A configured k larger than a
    data source's samples per prompt is left out of that source (with a warning).
    """
    settings = settings or PassKSettings()
    sources = [str(s) for s in data_sources]
    uids = [str(u) for u in sample_uids]

    def column(name: str) -> Sequence[Any] | None:  # a key only some batches carried is not a column
        values = infos.get(name)
        return values if values is not None and len(values) == len(sources) else None

    acc, reward = column("acc"), column("reward")
    if reward is None and acc is None:
        return {}
    by_source: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for i, (src, uid) in enumerate(zip(sources, uids, strict=True)):
        by_source[src][uid].append(i)
    out: dict[str, float] = {}
    for src, groups in by_source.items():
        judged_by = acc if acc is not None and any(acc[i] is not None for g in groups.values() for i in g) else reward
        if judged_by is None:
            continue
        correct = {uid: [_correct(judged_by[i], settings.threshold) for i in idx] for uid, idx in groups.items()}
        for (e_src, e_uid), count in (expected_counts or {}).items():
            if str(e_src) == src:  # a prompt whose every session failed is n misses, not absent
                got = correct.setdefault(str(e_uid), [])
                got.extend([False] * max(int(count) - len(got), 0))
        n = min(len(c) for c in correct.values())
        ks = sorted(set(settings.ks)) or default_ks(n)
        too_big = [k for k in ks if k > n]
        if too_big:
            logger.warning(
                "longcat-plugins: pass@k for data source %r: k=%s larger than its %d samples per prompt "
                "(actor_rollout_ref.rollout.val_kwargs.n); left out",
                src,
                ",".join(map(str, too_big)),
                n,
            )
            ks = [k for k in ks if k <= n]
        if not ks:
            continue
        for key, value in estimate(list(correct.values()), ks).items():
            out[f"{PREFIX}/{src}/{key}"] = value
        out[f"{PREFIX}/{src}/n"] = float(n)
    return out


def check_config(cfg: Mapping[str, Any]) -> list[str]:
    """Before Ray starts: every configured k must fit ``val_kwargs.n``."""
    from omegaconf import DictConfig, OmegaConf

    node = cfg if isinstance(cfg, DictConfig) else OmegaConf.create(dict(cfg))
    raw = OmegaConf.select(node, "longcat.settings.reward.passk.ks", default=None) or []
    n = OmegaConf.select(node, "actor_rollout_ref.rollout.val_kwargs.n", default=None)
    if not isinstance(n, int):
        return []
    return [
        f"longcat.settings.reward.passk.ks[{i}]: k={k} is larger than actor_rollout_ref.rollout.val_kwargs.n={n}"
        for i, k in enumerate(raw)
        if isinstance(k, int) and k > n
    ]


class PassK:
    """Unbiased pass@k / pass^k / avg@k of ``val_kwargs.n`` samples per prompt, logged at validation."""

    compute = staticmethod(validation_metrics)
    check_config = staticmethod(check_config)


def enabled_metrics() -> list[tuple[Any, Any]]:
    """``(component, settings)`` of every enabled ``val_metric`` in this process (``reward:passk``
    unless disabled, plus any a plugin ships)."""
    from longcat_plugins.host import get_host

    host = get_host()
    return [(c, host.settings_for(c.family, c.name)) for c in host.components(kind="val_metric")]


def added_metrics(
    data_sources: Sequence[Any],
    sample_uids: Sequence[Any],
    infos: Mapping[str, Sequence[Any]],
    expected_counts: Mapping[tuple[str, str], int] | None = None,
) -> dict[str, float]:
    """What every enabled ``val_metric`` adds to one validation pass. One that raises is
    reported with its plugin and left out: a metric must not end a training run."""
    out: dict[str, float] = {}
    try:
        metrics = enabled_metrics()
    except Exception:  # e.g. invalid settings; validate/the Hydra callback report them before Ray
        logger.warning("longcat-plugins: validation metrics unavailable", exc_info=True)
        return out
    for component, settings in metrics:
        try:
            out.update(component.target.compute(data_sources, sample_uids, infos, settings, expected_counts))
        except Exception:
            logger.warning(
                "longcat-plugins: validation metric %s (plugin %r) failed",
                component.ref,
                component.plugin,
                exc_info=True,
            )
    return out


def wrap_trainer(module: ModuleType) -> None:
    """Post-import hook: wrap ``_val_metrics_update`` of the module's trainer class (idempotent)."""
    cls = getattr(module, SEAMS[module.__name__], None)
    original = getattr(cls, "_val_metrics_update", None)
    if original is None or getattr(original, "__longcat_passk__", False):
        return
    if not verl_is_tested():
        logger.warning("longcat-plugins: pass@k validation metrics off: verl is outside %s", TESTED_VERL)
        return
    params = tuple(inspect.signature(original).parameters)
    if params[: len(_PARAMS)] != _PARAMS:
        logger.warning(
            "longcat-plugins: pass@k validation metrics off: %s._val_metrics_update%s is not the signature they were written for",
            cls.__qualname__,
            params,
        )
        return

    @functools.wraps(original)
    def _val_metrics_update(
        self: Any,
        data_sources: Any,
        sample_uids: Any,
        reward_extra_infos_dict: Any,
        sample_turns: Any,
        *a: Any,
        **kw: Any,
    ) -> dict[str, Any]:
        metrics = original(self, data_sources, sample_uids, reward_extra_infos_dict, sample_turns, *a, **kw)
        metrics.update(
            added_metrics(list(data_sources), list(sample_uids), reward_extra_infos_dict, kw.get("expected_acc_counts"))
        )
        return metrics

    _val_metrics_update.__longcat_passk__ = True  # type: ignore[attr-defined]
    cls._val_metrics_update = _val_metrics_update
    APPLIED[module.__name__] = True


def install() -> None:
    """Arrange the wrapping for whenever each trainer module is imported."""
    from longcat_plugins.import_hooks import when_imported

    for module_name in SEAMS:
        when_imported(module_name, wrap_trainer)
