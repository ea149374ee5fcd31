"""The streaming fusion engine: base + N experts -> one checkpoint, tensor by tensor.

Order of work, so that bad input loses nothing:

1. resolve the method through the host and type-check its settings (``params``);
2. open every checkpoint (missing shards, truncated files, bad index: all reported at once);
3. compare every expert with the base (names, shapes, dtypes: every mismatch reported);
4. check the output path, and probe the method once on a one-element tensor so bad
   parameter values fail here;
5. only then write, into a temporary directory beside the target that is renamed into
   place when complete and removed on any error or interrupt (the CLI turns SIGTERM into one);
   a temporary directory that a killed run left behind is removed by the next run.

Steps 2-4 collect every problem (file, tensor and output) and raise once, listing them all.

Each floating-point tensor is read from the base and every expert, converted to float32,
merged by the method and written in the base's dtype at its place in the base's shard
layout. A method that declares itself element-wise (:func:`~longcat_plugins.fusion.contract.elementwise`)
gets the tensor in chunks of ``chunk_elements``, so memory holds N+1 float32 chunks, not
tensors; any other method gets whole tensors (N+1 float32 copies of the largest). ``workers``
threads merge different tensors at once (``os.pread`` and torch release the GIL, so one
thread's reads overlap the other's arithmetic), the kernel is asked to read each next chunk
while the current one is merged, and each chunk is written as soon as it is merged. Results
are collected in tensor order, so the output and the report do not depend on the number of
workers or on the chunk size (tests check this bit for bit). Non-float tensors are copied from the base. Random draws come from
per-tensor generators keyed by seed and tensor name, so the output does not depend on
visiting order or sharding, and a fixed seed reproduces the files bit for bit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import re
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from longcat_plugins.fusion.checkpoint import INDEX_FILE, ITEMSIZE, Checkpoint, TensorInfo
from longcat_plugins.fusion.contract import (
    DELTA_SQ,
    TensorContext,
    has_delta_norms,
    is_elementwise,
    needs_global_norms,
)
from longcat_plugins.fusion.errors import CheckpointError, FusionError, InputError, MismatchError, OutputError
from longcat_plugins.fusion.validation import compare
from longcat_plugins.fusion.writer import ShardWriter, torch_dtype

if TYPE_CHECKING:
    import torch

    from longcat_plugins.components import FusionMethod
    from longcat_plugins.host import Host

#: files of a base checkpoint that are weights in other formats: never copied into the output
_STALE_WEIGHTS = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".msgpack", ".h5", ".gguf")
PROVENANCE_FILE = "fusion.json"


@dataclass(frozen=True)
class Expert:
    """One domain expert: its checkpoint directory, its weight, and a label for reports."""

    path: Path
    weight: float = 1.0
    name: str = ""

    @property
    def label(self) -> str:
        return self.name or self.path.name


@dataclass(frozen=True)
class ProgressEvent:
    """Emitted after each tensor of each pass (``phase`` is ``"norms"`` or ``"merge"``)."""

    phase: str
    tensor: str
    tensors_done: int
    tensors_total: int
    bytes_done: int
    bytes_total: int


@dataclass
class ExpertReport:
    name: str
    path: Path
    weight: float
    #: L2 norm of θ_expert − θ_base over every merged (floating-point) tensor
    delta_norm: float
    #: what the method reported per expert, summed over tensors, as fractions of the merged elements
    fractions: dict[str, float] = field(default_factory=dict)


@dataclass
class FusionReport:
    output: Path
    method: str
    settings: dict[str, Any]
    seed: int
    experts: list[ExpertReport]
    #: what the run did: counted up from zero as it goes
    tensors_merged: int = 0
    tensors_copied: int = 0
    elements_merged: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    seconds: float = 0.0
    norm_pass_seconds: float = 0.0
    warnings: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["output"] = str(self.output)
        for expert in data["experts"]:
            expert["path"] = str(expert["path"])
        return data


def _as_expert(item: Expert | str | os.PathLike[str] | tuple[Any, float]) -> Expert:
    if isinstance(item, Expert):
        return item
    if isinstance(item, tuple):
        path, weight = item
        return Expert(Path(path), float(weight))
    return Expert(Path(item))


def resolve_method(name: str, params: Mapping[str, Any] | None, host: Host | None = None) -> tuple[FusionMethod, Any]:
    """The fusion method ``name`` (built-in or from a plugin) and its typed settings.

    Raises ``UnknownComponentError`` (listing the choices) or ``ConfigError`` (key paths under ``params``).
    """
    from longcat_plugins.config import build_settings
    from longcat_plugins.host import get_host

    component = (host or get_host()).get("fusion", name)
    return component, build_settings(component, dict(params or {}), "params")


def _settings_kwargs(settings: Any) -> dict[str, Any]:
    return dataclasses.asdict(settings) if settings is not None else {}


def _probe(method: FusionMethod, settings: Any, weights: list[float]) -> None:
    """Call the method once on one-element tensors so bad parameter values fail before any work
    (or its declared tensor-free check: a dry run of a built-in method never imports torch)."""
    from longcat_plugins.config import ConfigError, ConfigProblem
    from longcat_plugins.fusion.contract import ParamError, params_check

    check = params_check(method.target)
    if check is not None:
        try:
            check(**_settings_kwargs(settings))
        except ParamError as exc:
            raise ConfigError([ConfigProblem(f"params.{exc.key}", str(exc).split(": ", 1)[-1])]) from None
        return
    import torch

    ctx = TensorContext("<probe>", 0, "<probe>", tuple(1.0 for _ in weights))
    base = torch.zeros(1)
    experts = [torch.full((1,), 0.5) for _ in weights]
    try:
        out = method.target(base, experts, list(weights), ctx, **_settings_kwargs(settings))
    except ParamError as exc:
        raise ConfigError([ConfigProblem(f"params.{exc.key}", str(exc).split(": ", 1)[-1])]) from None
    except (ValueError, TypeError) as exc:
        raise ConfigError([ConfigProblem("params", f"fusion method {method.name!r} rejected them: {exc}")]) from None
    except Exception:  # noqa: BLE001 - e.g. a method that needs 2-D tensors: it gets its chance on real ones
        return
    if not (isinstance(out, tuple) and len(out) == 2 and isinstance(out[0], torch.Tensor)):
        raise FusionError(
            f"fusion method {method.name!r} ({method.target_path}) must return (tensor, stats), got {type(out).__name__}"
        )


def tied_aliases(base: Checkpoint) -> dict[str, str]:
    """Output-embedding name -> input-embedding name, when the config ties them and both are stored.

    A tied pair stored twice is merged with the same random draws (keyed by the input
    embedding's name), so identical inputs give identical outputs and the pair stays tied;
    the alias is left out of the global norms so it is not counted twice.
    """
    try:
        config = json.loads((base.path / "config.json").read_text())
    except (OSError, ValueError):
        config = {}
    tie = config.get("tie_word_embeddings", (config.get("text_config") or {}).get("tie_word_embeddings", True))
    if not tie:
        return {}
    inputs = [
        n
        for n in base.tensors
        if n.endswith(("embed_tokens.weight", "wte.weight", "word_embeddings.weight", "embed_in.weight"))
    ]
    outputs = [n for n in base.tensors if n.endswith(("lm_head.weight", "embed_out.weight"))]
    if len(inputs) == 1 and len(outputs) == 1:
        return {outputs[0]: inputs[0]}
    return {}


def _output_problem(output: Path, inputs: Sequence[Path], overwrite: bool) -> str | None:
    """Why ``output`` cannot be written (it overlaps an input, or exists without ``overwrite``)."""
    resolved = output.resolve()
    for path in inputs:
        src = path.resolve()
        if resolved == src or src.is_relative_to(resolved):
            return f"output {output} would replace the input checkpoint {path}; choose another directory"
    if output.exists() and not overwrite:
        return f"output {output} already exists; remove it or pass --overwrite (overwrite=True)"
    return None


#: elements per chunk of an element-wise method: 4 MiB per float32 copy, small enough for the
#: caches, large enough that per-chunk Python overhead is noise
CHUNK_ELEMENTS = 1 << 20
#: bytes per checkpoint the kernel is asked to read ahead of the tensor a worker starts
READ_AHEAD_BYTES = 64 << 20
#: bytes of working memory the workers may hold at once (a tensor that needs more runs alone)
MEMORY_BUDGET = 768 << 20


class _Budget:
    """Bytes of working memory in use by the workers; a job waits until its share fits."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self.cond = threading.Condition()

    @contextlib.contextmanager
    def hold(self, nbytes: int) -> Iterator[None]:
        nbytes = min(nbytes, self.limit)
        with self.cond:
            self.cond.wait_for(lambda: self.used + nbytes <= self.limit)
            self.used += nbytes
        try:
            yield
        finally:
            with self.cond:
                self.used -= nbytes
                self.cond.notify_all()


class _Runner:
    """Runs one job per tensor on ``workers`` threads and yields the results in tensor order."""

    def __init__(self, workers: int, budget: int = MEMORY_BUDGET) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="fusion") if workers > 1 else None
        self.workers = workers
        self.op_threads = max(1, (os.cpu_count() or 1) // workers)
        if self.pool is not None:
            import torch

            self.caller_threads = torch.get_num_threads()
        self.budget = _Budget(budget)
        self.stop = threading.Event()

    def map(self, jobs: Sequence[Callable[[], Any]]) -> Iterator[Any]:
        if self.pool is None:
            for job in jobs:
                yield job()
            return
        window = 2 * self.workers  # jobs submitted ahead of the one being collected
        pending: list[Future[Any]] = []
        try:
            for job in jobs:
                pending.append(self.pool.submit(self._guarded, job))
                if len(pending) > window:
                    yield pending.pop(0).result()
            while pending:
                yield pending.pop(0).result()
        finally:
            if pending:  # a failure or interrupt: jobs not yet started return at once
                self.stop.set()
                for fut in pending:
                    fut.cancel()
                for fut in pending:
                    with contextlib.suppress(BaseException):
                        fut.result()

    def _guarded(self, job: Callable[[], Any]) -> Any:
        if self.stop.is_set():
            return None
        import torch

        # the workers share the cores: each op on one thread (OpenMP teams per worker on a busy
        # machine spin and cost far more than they give; no result depends on the thread count:
        # the only reductions that reach the output, the global norms, are thread-count independent)
        torch.set_num_threads(self.op_threads)
        return job()

    def close(self) -> None:
        if self.pool is not None:
            import torch

            self.stop.set()
            self.pool.shutdown(wait=True, cancel_futures=True)
            torch.set_num_threads(self.caller_threads)  # the workers set the process-wide default


def _ranges(numel: int, chunk: int | None) -> list[tuple[int, int]]:
    if not chunk or numel <= chunk:
        return [(0, numel)]
    return [(a, min(a + chunk, numel)) for a in range(0, numel, chunk)]


def fuse(
    base: str | os.PathLike[str],
    experts: Sequence[Expert | str | os.PathLike[str] | tuple[Any, float]],
    output: str | os.PathLike[str],
    *,
    method: str = "longcat",
    params: Mapping[str, Any] | None = None,
    seed: int = 0,
    overwrite: bool = False,
    host: Host | None = None,
    progress: Callable[[ProgressEvent], None] | None = None,
    prefetch: bool = True,
    dry_run: bool = False,
    workers: int = 2,
    chunk_elements: int | None = CHUNK_ELEMENTS,
) -> FusionReport:
    """Merge ``experts`` (fine-tuned from ``base``) into one checkpoint at ``output``.

    ``method`` names a fusion method (``longcat``, ``task_arithmetic``, ``ties``, or one a
    plugin registers); ``params`` are its settings. Everything is validated before anything is
    written; ``dry_run`` stops there. ``workers`` threads merge tensors concurrently;
    element-wise methods get ``chunk_elements`` at a time (``None``: whole tensors);
    ``prefetch`` asks the kernel to read each next chunk while the current one is merged.
    None of the three changes a single output bit. Returns a :class:`FusionReport`.
    """
    if workers < 1:
        raise FusionError(f"workers must be >= 1, got {workers}")
    if chunk_elements is not None and chunk_elements < 1:
        raise FusionError(f"chunk_elements must be >= 1 or None, got {chunk_elements}")
    expert_specs = [_as_expert(e) for e in experts]
    if not expert_specs:
        raise FusionError("no experts given: fusion needs at least one expert checkpoint")
    weights = [float(e.weight) for e in expert_specs]
    for i, w in enumerate(weights):
        if not math.isfinite(w):
            raise FusionError(f"experts[{i}] weight must be a finite number, got {w}")
    component, settings = resolve_method(method, params, host)
    start = time.perf_counter()  # after the host's plugin discovery, a once-per-process cost
    out_dir = Path(output)

    base_ckpt, expert_ckpts = _open_and_compare(Path(base), expert_specs, out_dir, overwrite)
    _probe(component, settings, weights)
    report = FusionReport(
        output=out_dir,
        method=component.name,
        settings=_settings_kwargs(settings),
        seed=seed,
        experts=[ExpertReport(e.label, e.path, e.weight, 0.0) for e in expert_specs],
    )
    if dry_run:
        report.seconds = time.perf_counter() - start
        return report

    aliases = tied_aliases(base_ckpt)
    infos = list(base_ckpt.iter_in_file_order())
    float_infos = [i for i in infos if i.is_float]
    io = _IO(base_ckpt, expert_ckpts, prefetch, chunk_elements, order=float_infos)
    runner = _Runner(workers)
    bytes_per_pass = base_ckpt.total_bytes * (len(expert_ckpts) + 1)
    sq_norms: list[float] | None = None
    try:
        if needs_global_norms(component.target, settings):
            t0 = time.perf_counter()
            sq_norms = _global_sq_norms(io, runner, [i for i in float_infos if i.name not in aliases], progress)
            report.norm_pass_seconds = time.perf_counter() - t0
            report.bytes_read += sum(i.nbytes for i in float_infos if i.name not in aliases) * (len(expert_ckpts) + 1)
        created = [p for p in [out_dir.parent, *out_dir.parent.parents] if not p.exists()]
        out_dir.parent.mkdir(parents=True, exist_ok=True)
        report.warnings += clean_stale_temp_dirs(out_dir)
        tmp = Path(tempfile.mkdtemp(prefix=_temp_prefix(out_dir), dir=out_dir.parent))
        try:
            _merge_into(
                tmp, base_ckpt, expert_ckpts, infos, aliases, component, settings, weights, seed, sq_norms, io,
                runner, report, progress, bytes_per_pass,
            )  # fmt: skip
            _copy_side_files(base_ckpt, tmp)
            provenance = {
                "method": component.name,
                "plugin": component.plugin,
                "params": report.settings,
                "seed": seed,
                "base": str(base_ckpt.path),
                "experts": [{"path": str(e.path), "weight": e.weight, "name": e.label} for e in expert_specs],
            }
            (tmp / PROVENANCE_FILE).write_text(json.dumps(provenance, indent=2) + "\n")
            _replace(tmp, out_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            for parent in created:  # directories made for the output, innermost first, if still empty
                with contextlib.suppress(OSError):
                    parent.rmdir()
            raise
    finally:
        runner.close()
        for ckpt in (base_ckpt, *expert_ckpts):
            ckpt.close()
    if sq_norms is not None:
        for rep, sq in zip(report.experts, sq_norms, strict=True):
            rep.delta_norm = math.sqrt(sq)
    report.seconds = time.perf_counter() - start
    return report


def _open_and_compare(
    base: Path, experts: Sequence[Expert], out_dir: Path, overwrite: bool
) -> tuple[Checkpoint, list[Checkpoint]]:
    """Open every checkpoint and compare each expert with the base, collecting every problem
    (unreadable files, then names, shapes and dtypes of whatever could be read, then the output
    path) before raising once, so one run lists all that is wrong."""
    file_problems: list[str] = []
    opened: list[Checkpoint | None] = []
    readable: list[Checkpoint] = []  # complete checkpoints, or the readable part of a broken one
    for label, path in [("base", base)] + [(f"experts[{i}]", e.path) for i, e in enumerate(experts)]:
        try:
            ckpt = Checkpoint.open(path, label)
        except CheckpointError as exc:
            file_problems += exc.problems
            opened.append(None)
            readable.append(exc.partial if exc.partial is not None else Checkpoint(label, path, None, {}, {}))
            continue
        opened.append(ckpt)
        readable.append(ckpt)
    complete = [c is not None for c in opened]
    mismatches = compare(readable[0], readable[1:], complete=complete)
    output_problem = _output_problem(out_dir, [base, *(e.path for e in experts)], overwrite)
    problems = file_problems + mismatches + ([output_problem] if output_problem else [])
    kinds = sum(map(bool, (file_problems, mismatches, output_problem)))
    if kinds > 1:
        raise InputError(problems)
    if file_problems:
        raise CheckpointError(file_problems)
    if mismatches:
        raise MismatchError(mismatches)
    if output_problem:
        raise OutputError(output_problem)
    base_ckpt, *expert_ckpts = [c for c in opened if c is not None]
    return base_ckpt, expert_ckpts


_TEMP_INFIX = ".fusing-"


def _machine() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "localhost"


def _temp_prefix(out_dir: Path) -> str:
    """``.<output>.fusing-<host>-<pid>-``: a later run can tell whether the writer is still alive."""
    return f".{out_dir.name}{_TEMP_INFIX}{_machine()}-{os.getpid()}-"


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's live process
        return True
    return True


def clean_stale_temp_dirs(out_dir: Path) -> list[str]:
    """Remove the temporary directories that dead runs on this machine left beside ``out_dir``
    (killed with SIGKILL, or the machine lost power); returns one warning line per directory
    removed or left alone.

    A directory is removed only when its name says this machine and a process id that no longer
    exists; a run on another machine sharing the directory, or a live run here, is never touched.
    """
    if not out_dir.parent.is_dir():
        return []
    pattern = re.compile(re.escape(f".{out_dir.name}{_TEMP_INFIX}") + r"(?:(?P<host>.+)-(?P<pid>\d+)-)?[^-]*")
    warnings: list[str] = []
    for path in sorted(out_dir.parent.iterdir()):
        match = pattern.fullmatch(path.name)
        if match is None or not path.is_dir() or path.is_symlink():
            continue
        if match["pid"] is None:
            warnings.append(f"{path} was left by an earlier run of an older version; remove it if no fuse is running")
        elif match["host"] == _machine() and int(match["pid"]) != os.getpid() and not _pid_alive(int(match["pid"])):
            shutil.rmtree(path, ignore_errors=True)
            warnings.append(f"removed {path}, left by an interrupted run (process {match['pid']} is gone)")
    return warnings


@dataclass
class _IO:
    """How tensors are read: the checkpoints, read-ahead, and the chunk size of element-wise methods."""

    base: Checkpoint
    experts: Sequence[Checkpoint]
    prefetch: bool
    chunk: int | None
    #: per worker thread: reusable chunk buffers (fresh memory costs a page fault per 4 KiB)
    local: threading.local = field(default_factory=threading.local)
    #: the floating-point tensors in the order they are merged (for :meth:`tensor_ahead`)
    order: Sequence[TensorInfo] = ()
    _position: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._position.update({t.name: k for k, t in enumerate(self.order)})

    def _buffer(self, key: str, slot: int, nbytes: int) -> torch.Tensor:
        import torch

        buffers = self.local.__dict__.setdefault(key, {})
        buf = buffers.get(slot)
        if buf is None or buf.numel() < nbytes:
            buf = buffers[slot] = torch.empty(nbytes, dtype=torch.uint8)
        return buf

    def read_float(
        self, ckpt: Checkpoint, info: TensorInfo, start: int, stop: int, slot: int | None = None
    ) -> torch.Tensor:
        """Elements [start, stop) as float32. With ``slot`` (chunks), in this thread's reusable
        buffers for that slot, valid until its next read; without, in memory the caller owns."""
        import torch

        if slot is None or self.chunk is None:
            raw = ckpt.read_range(info, start, stop)
            return raw.to(torch.float32) if raw.dtype != torch.float32 else raw
        n = stop - start
        raw = self.read_stored(ckpt, info, start, stop, slot)
        return self._buffer("f32", slot, n * 4)[: n * 4].view(torch.float32).copy_(raw)

    def read_stored(self, ckpt: Checkpoint, info: TensorInfo, start: int, stop: int, slot: int) -> torch.Tensor:
        """Elements [start, stop) in their stored dtype, in this thread's reusable buffer for ``slot``."""
        n = stop - start
        return ckpt.read_range(info, start, stop, out=self._buffer("raw", slot, n * ITEMSIZE[info.dtype]))

    def tensor_ahead(self, info: TensorInfo) -> None:
        """Ask the kernel for ``info`` and the tensors after it in file order, ``READ_AHEAD_BYTES``
        per checkpoint in all (a larger tensor's rest follows in :meth:`ahead`'s rolling window):
        read-ahead one chunk deep left a cold buffered read at about half the disk's O_DIRECT
        bandwidth (many small requests in flight on 4 files)."""
        if not self.prefetch:
            return
        window = 0
        for nxt in self.order[self._position.get(info.name, len(self.order)) :]:
            stop = min(nxt.numel, (READ_AHEAD_BYTES - window) // (nxt.nbytes // max(nxt.numel, 1)))
            for ckpt in (self.base, *self.experts):
                ckpt.will_need(nxt, 0, stop)
            window += nxt.nbytes
            if window >= READ_AHEAD_BYTES:
                break

    def ahead(self, info: TensorInfo, start: int, stop: int) -> None:
        """The chunk [start, stop) of ``info`` is next: ask for it, and for the rest of a tensor
        larger than the window up to ``READ_AHEAD_BYTES`` beyond it (a rolling window)."""
        itemsize = info.nbytes // max(info.numel, 1)
        stop = (
            max(stop, min(info.numel, start + READ_AHEAD_BYTES // max(itemsize, 1)))
            if info.nbytes > READ_AHEAD_BYTES
            else stop
        )
        if self.prefetch and stop > start:
            for ckpt in (self.base, *self.experts):
                ckpt.will_need(info, start, stop)


#: dtypes whose values float32 holds exactly: a mixed-dtype op on them widens them as ``.float()`` does
_EXACT_IN_FLOAT32 = frozenset({"F32", "F16", "BF16"})


def _tensor_sq_norms(io: _IO, runner: _Runner, info: TensorInfo) -> list[float]:
    """‖θ_i − θ_base‖² of one tensor per expert: δ_i built chunk by chunk in one float32 tensor
    (element-wise, so exact), then one ``vector_norm`` over the whole of it, as a whole-tensor
    computation does: the norms, and so the normalised output, do not depend on the chunk size.

    One δ buffer serves every expert in turn, and where the stored dtype widens exactly (bf16,
    f16, f32) each chunk is subtracted straight from the stored values (``torch.sub`` widens
    them, as the float32 copy did): no float32 copy of the expert's chunk, no fresh δ per expert."""
    import torch

    if runner.stop.is_set():
        return []
    io.tensor_ahead(info)
    ranges = _ranges(info.numel, io.chunk)
    exact = info.dtype in _EXACT_IN_FLOAT32 and io.chunk is not None
    with runner.budget.hold(info.numel * 4):
        out = []
        delta = torch.empty(info.numel, dtype=torch.float32)
        for j, ckpt in enumerate(io.experts):
            for k, (a, b) in enumerate(ranges):
                if io.prefetch and k + 1 < len(ranges):
                    ckpt.will_need(info, *ranges[k + 1])
                elif io.prefetch and j + 1 < len(io.experts):
                    io.experts[j + 1].will_need(info, *ranges[0])
                if exact:
                    torch.sub(io.read_stored(ckpt, info, a, b, slot=0), io.read_float(io.base, info, a, b, slot=1),
                              out=delta[a:b])  # fmt: skip
                else:
                    delta[a:b] = io.read_float(ckpt, info, a, b, slot=0)
                    delta[a:b].sub_(io.read_float(io.base, info, a, b, slot=1))
            out.append(float(torch.linalg.vector_norm(delta.view(info.shape))) ** 2)
        del delta
    return out


def _global_sq_norms(
    io: _IO, runner: _Runner, infos: Sequence[TensorInfo], progress: Callable[[ProgressEvent], None] | None
) -> list[float]:
    """Σ over tensors of ‖θ_i − θ_base‖² per expert: the first pass, for global normalisation."""
    sq = [0.0] * len(io.experts)
    total = sum(i.nbytes for i in infos) * (len(io.experts) + 1)
    done = 0
    jobs = [lambda info=info: _tensor_sq_norms(io, runner, info) for info in infos]
    for k, (info, per_expert) in enumerate(zip(infos, runner.map(jobs), strict=True)):
        for j, value in enumerate(per_expert):
            sq[j] += value  # in tensor order: the same sum whatever the number of workers
        done += info.nbytes * (len(io.experts) + 1)
        if progress is not None:
            progress(ProgressEvent("norms", info.name, k + 1, len(infos), done, total))
    return sq


@dataclass
class _Merged:
    """What merging one tensor produced, for the report (summed in tensor order by the caller)."""

    own_sq: list[float] | None = None
    stats: dict[str, list[float]] = field(default_factory=dict)
    nonfinite: bool = False
    warnings: list[str] = field(default_factory=list)


def _merge_tensor(
    io: _IO,
    runner: _Runner,
    info: TensorInfo,
    writer: ShardWriter,
    component: FusionMethod,
    kwargs: dict[str, Any],
    weights: list[float],
    ctx: TensorContext,
    chunked: bool,
    own_norms: bool,
    method_norms: bool,
) -> _Merged | None:
    """Read, merge and write one floating-point tensor (in chunks when ``chunked``)."""
    import torch

    if runner.stop.is_set():
        return None
    n = len(io.experts)
    ranges = _ranges(info.numel, io.chunk if chunked else None)
    result = _Merged(own_sq=[0.0] * n if own_norms else None)
    out_dtype = torch_dtype(info.dtype)
    width = ranges[0][1] - ranges[0][0]
    io.tensor_ahead(info)
    with runner.budget.hold(width * (4 * (n + 2) + 2 * (n + 1))):
        for k, (a, b) in enumerate(ranges):
            if k + 1 < len(ranges):
                io.ahead(info, *ranges[k + 1])
            slot = 0 if chunked else None
            b32 = io.read_float(io.base, info, a, b, slot)
            e32 = [
                io.read_float(ckpt, info, a, b, None if slot is None else 1 + j) for j, ckpt in enumerate(io.experts)
            ]
            if not chunked:
                b32, e32 = b32.view(info.shape), [e.view(info.shape) for e in e32]
            if result.own_sq is not None and not method_norms:
                for j, e in enumerate(e32):
                    result.own_sq[j] += float(torch.dist(e, b32)) ** 2
            merged, stats = component.target(b32, e32, list(weights), ctx, **kwargs)
            del b32, e32
            stats = dict(stats or {})
            delta_sq = stats.pop(DELTA_SQ, None)
            if result.own_sq is not None and method_norms and delta_sq is not None:
                for j, value in enumerate(delta_sq):
                    result.own_sq[j] += float(value)
            want = (b - a,) if chunked else info.shape
            if not isinstance(merged, torch.Tensor) or tuple(merged.shape) != want:
                shape = list(merged.shape) if isinstance(merged, torch.Tensor) else type(merged).__name__
                raise FusionError(
                    f"fusion method {component.name!r} returned {shape} for tensor {info.name}, "
                    f"expected shape {list(want)}"
                )
            # a sum is finite only if every element is (NaN and ±inf propagate): one cheap reduction
            if not math.isfinite(float(merged.sum())) and not bool(torch.isfinite(merged).all()):
                result.nonfinite = True
            for key, per_expert in stats.items():
                acc = result.stats.setdefault(key, [0.0] * n)
                for j, value in enumerate(per_expert):
                    acc[j] += float(value)
            writer.write_range(info, a, merged.reshape(-1).to(out_dtype))
            del merged
    return result


def _copy_tensor(io: _IO, info: TensorInfo, writer: ShardWriter) -> _Merged:
    """A non-float tensor: copied from the base; an expert that differs is reported."""
    import torch

    raw = io.base.read(info.name)
    result = _Merged()
    for ckpt in io.experts:
        if not torch.equal(ckpt.read(info.name), raw):
            result.warnings.append(
                f"tensor {info.name} ({info.dtype}) differs in {ckpt.label} ({ckpt.path}); "
                "non-float tensors are copied from the base"
            )
    writer.write(info, raw)
    return result


def _merge_into(
    tmp: Path,
    base: Checkpoint,
    experts: Sequence[Checkpoint],
    infos: Sequence[TensorInfo],
    aliases: Mapping[str, str],
    component: FusionMethod,
    settings: Any,
    weights: list[float],
    seed: int,
    sq_norms: list[float] | None,
    io: _IO,
    runner: _Runner,
    report: FusionReport,
    progress: Callable[[ProgressEvent], None] | None,
    bytes_total: int,
) -> None:
    kwargs = _settings_kwargs(settings)
    norms = tuple(math.sqrt(s) for s in sq_norms) if sq_norms is not None else None
    own_sq = [0.0] * len(experts)
    method_norms = has_delta_norms(component.target)
    chunked = is_elementwise(component.target, settings)
    counts: dict[str, list[float]] = {}
    writers = {name: ShardWriter(tmp / name, shard) for name, shard in base.shards.items()}

    def job(info: TensorInfo) -> Callable[[], _Merged | None]:
        if not info.is_float:
            return lambda: _copy_tensor(io, info, writers[info.file])
        rng_key = aliases.get(info.name, info.name)
        ctx = TensorContext(info.name, seed, rng_key, norms, streams={} if chunked else None)
        counted = sq_norms is None and info.name not in aliases
        return lambda: _merge_tensor(
            io, runner, info, writers[info.file], component, kwargs, weights, ctx, chunked, counted, method_norms
        )

    done_bytes = 0
    try:
        for k, (info, result) in enumerate(zip(infos, runner.map([job(i) for i in infos]), strict=True)):
            assert result is not None
            report.warnings += result.warnings
            if info.is_float:
                if result.own_sq is not None:
                    for j, value in enumerate(result.own_sq):
                        own_sq[j] += value
                if result.nonfinite:
                    report.warnings.append(f"tensor {info.name}: the merged values contain NaN or inf")
                for key, per_expert in result.stats.items():
                    acc = counts.setdefault(key, [0.0] * len(experts))
                    for j, value in enumerate(per_expert):
                        acc[j] += value
                report.tensors_merged += 1
                report.elements_merged += info.numel
            else:
                report.tensors_copied += 1
            done_bytes += info.nbytes * (len(experts) + 1)
            report.bytes_written += info.nbytes
            if progress is not None:
                progress(ProgressEvent("merge", info.name, k + 1, len(infos), done_bytes, bytes_total))
        for writer in writers.values():
            writer.close()
    except BaseException:
        runner.stop.set()
        for writer in writers.values():
            with contextlib.suppress(OSError):
                writer.abort()
        raise
    report.bytes_read += done_bytes
    if sq_norms is None:
        for rep, sq in zip(report.experts, own_sq, strict=True):
            rep.delta_norm = math.sqrt(sq)
    total = max(report.elements_merged, 1)
    for key, per_expert in counts.items():
        for rep, value in zip(report.experts, per_expert, strict=True):
            rep.fractions[key] = value / total
    if base.index is not None:
        shutil.copyfile(base.path / INDEX_FILE, tmp / INDEX_FILE)


def _copy_side_files(base: Checkpoint, tmp: Path) -> None:
    """config, generation config, tokenizer and any other small file of the base (not weights)."""
    for path in sorted(base.path.iterdir()):
        if not path.is_file() or path.name in (INDEX_FILE, PROVENANCE_FILE) or path.name.endswith(_STALE_WEIGHTS):
            continue
        shutil.copy2(path, tmp / path.name)


def _replace(tmp: Path, out_dir: Path) -> None:
    """Move the finished ``tmp`` to ``out_dir``; an existing one (overwrite) is swapped out, then removed."""
    old: Path | None = None
    if out_dir.exists() or out_dir.is_symlink():
        old = Path(tempfile.mkdtemp(prefix=f".{out_dir.name}.old-", dir=out_dir.parent))
        old.rmdir()
        out_dir.rename(old)
    try:
        tmp.rename(out_dir)
    except BaseException:
        if old is not None:  # put the previous output back
            old.rename(out_dir)
        raise
    if old is not None:
        if old.is_dir() and not old.is_symlink():
            shutil.rmtree(old, ignore_errors=True)
        else:
            old.unlink()
