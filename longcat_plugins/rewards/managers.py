"""Reward managers for verl's reward loop: one per reward kind, and ``longcat_router``.

verl's reward-loop worker builds the manager selected by ``reward.reward_manager.name`` with
``(config, tokenizer, compute_score, reward_router_address=..., reward_model_tokenizer=...)``
and awaits ``run_single(data)`` per sample. Every manager here returns the same
``reward_extra_info`` keys for every sample (verl stacks them by the first sample's keys, so a
mixed math+code batch with different keys would fail): ``acc``, ``longcat_reward_valid``,
``longcat_reward_error``, ``longcat_reward_name``, ``longcat_reward_failed``. A reward function
that raises yields an invalid sample (NaN, ``longcat_reward_failed = 1``, counted per step by
:mod:`.failures`), never a crashed batch or a silent 0.

The router dispatches each sample by ``data_source`` (fnmatch patterns, first match wins)
to a reward by name: a longcat reward component, ``custom`` (the function verl loaded from
``reward.custom_reward_function``) or ``default`` (verl's ``default_compute_score``).
"""

from __future__ import annotations

import fnmatch
import inspect
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from verl import DataProto
from verl.experimental.reward_loop.reward_manager.base import RewardManagerBase

from longcat_plugins.rewards.result import (
    ERROR_KEY,
    FAILED_KEY,
    NAME_KEY,
    VALID_KEY,
    RewardSetupError,
    failed,
    invalid,
)

DEFAULT_ROUTES: dict[str, str] = {
    "*math*": "math",
    "*gsm8k*": "math",
    "aime*": "math",
    "*MATH*": "math",
    "numina_*": "math",
    "*code*": "code",
    "apps": "code",
    "taco": "code",
    "codeforces": "code",
    "*tool*": "tool_format",
    "*genrm*": "genrm",
}


@dataclass(frozen=True)
class RouterConfig:
    """Settings of ``longcat_router`` (``longcat.settings.reward.longcat_router``)."""

    #: data_source fnmatch pattern -> reward name; checked in order, first match wins
    routes: dict[str, str] = field(default_factory=lambda: dict(DEFAULT_ROUTES))
    #: reward for a data_source no pattern matches; empty: such a sample is invalid
    default: str = ""
    #: extra kwargs per reward name, passed to its compute_score
    reward_kwargs: dict[str, dict[str, Any]] = field(default_factory=dict)


def normalise(result: Any, name: str) -> tuple[float, dict[str, Any]]:
    """(score, uniform extra info) from whatever a reward function returned."""
    if isinstance(result, dict):
        score = float(result["score"])
        valid = float(result.get(VALID_KEY, 1.0 if math.isfinite(score) else 0.0))
        error = str(result.get(ERROR_KEY, ""))
        acc = float(result.get("acc", float(score >= 1.0) if math.isfinite(score) else 0.0))
    else:
        score = float(result[0] if isinstance(result, list | tuple) else result)
        valid, error, acc = (1.0 if math.isfinite(score) else 0.0), "", float(score >= 1.0)
    raised = float(result.get(FAILED_KEY, 0.0)) if isinstance(result, dict) else 0.0
    if not valid or not math.isfinite(score):
        score, valid, error = float("nan"), 0.0, error or f"{name}: non-finite score"
    return score, {"acc": acc, VALID_KEY: valid, ERROR_KEY: error, NAME_KEY: name, FAILED_KEY: raised}


def _reward_kwargs(config: Any) -> Any:
    try:
        return config.reward.get("reward_kwargs") or {}
    except AttributeError:
        return {}


def _plain(value: Any) -> dict[str, Any]:
    from longcat_plugins.config import to_plain

    plain = to_plain(value)
    return dict(plain) if isinstance(plain, dict) else {}


