"""The planner's runtime half, shared by every trainer that plans its prompts.

:class:`PlannedData` turns the planner's decisions into verl prompt rows and verl's trained
batches back into the planner's observations, the same way under the ``longcat_data`` sync
trainer (one planned batch per step) and the ``dora`` streaming trainer (planned chunks as
capacity frees):

* **rows**: each planned group is one verl prompt row with its own uid (the key GRPO
  normalises by), ``__rollout_n__`` (the per-prompt ``n`` verl's agent-loop worker reads), a
  ``longcat_group`` id ``<task>#<copy>`` and, with the D6 context curriculum, its response
  budget ``longcat_max_tokens``;
* **self-verification (A6)**: during a phase, verification rows (problem + one recent rollout)
  shaped like the main rows;
* **observe**: rewards (``rm_scores``), lengths and, for A6, response texts of the trained
  groups, read from TransferQueue, folded into the planner and the verification phase;
* **state**: the planner's and the phase's, one JSON document saved with verl's checkpoint.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from longcat_plugins.data.planner import Candidate, DataPlanner, GroupResult, RowPlan
from longcat_plugins.data.replay import GroupRef
from longcat_plugins.data.selfverify import CORRECT, Judged, SelfVerification, parse_verdict
from longcat_plugins.data.selfverify import DATA_SOURCE as VERIFY_SOURCE
from longcat_plugins.data.settings import SETTINGS_PATH, DataSettings
from longcat_plugins.data.strategy import load_strategy

logger = logging.getLogger(__name__)

GROUP_KEY = "longcat_group"
MAX_TOKENS_KEY = "longcat_max_tokens"
ROLLOUT_N_KEY = "__rollout_n__"
#: the per-row agent loop verl's agent-loop worker runs (``default_agent_loop`` where absent)
AGENT_KEY = "agent_name"


def problem_text(raw_prompt: Any) -> str:
    """The task as the policy saw it: the last user message of a chat prompt (or the prompt)."""
    if isinstance(raw_prompt, str):
        return raw_prompt
    messages = list(raw_prompt)
    users = [m for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    last = users[-1] if users else messages[-1]
    return str(last["content"] if isinstance(last, dict) else last)


def prompt_tokens(tokenizer: Any, messages: list[dict[str, str]]) -> int:
    """Tokens of ``messages`` as the single-turn agent loop sends them (chat template, generation
    prompt): what must fit ``rollout.prompt_length`` before the loop left-truncates."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def objects(values: list[Any]) -> np.ndarray:
    """A 1-d object array of ``values`` (numpy would otherwise stack nested lists)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def field(batch: Mapping[str, Any], path: str, i: int) -> Any:
    """Row ``i``'s value at a dotted ``path`` (``data_source``, ``extra_info.stage``); ``None`` if absent."""
    head, *rest = path.split(".")
    if head not in batch:
        return None
    value = batch[head][i]
    for part in rest:
        if not isinstance(value, dict) or part not in value:
            return None
        value = value[part]
    return value.item() if hasattr(value, "item") else value


def candidates_of(batch: Mapping[str, Any], settings: DataSettings) -> list[Candidate]:
    """The planner's view of a batch of dataloader rows (one candidate per row)."""
    rows = len(batch["raw_prompt"])
    out = []
    for i in range(rows):
        task = field(batch, settings.task_key, i)
        if task is None:
            raise ValueError(f"{SETTINGS_PATH}.task_key={settings.task_key!r}: the row has no such field")
        domain = field(batch, settings.quotas.domain_key, i) if settings.quotas.enable else ""
        if settings.quotas.enable and domain is None:
            raise ValueError(
                f"{SETTINGS_PATH}.quotas.domain_key={settings.quotas.domain_key!r}: the row has no such field"
            )
        stage = None
        if settings.curriculum.enable and settings.curriculum.stage_key:
            stage = field(batch, settings.curriculum.stage_key, i)
            if stage is None:
                raise ValueError(
                    f"{SETTINGS_PATH}.curriculum.stage_key={settings.curriculum.stage_key!r}: the row has no such field"
                )
        historical = field(batch, settings.pass_rate_key, i) if settings.pass_rate_key else None
        out.append(
            Candidate(
                str(task),
                str(domain or ""),
                None if stage is None else str(stage),
                None if historical is None else float(historical),
            )
        )
    return out


def take(batch: Mapping[str, Any], index: list[int]) -> dict[str, Any]:
    """Rows ``index`` of a column batch (tensors and object arrays alike)."""
    idx = np.asarray(index, dtype=np.int64)
    return {
        k: (v[torch.as_tensor(idx)] if isinstance(v, torch.Tensor) else np.asarray(v, dtype=object)[idx])
        for k, v in batch.items()
    }


