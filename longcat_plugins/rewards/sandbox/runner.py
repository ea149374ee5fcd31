"""The async batch API: ``await Sandbox().run(language, source, suite)``.

One submission = one private run directory owned by one per-run uid, compiled once, then each
test case run as its own process tree (stdin from a file, stdout/stderr to files in a second,
root-only directory the program cannot touch, so output size is bounded by RLIMIT_FSIZE and
no pipe can fill up). Waiting uses asyncio subprocesses (the event loop's child watcher), never
a polling loop. On timeout the whole process group is SIGKILLed; after every abnormal case and
at the end, every process of the run's uid is killed (``kill -9 -1`` as that uid), and both
directories are removed.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import queue
import random
import shutil
import signal
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from longcat_plugins.rewards.result import RewardSetupError
from longcat_plugins.rewards.sandbox.execution import CaseResult, ProcResult
from longcat_plugins.rewards.sandbox.isolation import (
    IsolationLevel,
    blocked_for_other_users,
    choose_level,
    lock_uid,
    make_preexec,
    wrap_argv,
)
from longcat_plugins.rewards.sandbox.languages import Language, get_language
from longcat_plugins.rewards.sandbox.limits import COMPILE_LIMITS, Limits
from longcat_plugins.rewards.sandbox.split_asserts import (
    SplitTest,
    Unsplittable,
    program_names,
    split_test,
    split_value,
)
from longcat_plugins.rewards.sandbox.testcases import (
    TestCase,
    TestSuite,
    stdout_matches,
    value_checks,
    value_matches,
    values_equal,
)
from longcat_plugins.rewards.sandbox.warm import run_warm_stdio

logger = logging.getLogger(__name__)

_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": "/nonexistent", "PYTHONHASHSEED": "0"}

#: the judge-and-child script of call-based and assert-based Python tests (see its docstring)
_HARNESS = (Path(__file__).parent / "harness.py").read_text()


def live_pids_of_uid(uid: int) -> list[int]:
    """Pids whose real uid is ``uid`` and that are not zombies (zombies hold no resources but a pid)."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status") as f:
                status = f.read()
        except OSError:
            continue
        uid_line = status[status.find("\nUid:") + 5 :].split(None, 1)[0] if "\nUid:" in status else ""
        state = status[status.find("\nState:") + 7 :].split(None, 1)[0] if "\nState:" in status else ""
        if uid_line == str(uid) and state != "Z":
            pids.append(int(entry))
    return pids


def check_python_modes(call_mode: str, stdio_mode: str) -> None:
    """ValueError unless the Python call and stdio modes are ones the sandbox runs (settings
    check them before Ray with this, the sandbox again where it starts)."""
    if call_mode not in ("batch", "per_case"):
        raise ValueError(f"python_call_mode must be 'batch' or 'per_case', got {call_mode!r}")
    if stdio_mode not in ("warm", "per_case"):
        raise ValueError(f"python_stdio_mode must be 'warm' or 'per_case', got {stdio_mode!r}")


class SandboxSetupError(RewardSetupError):
    """The sandbox cannot run this language at all here; raised, never scored as wrong answers."""


@dataclass
class SandboxReport:
    """Outcome of one submission. ``infra_error`` set means the sandbox itself failed: invalid."""

    language: str
    isolation: str
    compiled: bool = True
    compile_error: str = ""
    cases: list[CaseResult] = field(default_factory=list)
    infra_error: str = ""
    #: a test case of a shape the harness cannot judge whatever the program (the dataset's doing,
    #: not the program's): the submission is invalid, not wrong
    unjudgeable: str = ""
    wall_s: float = 0.0

    @property
    def pass_rate(self) -> float:
        return sum(c.passed for c in self.cases) / len(self.cases) if self.cases else 0.0

    @property
    def all_passed(self) -> bool:
        return bool(self.cases) and all(c.passed for c in self.cases)

    def compile_failed(self, error: str, n_cases: int) -> None:
        """The program did not compile (warm: did not load): every case is a compile error."""
        self.compiled = False
        self.compile_error = error
        self.cases = [CaseResult(False, "compile_error") for _ in range(n_cases)]


def _case_result(status: str, stdout: str, wall_s: float, stderr: str, expected: str | None) -> CaseResult:
    """The verdict on one run of a case: a failed run is its status; a clean one passes when it
    printed ``expected`` (``None``: an assert-based case, whose clean exit is the pass)."""
    if status != "ok":
        return CaseResult(False, status, wall_s, stderr[-500:])
    if expected is None or stdout_matches(stdout, expected):
        return CaseResult(True, "passed", wall_s)
    return CaseResult(False, "wrong_answer", wall_s, f"got {stdout[:200]!r}")


