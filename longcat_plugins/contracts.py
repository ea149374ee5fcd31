"""Plugin contracts before Ray: call each component once the way verl will (issue 32 item 4).

A policy loss that returns the wrong shape, an estimator that returns one tensor, a reward that
raises on its first sample, or a loss knob of the wrong type otherwise fail only inside a Ray
worker, a minute into a run, in an error that names neither the plugin nor the key. Here each
enabled policy loss, advantage estimator, reward function and reward manager is called on a
small synthetic batch, with the arguments verl 0.9 passes (read in
``verl/workers/utils/losses.py`` ``ppo_loss``, ``verl/trainer/ppo/ray_trainer.py``
``compute_advantage``, ``verl/experimental/reward_loop/reward_manager/naive.py``), and what it
returns is checked against what verl does with it next. Each problem names the component, its
plugin, and what verl expected.

Used by ``longcat-plugins check``, ``longcat-plugins validate`` and the Hydra gate (the components
a recipe selects), and the ``longcat_check`` pytest fixture (:mod:`longcat_plugins.testing`).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import inspect
import math
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from longcat_plugins.components import Component
from longcat_plugins.schema import ConfigProblem, check_mapping, select

#: the component kinds checked, in the order verl meets them in a step
KINDS = ("reward_function", "reward_manager", "adv_estimator", "policy_loss")
#: batch x response length of the synthetic batch
BATCH, LENGTH = 8, 6
#: a reward or manager that takes longer than this on one synthetic sample is reported
CALL_TIMEOUT_S = 30.0
#: the synthetic sample every reward sees
SAMPLE = {
    "data_source": "longcat/check",
    "solution_str": "2 + 2 = 4, so the answer is \\boxed{4}.",
    "ground_truth": "4",
}


@dataclass
class Outcome:
    """One component's check."""

    component: Component
    problems: list[str]
    seconds: float

    @property
    def ok(self) -> bool:
        return not self.problems

    def messages(self) -> list[str]:
        who = f"{self.component.ref} (plugin {self.component.plugin!r})"
        return [f"{who}: {p}" for p in self.problems]


class ContractError(ValueError):
    """A component does not do what verl expects of it; the message says what."""


def check_host(host: Any, cfg: Mapping[str, Any] | None = None, kinds: Sequence[str] = KINDS) -> list[Outcome]:
    """Check every enabled component of ``kinds`` in ``host``; ``cfg`` (a plain composed recipe)
    supplies the loss's knobs, ``loss_agg_mode`` and the reward managers' config."""
    out = []
    with active(host):
        for kind in kinds:
            for component in host.components(kind=kind):
                out.append(check_component(component, cfg))
    return out


def selected_components(host: Any, cfg: Mapping[str, Any]) -> list[Component]:
    """The components of ``host`` the recipe selects by a stock verl key (the ones its run calls)."""
    keys = {
        "policy_loss": "actor_rollout_ref.actor.policy_loss.loss_mode",
        "adv_estimator": "algorithm.adv_estimator",
        "reward_manager": "reward.reward_manager.name",
    }
    chosen = []
    for kind, key in keys.items():
        name = select(cfg, key)
        found = [c for c in host.components(kind=kind) if c.name == name]
        chosen += found
    custom = select(cfg, "reward.custom_reward_function") or {}
    if custom.get("path") == "pkg://longcat_plugins.reward_functions":
        chosen += [c for c in host.components(kind="reward_function") if c.name == custom.get("name")]
    return chosen


def config_problems(host: Any, cfg: Mapping[str, Any]) -> list[ConfigProblem]:
    """What ``validate`` and the Hydra gate report: the recipe's selected components, and a
    ``reward.custom_reward_function`` loaded from a file, each called once and checked."""
    problems = []
    with active(host):
        for component in selected_components(host, cfg):
            outcome = check_component(component, cfg)
            problems += [ConfigProblem(_key_of(component), m) for m in outcome.messages()]
        custom = select(cfg, "reward.custom_reward_function") or {}
        path = custom.get("path")
        if path and path != "pkg://longcat_plugins.reward_functions":
            problems += [ConfigProblem("reward.custom_reward_function", m) for m in check_custom_function(cfg)]
    return problems


