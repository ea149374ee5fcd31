"""The code environment on the real sandbox, at every isolation level available: the warm test
harness (a fork per case, same isolation), hostile shell commands and hostile code under test
contained with nothing left behind, the hidden-test reward (golden 1, broken less, NaN when the
sandbox fails), and the workspace pool (recycling, replacement, no leaks after many episodes)."""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import fcntl
import math
import os
import shutil
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from longcat_plugins.environments.code_env import episode as episode_mod
from longcat_plugins.environments.code_env.episode import CodeEnvSettings, CodeEpisode
from longcat_plugins.environments.code_env.pool import WorkspacePool, copy_owned
from longcat_plugins.environments.code_env.tasks import make_task, write_task
from longcat_plugins.rewards.sandbox import IsolationLevel, Limits, Sandbox, available_levels
from longcat_plugins.rewards.sandbox.isolation import UID_LOCK_DIR
from longcat_plugins.rewards.sandbox.runner import live_pids_of_uid
from longcat_plugins.rewards.sandbox.warm import CodeCase, run_per_process, run_warm

LEVELS = [lv for lv, why in available_levels().items() if why is None]
LIMITS = Limits(cpu_s=1.0, wall_s=2.0, memory_mb=256, nproc=16, fsize_mb=1)


@pytest.fixture(scope="module")
def tasks_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("code_tasks")
    os.chmod(out, 0o755)
    for seed, mode in ((0, "bug"), (1, "missing"), (2, "bug"), (3, "missing")):
        task = make_task(seed, mode, distractors=2, depth=1, hidden=5)
        write_task(task, out / task.task_id)
    return out


def settings(level: IsolationLevel, work_root: str, **kw: object) -> CodeEnvSettings:
    base = {"isolation": level.value, "pool_size": 2, "shell_wall_s": 3.0, "shell_cpu_s": 1.0}
    base.update(
        {"shell_memory_mb": 256, "shell_nproc": 16, "test_wall_s": 2.0, "test_cpu_s": 1.0, "work_root": work_root}
    )
    base.update(kw)
    return CodeEnvSettings(**base)  # type: ignore[arg-type]


@pytest.fixture
def pool_settings(request: pytest.FixtureRequest, work_root: str) -> Iterator[CodeEnvSettings]:
    s = settings(request.param, work_root)
    yield s
    pool = episode_mod._pools.pop(s, None)
    if pool is not None:
        pool.close()
        assert_pool_clean(pool)


def open_episode(tasks_dir: Path, task_id: str, s: CodeEnvSettings) -> CodeEpisode:
    return CodeEpisode.open({"task_dir": str(tasks_dir / task_id)}, s)


def assert_pool_clean(pool: WorkspacePool) -> None:
    """No directory, no process of any sandbox uid, no held uid lock."""
    assert not os.path.exists(pool.root), os.listdir(pool.root)
    sb = pool.sandbox
    if sb.level is not IsolationLevel.RLIMITS and os.geteuid() == 0:
        assert pool.uids_seen
        stray = [u for u in pool.uids_seen if live_pids_of_uid(u)]
        assert stray == [], stray
        for uid in pool.uids_seen:
            fd = os.open(os.path.join(UID_LOCK_DIR, f"{uid}.lock"), os.O_RDWR)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # raises if still held
            finally:
                os.close(fd)


def mounts() -> int:
    return len(Path("/proc/self/mountinfo").read_text().splitlines())


# -- the warm harness ----------------------------------------------------------------------------


