"""verl's sync trainer starts its agent-loop workers beside the rollout replicas
(``schedulers/agent_loops_ahead.py``): through verl's own ``PPOTrainer.init`` and its hybrid
``LLMServerManager.create`` call, with main_ppo's arguments, handed over to main_ppo's ``create``,
and only where that manager is the one main_ppo would build. The real runs: the suite's shared
v1 run and the resume run (``test_e2e_cpu.py``) and the bench (``bench_dora_cpu.py --agent-loops``)."""

from __future__ import annotations

import asyncio
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from longcat_plugins.runtime import later
from longcat_plugins.schedulers.agent_loops_ahead import ENV_AGENT_LOOPS, STARTED, agent_loops_mode

MANAGER_KEY = "actor_rollout_ref.rollout.agent.agent_loop_manager_class"


def test_the_mode_parses_and_a_bad_one_names_the_variable_and_the_choices() -> None:
    assert agent_loops_mode(None) == agent_loops_mode(" ") == "ahead"
    assert agent_loops_mode("verl") == "verl"
    with pytest.raises(ValueError, match="LONGCAT_AGENT_LOOPS: expected one of ahead, verl, got 'early'"):
        agent_loops_mode("early")


def test_a_bad_mode_stops_main_ppo_before_ray(tmp_path: Path) -> None:
    from conftest import main_ppo_refuses

    proc = main_ppo_refuses(tmp_path, "example_plugin", env={ENV_AGENT_LOOPS: "early"})
    assert "LONGCAT_AGENT_LOOPS: expected one of ahead, verl, got 'early'" in proc.stderr


class _Fakes:
    """verl's manager classes with nothing behind them: each ``create`` is verl's own code (the
    hooks and ``auto_await`` included) down to the constructors, which only record."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from verl.experimental.agent_loop import AgentLoopManager
        from verl.trainer.ppo.v1 import AgentLoopManagerTQ
        from verl.workers.rollout import llm_server

        self.managers: list[Any] = []
        self.clients = 0
        fakes = self

        def manager_init(manager: Any, **kwargs: Any) -> None:
            manager.kwargs = kwargs
            fakes.managers.append(manager)

        async def no_workers(manager: Any) -> None:
            manager.agent_loop_workers = []

        class ServerManager:
            def get_client(self) -> str:
                fakes.clients += 1
                return f"client-{fakes.clients}"

        monkeypatch.setattr(AgentLoopManager, "__init__", manager_init)
        monkeypatch.setattr(AgentLoopManagerTQ, "_init_agent_loop_workers", no_workers)
        monkeypatch.setattr(llm_server.LLMServerManager, "create", classmethod(lambda cls, *a, **kw: ServerManager()))


def _trainer(manager_class: str | None, **overrides: Any) -> Any:
    """A v1 trainer whose ``_setup`` makes verl's two manager calls, in verl's order: reward
    workers exist, then the hybrid replicas are created (through trainer_base's own name)."""
    from verl.trainer.ppo.v1 import PPOTrainer, trainer_base

    class Trainer(PPOTrainer):
        def __init__(self) -> None:  # verl's builds the replay buffer, dataloaders, ...
            self.config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"agent": {}}}})
            OmegaConf.update(self.config, MANAGER_KEY, manager_class, force_add=True)
            self.use_teacher_policy = False
            self.reward_loop_manager = type("Rewards", (), {"reward_loop_worker_handles": ["reward-0"]})()
            self.setup_order: list[str] = []

        def _setup(self) -> None:
            self.llm_server_manager = trainer_base.LLMServerManager.create(
                config=self.config, worker_group="actor-wg", rollout_resource_pool=None
            )
            self.setup_order.append("replicas created")

        def on_init_end(self) -> None:
            self.setup_order.append("init end")

        def on_step_end(self) -> None:
            pass

        def on_sample_end(self) -> None:
            pass

    for name, method in overrides.items():
        setattr(Trainer, name, method)
    return Trainer()


def _main_ppo_creates(trainer: Any) -> Any:
    """What verl's ``TaskRunnerV1.init_agent_loop_manager`` does after ``trainer.init()``."""
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ
    from verl.utils.import_utils import load_class_from_fqn

    fqn = OmegaConf.select(trainer.config, MANAGER_KEY)
    cls = load_class_from_fqn(fqn, "AgentLoopManager") if fqn else AgentLoopManagerTQ
    return cls.create(
        config=trainer.config,
        llm_client=trainer.get_llm_client(),
        teacher_client=trainer.get_teacher_client(),
        reward_loop_worker_handles=trainer.get_reward_handles(),
    )


