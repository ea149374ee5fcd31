"""The data strategies inside verl's v1 trainer: ``trainer.v1.trainer_mode=longcat_data``.

verl's synchronous v1 trainer (``PPOTrainerSync``) with its prompt supply and batch choice
replaced by :class:`~longcat_plugins.data.planner.DataPlanner`, at the seams verl offers:

* **Prompts** (``_next_train_batch``): ``pool_factor × train_batch_size`` prompts are drawn from
  verl's dataloader; the planner picks tasks (curriculum order, per-domain rollout quotas) and
  gives each row its rollout count through ``__rollout_n__``, the per-prompt ``n`` verl's
  agent-loop worker reads ("user can dynamically adjust n for each sample here"). A task split
  into k groups (D5/A5) is k rows, each with its own uid (the key verl's GRPO and
  ``longcat_grpo`` normalise by) and a ``longcat_group`` id ``<task>#<j>``; a response budget
  (D6) rides along as ``longcat_max_tokens`` for the ``longcat_single_turn`` agent loop.
* **Batch** (the replay buffer, :class:`DataReplayBuffer`): verl's sync ``ReplayBuffer`` waits
  until every group of the step has finished; the planner chooses the trained groups (S4
  balance, D2 replay of earlier surplus) and learns from their rewards (pass rates, live
  accuracy, lengths). Its metrics join verl's as ``longcat/data/*``.
* **Checkpoints**: the planner's state is written beside verl's ``data.pt`` as
  ``longcat_data.json`` and read back on resume, so a resumed run plans what an uninterrupted
  one would.
"""

from __future__ import annotations

import json
import logging
import math
import os
import uuid
from typing import Any

import numpy as np
import torch
from omegaconf import DictConfig
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1 import replay_buffer as verl_replay_buffer
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu

from longcat_plugins.data.planner import Candidate, DataPlanner, GroupResult, RowPlan
from longcat_plugins.data.replay import GroupRef
from longcat_plugins.data.selfverify import CORRECT, Judged, SelfVerification, parse_verdict
from longcat_plugins.data.selfverify import DATA_SOURCE as VERIFY_SOURCE
from longcat_plugins.data.settings import SETTINGS_PATH, DataSettings, data_settings

logger = logging.getLogger(__name__)

MODE = "longcat_data"
STATE_FILE = "longcat_data.json"
#: the agent loop that applies a per-request response budget (D6)
BUDGETED_AGENT_LOOP = "longcat_single_turn"
GROUP_KEY = "longcat_group"
MAX_TOKENS_KEY = "longcat_max_tokens"
ENV_TRACE = "LONGCAT_DATA_TRACE"


def check_config(config: DictConfig) -> list[str]:
    """Problems that stop a ``longcat_data`` run, each naming its key path."""
    problems: list[str] = []
    from omegaconf import OmegaConf

    raw = OmegaConf.select(config, "longcat.settings.scheduler.longcat_data", default=None)
    try:
        settings = DataSettings(**(OmegaConf.to_container(raw, resolve=True) if raw is not None else {}))
    except (TypeError, ValueError):
        return problems  # the settings check reports these with their key path
    if not config.trainer.get("use_v1", False):
        problems.append(f"trainer.use_v1: the {MODE} trainer is a v1 trainer; set trainer.use_v1=true")
    algorithm = config.get("algorithm", {}) or {}
    if (algorithm.get("filter_groups", None) or {}).get("enable", False):
        problems.append(
            f"algorithm.filter_groups.enable: the {MODE} trainer chooses its own batches; turn DAPO filtering off"
        )
    if int(config.trainer.v1.get(MODE, {}).get("parameter_sync_step", 1) or 1) != 1:
        problems.append(f"trainer.v1.{MODE}.parameter_sync_step: must be 1 (one planned batch per step)")
    batch, n = int(config.data.train_batch_size), int(config.actor_rollout_ref.rollout.n)
    b = settings.budget
    if b.enable:
        budget = b.budget or batch * n
        if budget < b.n_min:
            problems.append(f"{SETTINGS_PATH}.budget.budget: {budget} rollouts cannot give one task n_min={b.n_min}")
    ctx = settings.context
    if ctx.enable:
        limit = int(config.data.max_response_length)
        if max(ctx.budgets) > limit:
            problems.append(
                f"{SETTINGS_PATH}.context.budgets: the largest budget {max(ctx.budgets)} exceeds "
                f"data.max_response_length ({limit}), the rollout's ceiling"
            )
        agent = config.actor_rollout_ref.rollout.agent.get("default_agent_loop", None)
        if agent != BUDGETED_AGENT_LOOP:
            problems.append(
                f"actor_rollout_ref.rollout.agent.default_agent_loop: {SETTINGS_PATH}.context needs the "
                f"{BUDGETED_AGENT_LOOP!r} agent loop (it applies the per-request budget), got {agent!r}"
            )
    sv = settings.selfverify
    if sv.enable:
        name = OmegaConf.select(config, "reward.custom_reward_function.name", default=None)
        if name != "selfverify":
            problems.append(
                f"reward.custom_reward_function.name: {SETTINGS_PATH}.selfverify needs the 'selfverify' reward "
                f"(it scores the verdicts; its setting main names the main task's reward), got {name!r}"
            )
        if settings.quotas.enable:
            problems.append(f"{SETTINGS_PATH}.selfverify: not combined with quotas yet (turn one off)")
    return problems


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


