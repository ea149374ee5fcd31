"""Test batches in one warm interpreter: start once, import once, fork one child per test case.

A sandboxed process per test case pays the isolation start-up (bwrap, reaper, a fresh Python)
every time: tens of milliseconds. Here one sandboxed interpreter per submission imports the code
under test once and then forks a child per case. The fork is copy-on-write, so every case starts
from the same pristine module state (a case that mutates globals or monkeypatches cannot affect
the next), each child is its own process group with its own CPU limit and wall deadline (one
hanging case costs that case, not the batch), and the whole interpreter still runs inside the
same isolation as a single case (same level, uid, rlimits, reaper), so nothing is weaker than
process-per-case. Case code is fed on stdin; nothing is written into the directory under test.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from longcat_plugins.rewards.sandbox.execution import CaseResult, Executor, ProcResult
from longcat_plugins.rewards.sandbox.languages import get_language
from longcat_plugins.rewards.sandbox.limits import Limits
from longcat_plugins.rewards.sandbox.testcases import value_checks, values_equal

#: the marker that starts every result line of the harness (a case's own output cannot forge it:
#: children write to /dev/null, and results come back over a private pipe)
MARKER = "\x00LCWARM"

#: Both harnesses end a case the same way: kill its whole process group (it may have forked) and
#: reap its leader. Each harness runs alone (``python -I -S -c``), so this is prepended to both.
_KILL_AND_REAP = r"""
def kill_and_reap(pid):
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass
    return os.waitpid(pid, 0)[1]
"""

#: The harness: argv = per-case wall seconds, per-case CPU seconds, comma-separated modules to
#: pre-import; stdin = one JSON case per line ({"name", "code"}); stdout = one MARKER line per case.
HARNESS = (
    _KILL_AND_REAP
    + r"""
import json, os, resource, select, signal, sys, time
sys.path.insert(0, os.getcwd())
wall, cpu = float(sys.argv[1]), int(sys.argv[2])
sys.__stdout__.write("\x00LCWARM-READY\n")
sys.__stdout__.flush()
for mod in filter(None, sys.argv[3].split(",")):
    try:
        __import__(mod)
    except BaseException:
        pass  # the cases that import it see the error themselves
cases = [json.loads(line) for line in sys.stdin.read().splitlines() if line.strip()]
null = os.open(os.devnull, os.O_RDWR)
out = sys.__stdout__
for case in cases:
    start = time.monotonic()
    r, w = os.pipe()
    try:
        pid = os.fork()
    except OSError as exc:
        os.close(r); os.close(w)
        out.write("\x00LCWARM" + json.dumps({"status": "runtime_error", "error": "fork failed: %s" % exc, "wall": 0.0}) + "\n")
        out.flush()
        continue
    if pid == 0:
        try:
            os.close(r)
            os.setpgid(0, 0)
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            for fd in (0, 1, 2):
                os.dup2(null, fd)
            try:
                ns = {"__name__": "__lctest__"}
                exec(compile(case["code"], case["name"], "exec"), ns)
                if "exprs" in case:  # a value test: its values are judged outside
                    values = [eval(compile(e, case["name"], "eval"), ns) for e in case["exprs"]]
                    res = {"status": "values", "values": values, "error": ""}
                else:
                    res = {"status": "passed", "error": ""}
            except AssertionError as exc:
                res = {"status": "failed", "error": ("AssertionError: " + str(exc))[:300]}
            except BaseException as exc:
                res = {"status": "runtime_error", "error": (type(exc).__name__ + ": " + str(exc))[:300]}
            try:
                line = json.dumps(res)
            except BaseException as exc:
                line = json.dumps({"status": "failed", "error": "a value is not JSON: %s" % type(exc).__name__})
            os.write(w, (line + "\n").encode())
        finally:
            os._exit(0)
    os.close(w)
    deadline = start + wall
    buf = b""
    while b"\n" not in buf:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([r], [], [], left)[0]:
            break
        chunk = os.read(r, 4096)
        if not chunk:
            break
        buf += chunk
    os.close(r)
    st = kill_and_reap(pid)
    if b"\n" in buf:
        res = json.loads(buf.split(b"\n", 1)[0])
    elif time.monotonic() >= deadline or os.WIFSIGNALED(st) and os.WTERMSIG(st) in (signal.SIGXCPU, signal.SIGKILL):
        res = {"status": "time_limit", "error": "case exceeded its time limit"}
    else:
        res = {"status": "runtime_error", "error": "case died (status %d)" % st}
    res["wall"] = time.monotonic() - start
    out.write("\x00LCWARM" + json.dumps(res) + "\n")
    out.flush()
