"""``longcat_heavy_thinking``: :func:`~longcat_plugins.environments.heavy_thinking.heavy_think` in verl's agent loop.

Every generation goes through verl's rollout server (``server_manager.generate``), the K parallel
ones of a round concurrently. Each parallel trajectory and each summary is scored with the run's
own reward function (``reward.custom_reward_function``, else verl's ``default_compute_score``) on
its own response, and becomes a training output with that reward (:func:`.heavy_thinking.credit`).

Several outputs per sample: verl 0.9's v1 trainer stores a list of ``AgentLoopOutput`` per session
(``verl/trainer/ppo/v1/agent_loop_tq.py``) but was built for segments of one trajectory: it copies
the last output's ``reward_score`` onto the others before ``as_dict()``, and its ``grpo`` broadcasts
the last output's advantage to the whole session. So the outputs here are :class:`CreditedOutput`,
whose ``as_dict()`` writes their own credited reward into ``rm_scores``, and the recipe uses the
per-row estimator ``longcat_grpo`` (a ``grpo`` run with parallel outputs is refused). The legacy
trainer takes one output per sample: there, and with ``train_parallel: false``, the last summary
(the final answer) is the only output.
"""

from __future__ import annotations

import asyncio
import inspect
import random
import time
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput

from longcat_plugins.environments.heavy_thinking import (
    AGENT_NAME,
    HeavyThinkingSettings,
    credit,
    heavy_think,
)
from longcat_plugins.rewards.plain import plain

__all__ = ["CreditedOutput", "LongcatHeavyThinkingAgentLoop", "load_settings"]

#: prefix of this loop's metrics in ``reward_extra_info``
METRIC_PREFIX = "heavy_"

_reward_fns: dict[str, Any] = {}


def load_settings() -> HeavyThinkingSettings:
    """The settings from the process's ``longcat:`` selection (defaults when the host has none)."""
    from longcat_plugins.host import UnknownComponentError, get_host

    try:
        found = get_host().settings_for("environment", AGENT_NAME)
    except UnknownComponentError:  # instantiated directly, outside the plugin host
        return HeavyThinkingSettings()
    return found if found is not None else HeavyThinkingSettings()


def _get(config: Any, path: str, default: Any) -> Any:
    node = config
    for key in path.split("."):
        node = node.get(key) if hasattr(node, "get") else None
        if node is None:
            return default
    return node


def _multi_output(config: Any, train_parallel: bool) -> bool:
    """The v1 trainer stores every output of a sample; the legacy trainer keeps the last one."""
    return bool(train_parallel and _get(config, "trainer.use_v1", False))


def _grpo_problem(config: Any, train_parallel: bool) -> str | None:
    if not _multi_output(config, train_parallel) or str(_get(config, "algorithm.adv_estimator", "")) != "grpo":
        return None
    return (
        "algorithm.adv_estimator: grpo under the v1 trainer gives every output of a sample the last "
        f"output's advantage, so {AGENT_NAME}'s parallel trajectories would be credited with the "
        "summary's; use algorithm.adv_estimator=longcat_grpo (per-output), or "
        f"longcat.settings.environment.{AGENT_NAME}.train_parallel=false to train the summary only"
    )


class CreditedOutput(AgentLoopOutput):
    """An ``AgentLoopOutput`` that keeps its own reward through verl's v1 multi-output path.

    verl's v1 worker overwrites every non-final output's ``reward_score`` (and
    ``reward_extra_info``) with the final one's before calling ``as_dict()``; this output writes
    ``credited_reward``/``credited_info`` back, so ``rm_scores`` carries the reward of what this
    output wrote."""

    credited_reward: float
    credited_info: dict[str, float] = {}

    def as_dict(self) -> dict[str, Any]:
        out = super().as_dict()
        out.pop("credited_reward", None)
        out.pop("credited_info", None)
        out["rm_scores"][-1] = float(self.credited_reward)
        out["extra_fields"]["reward_extra_info"] = dict(self.credited_info)
        return out


class _Gen:
    """One generation through the rollout server: its tokens, log-probs and text."""

    def __init__(self, prompt_ids: list[int], response_ids: list[int], mask: list[int], logprobs: Any, text: str):
        self.prompt_ids, self.response_ids, self.mask, self.logprobs, self.text = (
            prompt_ids,
            response_ids,
            mask,
            logprobs,
            text,
        )