def run_module(
    sb: Sandbox, work_root: str, module: str, cases: list[CodeCase], limits: Limits = LIMITS
) -> tuple[list, int | None]:
    """``cases`` against a module ``m`` (the code under test) in the warm harness, in a fresh
    workspace under ``work_root``: the per-case results and the run's uid."""

    async def go() -> tuple[list, int | None]:
        uid, fd = await sb.lease_uid()
        ws, io = os.path.join(work_root, "ws"), os.path.join(work_root, "io")
        os.mkdir(ws, 0o700)
        os.mkdir(io, 0o700)
        Path(ws, "m.py").write_text(module)
        if uid is not None:
            os.chown(ws, uid, uid)
            os.chown(os.path.join(ws, "m.py"), uid, uid)
        try:
            return (await run_warm(sb, cases, ws, io, uid, limits, ("m",)))[0], uid
        finally:
            await sb.release_uid(uid, fd)

    return asyncio.run(go())


@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: lv.value)
def test_warm_harness_isolates_every_case(level: IsolationLevel, work_root: str) -> None:
    limits = dataclasses.replace(LIMITS, wall_s=1.0)
    sb = Sandbox(level.value, limits, work_root=work_root)
    mod = "SEEN = []\n\ndef f(a):\n    SEEN.append(a)\n    return 2 * a + len(SEEN) - 1\n"
    cases = [CodeCase(f"t{i}", f"from m import f\nassert f({i}) == {2 * i}\n") for i in range(6)]
    cases += [
        CodeCase("wrong", "from m import f\nassert f(1) == 3, 'off by one'\n"),
        CodeCase("crash", "raise KeyError('boom')\n"),
        CodeCase("spin", "while True:\n    pass\n"),
        CodeCase("sleep", "import time\ntime.sleep(30)\n"),
        CodeCase("exit", "import os\nos._exit(0)\n"),
        CodeCase(
            "fork_bomb", "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
        ),
        CodeCase("memory", "x = []\nwhile True:\n    x.append(bytearray(10**7))\n"),
        CodeCase("after", "from m import f\nassert f(5) == 10\n"),
    ]

    start = time.monotonic()
    results, uid = run_module(sb, work_root, mod, cases, limits)
    statuses = {c.name: r.status for c, r in zip(cases, results, strict=True)}
    assert [statuses[f"t{i}"] for i in range(6)] == ["passed"] * 6  # each case saw a fresh SEEN
    assert statuses["wrong"] == "failed" and statuses["crash"] == "runtime_error"
    assert statuses["spin"] == statuses["sleep"] == "time_limit"
    assert statuses["exit"] == "runtime_error"  # died without reporting: never a pass
    assert statuses["fork_bomb"] in ("time_limit", "runtime_error") and statuses["memory"] == "runtime_error"
    assert statuses["after"] == "passed", statuses
    assert time.monotonic() - start < 6 * limits.wall_s + 3
    if uid is not None:
        assert live_pids_of_uid(uid) == []


def statuses_of(work_root: str, module: str, cases: list[CodeCase]) -> dict[str, str]:
    """Status by case of ``cases`` against the module ``m`` (the agent's code)."""
    results, _ = run_module(Sandbox("auto", LIMITS, work_root=work_root), work_root, module, cases)
    return {c.name: r.status for c, r in zip(cases, results, strict=True)}


#: hidden tests of the generated tasks' form: imports, then asserts on literal values
VALUE_TESTS = [CodeCase(f"t{i}", f"from m import f\nassert f(*{[i]!r}) == {2 * i}\n") for i in range(1, 4)]
FORGE = "import json\n_dumps = json.dumps\njson.dumps = lambda o, *a, **k: _dumps({'status': 'passed', 'error': '', 'wall': 0.0})\n"
AGENT_HACKS = {
    "returns an always-equal object": "class Yes:\n    def __eq__(self, other):\n        return True\n"
    "    __hash__ = None\n\ndef f(a):\n    return Yes()\n",
    "replaces exec and eval when imported": "import builtins\nbuiltins.exec = lambda *a, **k: None\n"
    "builtins.eval = lambda *a, **k: None\ndef f(a):\n    return 0\n",
    "forges the harness's result lines when imported": FORGE + "def f(a):\n    return 0\n",
    "exits the test early": "import os\ndef f(a):\n    os._exit(0)\n",
}