"""
)


@dataclass(frozen=True)
class CodeCase:
    """One test case: Python source that raises (AssertionError or anything else) to fail. One
    made of imports and ``assert <expr> == <literal>`` statements runs as its values, judged
    outside the sandbox (:func:`~longcat_plugins.rewards.sandbox.testcases.value_checks`)."""

    name: str
    code: str

    def line(self) -> tuple[str, list[Any] | None]:
        """The harness's stdin line for this case, and the expected values kept outside (None:
        the case passes by running without an error)."""
        split = value_checks(self.code)
        if split is None:
            return json.dumps({"name": self.name, "code": self.code}), None
        setup, checks = split
        exprs = [expr for expr, _ in checks]
        return json.dumps({"name": self.name, "code": setup, "exprs": exprs}), [e for _, e in checks]


#: the harness's first line: the interpreter started in the sandbox (before any code under test ran)
READY = MARKER + "-READY"


def started(res: ProcResult) -> bool:
    """Whether the harness came up at all; False is the sandbox's failure, not the code's."""
    return res.stdout.startswith(READY)


def _batch_limits(limits: Limits, n: int) -> Limits:
    """The interpreter's own limits: room for ``n`` cases plus start-up; per-case limits are the harness's."""
    return Limits(
        cpu_s=min(limits.cpu_s * n + 2.0, 300.0),
        wall_s=min(limits.wall_s * n + 2.0, 300.0),
        memory_mb=limits.memory_mb,
        nproc=limits.nproc,
        fsize_mb=limits.fsize_mb,
        nofile=limits.nofile,
        output_bytes=max(limits.output_bytes, 4096 * (n + 1)),
    )


def _judged(got: Any, expected: list[Any] | None) -> CaseResult:
    """One harness result line's verdict. A value test passes only on values equal to its
    expectations (a "passed" line for it was not written by its check); any other test only on
    "passed". A line that is not the harness's JSON is a runtime error, never a pass."""
    try:
        status, wall, error = str(got["status"]), float(got.get("wall", 0.0)), str(got.get("error", ""))
    except (TypeError, KeyError, ValueError):
        return CaseResult(False, "runtime_error", 0.0, f"malformed harness result {str(got)[:100]!r}")
    if expected is None or status not in ("values", "passed"):
        return CaseResult(status == "passed", status, wall, error)
    values = got.get("values") if status == "values" else None
    if not isinstance(values, list) or len(values) != len(expected):
        return CaseResult(False, "failed", wall, "the test's values did not come back")
    for value, want in zip(values, expected, strict=True):
        if not values_equal(value, want):
            return CaseResult(False, "failed", wall, f"got {value!r}"[:300])
    return CaseResult(True, "passed", wall)


def parse_results(res: ProcResult, expected: list[list[Any] | None]) -> list[CaseResult]:
    """The per-case results of one harness run, judged against each case's expected values
    (None: a case that passes by running); cases it never reached get the process's status."""
    lines = [ln[len(MARKER) :] for ln in res.stdout.split("\n") if ln.startswith(MARKER) and ln != READY]
    out = []
    for k, want in enumerate(expected):
        if k >= len(lines):
            status = res.status if res.status != "ok" else "runtime_error"
            out.append(CaseResult(False, status, 0.0, res.stderr[-300:] or "harness stopped before this case"))
            continue
        try:
            got = json.loads(lines[k])
        except ValueError:
            got = lines[k]
        out.append(_judged(got, want))
    return out


async def run_warm(
    sandbox: Executor,
    cases: list[CodeCase],
    run_dir: str,
    io_dir: str,
    uid: int | None,
    limits: Limits | None = None,
    preload: tuple[str, ...] = (),
) -> tuple[list[CaseResult], ProcResult]:
    """Run ``cases`` against the code in ``run_dir`` in one warm sandboxed interpreter.

    ``limits`` are per case (CPU, wall); memory, processes and file size bound the whole batch.
    Returns the per-case results and the interpreter's own outcome (an ``OSError`` of the sandbox
    propagates: the caller decides it is an infrastructure failure).
    """
    limits = limits or sandbox.limits
    python = get_language("python").run[0]
    argv = [python, "-I", "-S", "-B", "-c", HARNESS, str(limits.wall_s), str(max(1, int(limits.cpu_s + 0.999)))]
    argv.append(",".join(preload))
    lines = [case.line() for case in cases]
    stdin = "".join(line + "\n" for line, _ in lines)
    res = await sandbox.exec(argv, run_dir, io_dir, _batch_limits(limits, len(cases)), uid, stdin)
    res.check_isolation()
    return parse_results(res, [expected for _, expected in lines]), res