class LongcatRewardManager(RewardManagerBase):
    """Scores each sample with the reward named by :meth:`route` (fixed per subclass)."""

    reward_name: ClassVar[str] = "custom"

    def __init__(
        self,
        config: Any,
        tokenizer: Any,
        compute_score: Any,
        reward_router_address: str | None = None,
        reward_model_tokenizer: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, tokenizer, compute_score)
        self.reward_router_address = reward_router_address
        self.reward_model_tokenizer = reward_model_tokenizer
        self._fns: dict[str, Any] = {}
        try:
            rm = config.reward.reward_model
            self.reward_model_name = rm.get("model_path") if rm.get("enable") else None
        except AttributeError:
            self.reward_model_name = None

    def route(self, data_source: str) -> str:
        return self.reward_name

    def kwargs_for(self, name: str) -> dict[str, Any]:
        """``reward.reward_kwargs`` (the verl key the dapo manager reads too) for this manager's reward."""
        return _plain(_reward_kwargs(self.config))

    def resolve(self, name: str) -> Any:
        """The compute_score callable for reward ``name``."""
        if name not in self._fns:
            if name == "custom":
                if self.compute_score is None:
                    raise ValueError("reward 'custom' needs reward.custom_reward_function to be set")
                fn = self.compute_score
            elif name == "default":
                from verl.utils.reward_score import default_compute_score

                fn = default_compute_score
            else:
                from longcat_plugins.host import get_host

                fn = get_host().get("reward", name, kind="reward_function").target
            self._fns[name] = fn
        return self._fns[name]

    async def _decode(self, data: DataProto) -> tuple[str, str, Any, dict[str, Any]]:
        item = data[-1:][0]
        response_ids = item.batch["responses"]
        valid_len = int(item.batch["attention_mask"][-response_ids.shape[-1] :].sum())
        text = await self.loop.run_in_executor(
            None, lambda: self.tokenizer.decode(response_ids[:valid_len], skip_special_tokens=True)
        )
        nt = item.non_tensor_batch
        extra = dict(nt.get("extra_info") or {})
        if nt.get("tool_extra_fields") is not None:
            extra.update(nt["tool_extra_fields"].items())
        extra["num_turns"] = nt.get("__num_turns__", None)
        return str(nt["data_source"]), text, (nt.get("reward_model") or {}).get("ground_truth"), extra

    async def score(self, name: str, data_source: str, text: str, ground_truth: Any, extra: dict[str, Any]) -> Any:
        fn = self.resolve(name)
        kwargs = dict(self.kwargs_for(name))
        if self.reward_router_address is not None and name in ("genrm", "custom"):
            kwargs["reward_router_address"] = self.reward_router_address
            if name == "genrm":
                kwargs["reward_model_name"] = self.reward_model_name
            else:
                kwargs["reward_model_tokenizer"] = self.reward_model_tokenizer
        call = dict(data_source=data_source, solution_str=text, ground_truth=ground_truth, extra_info=extra, **kwargs)
        if inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(getattr(fn, "func", None)):
            return await fn(**call)
        result = await self.loop.run_in_executor(None, lambda: fn(**call))
        return await result if inspect.isawaitable(result) else result

    async def run_single(self, data: DataProto) -> dict[str, Any]:
        data_source, text, ground_truth, extra = await self._decode(data)
        name = self.route(data_source)
        if not name:
            result: Any = invalid(f"no reward route for data_source {data_source!r}")
        else:
            try:
                result = await self.score(name, data_source, text, ground_truth, extra)
            except RewardSetupError:
                raise
            except Exception as exc:  # noqa: BLE001 - a failing reward is an invalid sample, not a dead batch
                from longcat_plugins.rewards.failures import warn_first

                result = failed(name, exc)
                warn_first(name, result[ERROR_KEY])
        score, info = normalise(result, name or "none")
        return {"reward_score": score, "reward_extra_info": info}


class MathRewardManager(LongcatRewardManager):
    """Every sample scored by the ``math`` reward."""

    reward_name = "math"


class CodeRewardManager(LongcatRewardManager):
    """Every sample scored by the ``code`` sandbox reward."""

    reward_name = "code"


class GenRMRewardManager(LongcatRewardManager):
    """Every sample scored by the ``genrm`` judge, through verl's reward router when enabled."""

    reward_name = "genrm"


class ToolFormatRewardManager(LongcatRewardManager):
    """Every sample scored by the ``tool_format`` reward."""

    reward_name = "tool_format"


#: where the router's settings live in a recipe
ROUTER_KEY = "longcat.settings.reward.longcat_router"