#: whether a check's value passes (``None``: the check passes by completing)
Verdict = Callable[[Any], bool]


def _cut_asserts(code: str, defined: frozenset[str]) -> list[tuple[SplitTest, Verdict | None]]:
    """The split tests of one Python assert case and their verdicts: one per ``assert <expr> ==
    <literal>`` (its value compared here), or the whole case (the judge's verdict)."""
    literal = value_checks(code)
    if literal is None:
        return [(split_test(code, defined), None)]
    setup, values = literal
    return [(split_value(setup, e, defined), partial(values_equal, expected=x)) for e, x in values]


def _harness_verdict(
    case: list[tuple[Any, Verdict | None]], lines: Iterator[str], res: ProcResult, share: float
) -> CaseResult:
    """One case's verdict from the harness's next result lines (one per check). A missing line
    (the program exited, or ran out of time) fails with the run's status; a line that is not the
    harness's JSON (the program wrote it) is a runtime error, never a pass."""
    for _, verdict in case:
        line = next(lines, None)
        if line is None:
            status = res.status if res.status != "ok" else "runtime_error"
            return CaseResult(False, status, res.wall_s, res.stderr[-500:])
        try:
            out = json.loads(line)
            ok, value, error = bool(out["ok"]), out.get("value"), str(out.get("error", ""))
        except (ValueError, TypeError, KeyError):
            return CaseResult(False, "runtime_error", res.wall_s, f"malformed harness line {line[:100]!r}")
        if not ok:
            return CaseResult(False, "runtime_error", res.wall_s, error)
        if verdict is not None and not verdict(value):
            return CaseResult(False, "wrong_answer", res.wall_s * share, f"got {value!r}"[:200])
    return CaseResult(True, "passed", res.wall_s * share)