def check_custom_function(cfg: Mapping[str, Any]) -> list[str]:
    """A user's ``reward.custom_reward_function`` (a file or module verl loads by path), called once."""
    from verl.utils.import_utils import load_extern_object

    custom = select(cfg, "reward.custom_reward_function") or {}
    path, name = custom.get("path"), custom.get("name") or "compute_score"
    label = f"reward {name!r} ({path})"
    try:
        fn = load_extern_object(path, name)
    except Exception as exc:  # noqa: BLE001 - an unloadable file is the finding
        return [f"{label}: cannot be loaded: {type(exc).__name__}: {exc}"]
    try:
        problems = check_reward_callable(fn, custom.get("reward_kwargs") or {})
    except ContractError as exc:
        problems = [str(exc)]
    except Exception as exc:  # noqa: BLE001 - the reward's exception is the finding
        problems = [f"raised {type(exc).__name__}: {exc}{_where(exc)}"]
    return [f"{label}: {p}" for p in problems]


@contextlib.contextmanager
def active(host: Any) -> Iterator[None]:
    """``host`` as the process-wide host while components run (they read their settings from it)."""
    from longcat_plugins.host import set_host

    previous = set_host(host)
    try:
        yield
    finally:
        set_host(previous)


def _key_of(component: Component) -> str:
    return {
        "policy_loss": "actor_rollout_ref.actor.policy_loss.loss_mode",
        "adv_estimator": "algorithm.adv_estimator",
        "reward_manager": "reward.reward_manager.name",
        "reward_function": "reward.custom_reward_function.name",
    }[component.kind]


def check_component(component: Component, cfg: Mapping[str, Any] | None = None) -> Outcome:
    """Call ``component`` once as verl would; every problem found, with what verl expected."""
    checks = {
        "policy_loss": _check_policy_loss,
        "adv_estimator": _check_adv_estimator,
        "reward_function": _check_reward_function,
        "reward_manager": _check_reward_manager,
    }
    start = time.perf_counter()
    try:
        problems = checks[component.kind](component, cfg or {})
    except ContractError as exc:
        problems = [str(exc)]
    except Exception as exc:  # noqa: BLE001 - the plugin's exception is the finding; Ctrl-C still stops
        problems = [f"raised {type(exc).__name__}: {exc}{_where(exc)}"]
    return Outcome(component, problems, time.perf_counter() - start)


def _where(exc: BaseException) -> str:
    """`` (at file:line in fn)`` of the innermost frame, so the plugin's own line is named."""
    tb = exc.__traceback__
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    if tb is None:
        return ""
    code = tb.tb_frame.f_code
    return f" (at {code.co_filename}:{tb.tb_lineno} in {code.co_name})"


# -- the synthetic batch ----------------------------------------------------------------------------


def _batch() -> dict[str, Any]:
    """Two groups of four samples, right-padded responses, outcome scores at the last token."""
    import numpy as np
    import torch

    g = torch.Generator().manual_seed(0)
    lengths = torch.tensor([6, 4, 5, 6, 3, 6, 2, 5])
    mask = torch.arange(LENGTH)[None, :] < lengths[:, None]
    old = -torch.rand(BATCH, LENGTH, generator=g) * 2
    log_prob = (old + torch.randn(BATCH, LENGTH, generator=g) * 0.1).requires_grad_(True)
    scores = torch.tensor([1.0, 0.0, 0.5, 1.0, 0.0, 0.0, 1.0, 0.25])
    rewards = torch.zeros(BATCH, LENGTH)
    rewards[torch.arange(BATCH), lengths - 1] = scores
    group_adv = (scores - scores.view(2, 4).mean(1).repeat_interleave(4))[:, None]
    return {
        "mask": mask,
        "old_log_prob": old,
        "log_prob": log_prob,
        "advantages": (group_adv * mask).float(),
        # what verl's rollout correction hands a loss: per-token train/rollout ratios near 1
        "rollout_is_weights": (torch.randn(BATCH, LENGTH, generator=g) * 0.2).exp() * mask,
        "token_level_rewards": rewards,
        "index": np.array(["a"] * 4 + ["b"] * 4, dtype=object),
    }