def test_the_sync_trainer_starts_its_agent_loops_with_its_replicas_and_main_ppo_gets_them(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from longcat_plugins.schedulers.prestart import PrestartedAgentLoopManager

    monkeypatch.delenv(ENV_AGENT_LOOPS, raising=False)
    fakes = _Fakes(monkeypatch)
    trainer = _trainer(None)
    trainer.init()
    assert len(fakes.managers) == 1, "created during init(), with the replicas"
    ahead = fakes.managers[0]
    assert isinstance(ahead, PrestartedAgentLoopManager)
    assert ahead.kwargs == {
        "config": trainer.config,
        "llm_client": "client-1",
        "teacher_client": None,
        "reward_loop_worker_handles": ["reward-0"],
    }
    assert STARTED in capsys.readouterr().out
    assert _main_ppo_creates(trainer) is ahead and len(fakes.managers) == 1, "main_ppo's create got it"
    fresh = _main_ppo_creates(trainer)
    assert fresh is not ahead and len(fakes.managers) == 2, "handed over once; then verl's create as before"


@pytest.mark.parametrize(
    ("why", "mode", "manager_class", "overrides"),
    [
        ("LONGCAT_AGENT_LOOPS=verl", "verl", None, {}),
        ("its own client (the async trainers)", None, None, {"get_llm_client": lambda self: "own"}),
        ("its own reward handles", None, None, {"get_reward_handles": lambda self: []}),
        ("a recipe's manager of its own", None, "lc_test_managers.OwnManager", {}),
    ],
)
def test_verls_order_where_the_manager_would_differ_or_is_asked_for(
    why: str, mode: str | None, manager_class: str | None, overrides: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    if mode is None:
        monkeypatch.delenv(ENV_AGENT_LOOPS, raising=False)
    else:
        monkeypatch.setenv(ENV_AGENT_LOOPS, mode)
    fakes = _Fakes(monkeypatch)
    holder = types.ModuleType("lc_test_managers")  # a manager neither verl's default nor ours

    class OwnManager:
        @classmethod
        def create(cls, **kwargs: Any) -> str:
            return "own manager"

    holder.OwnManager = OwnManager  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "lc_test_managers", holder)
    trainer = _trainer(manager_class, **overrides)
    trainer.init()
    assert fakes.managers == [], why
    assert trainer.setup_order == ["replicas created", "init end"]


def test_a_gated_run_starts_them_ahead_too_and_gets_them_once_the_gate_opens(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from longcat_plugins.schedulers.start_gate import ENV_GATE, GATED

    monkeypatch.delenv(ENV_AGENT_LOOPS, raising=False)
    gate = tmp_path / "gate"
    gate.touch()
    monkeypatch.setenv(ENV_GATE, str(gate))
    fakes = _Fakes(monkeypatch)
    trainer = _trainer(GATED[None])  # what the bench names for a sync run started beside others
    trainer.init()
    assert len(fakes.managers) == 1, "not held: created with the replicas"
    assert _main_ppo_creates(trainer) is fakes.managers[0]
    assert (tmp_path / "gate.waiting").exists(), "main_ppo's create went through the gate"


def test_an_awaiting_caller_still_gets_verls_coroutine(monkeypatch: pytest.MonkeyPatch) -> None:
    """The wrapped ``AgentLoopManagerTQ.create`` keeps ``auto_await``'s contract for async callers."""
    from verl.trainer.ppo.v1 import AgentLoopManagerTQ

    fakes = _Fakes(monkeypatch)
    config = OmegaConf.create({})

    async def caller() -> Any:
        return await AgentLoopManagerTQ.create(config=config)

    manager = asyncio.run(caller())
    assert isinstance(manager, AgentLoopManagerTQ) and fakes.managers == [manager]


def test_what_was_started_ahead_is_handed_out_to_its_own_ray_job_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The table both start-up moves keep (the hf servers', the agent-loop workers'): another Ray
    session's entry is never taken and does not stop this session's start under the same key."""
    table = later.StartedAhead()
    monkeypatch.setattr(later, "ray_job", lambda: "ff000000")
    table.put("hf_server_0", "gone", "node")
    monkeypatch.setattr(later, "ray_job", lambda: "01000000")
    assert not table.holds("hf_server_0") and table.take("hf_server_0") is None and not table
    table["hf_server_0"] = ("gone", "node", "ff000000")
    table.put("hf_server_0", "live", "node")
    assert table.holds("hf_server_0") and table.take("hf_server_0") == ("live", "node") and not table


def test_a_worker_built_later_runs_its_own_init_only_when_constructed() -> None:
    from longcat_plugins.runtime.later import Later as _Later

    class Worker:
        def __init__(self, config: str, client: str) -> None:
            self.built = (config, client)

    Later = type("Worker", (_Later, Worker), {})
    early = Later()
    assert not hasattr(early, "built"), "no arguments: only the process (here, the object) exists"
    early.longcat_construct("config", "client")
    assert early.built == ("config", "client")
    assert Later("c", "l").built == ("c", "l"), "with arguments it is built at once, as verl's class"


@pytest.fixture
def spawning(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, list[str]]]:
    """What ``spawn_workers`` starts (class name, actor names), without Ray."""
    from longcat_plugins.schedulers import agent_loops_ahead

    started: list[tuple[str, list[str]]] = []
    monkeypatch.setattr(later, "ray_job", lambda: "01000000")
    monkeypatch.setattr(agent_loops_ahead, "later", lambda cls: cls.__name__)
    monkeypatch.setattr(agent_loops_ahead, "_start", lambda cls, names: started.append((cls, names)) or list(names))
    monkeypatch.setattr(agent_loops_ahead, "_spawned", later.StartedAhead())
    monkeypatch.delenv(ENV_AGENT_LOOPS, raising=False)
    return started


def _sized(manager_class: str | None, workers: int = 2) -> Any:
    config = OmegaConf.create({"actor_rollout_ref": {"rollout": {"agent": {"num_workers": workers}}}})
    OmegaConf.update(config, MANAGER_KEY, manager_class, force_add=True)
    return type("Trainer", (), {"config": config})()


def test_the_workers_processes_start_once_named_as_verl_names_them(
    spawning: list[tuple[str, list[str]]], capsys: pytest.CaptureFixture[str]
) -> None:
    from longcat_plugins.schedulers import agent_loops_ahead
    from longcat_plugins.schedulers.start_gate import GATED

    for manager in (None, "longcat_plugins.schedulers.prestart.PrestartedAgentLoopManager", GATED[None]):
        trainer = _sized(manager)
        assert agent_loops_ahead.spawn_workers(trainer) == 2, manager
        assert agent_loops_ahead.spawn_workers(trainer) == 0, "once per run"
    assert len(spawning) == 3 and all(cls == "AgentLoopWorkerTQ" for cls, _ in spawning)
    names = spawning[0][1]
    assert [n.rsplit("_", 1)[0] for n in names] == ["agent_loop_worker_0", "agent_loop_worker_1"], names
    assert all(len(n.rsplit("_", 1)[1]) == 8 for n in names), "verl's uuid suffix"
    assert agent_loops_ahead.SPAWNED in capsys.readouterr().out


def test_an_earlier_sessions_entry_under_a_reused_config_id_does_not_stop_this_runs(
    spawning: list[tuple[str, list[str]]],
) -> None:
    """A failed setup's entry, left under the id a new run's config happens to reuse, is dropped:
    this run's workers still start ahead, and its manager gets them, not the dead ones."""
    from longcat_plugins.schedulers import agent_loops_ahead

    trainer = _sized(None)
    agent_loops_ahead._spawned[id(trainer.config)] = (["dead"], "ff000000")
    assert agent_loops_ahead.spawn_workers(trainer) == 2
    workers, job = agent_loops_ahead._spawned[id(trainer.config)]
    assert job == "01000000" and workers == spawning[0][1] and "dead" not in workers


def test_a_bad_mode_raises_in_a_process_the_hydra_callback_did_not_check(
    spawning: list[tuple[str, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another entry point than main_ppo gets the same error, not verl's order in silence."""
    from longcat_plugins.schedulers import agent_loops_ahead

    monkeypatch.setenv(ENV_AGENT_LOOPS, "early")
    with pytest.raises(ValueError, match="LONGCAT_AGENT_LOOPS: expected one of ahead, verl, got 'early'"):
        agent_loops_ahead.spawn_workers(_sized(None))
    assert spawning == []


@pytest.mark.parametrize("why", ["LONGCAT_AGENT_LOOPS=verl", "a recipe's manager of its own"])
def test_no_worker_starts_ahead_where_verls_manager_would_not_build_verls_workers(
    why: str, spawning: list[tuple[str, list[str]]], monkeypatch: pytest.MonkeyPatch
) -> None:
    from longcat_plugins.schedulers import agent_loops_ahead

    manager = None
    if why.startswith("LONGCAT"):
        monkeypatch.setenv(ENV_AGENT_LOOPS, "verl")
    else:
        holder = types.ModuleType("lc_test_managers")
        holder.OwnManager = type("OwnManager", (), {})  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "lc_test_managers", holder)
        manager = "lc_test_managers.OwnManager"
    assert agent_loops_ahead.spawn_workers(_sized(manager)) == 0 and spawning == [], why


class _Spawned:
    """A worker started ahead: its construction is awaited, and may fail."""

    def __init__(self, fail: bool = False) -> None:
        self.built: tuple[Any, ...] | None = None
        fail_or_build = self._fail if fail else self._build
        self.longcat_construct = type("Method", (), {"remote": staticmethod(fail_or_build)})()

    async def _build(self, *args: Any) -> None:
        self.built = args

    async def _fail(self, *args: Any) -> None:
        raise RuntimeError("the tokenizer is missing")


def _manager(worker_class: Any) -> Any:
    """verl's base manager with nothing behind it but what ``_init_agent_loop_workers`` reads."""
    from verl.experimental.agent_loop import AgentLoopManager

    manager = object.__new__(AgentLoopManager)
    manager.config = OmegaConf.create({})
    manager.llm_client, manager.teacher_client, manager.reward_loop_worker_handles = "client", None, ["reward-0"]
    manager.agent_loop_workers_class = worker_class
    return manager


def test_verls_manager_constructs_the_workers_started_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    from longcat_plugins.schedulers import agent_loops_ahead

    monkeypatch.setattr(later, "ray_job", lambda: "01000000")
    manager = _manager(AgentLoopWorkerTQ)
    spawned = [_Spawned(), _Spawned()]
    monkeypatch.setitem(agent_loops_ahead._spawned, id(manager.config), (spawned, "01000000"))
    asyncio.run(manager._init_agent_loop_workers())
    assert manager.agent_loop_workers == spawned and id(manager.config) not in agent_loops_ahead._spawned
    assert all(w.built == (manager.config, "client", None, ["reward-0"]) for w in spawned)

    failing = _manager(AgentLoopWorkerTQ)
    monkeypatch.setitem(agent_loops_ahead._spawned, id(failing.config), ([_Spawned(fail=True)], "01000000"))
    with pytest.raises(RuntimeError, match="the tokenizer is missing"):
        asyncio.run(failing._init_agent_loop_workers())


def test_a_manager_of_other_workers_or_a_later_session_starts_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook on a stand-in for verl's module: another worker class goes to verl's own method,
    and the workers started ahead stay for the manager they were started for."""
    from longcat_plugins.schedulers import agent_loops_ahead

    verls: list[Any] = []

    class AgentLoopManager:
        async def _init_agent_loop_workers(self) -> None:
            verls.append(self)

    module = types.ModuleType("agent_loop")
    module.AgentLoopManager = AgentLoopManager  # type: ignore[attr-defined]
    agent_loops_ahead._hook_manager_workers(module)
    agent_loops_ahead._hook_manager_workers(module)  # a second import: not wrapped twice
    manager = AgentLoopManager()
    manager.config = OmegaConf.create({})  # type: ignore[attr-defined]
    manager.agent_loop_workers_class = object()  # type: ignore[attr-defined]
    entry = ([_Spawned()], "01000000")
    monkeypatch.setitem(agent_loops_ahead._spawned, id(manager.config), entry)  # type: ignore[attr-defined]
    asyncio.run(manager._init_agent_loop_workers())
    assert verls == [manager] and entry[0][0].built is None
    assert agent_loops_ahead._spawned[id(manager.config)] is entry  # type: ignore[attr-defined]

    stale = AgentLoopManager()
    stale.config = OmegaConf.create({})  # type: ignore[attr-defined]
    from verl.trainer.ppo.v1.agent_loop_tq import AgentLoopWorkerTQ

    stale.agent_loop_workers_class = AgentLoopWorkerTQ  # type: ignore[attr-defined]
    left = ([_Spawned()], "ff000000")  # an earlier Ray session's, whose setup failed
    monkeypatch.setitem(agent_loops_ahead._spawned, id(stale.config), left)  # type: ignore[attr-defined]
    monkeypatch.setattr(later, "ray_job", lambda: "01000000")
    asyncio.run(stale._init_agent_loop_workers())
    assert verls == [manager, stale] and left[0][0].built is None, "verl's own workers, not a gone cluster's"