class Sandbox:
    """Runs untrusted programs; one instance can serve many concurrent submissions."""

    def __init__(
        self,
        isolation: str = "auto",
        limits: Limits | None = None,
        compile_limits: Limits = COMPILE_LIMITS,
        max_concurrent: int = 8,
        work_root: str | None = None,
        uid_base: int = 61000,
        uid_count: int = 1000,
        python_call_mode: str = "batch",
        python_stdio_mode: str = "warm",
    ) -> None:
        check_python_modes(python_call_mode, python_stdio_mode)
        self.python_stdio_mode = python_stdio_mode
        self.level: IsolationLevel = choose_level(isolation)
        self.limits = limits or Limits()
        self.compile_limits = compile_limits
        self.python_call_mode = python_call_mode
        self.is_root = os.geteuid() == 0
        root = work_root or ("/run/longcat-sandbox" if self.is_root and os.path.isdir("/run") else None)
        root = root or os.path.join(tempfile.gettempdir(), f"longcat-sandbox-{os.getuid()}")
        os.makedirs(root, mode=0o711, exist_ok=True)
        self.work_root = os.path.realpath(root)
        self._check_work_root()
        self.uid_base = uid_base
        self.uid_count = uid_count
        self._slots: queue.Queue[int] = queue.Queue()
        self._toolchains_ok: set[Language] = set()
        for slot in range(max_concurrent):
            self._slots.put(slot)

    def _check_work_root(self) -> None:
        """The run dirs must stay visible to the program: reachable by its uid, not under a private tmp."""
        root = self.work_root
        if self.level is IsolationLevel.NAMESPACES and any(
            root == d or root.startswith(d + "/") for d in ("/tmp", "/var/tmp", "/dev/shm")
        ):
            raise ValueError(f"sandbox work_root {root!r} is under a directory the namespaces level hides")
        if self.is_root and self.level is not IsolationLevel.RLIMITS:
            path = root
            while path != "/":
                if not os.stat(path).st_mode & 0o001:
                    raise ValueError(f"sandbox work_root {root!r}: {path!r} is not searchable by the sandbox uid")
                path = os.path.dirname(path)

    # -- slots -------------------------------------------------------------------------------
    async def _acquire(self) -> int:
        try:
            return self._slots.get_nowait()
        except queue.Empty:
            return await asyncio.to_thread(self._slots.get)

    async def _lock_uid(self) -> tuple[int | None, int | None]:
        """(uid, lock fd): a uid no other run on this machine holds (flock, released if we die)."""
        if not self.is_root or self.level is IsolationLevel.RLIMITS:
            return None, None
        while True:
            offset = random.randrange(self.uid_count)
            for k in range(self.uid_count):
                uid = self.uid_base + (offset + k) % self.uid_count
                fd = lock_uid(uid)
                if fd is None:
                    continue
                if live_pids_of_uid(uid):  # a crashed holder's leftovers: clean before reuse
                    await self._sweep(uid)
                return uid, fd
            await asyncio.sleep(0.05)  # every uid of the range busy machine-wide: rare, wait

    async def lease_uid(self) -> tuple[int | None, int | None]:
        """(uid, lock fd) held until :meth:`release_uid`: for work that outlives one submission
        (a code agent's workspace). (None, None) when runs do not switch uid (level rlimits, not root)."""
        return await self._lock_uid()

    async def release_uid(self, uid: int | None, lock_fd: int | None) -> None:
        """Kill whatever still runs as ``uid`` and give the uid back."""
        await self._sweep(uid)
        if lock_fd is not None:
            os.close(lock_fd)

    async def sweep(self, uid: int | None) -> None:
        """Kill every process of ``uid`` (see :meth:`_sweep`)."""
        await self._sweep(uid)

    # -- processes -----------------------------------------------------------------------------
    async def exec(
        self, argv: list[str], run_dir: str, io_dir: str, limits: Limits, uid: int | None, stdin: str = ""
    ) -> ProcResult:
        """Run ``argv`` in ``run_dir`` under ``limits`` as ``uid``; never longer than ``limits.wall_s``."""
        fd, in_path = tempfile.mkstemp(dir=io_dir, prefix="in")
        with os.fdopen(fd, "w") as f:
            f.write(stdin)
        out_path, err_path = in_path + ".out", in_path + ".err"
        start = time.monotonic()
        timed_out = False
        with open(in_path, "rb") as fin, open(out_path, "wb") as fout, open(err_path, "wb") as ferr:
            proc = await asyncio.create_subprocess_exec(
                *wrap_argv(self.level, argv, run_dir, dedicated_uid=uid is not None),
                stdin=fin,
                stdout=fout,
                stderr=ferr,
                cwd=run_dir,
                env=_ENV,
                preexec_fn=make_preexec(self.level, limits, uid),
            )
            try:
                await asyncio.wait_for(proc.wait(), limits.wall_s)
            except TimeoutError:
                timed_out = True
                proc.terminate()  # the reaper kills the run and reaps it; SIGKILL below is the backstop
                try:
                    await asyncio.wait_for(proc.wait(), 2.0)
                except TimeoutError:
                    pass
            finally:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                if proc.returncode is None:
                    await proc.wait()
        wall = time.monotonic() - start

        def read(path: str) -> str:
            with open(path, "rb") as f:
                return f.read(limits.output_bytes).decode(errors="replace")

        result = ProcResult(proc.returncode, wall, read(out_path), read(err_path), timed_out)
        for p in (in_path, out_path, err_path):
            os.unlink(p)
        return result

    async def _sweep(self, uid: int | None) -> None:
        """Kill every process of ``uid`` (escaped the group or not): ``kill -9 -1`` run as that uid."""
        if uid is None:
            return
        proc = await asyncio.create_subprocess_exec(
            "/bin/kill",
            "-9",
            "-1",
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
            preexec_fn=lambda: (os.setgroups([]), os.setgid(uid), os.setuid(uid)),
        )
        await proc.wait()
        # kill(-1) can miss children forked while it runs (a fork bomb): kill stragglers until none live
        for _ in range(100):
            pids = live_pids_of_uid(uid)
            if not pids:
                return
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
            await asyncio.sleep(0.01)
        logger.error("code sandbox: processes of uid %d survive repeated SIGKILL: %s", uid, live_pids_of_uid(uid))

    # -- submissions ---------------------------------------------------------------------------
    def _check_toolchain(self, lang: Language) -> None:
        """Refuse, loudly, a language whose compiler or interpreter the sandbox uid cannot execute."""
        if not self.is_root or self.level is IsolationLevel.RLIMITS or lang in self._toolchains_ok:
            return
        for argv in (lang.compile or (), lang.run):
            if not argv or "{" in argv[0]:
                continue
            exe = shutil.which(argv[0]) or argv[0]
            blocked = blocked_for_other_users(exe)
            if blocked is not None:
                raise SandboxSetupError(
                    f"code sandbox: {lang.name} runs {exe!r}, but {blocked!r} is not accessible to the "
                    f"sandbox uids ({self.uid_base}-{self.uid_base + self.uid_count - 1}): every program "
                    "would fail as if it were wrong. Install the toolchain world-readable (e.g. "
                    "apt-get install python3 for /usr/bin/python3)"
                )
        self._toolchains_ok.add(lang)

    async def run(self, language: str | Language, source: str, suite: TestSuite) -> SandboxReport:
        """Compile ``source`` once and run every case of ``suite``; infra failures land in ``infra_error``.

        Raises :class:`SandboxSetupError` when the language's toolchain is out of the sandbox uid's reach.
        """
        lang = get_language(language) if isinstance(language, str) else language
        self._check_toolchain(lang)
        report = SandboxReport(lang.name, self.level.value)
        start = time.monotonic()
        slot = await self._acquire()
        uid, lock_fd = await self._lock_uid()
        run_dir = io_dir = None
        try:
            run_dir = tempfile.mkdtemp(dir=self.work_root, prefix="run")
            io_dir = tempfile.mkdtemp(dir=self.work_root, prefix="io")
            if uid is not None:
                os.chown(run_dir, uid, uid)
            os.chmod(run_dir, 0o700)
            await self._run_in(lang, source, suite, run_dir, io_dir, uid, report)
        except OSError as exc:
            report.infra_error = f"sandbox error: {type(exc).__name__}: {exc}"
            logger.warning("code sandbox: %s", report.infra_error)
        finally:
            await self._sweep(uid)
            for d in (run_dir, io_dir):
                if d:
                    shutil.rmtree(d, ignore_errors=True)
            if lock_fd is not None:
                os.close(lock_fd)
            self._slots.put(slot)
            report.wall_s = time.monotonic() - start
        return report

    async def _run_in(
        self,
        lang: Language,
        source: str,
        suite: TestSuite,
        run_dir: str,
        io_dir: str,
        uid: int | None,
        report: SandboxReport,
    ) -> None:
        src = os.path.join(run_dir, lang.source_name)
        exe = os.path.join(run_dir, lang.exe_name)
        Path(src).write_text(source)
        os.chmod(src, 0o644)
        warm = lang.name == "python" and self.python_stdio_mode == "warm" and suite.fn_name is None
        if warm and not any(c.assert_code is not None for c in suite.cases):
            await self._run_stdio_warm(lang, src, suite, run_dir, io_dir, uid, report)
            return
        compile_argv = lang.compile_argv(src, exe)
        if compile_argv and not all(c.assert_code is not None for c in suite.cases):
            res = await self.exec(compile_argv, run_dir, io_dir, self.compile_limits, uid)
            res.check_isolation()
            if res.status != "ok":
                report.compile_failed((res.stderr or res.status)[-2000:], len(suite.cases))
                return
        if lang.name == "python" and any(c.assert_code is not None for c in suite.cases):
            await self._run_python_asserts(src, suite, run_dir, io_dir, uid, report)
            return
        if suite.fn_name is not None:
            if lang.name != "python":
                raise ValueError(f"call-based test cases (fn_name) need python, not {lang.name}")
            await self._run_call_based(src, suite, run_dir, io_dir, uid, report)
            return
        for case in suite.cases:
            report.cases.append(await self._run_case(lang, case, src, exe, run_dir, io_dir, uid))

    async def _run_case(
        self, lang: Language, case: TestCase, src: str, exe: str, run_dir: str, io_dir: str, uid: int | None
    ) -> CaseResult:
        if case.assert_code is not None:
            prog = os.path.join(run_dir, "case_" + lang.source_name)
            Path(prog).write_text(Path(src).read_text() + "\n\n" + case.assert_code)
            os.chmod(prog, 0o644)
            res = await self.exec(lang.run_argv(prog, exe), run_dir, io_dir, self.limits, uid)
        else:
            res = await self.exec(lang.run_argv(src, exe), run_dir, io_dir, self.limits, uid, case.stdin)
        if res.status != "ok":
            await self._sweep(uid)
        expected = None if case.assert_code is not None else case.expected or ""
        return _case_result(res.status, res.stdout, res.wall_s, res.stderr, expected)

    async def _run_call_based(
        self, src: str, suite: TestSuite, run_dir: str, io_dir: str, uid: int | None, report: SandboxReport
    ) -> None:
        """Call-based cases: each calls the function on its arguments; the value is compared here."""

        checks = [[(case.args, partial(value_matches, expected=case.expected_value))] for case in suite.cases]
        await self._run_harness(src, suite.fn_name or "", checks, run_dir, io_dir, uid, report)

    async def _run_python_asserts(
        self, src: str, suite: TestSuite, run_dir: str, io_dir: str, uid: int | None, report: SandboxReport
    ) -> None:
        """Python assert cases. One made of ``assert <expr> == <literal>`` statements runs as its
        expressions' values, compared here (:func:`value_checks`: the expectation stays out
        of the sandbox, an ``__eq__`` that always says yes gets nothing). Any other is cut by
        :func:`.split_asserts.split_test`: its calls into the program run in the program's process,
        the rest of each assert in the harness's judge. One that cannot be cut is not credited."""

        defined = program_names(Path(src).read_text())
        checks: list[list[tuple[Any, Verdict | None]] | CaseResult] = []
        for index, case in enumerate(suite.cases):
            try:
                cuts = _cut_asserts(case.assert_code or "", defined)
            except Unsplittable as exc:
                checks.append(CaseResult(False, "unsupported_test", 0.0, f"not credited: {exc}"))
                try:  # whatever the program: the test's own shape, which no answer can fix
                    _cut_asserts(case.assert_code or "", frozenset())
                except Unsplittable as own:
                    report.unjudgeable = report.unjudgeable or f"assert case {index} cannot be judged: {own}"
                continue
            checks.append([({"split": cut.child, "judge": cut.judge}, verdict) for cut, verdict in cuts])
        await self._run_harness(src, "", checks, run_dir, io_dir, uid, report)

    async def _run_harness(
        self,
        src: str,
        fn_name: str,
        checks: list[list[tuple[Any, Verdict | None]] | CaseResult],
        run_dir: str,
        io_dir: str,
        uid: int | None,
        report: SandboxReport,
    ) -> None:
        """Run every case's checks through the harness (one interpreter pair per batch, or per
        case); a case passes when each of its checks ran and its value passed its verdict
        (``None``: the judge's own verdict is the pass). A :class:`CaseResult` among ``checks``
        is a verdict reached before running anything, kept in its place."""
        harness = os.path.join(run_dir, "harness.py")
        Path(harness).write_text(_HARNESS)
        os.chmod(harness, 0o644)
        python = get_language("python").run[0]
        groups: list[list[list[tuple[Any, Verdict | None]] | CaseResult]] = (
            [checks] if self.python_call_mode == "batch" else [[c] for c in checks]
        )
        for group in groups:
            runnable = [case for case in group if not isinstance(case, CaseResult)]
            if not runnable:
                report.cases.extend(c for c in group if isinstance(c, CaseResult))
                continue
            payloads = [payload for case in runnable for payload, _ in case]
            # the judge's half of each split test goes on stdin: it never touches the program's files
            judged = {str(i): p.pop("judge") for i, p in enumerate(payloads) if isinstance(p, dict) and "split" in p}
            cases_path = os.path.join(run_dir, "cases.jsonl")
            Path(cases_path).write_text("".join(json.dumps(payload) + "\n" for payload in payloads))
            os.chmod(cases_path, 0o644)
            n = len(payloads)
            limits = Limits(
                cpu_s=min(self.limits.cpu_s * n, 120.0),
                wall_s=min(self.limits.wall_s * n, 180.0),
                memory_mb=self.limits.memory_mb,
                nproc=self.limits.nproc,
                fsize_mb=self.limits.fsize_mb,
                nofile=self.limits.nofile,
                output_bytes=self.limits.output_bytes * 4,
            )
            argv = [python, "-I", "-S", "-B", harness, src, fn_name, cases_path]
            res = await self.exec(argv, run_dir, io_dir, limits, uid, json.dumps(judged))
            lines = iter([ln[6:] for ln in res.stdout.split("\n") if ln.startswith("\x00LCRES")])
            for case in group:
                report.cases.append(
                    case if isinstance(case, CaseResult) else _harness_verdict(case, lines, res, len(case) / n)
                )
            if res.status != "ok":
                await self._sweep(uid)

    async def _run_stdio_warm(
        self,
        lang: Language,
        src: str,
        suite: TestSuite,
        run_dir: str,
        io_dir: str,
        uid: int | None,
        report: SandboxReport,
    ) -> None:
        """Every stdin/stdout case of a Python program in one warm interpreter, a fork per case
        (:func:`~longcat_plugins.rewards.sandbox.warm.run_warm_stdio`); compared here, outside."""
        inputs = [c.stdin for c in suite.cases]
        got = await run_warm_stdio(self, src, inputs, run_dir, io_dir, uid, python=lang.run[0])
        if got.compile_error is not None:
            report.compile_failed(got.compile_error, len(suite.cases))
            return
        for case, (status, stdout, wall, stderr) in zip(suite.cases, got.cases, strict=True):
            report.cases.append(_case_result(status, stdout, wall, stderr, case.expected or ""))