def concat(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    """Column batches one after another."""
    if len(chunks) == 1:
        return chunks[0]
    return {
        k: torch.cat([c[k] for c in chunks])
        if isinstance(chunks[0][k], torch.Tensor)
        else np.concatenate([c[k] for c in chunks])
        for k in chunks[0]
    }


def columns(rows: Any) -> dict[str, Any]:
    """A verl TensorDict of prompt rows as a column batch (tensors kept, the rest object arrays)."""
    out: dict[str, Any] = {}
    for key in rows.keys():
        value = rows[key]
        out[key] = value if isinstance(value, torch.Tensor) else objects(list(value))
    return out


def merge_plan_metrics(step: dict[str, float], chunk: Mapping[str, float]) -> None:
    """Fold one chunk's planning metrics into the step's (a streaming trainer plans a step in
    chunks): counts add up, per-task maxima and minima stay extremes, the rest is the latest."""
    for key, value in chunk.items():
        if key not in step:
            step[key] = value
        elif key.endswith(("/plan/tasks", "/plan/groups", "/plan/rollouts", "/plan/budget", "/tasks_seen_before")):
            step[key] += value
        elif key.endswith("/max"):
            step[key] = max(step[key], value)
        elif key.endswith("/min"):
            step[key] = min(step[key], value)
        else:
            step[key] = value


def build_planner(settings: DataSettings, batch_prompts: int, rollout_n: int, seed: int) -> DataPlanner:
    """The planner with the plugins' strategies of ``settings.strategies`` loaded by name."""
    strategies = [
        load_strategy(name, settings.strategy_settings.get(name, {}), f"{SETTINGS_PATH}.strategies[{i}]")
        for i, name in enumerate(settings.strategies)
    ]
    return DataPlanner(settings, batch_prompts=batch_prompts, rollout_n=rollout_n, seed=seed, strategies=strategies)


class PlannedData:
    """The planner, the verification phase and the groups in flight, for one training run."""

    def __init__(self, settings: DataSettings, config: Any, tokenizer: Any = None) -> None:
        self.settings = settings
        self.tokenizer = tokenizer
        self.prompt_limit = int(config.actor_rollout_ref.rollout.prompt_length)
        self.planner = build_planner(
            settings,
            batch_prompts=int(config.data.train_batch_size),
            rollout_n=int(config.actor_rollout_ref.rollout.n),
            seed=int(config.data.get("seed", 0) or 0),
        )
        #: uid -> the group it is, for every group submitted and not yet trained or dropped
        self.group_refs: dict[str, GroupRef] = {}
        sv = settings.selfverify
        #: A6: the verification phase, the problem text of every main group, the verification uids
        self.selfverify = SelfVerification(sv) if sv.enable else None
        self.problems: dict[str, str] = {}
        self.verify_uids: set[str] = set()
        #: groups that left the queue untrained since the last observe: uid -> (group, verification?)
        self.gone: dict[str, tuple[GroupRef, bool]] = {}
        self.verify_truncated = 0
        #: the loop the verification rows run in, and the one main rows without ``agent_name`` run in
        agent = config.actor_rollout_ref.rollout.get("agent", None) or {}
        self.default_loop = str(agent.get("default_agent_loop", None) or "single_turn_agent")
        self.verify_loop = sv.agent_loop or self.default_loop

    # -- rows -----------------------------------------------------------------------------------

    def rows(self, pool: dict[str, Any], plan: list[RowPlan], step: int, verify: bool = True) -> dict[str, Any]:
        """The planned rows of ``pool`` as verl prompt rows (plus this step's verification rows
        when ``verify``), each group registered under its new uid."""
        batch = take(pool, [r.row for r in plan])
        uids = [str(uuid.uuid4()) for _ in plan]
        batch["uid"] = np.array(uids, dtype=object)
        batch[ROLLOUT_N_KEY] = np.array([r.rollouts for r in plan], dtype=object)
        batch[GROUP_KEY] = np.array([r.group_id for r in plan], dtype=object)
        if any(r.max_tokens is not None for r in plan):
            batch[MAX_TOKENS_KEY] = np.array([r.max_tokens for r in plan], dtype=object)
        for uid, r in zip(uids, plan, strict=True):
            self.group_refs[uid] = GroupRef(uid, r.task, r.domain, step, r.group)
        if self.selfverify is not None:
            for uid, prompt in zip(uids, batch["raw_prompt"], strict=True):
                self.problems[uid] = problem_text(prompt)
            extra = (
                self.verification_rows(take(pool, [plan[0].row]), plan[0].max_tokens, step) if verify and plan else None
            )
            if extra is not None:
                if AGENT_KEY in extra and AGENT_KEY not in batch:  # one column for both: verl reads it per row
                    batch[AGENT_KEY] = objects([self.default_loop] * len(plan))
                batch = concat([batch, extra])
        return batch

    def verification_rows(self, template: dict[str, Any], max_tokens: int | None, step: int) -> dict[str, Any] | None:
        """A6: this step's verification prompts (problem + one recent rollout), shaped like the
        main rows (copies of ``template``, a one-row batch, with prompt, source, truth and info
        replaced); ``None`` outside a phase."""
        if self.selfverify is None:
            return None
        judged = self.selfverify.to_judge()
        if not judged:
            return None
        sv = self.settings.selfverify
        rows = take(template, [0] * len(judged))
        uids = [str(uuid.uuid4()) for _ in judged]
        rows["uid"] = np.array(uids, dtype=object)
        messages = [[{"role": "user", "content": self.selfverify.prompt(j)}] for j in judged]
        rows["raw_prompt"] = objects(messages)
        if self.tokenizer is not None:
            self.verify_truncated = sum(prompt_tokens(self.tokenizer, m) > self.prompt_limit for m in messages)
        if self.verify_truncated:
            logger.warning(
                "step %d: %d of %d verification prompts exceed data.max_prompt_length=%d and the agent loop "
                "left-truncates them: shorten %s.selfverify.prompt or raise data.max_prompt_length",
                step,
                self.verify_truncated,
                len(messages),
                self.prompt_limit,
                SETTINGS_PATH,
            )
        rows["data_source"] = objects([VERIFY_SOURCE] * len(judged))
        target = ["correct" if j.correct else "incorrect" for j in judged]
        rows["reward_model"] = objects([{"style": "rule", "ground_truth": t} for t in target])
        base = rows.get("extra_info")
        rows["extra_info"] = objects(
            [
                {
                    **(dict(base[i]) if base is not None and isinstance(base[i], dict) else {}),
                    "selfverify_task": j.task,
                    "selfverify_correct": sv.correct,
                    "selfverify_incorrect": sv.incorrect,
                }
                for i, j in enumerate(judged)
            ]
        )
        rows[ROLLOUT_N_KEY] = objects([sv.rollouts or self.planner.rollout_n] * len(judged))
        rows[GROUP_KEY] = objects([f"selfverify:{j.task}#{i}" for i, j in enumerate(judged)])
        if max_tokens is not None:
            rows[MAX_TOKENS_KEY] = objects([max_tokens] * len(judged))
        if AGENT_KEY in rows or self.verify_loop != self.default_loop:
            # a copied tool row names its episode loop: the verification prompt is single-turn
            rows[AGENT_KEY] = objects([self.verify_loop] * len(judged))
        for i, (uid, j) in enumerate(zip(uids, judged, strict=True)):
            self.group_refs[uid] = GroupRef(uid, f"selfverify:{j.task}", VERIFY_SOURCE, step, i)
            self.verify_uids.add(uid)
        return rows

    def retain(self, live: set[str]) -> int:
        """Set aside the groups that left verl's queue untrained (a streaming trainer's sampler
        drops filtered and stale groups without a word to the planner) until the next
        :meth:`observe`, which learns from those that online filtering dropped; returns how many."""
        gone = [uid for uid in self.group_refs if uid not in live]
        for uid in gone:
            self._set_aside(uid)
        return len(gone)

    def _set_aside(self, uid: str) -> None:
        """Move a submitted group out of the live records into :attr:`gone`."""
        self.gone[uid] = (self.group_refs.pop(uid), uid in self.verify_uids)
        self.problems.pop(uid, None)
        self.verify_uids.discard(uid)

    # -- learning from the trained batch --------------------------------------------------------

    def observe(
        self,
        tq: Any,
        batch: Any,
        replayed: set[str],
        step: int,
        filtered: Mapping[str, Sequence[float]] | None = None,
    ) -> dict[str, float]:
        """Rewards and lengths of the trained groups of ``batch`` (a TransferQueue
        ``KVBatchMeta``, read through ``tq``) -> planner and verification phase; their metrics.

        ``filtered``: the rewards of the groups online filtering dropped since the last step (by
        uid; DORA's sampler). They are not trained, but their outcomes count: a main group's
        rewards move its task's pass rate (else the all-correct and all-wrong prompts that
        budget allocation and oversampling exist for would never be seen), and a verification
        group's verdicts are judged (a group without signal is one whose verdicts all agree)."""
        fields = ["rm_scores"] if self.selfverify is None else ["rm_scores", "responses"]
        data = tq.kv_batch_get(keys=batch.keys, partition_id=batch.partition_id, select_fields=fields)
        scores = list(data["rm_scores"])
        texts = self._responses(data, batch) if self.selfverify is not None else [""] * len(scores)
        per_uid: dict[str, tuple[list[float | None], list[int], list[str]]] = {}
        for key, tag, score, text in zip(batch.keys, batch.tags, scores, texts, strict=True):
            value = float(score.sum().item())
            rewards, lengths, responses = per_uid.setdefault(key.split("_")[0], ([], [], []))
            rewards.append(value if math.isfinite(value) else None)
            lengths.append(int(tag.get("response_len", 0)))
            responses.append(text)
        results = []
        verify_rewards: list[float] = []
        verdicts: list[str | None] = []
        sv = self.settings.selfverify
        main_rewards: list[float] = []
        judged: list[Judged] = []
        threshold = self.settings.correct_threshold
        for uid, (rewards, lengths, responses) in per_uid.items():
            ref = self.group_refs.pop(uid, None)
            if ref is None:
                continue
            if uid in self.verify_uids:
                self.verify_uids.discard(uid)
                verify_rewards += [r for r in rewards if r is not None]
                verdicts += [parse_verdict(text, sv.correct, sv.incorrect) for text in responses]
                continue
            results.append(GroupResult(ref.task, ref.group, rewards, lengths, replayed=uid in replayed))
            problem = self.problems.pop(uid, None)
            if self.selfverify is None or uid in replayed or problem is None:
                continue
            valid = [r for r in rewards if r is not None]
            main_rewards += valid
            acc = sum(r >= threshold for r in valid) / len(valid) if valid else 0.0
            judged += [
                Judged(ref.task, step, problem, text.strip(), r >= threshold, acc)
                for r, text in zip(rewards, responses, strict=True)
                if r is not None and text.strip()
            ]
        dropped: list[GroupResult] = []
        verify_dropped: list[float] = []
        for uid, rewards in (filtered or {}).items():
            if uid in self.group_refs:  # dropped, and not yet set aside by retain
                self._set_aside(uid)
            ref, verifies = self.gone.pop(uid, (None, False))
            if ref is None:
                continue
            if verifies:
                verify_dropped += [float(r) for r in rewards if math.isfinite(r)]
            else:
                dropped.append(GroupResult(ref.task, ref.group, [r if math.isfinite(r) else None for r in rewards], []))
        self.gone = {}
        metrics = self.planner.observe(results, filtered=dropped)
        if self.selfverify is not None:
            metrics.update(self.selfverify.observe(step, main_rewards, verify_rewards, judged, verify_dropped))
            if verify_rewards:
                metrics["longcat/selfverify/truncated_prompts"] = float(self.verify_truncated)
            said = [v for v in verdicts if v is not None]
            if said:  # near 0 or 1 with accuracy near 0.5: a constant verdict, not judging
                metrics["longcat/selfverify/verify_says_correct"] = said.count(CORRECT) / len(said)
            if main_rewards:
                metrics["longcat/selfverify/main_accuracy"] = sum(r >= threshold for r in main_rewards) / len(
                    main_rewards
                )
        return metrics

    def _responses(self, data: Any, batch: Any) -> list[str]:
        """Each sample's response text (the candidate solutions of A6), cut at its length."""
        if self.tokenizer is None:
            raise RuntimeError(f"{SETTINGS_PATH}.selfverify needs the tokenizer to read the responses")
        responses = data["responses"]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        if hasattr(responses, "to_padded_tensor"):
            responses = responses.to_padded_tensor(padding=pad)
        return [
            self.tokenizer.decode(ids[: int(tag.get("response_len", len(ids)))], skip_special_tokens=True)
            for ids, tag in zip(responses, batch.tags, strict=True)
        ]

    # -- state ----------------------------------------------------------------------------------

    def state_dict(self, in_flight: bool = False) -> dict[str, Any]:
        """Planner and verification phase, JSON-serialisable; ``in_flight``: also the groups
        submitted and not yet trained (a streaming trainer's checkpoint keeps them in verl's
        queue, and they must still be known to the planner when they are trained after resume)."""
        state = self.planner.state_dict()
        if self.selfverify is not None:
            state["selfverify"] = self.selfverify.state_dict()
        if in_flight:
            state["in_flight"] = {
                "groups": {uid: dict(ref.__dict__) for uid, ref in self.group_refs.items()},
                "problems": dict(self.problems),
                "verify_uids": sorted(self.verify_uids),
            }
        return state

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.planner.load_state_dict(state)
        if self.selfverify is not None and state.get("selfverify") is not None:
            self.selfverify.load_state_dict(state["selfverify"])
        flight = state.get("in_flight")
        if flight is not None:
            self.group_refs = {uid: GroupRef(**ref) for uid, ref in flight["groups"].items()}
            self.problems = dict(flight["problems"])
            self.verify_uids = set(flight["verify_uids"])


__all__ = [
    "GROUP_KEY",
    "MAX_TOKENS_KEY",
    "PlannedData",
    "build_planner",
    "candidates_of",
    "columns",
    "concat",
    "problem_text",
    "prompt_tokens",
    "take",
]