def _finite_tensor(value: Any, what: str, shape: tuple[int, ...]) -> list[str]:
    import torch

    if not isinstance(value, torch.Tensor):
        return [f"{what} must be a torch.Tensor, got {type(value).__name__}"]
    problems = []
    if tuple(value.shape) != shape:
        problems.append(f"{what} has shape {tuple(value.shape)}; verl expects {shape}")
    if not value.dtype.is_floating_point:
        problems.append(f"{what} has dtype {value.dtype}; verl expects a floating-point tensor")
    elif not torch.isfinite(value.detach()).all():
        problems.append(f"{what} is not finite (NaN or inf) on a finite batch")
    return problems


# -- policy losses ---------------------------------------------------------------------------------


def _loss_config(component: Component, cfg: Mapping[str, Any]) -> Any:
    """``config.policy_loss`` as verl builds it: the recipe's ``policy_loss`` when it selects this
    loss (type-checked against the loss's config class, keys named), else the class's defaults."""
    from verl.workers.config.actor import PolicyLossConfig

    cls = component.config if isinstance(component.config, type) else None
    if cls is None or not issubclass(cls, PolicyLossConfig):
        if cls is not None:
            raise ContractError(
                f"config {cls.__name__} is not a verl PolicyLossConfig subclass: verl hands a loss its knobs as "
                "config.policy_loss, built from actor_rollout_ref.actor.policy_loss._target_"
            )
        cls = PolicyLossConfig
    raw = select(cfg, "actor_rollout_ref.actor.policy_loss")
    if not isinstance(raw, Mapping) or raw.get("loss_mode") != component.name:
        return cls(loss_mode=component.name)
    where = "actor_rollout_ref.actor.policy_loss"
    target = raw.get("_target_")
    wanted = f"{cls.__module__}.{cls.__qualname__}"
    if cls is not PolicyLossConfig and target != wanted:
        raise ContractError(
            f"{where}._target_ is {target!r}: verl would build a {target or 'PolicyLossConfig'} and this loss's "
            f"knobs would not reach it; set {where}._target_: {wanted}"
        )
    plain = _without_targets(raw)
    problems = check_mapping(plain, cls, where)
    if problems:
        raise ContractError("; ".join(str(p) for p in problems))
    from omegaconf import OmegaConf
    from verl.utils.config import omega_conf_to_dataclass

    return omega_conf_to_dataclass(OmegaConf.create(dict(raw)), dataclass_type=cls if target is None else None)


def _without_targets(node: Any) -> Any:
    if isinstance(node, Mapping):
        return {k: _without_targets(v) for k, v in node.items() if k != "_target_"}
    return node


def _rollout_is(cfg: Mapping[str, Any]) -> bool:
    """Whether verl hands the loss ``rollout_is_weights`` under this recipe (token or sequence
    importance weights from ``algorithm.rollout_correction``, not in bypass mode)."""
    return bool(select(cfg, "algorithm.rollout_correction.rollout_is")) and not select(
        cfg, "algorithm.rollout_correction.bypass_mode"
    )


