"""One noise curriculum per training run, shared by every agent-loop worker (E3, report §3.3.3).

verl runs agent loops in several ``AgentLoopWorker`` Ray actors (separate processes), and each
episode is its own loop instance. The curriculum must see every outcome of the run, so it lives in
one place: a named Ray actor (:class:`CurriculumService`, created by whichever worker asks first,
``get_if_exists=True``, not detached: it ends with the job) that episodes ask for a noise level and
report their outcome to. The name comes from the run (``trainer.project_name`` /
``trainer.experiment_name``, or ``$LONGCAT_NOISE_CURRICULUM_NAME``); Ray keeps named actors per
job namespace, so two runs on one cluster never share one. Without Ray (the agent loop called
directly, as unit tests do) the service is an object in this process, shared by name the same way.

Checkpoints: verl 0.9's v1 trainer calls ``trainer.checkpoint_callback_class`` after each save;
:class:`CurriculumCheckpointCallback` writes the service's state next to the weights
(``global_step_N/longcat_noise_curriculum.json``). The service loads it when it is created in a
resumed run (``trainer.resume_mode`` auto / resume_path, as verl resolves it). The legacy trainer
has no such hook: there the curriculum restarts from ``start_level`` on resume.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import threading
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

from verl.trainer.ppo.checkpoint_callback import CheckpointCallback

from longcat_plugins.atomic import write_json_atomic
from longcat_plugins.environments.curriculum import CurriculumConfig, NoiseCurriculum
from longcat_plugins.environments.noise import NoiseConfig

logger = logging.getLogger(__name__)

#: overrides the service's name (otherwise derived from the run's project and experiment)
NAME_ENV = "LONGCAT_NOISE_CURRICULUM_NAME"
#: the curriculum's state inside a verl checkpoint folder (``global_step_N/``)
STATE_FILE = "longcat_noise_curriculum.json"
#: prefix of the curriculum metrics in every sample's ``reward_extra_info``
CURRICULUM_METRIC_PREFIX = "env_curriculum_"


@dataclass(frozen=True)
class CurriculumSettings(CurriculumConfig):
    """``noise_curriculum`` of ``longcat_tool_agent``: the curriculum's knobs plus how episodes join it."""

    #: off by default: episodes use ``noise_level`` (or the sample's own)
    enabled: bool = False
    #: ``extra_info.split`` values whose episodes take their level from the curriculum and report
    #: their outcome (a sample without ``split`` joins); other splits (validation) keep their own
    #: ``noise_level`` and only read the curriculum's metrics. verl does not tell an agent loop
    #: whether it runs for validation, so the dataset split is the signal.
    splits: tuple[str, ...] = ("train",)
    #: seed of the clean-or-noisy draws
    seed: int = 0

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "splits", tuple(str(s) for s in self.splits))
        if not self.splits:
            raise ValueError("splits must name at least one dataset split")

    def curriculum_config(self) -> CurriculumConfig:
        return CurriculumConfig(**{f.name: getattr(self, f.name) for f in fields(CurriculumConfig)})

    def joins(self, extra_info: Any) -> bool:
        """Whether a sample's episode is driven by the curriculum (by its ``extra_info.split``)."""
        split = extra_info.get("split") if isinstance(extra_info, dict) else None
        return split is None or str(split) in self.splits


def episode_metrics(curriculum: NoiseCurriculum) -> dict[str, float]:
    """The curriculum's per-level metrics under fixed keys (verl needs the same keys on every sample).

    ``level``, ``raises``, ``gap`` (clean - current-level success; 0 with ``gap_measured`` 0 until
    both sides have outcomes) and, for every rung k of the ladder, ``level{k}_success`` (EMA; 0
    while ``level{k}_n`` is 0) and ``level{k}_n`` (outcomes since that level was last reset).
    """
    p = CURRICULUM_METRIC_PREFIX
    gap = curriculum.gap()
    out = {
        f"{p}level": float(curriculum.level),
        f"{p}raises": float(len(curriculum.raises)),
        f"{p}gap": float(gap) if gap is not None else 0.0,
        f"{p}gap_measured": float(gap is not None),
    }
    for k in range(NoiseConfig.MAX_LEVEL + 1):
        ema = curriculum.per_level.get(k)
        success = curriculum.success(k)
        out[f"{p}level{k}_success"] = float(success) if success is not None else 0.0
        out[f"{p}level{k}_n"] = float(ema.n) if ema is not None else 0.0
    return out