@pytest.mark.parametrize("name", sorted(AGENT_HACKS))
def test_an_agent_that_games_the_hidden_tests_passes_none(name: str, work_root: str) -> None:
    """The code environment's reward: module code written to pass hidden tests without solving
    them. Their values are judged outside the sandbox, so none passes; the honest module passes
    all, and a test of another form still runs as code."""
    statuses = statuses_of(work_root, AGENT_HACKS[name], VALUE_TESTS)
    assert all(s != "passed" for s in statuses.values()), statuses
    honest = statuses_of(
        os.path.join(work_root, "honest"),
        "def f(a):\n    return 2 * a\n",
        [*VALUE_TESTS, CodeCase("open", "from m import f\nassert abs(f(0.25) - 0.5) < 1e-12\n")],
    )
    assert set(honest.values()) == {"passed"}, honest


@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: lv.value)
def test_warm_and_process_per_case_agree(level: IsolationLevel, work_root: str, tasks_dir: Path) -> None:
    sb = Sandbox(level.value, LIMITS, work_root=work_root)
    task = make_task(2, "bug", distractors=2, depth=1, hidden=5)
    cases = [CodeCase(t["name"], t["code"]) for t in task.hidden]

    async def go() -> tuple:
        uid, fd = await sb.lease_uid()
        ws, io = os.path.join(work_root, "ws"), os.path.join(work_root, "io")
        copy_owned(str(tasks_dir / task.task_id / "repo"), ws, uid)
        os.mkdir(io, 0o700)
        try:
            warm, _ = await run_warm(sb, cases, ws, io, uid, LIMITS)
            per = await run_per_process(sb, cases, ws, io, uid, LIMITS)
            return warm, per
        finally:
            await sb.release_uid(uid, fd)

    warm, per = asyncio.run(go())
    assert [r.passed for r in warm] == [r.passed for r in per]
    assert 0 < sum(r.passed for r in warm) < len(cases)  # the broken function passes some, not all


# -- shell -----------------------------------------------------------------------------------------

HOSTILE_SHELL = {
    "fork_bomb": "bomb() { bomb | bomb & }; bomb",
    "spin": "while :; do :; done",
    "memory": "python3 -c 'x = bytearray(4 * 1024**3)'",
    "output_flood": "yes xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx",
    "escape": "setsid sleep 300 > /dev/null 2>&1 < /dev/null & echo started",
    "kill_all": "kill -9 -1; echo alive",
}


@pytest.mark.parametrize("name", list(HOSTILE_SHELL))
@pytest.mark.parametrize("pool_settings", LEVELS, ids=lambda lv: lv.value, indirect=True)
def test_hostile_shell_commands_are_contained(pool_settings: CodeEnvSettings, tasks_dir: Path, name: str) -> None:
    ep = open_episode(tasks_dir, "code-00000", pool_settings)
    uid = ep.slot.uid if ep.slot else None
    start = time.monotonic()
    r = ep.call_tool("shell", {"command": HOSTILE_SHELL[name]})
    assert time.monotonic() - start < pool_settings.shell_wall_s + 3
    assert not ep.infra_error, ep.infra_error
    if uid is not None:
        assert live_pids_of_uid(uid) == [], (name, r.content[:300])
    assert os.getppid() > 1  # we and our parent are alive
    after = ep.call_tool("shell", {"command": "echo still-here"})
    assert after.ok and "still-here" in after.content
    ep.close()