def _check_policy_loss(component: Component, cfg: Mapping[str, Any]) -> list[str]:
    from verl.workers.config.actor import ActorConfig

    if select(cfg, "actor_rollout_ref.actor.policy_loss.loss_mode") != component.name:
        cfg = {}  # the recipe's actor knobs are for the loss it selects; any other is checked as it ships
    b = _batch()
    mask = b["mask"]
    agg = select(cfg, "actor_rollout_ref.actor.loss_agg_mode") or "token-mean"
    # a recipe's own loss_scale_factor; without a recipe, the one a constant-length loss needs
    # (the synthetic batch's maximum response length), as verl's ppo_loss copies it
    scale = select(cfg, "actor_rollout_ref.actor.loss_scale_factor") if cfg else LENGTH
    config = ActorConfig(
        strategy="fsdp",
        rollout_n=4,
        ppo_micro_batch_size_per_gpu=1,
        loss_agg_mode=agg,
        loss_scale_factor=scale,
        policy_loss=_loss_config(component, cfg),
        global_batch_info={
            "dp_size": 1,
            "batch_num_tokens": int(mask.sum()),
            "global_batch_size": BATCH,
            "loss_scale_factor": scale,
        },
    )
    result = component.target(
        old_log_prob=b["old_log_prob"],
        log_prob=b["log_prob"],
        advantages=b["advantages"],
        response_mask=mask,
        loss_agg_mode=agg,
        config=config,
        rollout_is_weights=b["rollout_is_weights"] if _rollout_is(cfg) else None,
    )
    expected = "verl's ppo_loss expects (loss, metrics): a scalar tensor and a dict of numbers"
    if not isinstance(result, tuple) or len(result) != 2:
        return [f"returned {type(result).__name__}; {expected}"]
    loss, metrics = result
    problems = _finite_tensor(loss, "the loss", ())
    if not problems and not loss.requires_grad:
        problems.append("the loss does not depend on log_prob (no gradient would reach the model)")
    if not problems:
        loss.backward()
        grad = b["log_prob"].grad
        if grad is None or not bool(grad.isfinite().all()):
            problems.append("the loss's gradient with respect to log_prob is not finite")
    if not isinstance(metrics, Mapping):
        problems.append(f"metrics is {type(metrics).__name__}; {expected}")
    else:
        import torch

        for key, value in metrics.items():
            if not isinstance(key, str):
                problems.append(f"metric key {key!r} is not a string")
            elif isinstance(value, torch.Tensor) and value.numel() != 1:
                problems.append(f"metric {key!r} is a tensor of shape {tuple(value.shape)}; verl logs numbers")
            elif not isinstance(value, int | float | torch.Tensor):
                problems.append(f"metric {key!r} is {type(value).__name__}; verl logs numbers")
    return problems


# -- advantage estimators -------------------------------------------------------------------------


def _check_adv_estimator(component: Component, cfg: Mapping[str, Any]) -> list[str]:
    from verl.trainer.config import AlgoConfig

    b = _batch()
    response_mask = b["mask"].long()  # verl's compute_response_mask: the attention mask's dtype
    result = component.target(
        token_level_rewards=b["token_level_rewards"],
        response_mask=response_mask,
        config=AlgoConfig(adv_estimator=component.name),
        index=b["index"],
    )
    expected = f"verl's compute_advantage expects (advantages, returns), each of shape {(BATCH, LENGTH)}"
    if not isinstance(result, tuple) or len(result) != 2:
        return [f"returned {type(result).__name__}; {expected}"]
    problems = _finite_tensor(result[0], "advantages", (BATCH, LENGTH))
    problems += _finite_tensor(result[1], "returns", (BATCH, LENGTH))
    return problems


# -- rewards ------------------------------------------------------------------------------------------


def _call(fn: Any, kwargs: dict[str, Any]) -> Any:
    """``fn(**kwargs)`` (awaited if async) within :data:`CALL_TIMEOUT_S`."""

    def run() -> Any:
        if inspect.iscoroutinefunction(fn):
            return asyncio.run(fn(**kwargs))
        result = fn(**kwargs)
        if inspect.isawaitable(result):
            return asyncio.run(_await(result))
        return result

    pool = concurrent.futures.ThreadPoolExecutor(max_workers=1)
    try:
        return pool.submit(run).result(timeout=CALL_TIMEOUT_S)
    except concurrent.futures.TimeoutError:
        raise ContractError(f"did not return within {CALL_TIMEOUT_S:g} s on one synthetic sample") from None
    finally:
        pool.shutdown(wait=False)


async def _await(awaitable: Any) -> Any:
    return await awaitable


