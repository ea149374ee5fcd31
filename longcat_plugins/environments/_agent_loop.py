"""Implementation of :mod:`longcat_plugins.environments.agent_loop` (import that module, not this one)."""

from __future__ import annotations

import asyncio
import json
import logging
import math
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput
from verl.experimental.agent_loop.tool_parser import ToolParser
from verl.tools.schemas import OpenAIFunctionToolSchema

from longcat_plugins.bounds import bounded
from longcat_plugins.environments.context import ContextAction, ContextPolicy, ContextSettings, restart_messages
from longcat_plugins.environments.curriculum_service import (
    CurriculumClient,
    CurriculumSettings,
    connect_async,
    resume_dir,
    service_name,
)
from longcat_plugins.environments.episode_reward import EPISODE_KEY
from longcat_plugins.environments.episodes import AGENT_NAME, open_episode
from longcat_plugins.rewards.plain import plain
from longcat_plugins.rewards.result import ERROR_KEY, VALID_KEY, scored
from longcat_plugins.rewards.tool_format import check_calls

logger = logging.getLogger(__name__)

#: prefix of every metric this loop puts into ``reward_extra_info``
METRIC_PREFIX = "env_"


@dataclass(frozen=True)
class ToolAgentSettings(ContextSettings):
    """Settings of ``longcat_tool_agent`` (``longcat.settings.environment.longcat_tool_agent``)."""

    #: model turns per trajectory, all segments together
    max_turns: int = bounded(16, ge=1)
    #: token budget of one model turn (further capped by the room left in the response)
    max_turn_tokens: int = bounded(256, ge=1)
    #: tool calls executed per model turn; extra calls are answered with an error
    max_parallel_calls: int = bounded(4, ge=1)
    #: a tool result longer than this is cut (characters)
    max_tool_response_chars: int = bounded(2000, ge=1)
    #: verl tool parser (``verl.experimental.agent_loop.tool_parser``) reading the model's calls
    tool_parser: str = "hermes"
    #: where the tool schemas go: "auto" (the chat template if it renders ``tools``, else the
    #: system prompt), "template", or "system"
    render_tools: str = "auto"
    #: how the system prompt lists tools: "json" (full schemas) or "compact" (one line per tool:
    #: ``name(arg: type, opt?: type) - description``; a fraction of the tokens, for small contexts)
    tools_style: str = "json"
    #: reward = (1 - w) * rubric score + w * share of well-formed tool calls (``tool_format``)
    format_weight: float = bounded(0.0, ge=0, le=1)
    #: noise level passed to ``new_episode``; -1: the environment's / dataset's own
    noise_level: int = bounded(-1, ge=-1)
    #: noise curriculum (2601 report §3.3.3) shared by the whole run (:class:`CurriculumSettings`; ``enabled: true``
    #: turns it on). Exclusive with ``noise_level``.
    noise_curriculum: CurriculumSettings = field(default_factory=CurriculumSettings)
    #: one training output per context segment (v1 trainer); False: the final segment only
    segments_as_outputs: bool = True
    #: True: the loop scores the episode (``reward_score``). False: it leaves the episode's reward
    #: record in the sample's ``extra_fields["longcat_episode"]`` and verl's reward loop scores the
    #: sample through ``reward.reward_manager`` (the ``tool_rubric`` reward reads the record), so a
    #: batch that mixes tool episodes with other rows (self-verification's single-turn rows) is
    #: scored by one reward manager, e.g. ``longcat_router`` routing each row by its data source
    reward_in_loop: bool = True

    def __post_init__(self) -> None:
        super().__post_init__()  # its check_bounds holds this class's bounded fields too
        if self.render_tools not in ("auto", "template", "system"):
            raise ValueError(f"render_tools must be 'auto', 'template' or 'system', got {self.render_tools!r}")
        if self.tools_style not in ("json", "compact"):
            raise ValueError(f"tools_style must be 'json' or 'compact', got {self.tools_style!r}")
        if isinstance(self.noise_curriculum, Mapping):  # as built from YAML: a mapping, checked by the host
            try:
                object.__setattr__(self, "noise_curriculum", CurriculumSettings(**self.noise_curriculum))
            except (TypeError, ValueError) as exc:
                raise ValueError(f"noise_curriculum: {exc}") from exc
        if self.noise_curriculum.enabled and self.noise_level >= 0:
            raise ValueError(
                f"noise_level ({self.noise_level}) and noise_curriculum are exclusive: the curriculum picks the level"
            )
        if (
            not self.reward_in_loop
            and self.segments_as_outputs
            and (self.discard_turns or self.summary_threshold_tokens)
        ):
            # verl's reward loop scores a trajectory's last output only: every segment must be scored here
            raise ValueError(
                "reward_in_loop=false scores one output per episode: set segments_as_outputs=false, or "
                f"discard_turns=0 (got {self.discard_turns}) and summary_threshold_tokens=0 "
                f"(got {self.summary_threshold_tokens})"
            )
        if self.tool_parser not in ToolParser._registry:
            raise ValueError(
                f"tool_parser {self.tool_parser!r} is not a verl tool parser; known: {sorted(ToolParser._registry)}"
            )