class CurriculumService:
    """Owns the run's :class:`NoiseCurriculum`: hands out levels, takes outcomes (one at a time)."""

    def __init__(self, config: CurriculumConfig, seed: int = 0, resume_from: str | None = None) -> None:
        self.curriculum = NoiseCurriculum(config)
        self.rng = random.Random(seed)
        self.resumed_from: str | None = None
        if resume_from:
            path = Path(resume_from) / STATE_FILE
            if path.is_file():
                self.load_state_dict(json.loads(path.read_text()))
                self.resumed_from = str(path)
                logger.warning("noise curriculum resumed from %s at level %d", path, self.curriculum.level)

    def assign(self) -> int:
        """The noise level of the next episode: clean with ``clean_fraction``, else the current level."""
        return self.curriculum.sample(self.rng.random()).level

    def report(self, level: int, success: float) -> dict[str, float]:
        """Record one outcome; the metrics after it."""
        if self.curriculum.update(level, success):
            logger.warning("noise curriculum raised: %s", self.curriculum.raises[-1])
        return episode_metrics(self.curriculum)

    def metrics(self) -> dict[str, float]:
        return episode_metrics(self.curriculum)

    def state_dict(self) -> dict[str, Any]:
        return {"curriculum": self.curriculum.state_dict(), "rng": _rng_state(self.rng)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """The saved progress (level, EMAs, raises, draws); the knobs stay this run's own."""
        config = self.curriculum.config
        self.curriculum.load_state_dict(state["curriculum"])
        self.curriculum.config = config
        if "rng" in state:
            self.rng.setstate(_rng_from(state["rng"]))

    def resumed(self) -> str | None:
        return self.resumed_from


def _rng_state(rng: random.Random) -> list[Any]:
    version, internal, gauss = rng.getstate()
    return [version, list(internal), gauss]


def _rng_from(state: list[Any]) -> tuple[Any, ...]:
    return (state[0], tuple(state[1]), state[2])


# -- naming and resuming from the trainer config ---------------------------------------------------


def service_name(config: Any) -> str:
    """The run's service name: ``$LONGCAT_NOISE_CURRICULUM_NAME`` or one built from the experiment."""
    explicit = os.environ.get(NAME_ENV)
    if explicit:
        return explicit
    trainer = _get(config, "trainer") or {}
    project = _get(trainer, "project_name") or "project"
    experiment = _get(trainer, "experiment_name") or "experiment"
    return f"longcat_noise_curriculum/{project}/{experiment}"


def resume_dir(config: Any) -> str | None:
    """The checkpoint folder verl resumes from (its ``_load_checkpoint`` rules), or None."""
    trainer = _get(config, "trainer") or {}
    mode = _get(trainer, "resume_mode") or "auto"
    if mode == "disable":
        return None
    if mode == "resume_path":
        path = _get(trainer, "resume_from_path")
        return os.path.abspath(str(path)) if path else None
    base = _get(trainer, "default_local_dir")
    if not base:
        return None
    from verl.utils.checkpoint.checkpoint_manager import find_latest_ckpt_path

    return find_latest_ckpt_path(os.path.abspath(str(base)))


def _get(node: Any, key: str) -> Any:
    if node is None:
        return None
    getter = getattr(node, "get", None)
    return getter(key) if callable(getter) else getattr(node, key, None)


# -- the client the agent loop uses ----------------------------------------------------------------


class CurriculumClient:
    """Async access to the run's service: a Ray actor handle, or the in-process service."""

    def __init__(self, name: str, target: Any, remote: bool) -> None:
        self.name, self._target, self.remote = name, target, remote

    async def _call(self, method: str, *args: Any) -> Any:
        if self.remote:
            return await getattr(self._target, method).remote(*args)
        return getattr(self._target, method)(*args)

    async def assign(self) -> int:
        return int(await self._call("assign"))

    async def report(self, level: int, success: float) -> dict[str, float]:
        return dict(await self._call("report", int(level), float(success)))

    async def metrics(self) -> dict[str, float]:
        return dict(await self._call("metrics"))

    async def state_dict(self) -> dict[str, Any]:
        return dict(await self._call("state_dict"))


_clients: dict[str, CurriculumClient] = {}
_clients_lock = threading.Lock()
_remote_cls: Any = None


def connect(name: str, settings: CurriculumSettings, resume_from: str | None = None) -> CurriculumClient:
    """The client of service ``name`` (created with ``settings`` if nobody has yet); cached per process.

    Under Ray: the named actor (``get_if_exists``; the first creator's settings and resume folder
    win, and every worker has the same ones). Without Ray: an object in this process.
    """
    import ray

    remote = ray.is_initialized()
    key = f"{'ray' if remote else 'local'}:{name}"
    with _clients_lock:
        client = _clients.get(key)
        if client is not None:
            return client
        config = settings.curriculum_config()
        if remote:
            global _remote_cls
            if _remote_cls is None:
                # no CPU reserved: it does microseconds of work per call; one call at a time keeps it consistent
                _remote_cls = ray.remote(num_cpus=0, max_concurrency=1)(CurriculumService)
            target = _remote_cls.options(name=name, get_if_exists=True, lifetime="non_detached").remote(
                config, settings.seed, resume_from
            )
        else:
            target = CurriculumService(config, settings.seed, resume_from)
        client = _clients[key] = CurriculumClient(name, target, remote)
        return client


async def connect_async(
    name: str, settings: CurriculumSettings, resume_from: Callable[[], str | None] = lambda: None
) -> CurriculumClient:
    """:func:`connect` off the event loop (finding or creating a Ray actor is a blocking GCS call);
    ``resume_from`` is called only when this process has no client yet."""
    cached = _clients.get(f"ray:{name}") or _clients.get(f"local:{name}")
    if cached is not None:
        return cached
    return await asyncio.get_running_loop().run_in_executor(None, lambda: connect(name, settings, resume_from()))


def forget_clients() -> None:
    """Drop the cached clients and in-process services (tests; a new Ray session)."""
    with _clients_lock:
        _clients.clear()


# -- checkpoints (verl v1 trainer hook) ------------------------------------------------------------


class CurriculumCheckpointCallback(CheckpointCallback):
    """``trainer.checkpoint_callback_class``: saves the run's curriculum into each verl checkpoint.

    Runs on the driver after verl wrote ``global_step_N/``; writes ``STATE_FILE`` there (temp file,
    then rename). Does nothing when the run has no curriculum service (curriculum off, or no
    episode has run yet).
    """

    def on_save(self, trainer: Any, global_step: int, checkpoint_dir: str, async_save: bool = False, **kwargs: Any):
        import ray

        name = service_name(self.config)
        try:
            actor = ray.get_actor(name)
        except ValueError:
            logger.info("no noise curriculum %r in this run: nothing to save at step %d", name, global_step)
            return
        state = ray.get(actor.state_dict.remote())
        save_state(state, checkpoint_dir)


def save_state(state: dict[str, Any], checkpoint_dir: str | os.PathLike[str]) -> Path:
    """Write the service state into ``checkpoint_dir`` atomically; the file's path."""
    return write_json_atomic(Path(checkpoint_dir) / STATE_FILE, state)
