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
from typing import Any

from omegaconf import DictConfig
from transfer_queue import KVBatchMeta
from verl.trainer.ppo.v1 import replay_buffer as verl_replay_buffer
from verl.trainer.ppo.v1.replay_buffer import ReplayBuffer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.utils import tensordict_utils as tu

from longcat_plugins.data.checks import planned_settings, strategy_problems
from longcat_plugins.data.planned import (
    PlannedData,
    candidates_of,
    concat,
)
from longcat_plugins.data.planner import DataPlanner, RowPlan
from longcat_plugins.data.replay import GroupRef
from longcat_plugins.data.settings import DataSettings, data_settings

logger = logging.getLogger(__name__)

MODE = "longcat_data"
STATE_FILE = "longcat_data.json"
ENV_TRACE = "LONGCAT_DATA_TRACE"


def check_config(config: DictConfig) -> list[str]:
    """Problems that stop a ``longcat_data`` run, each naming its key path."""
    problems: list[str] = []
    settings = planned_settings(config)
    if settings is None:
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
    return problems + strategy_problems(config, settings, MODE)


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
        self.planned = PlannedData(self.data, config)
        self.step_groups = 0
        self._plan_metrics: dict[str, float] = {}
        super().__init__(config)

    @property
    def planner(self) -> DataPlanner:
        return self.planned.planner

    @property
    def group_refs(self) -> dict[str, GroupRef]:
        return self.planned.group_refs

    @property
    def problems(self) -> dict[str, str]:
        return self.planned.problems

    @property
    def verify_uids(self) -> set[str]:
        return self.planned.verify_uids

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
        pool = concat([self._draw() for _ in range(draws)])
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
        if self.planned.tokenizer is None:
            self.planned.tokenizer = self.tokenizer
        batch = self.planned.rows(pool, plan, self.global_steps)
        self.step_groups = len(batch["uid"])
        out = tu.get_tensordict(batch)
        tu.assign_non_tensor_data(out, "global_steps", self.global_steps)
        return out

    # -- learning from the trained batch --------------------------------------------------------

    def observe(self, batch: KVBatchMeta, replayed: set[str]) -> dict[str, float]:
        """Rewards and lengths of the trained groups -> planner; its metrics for this step."""
        if self.planned.tokenizer is None:
            self.planned.tokenizer = self.tokenizer
        metrics = dict(self._plan_metrics)
        metrics.update(self.planned.observe(verl_replay_buffer.tq, batch, replayed, self.global_steps))
        return metrics

    def _save_checkpoint(self) -> None:
        super()._save_checkpoint()
        folder = os.path.join(self.config.trainer.default_local_dir, f"global_step_{self.global_steps}")
        os.makedirs(folder, exist_ok=True)
        tmp = os.path.join(folder, STATE_FILE + ".tmp")
        state = self.planned.state_dict()
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
        self.planned.load_state_dict(state)
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