def load_settings() -> ToolAgentSettings:
    """The settings from the process's ``longcat:`` selection (defaults when the host has none)."""
    from longcat_plugins.host import UnknownComponentError, get_host

    try:
        found = get_host().settings_for("environment", AGENT_NAME)
    except UnknownComponentError:  # the loop was instantiated directly, outside the plugin host
        return ToolAgentSettings()
    return found if found is not None else ToolAgentSettings()


def tools_system_block(schemas: list[dict[str, Any]], style: str = "json") -> str:
    """The tool list and call format (Hermes/Qwen style), for chat templates that cannot render tools."""
    if style == "compact":
        lines = "\n".join(_compact_signature(s) for s in schemas)
    else:
        lines = "\n".join(json.dumps(s, ensure_ascii=False, sort_keys=True) for s in schemas)
    return (
        "\n\n# Tools\nYou may call these functions:\n<tools>\n"
        f"{lines}\n</tools>\n"
        'To call one, answer with <tool_call>{"name": <function-name>, "arguments": <args-json-object>}</tool_call>.'
    )


def renders_tools_in_template(tokenizer: Any, render_tools: str) -> bool:
    """Whether tool schemas go to the chat template (``render_tools``: auto/template/system)."""
    template = str(getattr(tokenizer, "chat_template", "") or "")
    return render_tools == "template" or (render_tools == "auto" and "tools" in template)


def opening_messages(
    episode: Any, tools_style: str, tools_in_template: bool
) -> tuple[dict[str, str], dict[str, str], list[dict[str, Any]] | None]:
    """(system message, first user message, tools for the chat template or None): how every trajectory starts.

    Public so that warm-start data (:mod:`longcat_plugins.environments.golden`) renders the very
    prompt the loop sends.
    """
    schemas = [plain(s) for s in episode.tool_schemas()]
    system_text = episode.system_prompt()
    if schemas and not tools_in_template:  # an episode without tools gets no tool block at all
        system_text += tools_system_block(schemas, tools_style)
    system = {"role": "system", "content": system_text}
    question = {"role": "user", "content": episode.first_user_message()}
    return system, question, (schemas if tools_in_template and schemas else None)


def tool_message_body(content: Any, limit: int) -> str:
    """A tool result as the loop puts it into the context: text, cut past ``limit`` characters."""
    body = str(content)
    return body[:limit] + "...(truncated)" if len(body) > limit else body


def _compact_signature(schema: dict[str, Any]) -> str:
    fn = schema.get("function", schema)
    params = fn.get("parameters") or {}
    required = set(params.get("required") or [])
    args = []
    for name, prop in (params.get("properties") or {}).items():
        kind = prop.get("type", "any") if isinstance(prop, dict) else "any"
        if isinstance(prop, dict) and prop.get("enum"):
            kind = "|".join(json.dumps(v) for v in prop["enum"])
        args.append(f"{name}{'' if name in required else '?'}: {'|'.join(kind) if isinstance(kind, list) else kind}")
    description = str(fn.get("description") or "").strip().splitlines()
    return f"{fn.get('name')}({', '.join(args)})" + (f" - {description[0]}" if description else "")


# -- the loop ------------------------------------------------------------------------------------