def check_router_config(cfg: Any) -> list[str]:
    """Before Ray: every reward the router's ``routes``, ``default`` and ``reward_kwargs`` name
    must be one it can call (an enabled reward function, ``default``, or ``custom`` with
    ``reward.custom_reward_function.path`` set); on the reward worker an unknown route fails every
    sample routed to it, and kwargs for an unknown name would be ignored."""
    from longcat_plugins.config import host_for_section, to_plain

    plain = to_plain(cfg) or {}
    section = plain.get("longcat") or {}
    settings = ((section.get("settings") or {}).get("reward") or {}).get("longcat_router") or {}
    custom = ((plain.get("reward") or {}).get("custom_reward_function") or {}).get("path")
    functions = {c.name: c for c in host_for_section(section).components(kind="reward_function")}
    names = set(functions) | {"default"}
    if custom:
        names.add("custom")
    choices = ", ".join(sorted(names))
    named = [(f"{ROUTER_KEY}.routes.{pattern}", name) for pattern, name in (settings.get("routes") or {}).items()]
    if settings.get("default"):
        named.append((f"{ROUTER_KEY}.default", settings["default"]))
    named += [(f"{ROUTER_KEY}.reward_kwargs.{name}", name) for name in settings.get("reward_kwargs") or {}]
    problems = [
        f"{key}: {name!r} is not a reward this run can call; choices: {choices}"
        + ("" if custom or name != "custom" else " ('custom' needs reward.custom_reward_function.path)")
        for key, name in named
        if name not in names
    ]
    problems += _reward_kwargs_problems(
        section, settings.get("reward_kwargs") or {}, functions, f"{ROUTER_KEY}.reward_kwargs"
    )
    verl_kwargs = (plain.get("reward") or {}).get("reward_kwargs") or {}
    if isinstance(verl_kwargs, dict):  # verl's grab bag: only its entries named after a reward are the router's
        problems += _reward_kwargs_problems(section, verl_kwargs, functions, "reward.reward_kwargs")
    if any(name == "selfverify" for _, name in named):
        from longcat_plugins.rewards import selfverify

        problems += selfverify.check_config(cfg)
    return problems


def _reward_kwargs_problems(
    section: dict[str, Any], reward_kwargs: dict[str, Any], functions: dict[str, Any], where: str
) -> list[str]:
    """A reward's ``reward_kwargs`` are its settings for the calls the router makes: they must be
    keys of its settings (a typo would be dropped without a word) with values they accept."""
    from longcat_plugins.config import ConfigError, build_settings

    problems = []
    for name, kwargs in reward_kwargs.items():
        component = functions.get(name)
        if component is None or component.config is None or not isinstance(kwargs, dict):
            continue
        base = ((section.get("settings") or {}).get("reward") or {}).get(name) or {}
        try:
            build_settings(component, {**base, **kwargs}, f"{where}.{name}")
        except ConfigError as exc:
            problems += [f"{p.path}: {p.message}" for p in exc.problems]
    return problems


class RouterRewardManager(LongcatRewardManager):
    """Dispatches each sample by ``data_source`` to a reward (multi-domain batches)."""

    check_config = staticmethod(check_router_config)

    def __init__(self, *args: Any, router_config: RouterConfig | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.router_config = router_config or self._settings()
        self._routes = list(self.router_config.routes.items())
        self._cache: dict[str, str] = {}

    @staticmethod
    def _settings() -> RouterConfig:
        """The configured routes; the defaults only where the host does not know the router
        (outside a configured host). A bad setting raises, naming its key: it must never run
        as the default routes."""
        from longcat_plugins.host import settings_for

        return settings_for("reward", "longcat_router", fallback=RouterConfig) or RouterConfig()

    def route(self, data_source: str) -> str:
        if data_source not in self._cache:
            name = next((r for pat, r in self._routes if fnmatch.fnmatchcase(data_source, pat)), None)
            self._cache[data_source] = name if name is not None else self.router_config.default
        return self._cache[data_source]

    def kwargs_for(self, name: str) -> dict[str, Any]:
        """Per-reward kwargs: the router's settings, then ``reward.reward_kwargs.<name>``."""
        from_verl = _plain(_reward_kwargs(self.config)).get(name)
        return {**self.router_config.reward_kwargs.get(name, {}), **(from_verl if isinstance(from_verl, dict) else {})}