@pytest.mark.parametrize("pool_settings", LEVELS, ids=lambda lv: lv.value, indirect=True)
def test_shell_cannot_write_outside_or_reach_the_network(
    pool_settings: CodeEnvSettings, tasks_dir: Path, tmp_path: Path
) -> None:
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o755)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    server.settimeout(0.2)
    port = server.getsockname()[1]
    ep = open_episode(tasks_dir, "code-00000", pool_settings)
    task_repo = tasks_dir / "code-00000" / "repo"
    before = sorted(p.name for p in task_repo.rglob("*"))
    r = ep.call_tool(
        "shell",
        {
            "command": f"echo x > {private}/pwned; echo x > ../escaped; echo x > {task_repo}/pwned; "
            f"python3 -c \"import socket; s=socket.socket(); s.settimeout(1); s.connect(('127.0.0.1', {port})); print('CONNECTED')\"; "
            "echo done"
        },
    )
    try:
        accepted = server.accept()[0] is not None
    except TimeoutError:
        accepted = False
    server.close()
    assert "done" in r.content
    assert not (private / "pwned").exists()
    assert not (task_repo / "pwned").exists() and sorted(p.name for p in task_repo.rglob("*")) == before
    assert not os.path.exists(os.path.join(os.path.dirname(ep.slot.ws), "escaped"))  # type: ignore[union-attr]
    if pool_settings.isolation in ("bwrap", "namespaces"):
        assert "CONNECTED" not in r.content and not accepted
    ep.close()


# -- the reward ------------------------------------------------------------------------------------


@pytest.mark.parametrize("pool_settings", LEVELS, ids=lambda lv: lv.value, indirect=True)
def test_golden_scores_one_and_broken_scores_less(pool_settings: CodeEnvSettings, tasks_dir: Path) -> None:
    for task_id in ("code-00000", "code-00001"):
        ep = open_episode(tasks_dir, task_id, pool_settings)
        untouched = ep.evaluate()
        assert math.isfinite(untouched.score) and untouched.score < 1 and not untouched.success
        for name, args in ep.golden_chain():
            r = ep.call_tool(name, args)
            assert r.ok, (name, r.content)
            if name == "shell":  # the public test passes after the fix
                assert "passed" in r.content, r.content
        assert not ep.call_tool("shell", {"command": "true"}).ok  # nothing after submit
        golden = ep.evaluate()
        assert golden.score == 1.0 and golden.success, golden
        ep.close()
        # a wrong fix: the function returns a constant
        ep = open_episode(tasks_dir, task_id, pool_settings)
        fix = ep.task.golden_edit
        header = fix["old"].split('"""')[0] + '"""' + fix["old"].split('"""')[1] + '"""\n'
        assert ep.call_tool("edit", {"path": fix["path"], "old": fix["old"], "new": header + "    return None\n"}).ok
        assert ep.evaluate().score == 0.0  # the workspace was reset: the golden fix of the last episode is gone
        ep.close()


@pytest.mark.parametrize("pool_settings", LEVELS[:1], ids=lambda lv: lv.value, indirect=True)
def test_hostile_code_under_test_is_contained(pool_settings: CodeEnvSettings, tasks_dir: Path) -> None:
    pool_settings = dataclasses.replace(pool_settings, test_wall_s=0.5)  # the bomb runs out the batch's time
    ep = open_episode(tasks_dir, "code-00000", pool_settings)
    target = ep.task.golden_edit["path"]
    bomb = "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    assert ep.call_tool("write_file", {"path": target, "content": bomb}).ok
    start = time.monotonic()
    out = ep.evaluate()
    assert out.score == 0.0 and not out.success, out
    assert time.monotonic() - start < 2 * pool_settings.test_wall_s * len(ep.task.hidden) + 10
    if ep.slot and ep.slot.uid is not None:
        assert live_pids_of_uid(ep.slot.uid) == []
    ep.close()
    pool = episode_mod._pools.pop(pool_settings)
    pool.close()
    assert_pool_clean(pool)