@dataclass
class Segment:
    """One context window of a trajectory: its prompt and what followed it (a training output)."""

    messages: list[dict[str, Any]]
    prompt_ids: list[int]
    token_ids: list[int]  # prompt + response so far (what the model sees)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] | None = None
    model_turns: int = 0
    other_turns: int = 0
    ending: str = ""  # summary | discard | done | max_turns | length | stop

    @property
    def response_ids(self) -> list[int]:
        return self.token_ids[len(self.prompt_ids) :]


@dataclass
class EpisodeStats:
    """Counts over a whole trajectory (all segments)."""

    model_turns: int = 0
    tool_calls: int = 0
    tool_errors: int = 0
    #: of those, injected transient failures (tool noise): retrying the same call may succeed
    transient_errors: int = 0
    calls_seen: int = 0
    calls_well_formed: int = 0
    summaries: int = 0
    discards: int = 0
    final_answer: str = ""
    finish: str = ""
    timing: dict[str, float] = field(default_factory=lambda: {"generate_sequences": 0.0, "tool_calls": 0.0})
    server_extra: dict[str, Any] = field(default_factory=dict)


class LongcatToolAgentLoop(AgentLoopBase):
    """Multi-turn tool use against a longcat environment episode, rewarded by its rubric, with context management (2601 report §3.3.2)."""

    def __init__(self, *args: Any, settings: ToolAgentSettings | None = None, **kwargs: Any) -> None:
        kwargs.pop("tools", None)  # verl's global tool list; this loop's tools come from the episode
        super().__init__(*args, **kwargs)
        self.settings = settings if settings is not None else load_settings()
        self.prompt_length = int(self.rollout_config.prompt_length)
        self.response_length = int(self.rollout_config.response_length)
        self.tool_parser = ToolParser.get_tool_parser(self.settings.tool_parser, self.tokenizer)
        self.tools_in_template = renders_tools_in_template(self.tokenizer, self.settings.render_tools)
        trainer = self.config.get("trainer", {}) if hasattr(self.config, "get") else {}
        self.multi_output = bool(self.settings.segments_as_outputs and trainer.get("use_v1", False))

    # -- entry point ------------------------------------------------------------------------

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput | list[AgentLoopOutput]:
        """One trajectory: a list of outputs (one per context segment) under the v1 trainer, else the last one."""
        extra_info = plain(kwargs.get("extra_info")) or {}
        curriculum, level = await self._curriculum_level(extra_info)
        episode = await self._open_episode(extra_info, level)
        system, question, template_tools = opening_messages(episode, self.settings.tools_style, self.tools_in_template)
        self._parser_tools = _parser_tool_schemas([plain(s) for s in episode.tool_schemas()])

        policy = ContextPolicy(self.settings, global_step=int(plain(kwargs.get("global_steps", 0)) or 0))
        stats = EpisodeStats()
        request_id = uuid4().hex
        segments = [await self._new_segment(restart_messages(system, question), template_tools)]

        while not stats.finish:
            seg = segments[-1]
            if stats.model_turns >= self.settings.max_turns:  # before any restart: no empty last segment
                stats.finish = "max_turns"
                break
            resets = stats.summaries + stats.discards
            action = policy.decide(len(seg.token_ids), seg.model_turns, resets)
            if action is ContextAction.SUMMARY:
                summary = await self._summarise(seg, sampling_params, request_id, stats, template_tools)
                if summary is None:  # no room left in this segment for the summary exchange: discard instead
                    action = ContextAction.DISCARD
                else:
                    seg.ending = "summary"
                    stats.summaries += 1
                    segments.append(
                        await self._new_segment(restart_messages(system, question, summary), template_tools)
                    )
                    continue
            if action is ContextAction.DISCARD:
                seg.ending = "discard"
                stats.discards += 1
                segments.append(await self._new_segment(restart_messages(system, question), template_tools))
                continue
            if action is ContextAction.STOP:
                stats.finish = "context_resets"
                break
            await self._turn(seg, episode, sampling_params, request_id, stats, template_tools)
            if not stats.finish and self._episode_done(episode):
                stats.finish = "done"

        kept = [s for s in segments if s.response_mask]  # a segment the model never spoke in trains nothing
        if kept:
            kept[-1].ending = kept[-1].ending or stats.finish
        outcome = await asyncio.get_running_loop().run_in_executor(None, lambda: episode.evaluate(stats.final_answer))
        curriculum_metrics: dict[str, float] = {}
        if curriculum is not None:  # every sample carries the curriculum's metrics (same keys on all)
            if level >= 0:
                curriculum_metrics = await curriculum.report(level, float(bool(outcome.success)))
            else:
                curriculum_metrics = await curriculum.metrics()
        return self._outputs(segments, episode, outcome, stats, curriculum_metrics)

    async def _curriculum_level(self, extra_info: Any) -> tuple[CurriculumClient | None, int]:
        """(the run's curriculum or None, the noise level to open the episode at; -1: the sample's own)."""
        settings = self.settings.noise_curriculum
        if not settings.enabled:
            return None, self.settings.noise_level
        client = await connect_async(service_name(self.config), settings, lambda: resume_dir(self.config))
        if not settings.joins(extra_info):
            return client, -1
        return client, await client.assign()

    # -- pieces -----------------------------------------------------------------------------

    async def _open_episode(self, extra_info: Any, level: int) -> Any:
        """The sample's episode (an environment family with other episodes overrides this)."""
        return await asyncio.get_running_loop().run_in_executor(None, lambda: open_episode(extra_info, level))

    def _episode_done(self, episode: Any) -> bool:
        """Has the episode ended the trajectory by itself (a code episode's ``submit``)? A tool-use
        episode ends when the user has no reply."""
        return False

    def _infra_error(self, outcome: Any) -> str | None:
        """Why the episode's outcome is no result (its environment failed, not the model): the sample
        is then marked invalid and never credited. None: the outcome is a result."""
        return None

    async def _new_segment(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None) -> Segment:
        prompt_ids = await self.ct_build_initial_tokens(messages, tools=tools)
        return Segment(messages=list(messages), prompt_ids=list(prompt_ids), token_ids=list(prompt_ids))

    def _room(self, seg: Segment) -> int:
        return self.response_length - len(seg.response_mask)

    async def _generate(
        self, seg: Segment, sampling_params: dict[str, Any], request_id: str, max_tokens: int, stats: EpisodeStats
    ) -> list[int]:
        """One model turn appended to ``seg`` (mask 1, with log-probs); returns the new token ids."""
        params = {**sampling_params, "max_tokens": max_tokens}
        if self.tool_parser.stop_token_ids:
            params["stop_token_ids"] = sorted(
                set((params.get("stop_token_ids") or []) + self.tool_parser.stop_token_ids)
            )
        start = time.perf_counter()
        out = await self.server_manager.generate(
            request_id=request_id, prompt_ids=seg.token_ids, sampling_params=params
        )
        stats.timing["generate_sequences"] += time.perf_counter() - start
        token_ids = list(out.token_ids)[:max_tokens]
        log_probs = list(out.log_probs)[: len(token_ids)] if out.log_probs else None
        _merge_server_extra(stats.server_extra, out.extra_fields or {})
        merge, mask, logprobs = await self.ct_merge_assistant_token(
            seg.token_ids,
            token_ids,
            seg.response_mask,
            (seg.response_logprobs or []) if (seg.response_logprobs or log_probs) else None,
            assistant_logprobs=log_probs,
        )
        seg.token_ids, seg.response_mask = merge.token_ids, mask
        if logprobs is not None:
            seg.response_logprobs = logprobs
        return token_ids

    async def _append_context(
        self, seg: Segment, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None
    ) -> bool:
        """Append non-model messages (mask 0); False (and nothing appended) if they do not fit."""
        updated = seg.messages + messages
        merge, mask, logprobs = await self.ct_merge_context_msg(
            seg.messages,
            updated,
            seg.token_ids,
            seg.response_mask,
            seg.response_logprobs if seg.response_logprobs else None,
            tools=tools,
        )
        if len(mask) >= self.response_length:
            return False
        seg.messages, seg.token_ids, seg.response_mask = updated, merge.token_ids, mask
        if seg.response_logprobs:
            seg.response_logprobs = logprobs or []
        seg.other_turns += len(messages)
        return True

    async def _turn(
        self,
        seg: Segment,
        episode: Any,
        sampling_params: dict[str, Any],
        request_id: str,
        stats: EpisodeStats,
        tools: list[dict[str, Any]] | None,
    ) -> None:
        """Model turn, then tools or the user; sets ``stats.finish`` when the trajectory ends."""
        room = self._room(seg)
        if room <= 0:
            stats.finish = "length"
            return
        token_ids = await self._generate(
            seg, sampling_params, request_id, min(self.settings.max_turn_tokens, room), stats
        )
        seg.model_turns += 1
        stats.model_turns += 1
        content, calls = await self.tool_parser.extract_tool_calls(token_ids, self._parser_tools)
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        checked = check_calls(text, {s["name"]: s.get("parameters") or {"type": "object"} for s in _functions(episode)})
        stats.calls_seen += len(checked)
        stats.calls_well_formed += sum(ok for ok, _ in checked)
        malformed = max(0, text.count("<tool_call>") - len(calls))
        stats.tool_errors += malformed
        assistant = {"role": "assistant", "content": content or ""}
        if calls:
            assistant["tool_calls"] = [
                {"type": "function", "function": {"name": c.name, "arguments": _json_or_raw(c.arguments)}}
                for c in calls[: self.settings.max_parallel_calls]
            ]
        seg.messages = seg.messages + [assistant]
        if len(seg.response_mask) >= self.response_length:
            stats.finish = "length"
            return
        if calls:
            start = time.perf_counter()
            results = [await self._call(episode, call.name, call.arguments, i, stats) for i, call in enumerate(calls)]
            stats.timing["tool_calls"] += time.perf_counter() - start
            tool_messages = [{"role": "tool", "name": name, "content": body} for name, body in results]
            if not await self._append_context(seg, tool_messages, tools):
                stats.finish = "length"
            return
        if malformed:  # the model tried a call the parser could not read: tell it, as a tool would
            note = [
                {
                    "role": "tool",
                    "name": "error",
                    "content": "Malformed <tool_call>: expected a JSON object with name and arguments.",
                }
            ]
            if not await self._append_context(seg, note, tools):
                stats.finish = "length"
            return
        reply = await asyncio.get_running_loop().run_in_executor(None, lambda: episode.user_reply(content or text))
        if reply is None:
            stats.final_answer = content or text
            stats.finish = "done"
            return
        if not await self._append_context(seg, [{"role": "user", "content": str(reply)}], tools):
            stats.finish = "length"

    async def _call(self, episode: Any, name: str, arguments: str, index: int, stats: EpisodeStats) -> tuple[str, str]:
        """Run one parsed call against the episode; (tool name, message body). Never raises."""
        if index >= self.settings.max_parallel_calls:
            stats.tool_errors += 1
            return name, f"Error: at most {self.settings.max_parallel_calls} tool calls per turn."
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError as exc:
            stats.tool_errors += 1
            return name, f"Error: arguments of {name!r} are not JSON: {exc.msg}"
        if not isinstance(args, dict):
            stats.tool_errors += 1
            return name, f"Error: arguments of {name!r} must be a JSON object"
        result = await asyncio.get_running_loop().run_in_executor(None, lambda: episode.call_tool(name, args))
        stats.tool_calls += 1
        if not result.ok:
            stats.tool_errors += 1
            stats.transient_errors += int(bool(getattr(result, "transient", False)))
        return name, tool_message_body(result.content, self.settings.max_tool_response_chars)

    async def _summarise(
        self,
        seg: Segment,
        sampling_params: dict[str, Any],
        request_id: str,
        stats: EpisodeStats,
        tools: list[dict[str, Any]] | None,
    ) -> str | None:
        """The model summarises the segment's history (the exchange ends the segment); None if it does not fit."""
        instruction = [{"role": "user", "content": self.settings.summary_instruction}]
        if not await self._append_context(seg, instruction, tools):
            return None
        room = self._room(seg)
        if room <= 0:
            return None
        token_ids = await self._generate(
            seg, sampling_params, request_id, min(self.settings.summary_max_tokens, room), stats
        )
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        return text.split("<tool_call>")[0].strip()

    def _outputs(
        self,
        segments: list[Segment],
        episode: Any,
        outcome: Any,
        stats: EpisodeStats,
        curriculum_metrics: dict[str, float] | None = None,
    ) -> Any:
        format_score = stats.calls_well_formed / stats.calls_seen if stats.calls_seen else 0.0
        w = self.settings.format_weight
        reward = (1.0 - w) * float(outcome.score) + w * format_score
        info = scored(
            reward,
            acc=float(bool(outcome.success)),
            **{
                f"{METRIC_PREFIX}success": float(bool(outcome.success)),
                f"{METRIC_PREFIX}rubric_score": float(outcome.score),
                f"{METRIC_PREFIX}format_score": float(format_score),
                f"{METRIC_PREFIX}turns": float(stats.model_turns),
                f"{METRIC_PREFIX}tool_calls": float(stats.tool_calls),
                f"{METRIC_PREFIX}tool_errors": float(stats.tool_errors),
                f"{METRIC_PREFIX}transient_errors": float(stats.transient_errors),
                f"{METRIC_PREFIX}noise_level": float(getattr(episode, "noise_level", 0) or 0),
                f"{METRIC_PREFIX}segments": float(len(segments)),
                f"{METRIC_PREFIX}summaries": float(stats.summaries),
                f"{METRIC_PREFIX}discards": float(stats.discards),
                f"{METRIC_PREFIX}finished": float(stats.finish == "done"),
                **(curriculum_metrics or {}),
            },
        )
        kept = [s for s in segments if s.response_mask]
        if not self.multi_output:
            kept = kept[-1:]
        in_loop = self.settings.reward_in_loop
        # deferred: the record the ``tool_rubric`` reward scores (verl hands extra_fields to the
        # reward manager inside extra_info); the env_* counts of ``info`` are not carried then
        record = {"score": reward, "success": float(bool(outcome.success)), "tool_calls": float(stats.tool_calls)}
        outputs = []
        for i, seg in enumerate(kept):
            response_ids = seg.response_ids[: self.response_length]
            extra = {
                **stats.server_extra,
                "turn_scores": [],
                "tool_rewards": [],
                "longcat_segment": {"index": i, "count": len(kept), "ending": seg.ending},
            }
            if in_loop:
                extra["reward_extra_info"] = dict(info)
            else:
                extra[EPISODE_KEY] = dict(record)
            outputs.append(
                AgentLoopOutput(
                    prompt_ids=seg.prompt_ids,
                    response_ids=response_ids,
                    response_mask=seg.response_mask[: self.response_length],
                    response_logprobs=seg.response_logprobs[: self.response_length] if seg.response_logprobs else None,
                    reward_score=reward if in_loop else None,
                    num_turns=seg.model_turns + seg.other_turns + 1,
                    metrics={**stats.timing, "num_preempted": -1},
                    extra_fields=extra,
                )
            )
        if not outputs:
            raise RuntimeError(f"{AGENT_NAME}: task {getattr(episode, 'task_id', '?')} produced no model tokens")
        error = self._infra_error(outcome)
        if error is not None:
            for o in outputs:
                o.reward_score = math.nan
                o.extra_fields["reward_extra_info"].update(
                    {"score": math.nan, "acc": 0.0, VALID_KEY: 0.0, ERROR_KEY: error}
                )
        return outputs if self.multi_output else outputs[0]


