"""R3 code sandbox: correct, wrong, crashing and slow programs in Python and C++; hostile
programs (fork bomb, infinite loop, memory bomb, network, writes outside the run dir, killing
the parent, escaping the process group) contained at every isolation level available, with
nothing left behind."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import math
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from longcat_plugins.rewards import code as code_reward
from longcat_plugins.rewards.result import VALID_KEY
from longcat_plugins.rewards.sandbox import IsolationLevel, Limits, Sandbox, available_levels, parse_test_cases
from longcat_plugins.rewards.sandbox.execution import ProcResult
from longcat_plugins.rewards.sandbox.isolation import IsolationUnavailable, choose_level, lock_uid

LIMITS = Limits(cpu_s=1.0, wall_s=3.0, memory_mb=256, nproc=16, fsize_mb=1)
LEVELS = [lv for lv, why in available_levels().items() if why is None]
ADD = parse_test_cases({"inputs": ["1 2\n", "3 4\n", "10 -3\n"], "outputs": ["3\n", "7\n", "7\n"]})
PY_ADD = "a, b = map(int, input().split())\nprint(a + b)\n"
CPP_ADD = '#include <cstdio>\nint main(){long a,b; scanf("%ld %ld",&a,&b); printf("%ld\\n", a+b);}\n'


def run(sb: Sandbox, lang: str, src: str, suite=ADD):  # noqa: ANN001, ANN201 - test helper
    return asyncio.run(sb.run(lang, src, suite))


def uid_processes(sb: Sandbox) -> list[int]:
    """Live pids owned by a per-run uid that no run holds (a leak). A uid another run holds right
    now (its lock is taken: a parallel test worker, the code env's pool) is that run's business;
    holding the lock while looking means no run can start on the uid meanwhile. Zombies are dead
    already (bwrap's namespace init, orphaned when the sweep kills it, waits for PID 1 to reap it)."""
    by_uid: dict[int, list[int]] = {}
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        fields = {ln.split(":")[0]: ln.split()[1:] for ln in status.splitlines() if ":" in ln and ln.split()[1:]}
        uid = int(fields.get("Uid", ["-1"])[0])
        if sb.uid_base <= uid < sb.uid_base + sb.uid_count and fields.get("State", ["?"])[0] != "Z":
            by_uid.setdefault(uid, []).append(int(pid))
    leaked = []
    for uid, pids in by_uid.items():
        fd = lock_uid(uid)
        if fd is None:
            continue  # held by a live run
        try:
            leaked += [pid for pid in pids if Path(f"/proc/{pid}").exists()]
        finally:
            os.close(fd)
    return sorted(leaked)


def assert_clean(sb: Sandbox) -> None:
    assert os.listdir(sb.work_root) == [], os.listdir(sb.work_root)
    if sb.level is not IsolationLevel.RLIMITS:
        assert uid_processes(sb) == []


@pytest.fixture(params=LEVELS, ids=lambda lv: lv.value)
def sandbox(request: pytest.FixtureRequest, work_root: str) -> Sandbox:
    return Sandbox(request.param.value, LIMITS, work_root=work_root, max_concurrent=4)


def test_levels_probed_and_auto_picks_the_strongest() -> None:
    levels = available_levels()
    # as root, running without a uid drop is refused: the program would be root
    assert (levels[IsolationLevel.RLIMITS] is None) == (os.geteuid() != 0)
    first = next(lv for lv in IsolationLevel if levels[lv] is None)
    assert choose_level("auto") is first
    with pytest.raises(ValueError, match="unknown"):
        choose_level("chroot")


def test_unavailable_level_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from longcat_plugins.rewards.sandbox import isolation

    monkeypatch.setattr(isolation, "available_levels", lambda: {lv: "no bwrap here" for lv in IsolationLevel})
    with pytest.raises(IsolationUnavailable, match="no bwrap here"):
        isolation.choose_level("bwrap")


@pytest.mark.parametrize(("lang", "src"), [("python", PY_ADD), ("cpp", CPP_ADD)])
def test_correct_wrong_crash_compile_error(sandbox: Sandbox, lang: str, src: str) -> None:
    ok = run(sandbox, lang, src)
    assert ok.all_passed and ok.pass_rate == 1.0, ok
    wrong = run(sandbox, lang, src.replace("a + b", "a * b").replace("a+b", "a*b"))
    assert [c.status for c in wrong.cases] == ["wrong_answer", "wrong_answer", "wrong_answer"]
    crash = run(sandbox, lang, "raise SystemExit(3)" if lang == "python" else "int main(){return *(int*)0;}")
    assert {c.status for c in crash.cases} == {"runtime_error"}
    broken = run(sandbox, lang, "def f(:\n" if lang == "python" else "int main( {")
    assert not broken.compiled and broken.compile_error and broken.pass_rate == 0.0
    assert_clean(sandbox)


def test_cpp_compiles_once(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[list[str]] = []
    real = sandbox.exec

    async def spy(argv, *a, **kw):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(argv)
        return await real(argv, *a, **kw)

    monkeypatch.setattr(sandbox, "exec", spy)
    assert run(sandbox, "cpp", CPP_ADD).all_passed
    assert sum("g++" in argv for argv in calls) == 1 and len(calls) == 1 + 3


def test_call_based_cases_batch_and_per_case(work_root: str) -> None:
    suite = parse_test_cases({"fn_name": "add", "inputs": [[1, 2], [3, 4], [0, 0]], "outputs": [3, [7], 1]})
    for mode in ("batch", "per_case"):
        sb = Sandbox("auto", LIMITS, work_root=os.path.join(work_root, mode), python_call_mode=mode)
        rep = run(sb, "python", "class Solution:\n    def add(self, a, b):\n        return a + b\n", suite)
        assert [c.passed for c in rep.cases] == [True, True, False], (mode, rep)
        assert_clean(sb)


def test_slow_program_is_time_limited(sandbox: Sandbox) -> None:
    start = time.monotonic()
    rep = run(sandbox, "python", "import time\ntime.sleep(30)\n", parse_test_cases({"inputs": [""], "outputs": [""]}))
    assert rep.cases[0].status == "time_limit"
    assert time.monotonic() - start < LIMITS.wall_s + 2
    assert_clean(sandbox)


HOSTILE = {
    "infinite_loop": "while True:\n    pass\n",
    "fork_bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
    "memory_bomb": "x = []\nwhile True:\n    x.append(bytearray(10**7))\n",
    "output_flood": "import sys\nwhile True:\n    sys.stdout.write('y' * 65536)\n",
    "kill_parent": (
        "import os, signal\n"
        "for pid in (os.getppid(), 1):\n"
        "    try:\n        os.kill(pid, signal.SIGKILL)\n    except OSError:\n        pass\n"
        "os.system('kill -9 -1 2>/dev/null')\nprint('alive')\n"
    ),
    "escape_group": (
        "import os, time\n"
        "if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(60)\n    os._exit(0)\n"
        "print('bye')\n"
    ),
}


@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_programs_are_contained(sandbox: Sandbox, name: str) -> None:
    suite = parse_test_cases({"inputs": [""], "outputs": ["never"]})
    start = time.monotonic()
    rep = run(sandbox, "python", HOSTILE[name], suite)
    assert not rep.infra_error, rep
    assert not rep.all_passed
    assert time.monotonic() - start < LIMITS.wall_s + 3
    assert_clean(sandbox)
    # the host and the next run are unaffected
    assert run(sandbox, "python", PY_ADD).all_passed


def test_network_is_blocked(sandbox: Sandbox) -> None:
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.settimeout(0.1)
    port = server.getsockname()[1]
    prog = (
        "import socket\ns = socket.socket()\ns.settimeout(1)\n"
        f"try:\n    s.connect(('127.0.0.1', {port}))\n    s.sendall(b'x')\n    print('connected')\n"
        "except OSError:\n    print('blocked')\n"
    )
    rep = run(sandbox, "python", prog, parse_test_cases({"inputs": [""], "outputs": ["blocked"]}))
    try:
        accepted = server.accept()[0] is not None
    except TimeoutError:
        accepted = False
    server.close()
    if sandbox.level in (IsolationLevel.BWRAP, IsolationLevel.NAMESPACES):
        assert rep.all_passed and not accepted, rep.cases[0].detail
    else:  # documented: uid and rlimits levels do not isolate the network
        assert accepted or rep.cases[0].status == "wrong_answer"


def test_writes_outside_the_run_dir_are_blocked(sandbox: Sandbox, tmp_path: Path) -> None:
    private = tmp_path / "host_private"
    private.mkdir(mode=0o700)
    os.chmod(tmp_path, 0o755)
    token = f"lc_escape_{os.getpid()}_{sandbox.level.value}"
    targets = [str(private / "pwned"), f"/tmp/{token}", f"/var/tmp/{token}"]
    prog = (
        "import sys\n"
        f"for path in {targets!r}:\n"
        "    try:\n        open(path, 'w').write('x')\n        print('wrote', path)\n"
        "    except OSError:\n        print('denied', path)\n"
    )
    rep = run(sandbox, "python", prog, parse_test_cases({"inputs": [""], "outputs": [""]}))
    assert not rep.infra_error
    if sandbox.level is not IsolationLevel.RLIMITS:
        assert not (private / "pwned").exists()
    if sandbox.level in (IsolationLevel.BWRAP, IsolationLevel.NAMESPACES):
        assert not os.path.exists(f"/tmp/{token}") and not os.path.exists(f"/var/tmp/{token}")
    for leftover in (f"/tmp/{token}", f"/var/tmp/{token}"):
        if os.path.exists(leftover):
            os.unlink(leftover)


def test_concurrent_runs_do_not_disturb_each_other(work_root: str) -> None:
    sb = Sandbox("auto", LIMITS, work_root=work_root, max_concurrent=3)
    bomb = parse_test_cases({"inputs": [""], "outputs": ["never"]})

    async def both():  # noqa: ANN202
        return await asyncio.gather(
            sb.run("python", HOSTILE["fork_bomb"], bomb),
            sb.run("python", HOSTILE["memory_bomb"], bomb),
            sb.run("python", PY_ADD, ADD),
        )

    _, _, good = asyncio.run(both())
    assert good.all_passed, good
    assert_clean(sb)


def test_code_reward_compute_score() -> None:
    gt = '{"inputs": ["1 2\\n", "3 4\\n"], "outputs": ["3\\n", "7\\n"]}'
    ok = asyncio.run(code_reward.compute_score("apps", f"Here:\n```python\n{PY_ADD}```", gt))
    assert ok["score"] == 1.0 and ok[VALID_KEY] == 1.0
    cpp = asyncio.run(code_reward.compute_score("apps", f"```cpp\n{CPP_ADD}```", gt))
    assert cpp["score"] == 1.0
    half = asyncio.run(code_reward.compute_score("apps", "```python\nprint(3)\n```", gt, score_mode="pass_rate"))
    assert half["score"] == 0.5 and half["acc"] == 0.0
    none = asyncio.run(code_reward.compute_score("apps", "no code here", gt))
    assert none["score"] == 0.0 and none[VALID_KEY] == 1.0
    bad = asyncio.run(code_reward.compute_score("apps", "```python\nprint(1)\n```", '{"inputs": [1]}'))
    assert bad[VALID_KEY] == 0.0 and math.isnan(bad["score"]) and "outputs" in bad["longcat_reward_error"]


def test_threads_still_work_after_runs() -> None:
    """preexec_fn runs only in the child: the host process keeps its threads and uid."""
    assert os.geteuid() == os.getuid()
    t = threading.Thread(target=lambda: None)
    t.start()
    t.join()


def test_python_reaper_fallback(work_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a C compiler the Python reaper does the same job (slower to start)."""
    from longcat_plugins.rewards.sandbox import isolation

    monkeypatch.setattr(
        isolation, "reaper_argv", lambda: (isolation._reaper_python(), "-I", "-S", "-c", isolation._REAPER)
    )
    sb = Sandbox("auto", LIMITS, work_root=work_root)
    assert run(sb, "python", PY_ADD).all_passed
    rep = run(sb, "python", HOSTILE["fork_bomb"], parse_test_cases({"inputs": [""], "outputs": ["x"]}))
    assert rep.cases[0].status in ("time_limit", "runtime_error")
    assert_clean(sb)


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid drop only happens as root")
def test_toolchain_out_of_the_sandbox_uids_reach_is_refused_loudly(work_root: str, tmp_path: Path) -> None:
    """Issue 13.0's class of failure: an interpreter under a 0700 dir (pyenv/venv under /root)."""
    from longcat_plugins.rewards.result import RewardSetupError
    from longcat_plugins.rewards.sandbox import SandboxSetupError
    from longcat_plugins.rewards.sandbox.languages import LANGUAGES

    private = tmp_path / "private"
    private.mkdir()
    (private / "python3").symlink_to(LANGUAGES["python"].run[0])
    private.chmod(0o700)
    hidden = dataclasses.replace(LANGUAGES["python"], run=(str(private / "python3"), "{src}"), compile=None)
    sb = Sandbox("auto", LIMITS, work_root=work_root)
    with pytest.raises(SandboxSetupError, match="not accessible to the sandbox uids") as info:
        asyncio.run(sb.run(hidden, PY_ADD, ADD))
    assert str(private) in str(info.value) and isinstance(info.value, RewardSetupError)
    assert asyncio.run(sb.run("python", PY_ADD, ADD)).all_passed  # the stock toolchain is reachable


@pytest.mark.skipif(os.geteuid() != 0, reason="the uid-switching levels are probed only as root")
def test_processes_probing_at_once_see_the_same_levels() -> None:
    """Each process probes the levels once, as a sandbox uid. With one fixed probe uid, two
    processes starting together killed each other's probe (the reaper's kill(-1) as that uid)
    and a level looked unavailable: the sandbox fell back to weaker isolation at random."""
    code = (
        "import json; from longcat_plugins.rewards.sandbox import available_levels; "
        "print(json.dumps({k.value: v is None for k, v in available_levels().items()}))"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) for _ in range(6)]
    seen = [json.loads(p.communicate(timeout=120)[0]) for p in procs]
    assert all(s == seen[0] for s in seen), seen
    assert seen[0] == {lv.value: why is None for lv, why in available_levels().items()}


# -- stdin/stdout batches in one warm interpreter (the default for Python) ----------------------
PARITY = {
    "add": PY_ADD,
    "exit_0_after_answer": "import sys\na, b = map(int, input().split())\nprint(a + b)\nsys.exit(0)\n",
    "exit_3": "import sys\nprint(3)\nsys.exit(3)\n",
    "exit_message": "import sys\nprint(7)\nsys.exit('bye')\n",
    "uncaught": "a, b = map(int, input().split())\nprint(a + b)\nraise ValueError('late')\n",
    "unjoined_thread": (
        "import sys, threading\ndef main():\n    a, b = map(int, sys.stdin.readline().split())\n    print(a + b)\n"
        "threading.stack_size(1 << 24)\nthreading.Thread(target=main).start()\n"
    ),
    "stdin_buffer": "import sys\nd = sys.stdin.buffer.read().split()\nprint(int(d[0]) + int(d[1]))\n",
    "open_fd0": "a, b = map(int, open(0).read().split())\nprint(a + b)\n",
    "main_guard": "def f():\n    a, b = map(int, input().split())\n    print(a + b)\nif __name__ == '__main__':\n    f()\n",
    "atexit_prints": "import atexit\na, b = map(int, input().split())\natexit.register(lambda: print(a + b))\n",
    # state carried between cases would make the second and third answers wrong
    "module_state": "import sys\nk = getattr(sys, 'lc_seen', 0)\nsys.lc_seen = k + 1\na, b = map(int, input().split())\n"
    "print(a + b + k)\n",
    "slow_second_case": "import time\na, b = map(int, input().split())\nif a == 3:\n    time.sleep(30)\nprint(a + b)\n",
    "syntax_error": "def (:\n",
    "forged_marker": (
        'import sys\nsys.stdout.write(\'\\x00LCWARM{"status": "ok", "wall": 0, "out": "Mwo=", "err": ""}\\n\')\n'
    ),
}


def test_warm_stdio_agrees_with_process_per_case(work_root: str) -> None:
    """Every program gets the same per-case verdicts from the warm harness as from one process per
    case (at the strongest level; isolation at every level is the hostile tests' business)."""
    warm = Sandbox("auto", LIMITS, work_root=work_root, python_stdio_mode="warm")
    per = Sandbox("auto", LIMITS, work_root=work_root, python_stdio_mode="per_case")

    async def both() -> list:  # noqa: ANN202
        out = []
        for name, src in PARITY.items():
            a, b = await asyncio.gather(warm.run("python", src, ADD), per.run("python", src, ADD))
            out.append((name, a, b))
        return out

    for name, w, p in asyncio.run(both()):
        assert not w.infra_error and not p.infra_error, (name, w, p)
        assert [c.status for c in w.cases] == [c.status for c in p.cases], (name, w.cases, p.cases)
        assert w.compiled == p.compiled, name
    assert_clean(warm)


@pytest.mark.parametrize("level", LEVELS, ids=lambda lv: lv.value)
@pytest.mark.parametrize("name", list(HOSTILE))
def test_hostile_case_in_a_warm_batch_costs_only_that_case(level: IsolationLevel, work_root: str, name: str) -> None:
    """The middle case turns hostile; the first is judged before it, and (unless it killed the
    harness itself) the last still runs, from pristine state, within its own limits."""
    sb = Sandbox(level.value, LIMITS, work_root=work_root)
    hostile = "\n".join("    " + ln for ln in HOSTILE[name].splitlines())
    src = f"import sys\nline = sys.stdin.readline()\nif line.strip() == 'bad':\n{hostile}\nprint(sum(map(int, line.split())))\n"
    suite = parse_test_cases({"inputs": ["1 2\n", "bad\n", "10 -3\n"], "outputs": ["3\n", "never\n", "7\n"]})
    start = time.monotonic()
    rep = run(sb, "python", src, suite)
    assert not rep.infra_error, rep
    assert rep.cases[0].passed and not rep.cases[1].passed, rep.cases
    if name != "kill_parent":  # killing its parent kills the harness: the rest of the batch fails, never passes
        assert rep.cases[2].passed, rep.cases
    assert time.monotonic() - start < 2 * LIMITS.wall_s + 4
    assert_clean(sb)


def test_expected_outputs_never_enter_the_sandbox(work_root: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A program that could read its harness's memory or files still finds no expected output:
    only the program and the stdins go in; the comparison runs outside."""
    sb = Sandbox("auto", LIMITS, work_root=work_root)
    seen: list[str] = []
    real_exec = sb.exec

    async def spy(argv, run_dir, io_dir, limits, uid, stdin=""):  # noqa: ANN001, ANN202
        seen.append(" ".join(argv) + stdin + "".join(Path(run_dir, f).read_text() for f in os.listdir(run_dir)))
        return await real_exec(argv, run_dir, io_dir, limits, uid, stdin)

    monkeypatch.setattr(sb, "exec", spy)
    suite = parse_test_cases({"inputs": ["1 2\n", "3 4\n"], "outputs": ["SECRET-3\n", "SECRET-7\n"]})
    rep = run(sb, "python", PY_ADD, suite)
    assert [c.status for c in rep.cases] == ["wrong_answer", "wrong_answer"]
    assert len(seen) == 1 and "SECRET" not in seen[0] and "3 4" in seen[0]


class _BwrapRefuses:
    """An executor whose every run is refused by bwrap itself (as when user namespaces are off)."""

    limits = Limits()

    async def exec(
        self, argv: list[str], run_dir: str, io_dir: str, limits: Limits, uid: int | None, stdin: str = ""
    ) -> ProcResult:
        return ProcResult(1, 0.01, "", "bwrap: Creating new namespace failed: Operation not permitted\n", False)

    async def sweep(self, uid: int | None) -> None:
        pass


def test_a_run_bwrap_refused_is_an_infra_failure_never_a_verdict() -> None:
    """Every harness raises OSError (the infra-error path) instead of scoring the refused run as a
    runtime error of the program; a program's own stderr that merely mentions bwrap is its verdict."""
    from longcat_plugins.rewards.sandbox.warm import CodeCase, run_per_process, run_warm, run_warm_stdio

    refused = ProcResult(1, 0.0, "", "bwrap: Can't mount proc on /newroot/proc\n", False)
    assert refused.isolation_failed and refused.status == "runtime_error"
    with pytest.raises(OSError, match=r"^isolation failed: bwrap: Can't mount proc on /newroot/proc$"):
        refused.check_isolation()
    own = ProcResult(1, 0.0, "", "Traceback ...\nRuntimeError: bwrap: fake\n", False)
    assert not own.isolation_failed
    own.check_isolation()

    ex, cases = _BwrapRefuses(), [CodeCase("t", "assert True\n")]
    for run in (
        lambda: run_warm(ex, cases, "/nonexistent", "/nonexistent", None),
        lambda: run_per_process(ex, cases, "/nonexistent", "/nonexistent", None),
        lambda: run_warm_stdio(ex, "/nonexistent/m.py", ["1\n"], "/nonexistent", "/nonexistent", None),
    ):
        with pytest.raises(OSError, match="^isolation failed: bwrap: Creating new namespace failed"):
            asyncio.run(run())