async def run_per_process(
    sandbox: Executor,
    cases: list[CodeCase],
    run_dir: str,
    io_dir: str,
    uid: int | None,
    limits: Limits | None = None,
) -> list[CaseResult]:
    """The baseline: every case its own sandboxed interpreter (what :func:`run_warm` is measured against)."""
    limits = limits or sandbox.limits
    python = get_language("python").run[0]
    out = []
    for case in cases:
        code = "import os, sys\nsys.path.insert(0, os.getcwd())\n" + case.code
        res = await sandbox.exec([python, "-I", "-S", "-B", "-c", code], run_dir, io_dir, limits, uid)
        res.check_isolation()
        if res.status == "ok":
            out.append(CaseResult(True, "passed", res.wall_s))
        else:
            failed = res.status == "runtime_error" and "AssertionError" in res.stderr
            out.append(CaseResult(False, "failed" if failed else res.status, res.wall_s, res.stderr[-300:]))
        if res.status != "ok":
            await sandbox.sweep(uid)
    return out


#: The stdin/stdout harness: argv = per-case wall s, per-case CPU s, per-case file-size bytes,
#: stdout bytes kept per case, the program's path; stdin = one JSON string (the case's stdin) per
#: line. It compiles the program once (a syntax error is one COMPILE line, no case runs), then per
#: case forks a child that gets the case's stdin, stdout and stderr as unnamed temp files (nothing
#: left in the run directory) and runs the compiled program as ``__main__``, exiting as the
#: interpreter would (SystemExit codes, a traceback and status 1 on an uncaught exception,
#: non-daemon threads joined, atexit run). The parent waits on a pidfd with the case's deadline,
#: SIGKILLs the child's process group, and writes the exit status and the first bytes of stdout
#: (base64) as one MARKER line. The expected outputs never enter the sandbox: the comparison is
#: the caller's, outside.
STDIO_HARNESS = (
    _KILL_AND_REAP
    + r"""
import binascii, io, json, os, resource, select, signal, sys, time, types
wall, cpu, fsize, cap, src = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
out = sys.__stdout__
out.write("\x00LCWARM-READY\n")
out.flush()
inputs = [json.loads(line) for line in sys.stdin.read().splitlines() if line.strip()]
try:
    with open(src, "rb") as f:
        program = compile(f.read(), src, "exec")
except BaseException as exc:
    out.write("\x00LCWARM-COMPILE" + json.dumps({"error": (type(exc).__name__ + ": " + str(exc))[:2000]}) + "\n")
    out.flush()
    sys.exit(0)
enc = (sys.stdin.encoding, sys.stdin.errors, sys.stdout.encoding, sys.stdout.errors, sys.stderr.encoding)
def unnamed():
    try:
        return os.open(".", os.O_TMPFILE | os.O_RDWR, 0o600)
    except OSError:  # a filesystem without O_TMPFILE: create, then unlink at once
        name = ".lcwarm-%d-%d" % (os.getpid(), time.monotonic_ns())
        fd = os.open(name, os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o600)
        os.unlink(name)
        return fd
def read_at(fd, offset, n):
    os.lseek(fd, offset, 0)
    chunks = []
    while n > 0:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            break
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
for text in inputs:
    start = time.monotonic()
    fin, fout, ferr = unnamed(), unnamed(), unnamed()
    data = memoryview(text.encode(enc[0], enc[1]))
    while data:
        data = data[os.write(fin, data):]
    os.lseek(fin, 0, 0)
    try:
        pid = os.fork()
    except OSError as exc:
        res = {"status": "runtime_error", "err": "fork failed: %s" % exc, "out": "", "wall": 0.0}
        out.write("\x00LCWARM" + json.dumps(res) + "\n")
        out.flush()
        continue
    if pid == 0:
        code = 1
        try:
            os.setpgid(0, 0)
            resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
            resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            for fd, f in ((0, fin), (1, fout), (2, ferr)):
                os.dup2(f, fd)
                os.close(f)
            sys.stdin = sys.__stdin__ = io.open(0, "r", encoding=enc[0], errors=enc[1], closefd=False)
            sys.stdout = sys.__stdout__ = io.open(1, "w", encoding=enc[2], errors=enc[3], closefd=False)
            sys.stderr = sys.__stderr__ = io.open(2, "w", 1, encoding=enc[4], errors="backslashreplace", closefd=False)
            main = types.ModuleType("__main__")
            main.__file__ = src
            sys.modules["__main__"] = main
            sys.argv = [src]
            code = 0
            try:
                exec(program, main.__dict__)
            except SystemExit as exc:
                if exc.code is None:
                    code = 0
                elif isinstance(exc.code, int):
                    code = exc.code & 0xFF
                else:
                    print(exc.code, file=sys.stderr)
                    code = 1
            except BaseException:
                import traceback
                traceback.print_exc()
                code = 1
            threading = sys.modules.get("threading")
            if threading is not None:
                threading._shutdown()
            import atexit
            atexit._run_exitfuncs()
            try:
                sys.stdout.flush()
            except BaseException:
                code = code or 120
            sys.stderr.flush()
        finally:
            os._exit(code)
    os.close(fin)
    pidfd = os.pidfd_open(pid)
    finished = bool(select.select([pidfd], [], [], wall)[0])
    os.close(pidfd)
    st = kill_and_reap(pid)
    elapsed = time.monotonic() - start
    if not finished:
        status = "time_limit"
    elif os.WIFSIGNALED(st):
        sig = os.WTERMSIG(st)
        status = "time_limit" if sig in (signal.SIGXCPU, signal.SIGKILL) else "output_limit" if sig == signal.SIGXFSZ else "runtime_error"
    else:
        status = "ok" if os.WEXITSTATUS(st) == 0 else "runtime_error"
    res = {
        "status": status,
        "wall": elapsed,
        "out": binascii.b2a_base64(read_at(fout, 0, cap), newline=False).decode(),
        "err": read_at(ferr, max(0, os.fstat(ferr).st_size - 500), 500).decode(errors="replace"),
    }
    os.close(fout)
    os.close(ferr)
    out.write("\x00LCWARM" + json.dumps(res) + "\n")
    out.flush()
"""
)