class LongcatHeavyThinkingAgentLoop(AgentLoopBase):
    """K parallel reasoning trajectories, then a summary over their answers that writes the final response (2601 report §4)."""

    def __init__(self, *args: Any, settings: HeavyThinkingSettings | None = None, **kwargs: Any) -> None:
        kwargs.pop("tools", None)  # verl's global tool list: heavy thinking calls none itself
        super().__init__(*args, **kwargs)
        self.settings = settings if settings is not None else load_settings()
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.multi_output = _multi_output(self.config, self.settings.train_parallel)
        problem = _grpo_problem(self.config, self.settings.train_parallel)
        if problem:
            raise ValueError(problem)

    @staticmethod
    def check_config(config: Any) -> list[str]:
        """Refuse verl's v1 ``grpo`` with parallel outputs before Ray starts (the host calls this
        for a recipe whose ``default_agent_loop`` selects this loop)."""
        node = _get(config, "longcat.settings.environment", {}).get(AGENT_NAME) or {}
        problem = _grpo_problem(config, bool(node.get("train_parallel", HeavyThinkingSettings.train_parallel)))
        return [problem] if problem else []

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
        messages = [dict(m) for m in plain(list(kwargs["raw_prompt"]))]
        timing = {"generate_sequences": 0.0}
        server_extra: dict[str, Any] = {}

        async def generate(msgs: list[dict[str, Any]], max_tokens: int, tag: str) -> _Gen:
            return await self._generate(msgs, sampling_params, max_tokens, timing, server_extra)

        s = self.settings
        rng = random.Random(f"{kwargs.get('uid', '')}-{kwargs.get('index', 0)}-{kwargs.get('session_id', 0)}")
        trace = await heavy_think(
            messages,
            generate,
            s,
            min(s.parallel_max_tokens or self.response_length, self.response_length),
            min(s.summary_max_tokens or self.response_length, self.response_length),
            rng,
        )
        score = self._scorer(kwargs)
        parallel_rewards = [[await score(g.text) for g in rnd.parallel] for rnd in trace.rounds]
        summary_rewards = [await score(rnd.final) for rnd in trace.rounds]
        credits = credit(parallel_rewards, summary_rewards)
        last = trace.rounds[-1]
        final_reward = summary_rewards[-1]
        metrics = {
            f"{METRIC_PREFIX}final_acc": final_reward,
            f"{METRIC_PREFIX}parallel_acc": sum(parallel_rewards[-1]) / len(parallel_rewards[-1]),
            f"{METRIC_PREFIX}agreement": sum(a == last.final.strip() for a in last.answers) / len(last.answers),
        }
        gens = [g for rnd in trace.rounds for g in (*rnd.parallel, rnd.summary)]
        pairs = list(zip(gens, credits, strict=True))
        if not self.multi_output:
            pairs = pairs[-1:]  # the final answer (last summary)
        outputs = []
        for gen, c in pairs:
            info = {
                "acc": c.reward,
                **metrics,
                f"{METRIC_PREFIX}summary": float(c.role == "summary"),
                f"{METRIC_PREFIX}round": float(c.round),
            }
            outputs.append(
                CreditedOutput(
                    prompt_ids=gen.prompt_ids,
                    response_ids=gen.response_ids[: self.response_length],
                    response_mask=gen.mask[: self.response_length],
                    response_logprobs=gen.logprobs[: self.response_length] if gen.logprobs else None,
                    reward_score=c.reward,
                    num_turns=2,
                    metrics={**timing, "num_preempted": -1},
                    extra_fields={
                        **server_extra,
                        "turn_scores": [],
                        "tool_rewards": [],
                        "reward_extra_info": dict(info),
                        "longcat_heavy": {"role": c.role, "round": c.round, "index": c.index},
                    },
                    credited_reward=c.reward,
                    credited_info=info,
                )
            )
        return outputs if self.multi_output else outputs[0]

    async def _generate(
        self,
        messages: list[dict[str, Any]],
        sampling_params: dict[str, Any],
        max_tokens: int,
        timing: dict[str, float],
        server_extra: dict[str, Any],
    ) -> _Gen:
        prompt_ids = list(await self.ct_build_initial_tokens(messages))
        if len(prompt_ids) > self.prompt_length:
            raise ValueError(
                f"{AGENT_NAME}: a prompt of {len(prompt_ids)} tokens exceeds data.max_prompt_length="
                f"{self.prompt_length} (the summary prompt holds K={self.settings.k} answers: raise "
                f"data.max_prompt_length or lower longcat.settings.environment.{AGENT_NAME}.answer_max_chars)"
            )
        start = time.perf_counter()
        out = await self.server_manager.generate(
            request_id=uuid4().hex, prompt_ids=prompt_ids, sampling_params={**sampling_params, "max_tokens": max_tokens}
        )
        timing["generate_sequences"] += time.perf_counter() - start
        token_ids = list(out.token_ids)[:max_tokens]
        log_probs = list(out.log_probs)[: len(token_ids)] if out.log_probs else None
        for key, value in (out.extra_fields or {}).items():  # weight versions, as verl's agent loops keep them
            if key == "max_global_steps" or key not in server_extra:
                server_extra[key] = value
        merge, mask, logprobs = await self.ct_merge_assistant_token(
            prompt_ids, token_ids, [], [] if log_probs else None, assistant_logprobs=log_probs
        )
        response_ids = merge.token_ids[len(merge.token_ids) - len(mask) :] if mask else []
        prompt_ids = merge.token_ids[: len(merge.token_ids) - len(mask)]
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        return _Gen(prompt_ids, response_ids, mask, logprobs, text)

    def _scorer(self, kwargs: dict[str, Any]) -> Any:
        """``async score(response) -> float``: the run's reward function on one response of this sample."""
        fn = _reward_fn(self.config)
        data_source = kwargs.get("data_source", "")
        ground_truth = (plain(kwargs.get("reward_model")) or {}).get("ground_truth")
        extra_info = plain(kwargs.get("extra_info")) or {}

        async def score(response: str) -> float:
            call = lambda: fn(  # noqa: E731
                data_source=data_source, solution_str=response, ground_truth=ground_truth, extra_info=extra_info
            )
            if inspect.iscoroutinefunction(getattr(fn, "func", fn)):
                result = await call()
            else:
                result = await asyncio.get_running_loop().run_in_executor(None, call)
            return float(result["score"] if isinstance(result, dict) else result)

        return score


def _reward_fn(config: Any) -> Any:
    """The run's ``reward.custom_reward_function`` (loaded once per process), else verl's default."""
    from verl.trainer.ppo.reward import get_custom_reward_fn

    section = config.get("reward", {}).get("custom_reward_function") or {}
    key = f"{section.get('path')}:{section.get('name')}"
    if key not in _reward_fns:
        fn = get_custom_reward_fn(config)
        if fn is None:
            from verl.utils.reward_score import default_compute_score

            fn = default_compute_score
        _reward_fns[key] = fn
    return _reward_fns[key]