def _objects(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _field(batch: dict[str, Any], path: str, i: int) -> Any:
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


def candidates_of(batch: dict[str, Any], settings: DataSettings) -> list[Candidate]:
    """The planner's view of a dataloader batch (one candidate per row)."""
    rows = len(batch["raw_prompt"])
    out = []
    for i in range(rows):
        task = _field(batch, settings.task_key, i)
        if task is None:
            raise ValueError(f"{SETTINGS_PATH}.task_key={settings.task_key!r}: the row has no such field")
        domain = _field(batch, settings.quotas.domain_key, i) if settings.quotas.enable else ""
        if settings.quotas.enable and domain is None:
            raise ValueError(
                f"{SETTINGS_PATH}.quotas.domain_key={settings.quotas.domain_key!r}: the row has no such field"
            )
        stage = None
        if settings.curriculum.enable and settings.curriculum.stage_key:
            stage = _field(batch, settings.curriculum.stage_key, i)
            if stage is None:
                raise ValueError(
                    f"{SETTINGS_PATH}.curriculum.stage_key={settings.curriculum.stage_key!r}: the row has no such field"
                )
        historical = _field(batch, settings.pass_rate_key, i) if settings.pass_rate_key else None
        out.append(
            Candidate(
                str(task),
                str(domain or ""),
                None if stage is None else str(stage),
                None if historical is None else float(historical),
            )
        )
    return out


def _take(batch: dict[str, Any], index: list[int]) -> dict[str, Any]:
    idx = np.asarray(index, dtype=np.int64)
    return {
        k: (v[torch.as_tensor(idx)] if isinstance(v, torch.Tensor) else np.asarray(v, dtype=object)[idx])
        for k, v in batch.items()
    }


def _concat(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    if len(chunks) == 1:
        return chunks[0]
    return {
        k: torch.cat([c[k] for c in chunks])
        if isinstance(chunks[0][k], torch.Tensor)
        else np.concatenate([c[k] for c in chunks])
        for k in chunks[0]
    }


class DataReplayBuffer(ReplayBuffer):
    """verl's sync replay buffer; the planner picks the trained groups and learns from them."""

    def __init__(self, *args: Any, trainer: LongcatDataTrainer, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.trainer = trainer
        self._replayed: set[str] = set()
        self._choice_metrics: dict[str, float] = {}

    def _select_prompt_uids(
        self, partition_id: str, sampleable_keys: set[str], batch_size: int
    ) -> tuple[list[str], dict[str, dict], dict[str, int]]:
        if partition_id == "val":
            return super()._select_prompt_uids(partition_id, sampleable_keys, batch_size)
        _, partition, steps = super()._select_prompt_uids(partition_id, sampleable_keys, 0)
        planner, refs = self.trainer.planner, self.trainer.group_refs
        verify = self.trainer.verify_uids
        fresh = [
            refs[uid]
            for uid in sorted(sampleable_keys)
            if uid in refs and uid not in verify and uid not in self.trainer.buffered_uids()
        ]
        choice, self._choice_metrics = planner.choose(fresh, self.trainer.global_steps)
        self._replayed = {g.uid for g in choice.replayed}
        gone = {g.uid for g in choice.dropped}
        stray = sampleable_keys - set(refs)  # refills of failed groups: trained as they are
        if gone:
            self._clear_groups(partition_id, gone)
            for uid in gone:
                refs.pop(uid, None)
        # A6 judges only fresh groups trained now: a buffered or dropped group's problem text is never read
        trained = {g.uid for g in choice.train}
        problems = self.trainer.problems
        for uid in [u for u in problems if u not in trained]:
            del problems[uid]
        self.trainer.trace_trained(choice.train, len(stray))
        # verification prompts (A6) train in the same batch as the main groups they judge
        judged = sorted(sampleable_keys & verify)
        return [g.uid for g in choice.train] + judged + sorted(stray), partition, steps

    def sample(self, global_steps: int, partition_id: str, batch_size: int) -> tuple[KVBatchMeta, dict]:
        if partition_id == "val":
            return super().sample(global_steps, partition_id, batch_size)
        # wait for every group this step started, plus the buffered ones still in TransferQueue
        wait_for = self.trainer.step_groups + len(self.trainer.buffered_uids())
        batch, metrics = super().sample(global_steps, partition_id, wait_for)
        metrics.update(self._choice_metrics)
        metrics.update(self.trainer.observe(batch, self._replayed))
        return batch, metrics


class LongcatDataTrainer(PPOTrainerSync):
    """verl's sync v1 trainer with planned prompts: budgets, oversampled groups, curricula, replay, quotas."""

    #: run by ``longcat-plugins validate`` and the Hydra callback before Ray starts
    check_config = staticmethod(check_config)

    def __init__(self, config: DictConfig) -> None:
        problems = check_config(config)
        if problems:
            raise ValueError(f"{MODE} trainer: invalid configuration:\n  " + "\n  ".join(problems))
        self.data: DataSettings = data_settings()
        self.planner = DataPlanner(
            self.data,
            batch_prompts=int(config.data.train_batch_size),
            rollout_n=int(config.actor_rollout_ref.rollout.n),
            seed=int(config.data.get("seed", 0) or 0),
        )
        #: uid -> the group it is, for every group submitted and not yet trained or dropped
        self.group_refs: dict[str, GroupRef] = {}
        self.step_groups = 0
        self._plan_metrics: dict[str, float] = {}
        self._verify_truncated = 0
        sv = self.data.selfverify
        #: A6: the verification phase, the problem text of every main group, the verification uids
        self.selfverify = SelfVerification(sv) if sv.enable else None
        self.problems: dict[str, str] = {}
        self.verify_uids: set[str] = set()
        super().__init__(config)

    def buffered_uids(self) -> set[str]:
        replay = self.planner.replay
        return {g.uid for g in replay.items} if replay is not None else set()

    # -- the seams ------------------------------------------------------------------------------

    def _build_replay_buffer(self) -> DataReplayBuffer:
        sampler = self.config.trainer.v1.sampler
        return DataReplayBuffer(
            trainer_mode=self.trainer_mode,
            trainer_config=self.config.trainer.v1.get(self.trainer_mode, {}),
            max_off_policy_threshold=sampler.max_off_policy_threshold,
            max_off_policy_strategy=sampler.max_off_policy_strategy,
            sampler_kwargs=sampler.sampler_kwargs,
            refill_fn=self._add_prompts_to_generate,
            trainer=self,
        )

    def _draw(self) -> dict[str, Any]:
        """One dataloader batch (verl's own iterator, restarted at the end of an epoch)."""
        try:
            if self.train_dataloader_it is None:
                self.train_dataloader_it = iter(self.train_dataloader)
            return next(self.train_dataloader_it)
        except StopIteration:
            self.train_dataloader_it = iter(self.train_dataloader)
            return next(self.train_dataloader_it)

    def _next_train_batch(self, num_prompts: int | None = None) -> Any:
        if num_prompts is not None and num_prompts != self.config.data.train_batch_size:
            return super()._next_train_batch(num_prompts)  # verl's refill of failed groups
        gen = self.config.data.get("gen_batch_size", None) or self.config.data.train_batch_size
        draws = math.ceil(self.data.pool_factor * self.config.data.train_batch_size / gen)
        pool = _concat([self._draw() for _ in range(draws)])
        plan, self._plan_metrics = self.planner.plan(candidates_of(pool, self.data))
        self._trace(plan)
        return self._rows(pool, plan)

    def _trace(self, plan: list[RowPlan]) -> None:
        """With ``LONGCAT_DATA_TRACE`` set, one JSON line per step: the planned rows."""
        rows = [[r.task, r.group, r.rollouts, r.max_tokens] for r in plan]
        self._trace_line({"step": self.global_steps, "rows": rows})

    def trace_trained(self, train: list[GroupRef], strays: int) -> None:
        """With ``LONGCAT_DATA_TRACE`` set, one more line per step: the groups it trains (task,
        copy, step that generated it), sorted, and how many unplanned refills rode along."""
        groups = sorted([g.task, g.group, g.step] for g in train)
        self._trace_line({"step": self.global_steps, "trained": groups, "strays": strays})

    def _trace_line(self, record: dict[str, Any]) -> None:
        path = os.environ.get(ENV_TRACE)
        if path:
            with open(path, "a") as sink:
                sink.write(json.dumps(record) + "\n")

    def _rows(self, pool: dict[str, Any], plan: list[RowPlan]) -> Any:
        batch = _take(pool, [r.row for r in plan])
        uids = [str(uuid.uuid4()) for _ in plan]
        batch["uid"] = np.array(uids, dtype=object)
        batch["__rollout_n__"] = np.array([r.rollouts for r in plan], dtype=object)
        batch[GROUP_KEY] = np.array([r.group_id for r in plan], dtype=object)
        if any(r.max_tokens is not None for r in plan):
            batch[MAX_TOKENS_KEY] = np.array([r.max_tokens for r in plan], dtype=object)
        for uid, r in zip(uids, plan, strict=True):
            self.group_refs[uid] = GroupRef(uid, r.task, r.domain, self.global_steps, r.group)
        if self.selfverify is not None:
            for uid, prompt in zip(uids, batch["raw_prompt"], strict=True):
                self.problems[uid] = problem_text(prompt)
            verify = self._verification_rows(pool, plan)
            if verify is not None:
                batch = _concat([batch, verify])
        self.step_groups = len(batch["uid"])
        out = tu.get_tensordict(batch)
        tu.assign_non_tensor_data(out, "global_steps", self.global_steps)
        return out

    def _verification_rows(self, pool: dict[str, Any], plan: list[RowPlan]) -> dict[str, Any] | None:
        """A6: this step's verification prompts (problem + one recent rollout), shaped like the
        main rows (copies of the first planned row with prompt, source, truth and info replaced)."""
        assert self.selfverify is not None
        judged = self.selfverify.to_judge()
        if not judged or not plan:
            return None
        sv = self.data.selfverify
        rows = _take(pool, [plan[0].row] * len(judged))
        uids = [str(uuid.uuid4()) for _ in judged]
        rows["uid"] = np.array(uids, dtype=object)
        messages = [[{"role": "user", "content": self.selfverify.prompt(j)}] for j in judged]
        rows["raw_prompt"] = _objects(messages)
        limit = int(self.config.actor_rollout_ref.rollout.prompt_length)
        self._verify_truncated = sum(prompt_tokens(self.tokenizer, m) > limit for m in messages)
        if self._verify_truncated:
            logger.warning(
                "step %d: %d of %d verification prompts exceed data.max_prompt_length=%d and the agent loop "
                "left-truncates them: shorten %s.selfverify.prompt or raise data.max_prompt_length",
                self.global_steps,
                self._verify_truncated,
                len(messages),
                limit,
                SETTINGS_PATH,
            )
        rows["data_source"] = _objects([VERIFY_SOURCE] * len(judged))
        target = ["correct" if j.correct else "incorrect" for j in judged]
        rows["reward_model"] = _objects([{"style": "rule", "ground_truth": t} for t in target])
        base = rows.get("extra_info")
        rows["extra_info"] = _objects(
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
        rows["__rollout_n__"] = _objects([sv.rollouts or self.planner.rollout_n] * len(judged))
        rows[GROUP_KEY] = _objects([f"selfverify:{j.task}#{i}" for i, j in enumerate(judged)])
        if plan[0].max_tokens is not None:
            rows[MAX_TOKENS_KEY] = _objects([plan[0].max_tokens] * len(judged))
        for i, (uid, j) in enumerate(zip(uids, judged, strict=True)):
            self.group_refs[uid] = GroupRef(uid, f"selfverify:{j.task}", VERIFY_SOURCE, self.global_steps, i)
            self.verify_uids.add(uid)
        return rows

    # -- learning from the trained batch --------------------------------------------------------

    def observe(self, batch: KVBatchMeta, replayed: set[str]) -> dict[str, float]:
        """Rewards and lengths of the trained groups -> planner; its metrics for this step."""
        fields = ["rm_scores"] if self.selfverify is None else ["rm_scores", "responses"]
        data = verl_replay_buffer.tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=fields
        )
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
        sv = self.data.selfverify
        main_rewards: list[float] = []
        judged: list[Judged] = []
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
            threshold = self.data.correct_threshold
            acc = sum(r >= threshold for r in valid) / len(valid) if valid else 0.0
            judged += [
                Judged(ref.task, self.global_steps, problem, text.strip(), r >= threshold, acc)
                for r, text in zip(rewards, responses, strict=True)
                if r is not None and text.strip()
            ]
        metrics = dict(self._plan_metrics)
        metrics.update(self.planner.observe(results))
        if self.selfverify is not None:
            metrics.update(self.selfverify.observe(self.global_steps, main_rewards, verify_rewards, judged))
            if verify_rewards:
                metrics["longcat/selfverify/truncated_prompts"] = float(self._verify_truncated)
            said = [v for v in verdicts if v is not None]
            if said:  # near 0 or 1 with accuracy near 0.5: a constant verdict, not judging
                metrics["longcat/selfverify/verify_says_correct"] = said.count(CORRECT) / len(said)
            threshold = self.data.correct_threshold
            if main_rewards:
                metrics["longcat/selfverify/main_accuracy"] = sum(r >= threshold for r in main_rewards) / len(
                    main_rewards
                )
        return metrics

    def _responses(self, data: Any, batch: KVBatchMeta) -> list[str]:
        """Each sample's response text (the candidate solutions of A6), cut at its length."""
        responses = data["responses"]
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else 0
        if hasattr(responses, "to_padded_tensor"):
            responses = responses.to_padded_tensor(padding=pad)
        return [
            self.tokenizer.decode(ids[: int(tag.get("response_len", len(ids)))], skip_special_tokens=True)
            for ids, tag in zip(responses, batch.tags, strict=True)
        ]

    # -- checkpoints ----------------------------------------------------------------------------

    def _save_checkpoint(self) -> None:
        super()._save_checkpoint()
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, STATE_FILE + ".tmp")
        state = self.planner.state_dict()
        if self.selfverify is not None:
            state["selfverify"] = self.selfverify.state_dict()
        with open(tmp, "w") as sink:
            json.dump(state, sink)
        os.replace(tmp, os.path.join(folder, STATE_FILE))

    def _load_checkpoint(self) -> None:
        super()._load_checkpoint()
        if self.global_steps <= 0:
            return
        if self.config.trainer.resume_mode == "resume_path":
            folder = str(self.config.trainer.resume_from_path)
        else:
            folder = os.path.join(
                os.path.abspath(self.config.trainer.default_local_dir), f"global_step_{self.global_steps}"
            )
        path = os.path.join(folder, STATE_FILE)
        if not os.path.exists(path):
            raise FileNotFoundError(f"{MODE} trainer: resuming from {folder} without its planner state {STATE_FILE}")
        with open(path) as source:
            state = json.load(source)
        self.planner.load_state_dict(state)
        if self.selfverify is not None and state.get("selfverify") is not None:
            self.selfverify.load_state_dict(state["selfverify"])
        self._restore_buffered_groups(folder)

    def _restore_buffered_groups(self, folder: str) -> None:
        """Re-attach the replay buffer to its groups, which verl restored into TransferQueue.

        verl checkpoints TransferQueue for every trainer mode but ``sync`` (``longcat_data`` is
        one), so the buffered groups' trajectories come back with it; the planner's state names
        them. A buffered group missing from the restored queue cannot be replayed: it is dropped
        and counted, and a queued group the planner does not know is cleared rather than trained
        outside the plan."""
        replay = self.planner.replay
        listing = verl_replay_buffer.tq.kv_list("train") or {}
        queued = {key for key, tag in listing.get("train", {}).items() if tag.get("is_prompt", False)}
        buffered = list(replay.items) if replay is not None else []
        kept = [g for g in buffered if g.uid in queued]
        if replay is not None:
            replay.items = kept
            replay.dropped += len(buffered) - len(kept)
        for g in kept:
            self.group_refs[g.uid] = g
        if len(kept) < len(buffered):
            logger.warning(
                "%s trainer: %d buffered replay groups are not in %s/transfer_queue; dropped",
                MODE,
                len(buffered) - len(kept),
                folder,
            )
        unknown = queued - {g.uid for g in kept}
        if unknown:
            keys = [k for k in listing.get("train", {}) if k.split("_", 1)[0] in unknown]
            verl_replay_buffer.tq.kv_clear(keys=keys, partition_id="train")


__all__ = ["DataReplayBuffer", "LongcatDataTrainer", "check_config"]