COMPILE = MARKER + "-COMPILE"


def _stdio_batch_limits(limits: Limits, n: int, max_stdin: int) -> Limits:
    """The stdio harness's own limits: ``n`` cases' time, and room for their stdin and kept stdout."""
    per_case = (limits.output_bytes + 2) // 3 * 4 + 2048
    need = n * per_case + 4096
    return Limits(
        cpu_s=min(limits.cpu_s * n + 2.0, 300.0),
        wall_s=min(limits.wall_s * n + 2.0, 300.0),
        memory_mb=limits.memory_mb,
        nproc=limits.nproc,
        fsize_mb=max(limits.fsize_mb, -(-(need + max_stdin) // (1 << 20))),
        nofile=limits.nofile,
        output_bytes=need,
    )


@dataclass
class StdioRun:
    """A stdin/stdout batch's outcome: per-case (status, stdout, wall, stderr tail), or a compile error."""

    cases: list[tuple[str, str, float, str]]
    compile_error: str | None = None


async def run_warm_stdio(
    sandbox: Executor,
    src: str,
    inputs: list[str],
    run_dir: str,
    io_dir: str,
    uid: int | None,
    python: str | None = None,
) -> StdioRun:
    """Run the Python program ``src`` once per stdin in ``inputs``, in one warm sandboxed interpreter.

    Per case, the same limits as one process per case (the sandbox's CPU, wall, file size; stdout
    kept up to ``output_bytes``). Statuses are :class:`ProcResult`'s (ok, runtime_error,
    time_limit, output_limit); cases the harness never reached get the interpreter's own status.
    ``python`` is the interpreter (the language's own; the stock one by default). Raises ``OSError`` when the harness did not start (the sandbox failed, not the program).
    """
    import base64

    limits = sandbox.limits
    python = python or get_language("python").run[0]
    cpu = max(1, int(limits.cpu_s + 0.999))
    argv = [python, "-I", "-S", "-B", "-c", STDIO_HARNESS, str(limits.wall_s), str(cpu)]
    argv += [str(limits.fsize_mb << 20), str(limits.output_bytes), src]
    stdin = "".join(json.dumps(text) + "\n" for text in inputs)
    max_stdin = max((len(t.encode()) for t in inputs), default=0)
    res = await sandbox.exec(argv, run_dir, io_dir, _stdio_batch_limits(limits, len(inputs), max_stdin), uid, stdin)
    res.check_isolation()
    if not started(res):
        raise OSError(f"warm harness did not start ({res.status}): {res.stderr.strip()[-300:]}")
    lines = res.stdout.split("\n")
    for ln in lines:
        if ln.startswith(COMPILE):
            return StdioRun([], json.loads(ln[len(COMPILE) :])["error"])
    got = [json.loads(ln[len(MARKER) :]) for ln in lines if ln.startswith(MARKER) and not ln.startswith(READY)]
    cases = []
    for k in range(len(inputs)):
        if k < len(got):
            g = got[k]
            text = base64.b64decode(g["out"]).decode(errors="replace")
            cases.append((g["status"], text, float(g["wall"]), g["err"]))
        else:
            status = res.status if res.status != "ok" else "runtime_error"
            cases.append((status, "", 0.0, res.stderr[-300:] or "harness stopped before this case"))
    return StdioRun(cases)