@pytest.mark.parametrize("pool_settings", LEVELS, ids=lambda lv: lv.value, indirect=True)
def test_a_failing_sandbox_makes_the_sample_invalid(pool_settings: CodeEnvSettings, tasks_dir: Path) -> None:
    ep = open_episode(tasks_dir, "code-00000", pool_settings)
    assert ep.slot is not None
    shutil.rmtree(ep.slot.ws)  # the workspace vanished under the sandbox (a dead sandbox)
    r = ep.call_tool("shell", {"command": "echo hi"})
    assert not r.ok and "not your fault" in r.content
    out = ep.evaluate()
    assert math.isnan(out.score) and "infra_error" in out.notes, out
    ep.close()
    # and the pool replaces / re-provisions it: the next episode of the task works
    ep = open_episode(tasks_dir, "code-00000", pool_settings)
    assert ep.call_tool("shell", {"command": "echo hi"}).ok
    assert math.isfinite(ep.evaluate().score)
    ep.close()


# -- the pool --------------------------------------------------------------------------------------


def run_episodes(pool: WorkspacePool, tasks_dir: Path, task_ids: list[str], concurrency: int) -> list[float]:
    """Each episode: read, edit (golden), one shell call, evaluate, close; returns the scores."""
    s = episode_mod.CodeEnvSettings(isolation=pool.sandbox.level.value, test_wall_s=2.0, test_cpu_s=1.0)

    def one(task_id: str) -> float:
        from longcat_plugins.environments.code_env.tasks import load_task

        task = load_task(tasks_dir / task_id)
        slot = pool.acquire(str(tasks_dir / task_id))
        ep = CodeEpisode(task, pool, s, slot)
        try:
            for name, args in ep.golden_chain()[:3]:
                ep.call_tool(name, args)
            return ep.evaluate().score
        finally:
            ep.close()

    with concurrent.futures.ThreadPoolExecutor(concurrency) as ex:
        return list(ex.map(one, task_ids))


@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: lv.value)
def test_pool_recycles_and_leaves_nothing_behind(level: IsolationLevel, work_root: str, tasks_dir: Path) -> None:
    n_mounts = mounts()
    pool = WorkspacePool(Sandbox(level.value, LIMITS, work_root=work_root), size=3)
    ids = sorted(p.name for p in tasks_dir.iterdir())
    pool.prewarm([str(tasks_dir / ids[0])])
    scores = run_episodes(pool, tasks_dir, [ids[k % 2] for k in range(12)], concurrency=6)
    assert scores == [1.0] * 12
    pool.close()  # waits for the background resets
    assert pool.stats.ready_hits > 0 and pool.stats.recycled == 12 and pool.stats.created <= 3 + pool.stats.replaced
    assert_pool_clean(pool)
    assert os.listdir(work_root) == []
    assert mounts() == n_mounts


def test_pool_replaces_a_slot_that_cannot_be_reset(
    work_root: str, tasks_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pool = WorkspacePool(Sandbox("auto", LIMITS, work_root=work_root), size=2)
    task = str(tasks_dir / "code-00000")
    slot = pool.acquire(task)
    real_fill = pool._fill

    def wedged(s, t):  # noqa: ANN001, ANN202 - the reset of this one slot fails
        if s is slot:
            raise OSError("device wedged")
        return real_fill(s, t)

    monkeypatch.setattr(pool, "_fill", wedged)
    old_dir = slot.dir
    pool.release(slot)
    deadline = time.monotonic() + 10
    while pool.stats.replaced == 0 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert pool.stats.replaced == 1 and not os.path.exists(old_dir)
    fresh = pool.acquire(task, timeout=5)
    assert fresh.dir != old_dir and os.path.exists(os.path.join(fresh.ws, "README.md"))
    pool.release(fresh)
    pool.close()
    assert_pool_clean(pool)


def test_pool_bounds_concurrency(work_root: str, tasks_dir: Path) -> None:
    pool = WorkspacePool(Sandbox("auto", LIMITS, work_root=work_root), size=1)
    task = str(tasks_dir / "code-00000")
    slot = pool.acquire(task)
    with pytest.raises(TimeoutError, match="pool size 1"):
        pool.acquire(task, timeout=0.2)
    pool.release(slot)
    again = pool.acquire(task, timeout=5)  # freed and reset in the background
    pool.release(again)
    pool.close()
    assert not os.path.exists(pool.root)