def score_problems(result: Any) -> list[str]:
    """What verl's managers accept from a reward function: a number, or a dict with a numeric
    ``score``; NaN only as a declared invalid sample (``longcat_reward_valid = 0``)."""
    from longcat_plugins.rewards.result import VALID_KEY

    expected = 'verl expects a number or a dict with a numeric "score"'
    if isinstance(result, Mapping):
        if "score" not in result:
            return [f'returned a dict without "score" (keys: {sorted(result)}); {expected}']
        score, valid = result["score"], result.get(VALID_KEY, 1.0)
    else:
        score, valid = (result[0] if isinstance(result, list | tuple) and result else result), 1.0
    if isinstance(score, bool) or not isinstance(score, int | float):
        try:
            import torch

            if isinstance(score, torch.Tensor) and score.numel() == 1:
                score = float(score)
            else:
                return [f"returned a score of type {type(score).__name__}; {expected}"]
        except ImportError:  # pragma: no cover - torch is a dependency
            return [f"returned a score of type {type(score).__name__}; {expected}"]
    if not math.isfinite(float(score)) and valid:
        return [f"returned a non-finite score ({score}) without marking the sample invalid ({VALID_KEY}: 0)"]
    return []


def _check_reward_function(component: Component, cfg: Mapping[str, Any]) -> list[str]:
    custom = select(cfg, "reward.custom_reward_function") or {}
    selected = custom.get("path") == "pkg://longcat_plugins.reward_functions" and custom.get("name") == component.name
    kwargs = dict(custom.get("reward_kwargs") or {}) if selected else {}  # the recipe's kwargs are for its reward
    return check_reward_callable(component.target, kwargs)


def check_reward_callable(fn: Any, reward_kwargs: Mapping[str, Any] | None = None) -> list[str]:
    """A ``compute_score`` function called as verl's ``naive`` manager calls it, checked."""
    return score_problems(call_reward(fn, {**SAMPLE, "extra_info": {"num_turns": 2}}, reward_kwargs))


def call_reward(fn: Any, sample: Mapping[str, Any], reward_kwargs: Mapping[str, Any] | None = None) -> Any:
    """``fn`` called as verl's ``naive`` manager calls a ``compute_score``: the sample's
    ``data_source``, ``solution_str``, ``ground_truth``, ``extra_info`` and the recipe's
    ``reward_kwargs`` as keywords, awaited if async, within :data:`CALL_TIMEOUT_S` (also used by
    ``longcat-plugins redteam``)."""
    return _call(fn, {**dict(sample), **dict(reward_kwargs or {})})


class _CheckTokenizer:
    """Decodes every response to the synthetic sample's text (a manager's only use of it here)."""

    pad_token_id = 0
    eos_token = ""

    def decode(self, ids: Any, skip_special_tokens: bool = True) -> str:
        return SAMPLE["solution_str"]


def _manager_sample() -> Any:
    import numpy as np
    import torch
    from verl import DataProto

    return DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([[0, 5, 6]]),
            "responses": torch.tensor([[7, 8, 9, 0]]),
            "attention_mask": torch.tensor([[0, 1, 1, 1, 1, 1, 0]]),
        },
        non_tensors={
            "data_source": np.array([SAMPLE["data_source"]], dtype=object),
            "reward_model": np.array([{"ground_truth": SAMPLE["ground_truth"], "style": "rule"}], dtype=object),
            "extra_info": np.array([{}], dtype=object),
        },
    )


def _check_reward_manager(component: Component, cfg: Mapping[str, Any]) -> list[str]:
    from omegaconf import OmegaConf

    base = {
        "reward": {
            "reward_model": {"enable": False, "model_path": None},
            "custom_reward_function": {"path": None, "name": None, "reward_kwargs": {}},
            "reward_kwargs": {},
        }
    }
    config = OmegaConf.create(dict(cfg) if cfg else base)
    expected = 'verl\'s reward loop expects {"reward_score": number, "reward_extra_info": dict}'

    async def one() -> Any:  # built inside the loop it runs in, as verl's reward-loop worker does
        manager = component.target(
            config=config,
            tokenizer=_CheckTokenizer(),
            compute_score=None,
            reward_router_address=None,
            reward_model_tokenizer=None,
        )
        return await manager.run_single(_manager_sample())

    result = _call(lambda: asyncio.run(one()), {})
    if not isinstance(result, Mapping) or "reward_score" not in result:
        return [f"run_single returned {type(result).__name__}; {expected}"]
    info = result.get("reward_extra_info", {})
    problems = [] if isinstance(info, Mapping) else [f"reward_extra_info is {type(info).__name__}; {expected}"]
    return problems + score_problems({"score": result["reward_score"], **(info if isinstance(info, Mapping) else {})})