# -- helpers ------------------------------------------------------------------------------------


def _functions(episode: Any) -> list[dict[str, Any]]:
    out = []
    for s in episode.tool_schemas():
        s = plain(s)
        out.append(s.get("function", s) if isinstance(s, dict) else {})
    return [f for f in out if isinstance(f.get("name"), str)]


def _parser_tool_schemas(schemas: list[dict[str, Any]]) -> list[OpenAIFunctionToolSchema]:
    out = []
    for s in schemas:
        spec = s if "function" in s else {"type": "function", "function": s}
        try:
            out.append(OpenAIFunctionToolSchema.model_validate(spec))
        except Exception:  # noqa: BLE001 - parsers that need schemas skip what verl cannot model
            logger.debug("tool schema not representable for verl's parser: %r", s)
    return out


def _json_or_raw(arguments: str) -> Any:
    try:
        return json.loads(arguments)
    except (json.JSONDecodeError, TypeError):
        return arguments


def _merge_server_extra(acc: dict[str, Any], new: dict[str, Any]) -> None:
    """Keep the rollout server's per-request fields (weight versions) the way verl's tool agent does."""
    if not acc:
        acc.update(new)
        return
    if new.get("max_global_steps") is not None:
        acc["max_global_steps"] = new["max_global_steps"]
