"""Supervised fine-tuning with verl's own SFT trainer, as a child process on the CPU runtime.

:func:`run_sft` takes a Hugging Face checkpoint directory and a messages-format parquet (the
``messages`` column verl's ``MultiTurnSFTDataset`` reads, optionally ``tools``), runs
``python -m verl.trainer.sft_trainer`` as a single-rank SPMD job (the torchrun environment is
set here, so no launcher is needed), and leaves an HF safetensors checkpoint with its
tokenizer at ``out``. verl's checkpoint handler writes that export (``hf_model``); it is
built in a temporary sibling directory and renamed into place only when complete, so an
interrupted or failed run leaves nothing at ``out``.

The warm starts (:mod:`.warmstart` and its specialisations) build on this one function.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

#: bytes per parameter SFT holds: fp32 weights, grads and two Adam moments (no ref, no rollout)
SFT_BYTES_PER_PARAM = 4 * 4


class SFTError(RuntimeError):
    """verl's SFT trainer failed, or its input is unusable; the message says which and where."""


@dataclass(frozen=True)
class SFTConfig:
    """The hyperparameters that change the trained weights (and so belong in a cache key)."""

    epochs: int = 3
    lr: float = 1e-3
    batch_size: int = 32
    max_length: int = 64
    seed: int = 1
    #: training steps in all; None: every epoch over the data (``epochs`` x batches per epoch)
    total_steps: int | None = None

    @classmethod
    def for_steps(cls, rows: int, steps: int, batch_size: int, lr: float, max_length: int, seed: int) -> SFTConfig:
        """``steps`` updates over ``rows`` samples: enough whole epochs to reach them, cut at ``steps``."""
        per_epoch = max(1, rows // batch_size)
        return cls(
            epochs=-(-steps // per_epoch),
            lr=lr,
            batch_size=batch_size,
            max_length=max_length,
            seed=seed,
            total_steps=steps,
        )

    def key(self) -> str:
        """A short, filesystem-safe tag of these values (for cache directory names)."""
        steps = "" if self.total_steps is None else f"-t{self.total_steps}"
        return f"e{self.epochs}-lr{self.lr:g}-b{self.batch_size}-l{self.max_length}-s{self.seed}{steps}"


def check_sft_inputs(base_model: Path, train_files: Sequence[Path], available_bytes: int | None = None) -> None:
    """Fail in the driver, naming the argument, before any child starts: the base checkpoint
    must be a local HF directory that fits the free RAM (the PPO preflight's rule, for SFT's
    footprint), and every parquet must have a ``messages`` column."""
    import pyarrow.parquet as pq

    from longcat_plugins.runtime.preflight import model_bytes

    if not (base_model / "config.json").is_file():
        raise SFTError(f"base_model: {str(base_model)!r} is not a Hugging Face checkpoint directory (no config.json)")
    need = model_bytes(base_model) // 4 * SFT_BYTES_PER_PARAM
    if available_bytes is None:
        import psutil

        available_bytes = psutil.virtual_memory().available
    if need > available_bytes:
        raise SFTError(
            f"base_model: SFT of {str(base_model)!r} on the CPU needs about {need / 2**30:.1f} GiB "
            f"(fp32 weights, grads and Adam) but {available_bytes / 2**30:.1f} GiB is free; use a smaller model"
        )
    if not train_files:
        raise SFTError("train_files: no parquet given")
    for path in train_files:
        if not path.is_file():
            raise SFTError(f"train_files: {str(path)!r} does not exist")
        columns = pq.read_schema(path).names
        if "messages" not in columns:
            raise SFTError(f"train_files: {str(path)!r} has no 'messages' column (columns: {', '.join(columns)})")


#: how often a run that lost its rendezvous port to another process is started again
PORT_ATTEMPTS = 3


def _free_port() -> int:
    """A port free now for the child's rendezvous, below the kernel's ephemeral range and above
    Ray's worker ports (10002-19999): a port the kernel handed out for port 0 is soon handed to
    another process (Ray, vLLM, a parallel SFT) before the child binds it. Another process can
    still take it, rarely: :func:`run_sft` then starts the run again on another port."""
    try:
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        low = 32768
    rng = random.SystemRandom()
    tries = [rng.randrange(20000, low) for _ in range(200)] if low > 20000 else []
    for port in [*tries, 0]:  # 0: the kernel's choice, when that range is empty or full
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return int(s.getsockname()[1])
    raise SFTError("no free local port for the SFT run's rendezvous")


def _lost_its_port(lines: Sequence[str]) -> bool:
    """The child failed because its rendezvous port was taken between our check and its bind."""
    return any("EADDRINUSE" in line and "DistNetworkError" in line for line in lines)


def _follow(proc: subprocess.Popen[str], log: IO[str], on_line: Callable[[str], None] | None) -> list[str]:
    """Copy the child's output to ``log`` (and ``on_line``) until it closes; its last 30 lines."""
    assert proc.stdout is not None
    lines: list[str] = []
    for line in proc.stdout:
        log.write(line)
        log.flush()
        lines.append(line)
        del lines[:-30]
        if on_line is not None:
            on_line(line)
    return lines


def build_command(
    base_model: Path, train_files: Sequence[Path], workdir: Path, config: SFTConfig, overrides: Sequence[str] = ()
) -> list[str]:
    """``python -m verl.trainer.sft_trainer`` with the CPU runtime's keys and ``config``."""
    files = "[" + ",".join(str(p) for p in train_files) + "]"
    keys = [
        f"model.path={base_model}",
        "model.use_remove_padding=false",  # padding removal needs flash-attention kernels
        "model.enable_gradient_checkpointing=false",
        "+model.override_config.attn_implementation=sdpa",
        "engine.strategy=fsdp2",  # FSDP1 refuses CPU parameters
        "engine.use_torch_compile=false",
        # bf16 compute is slow on a CPU and these models are fp32 anyway
        "+engine.mixed_precision={param_dtype:fp32,reduce_dtype:fp32,buffer_dtype:fp32}",
        f"engine.seed={config.seed}",
        f"data.train_files={files}",
        f"data.train_batch_size={config.batch_size}",
        f"data.micro_batch_size_per_gpu={config.batch_size}",
        f"data.max_length={config.max_length}",
        "data.num_workers=0",
        # each example tokenized once, not once per epoch (same batches, same weights)
        "data.custom_cls.path=pkg://longcat_plugins.learning.sft_dataset",
        "data.custom_cls.name=CachedMultiTurnSFTDataset",
        f"optim.lr={config.lr}",
        "trainer.device=cpu",
        "trainer.logger=[console]",
        f"trainer.seed={config.seed}",
        f"trainer.total_epochs={config.epochs}",
        f"trainer.total_training_steps={'null' if config.total_steps is None else config.total_steps}",
        "trainer.resume_mode=disable",
        f"trainer.default_local_dir={workdir / 'checkpoints'}",
        "checkpoint.save_contents=[hf_model]",
        f"hydra.run.dir={workdir / 'hydra'}",
    ]
    return [sys.executable, "-m", "verl.trainer.sft_trainer", *keys, *overrides]


def run_sft(
    base_model: Path,
    train_files: Path | Sequence[Path],
    out: Path,
    config: SFTConfig = SFTConfig(),
    overrides: Sequence[str] = (),
    on_line: Callable[[str], None] | None = None,
) -> Path:
    """Fine-tune ``base_model`` on ``train_files`` and write the HF checkpoint to ``out``.

    ``out`` must not exist. The child's output goes to ``out/sft.log`` (and ``on_line``), the
    hyperparameters to ``out/sft.json``. Raises :class:`SFTError` on bad input or a failed run.
    """
    base_model, out = Path(base_model).resolve(), Path(out).resolve()
    files = [Path(train_files)] if isinstance(train_files, str | Path) else [Path(p) for p in train_files]
    files = [p.resolve() for p in files]
    if out.exists():
        raise SFTError(f"out: {str(out)!r} already exists; remove it or choose another directory")
    check_sft_inputs(base_model, files)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}-", dir=out.parent))
    proc: subprocess.Popen[str] | None = None
    try:
        command = build_command(base_model, files, tmp, config, overrides)
        env = {
            **os.environ,
            "LONGCAT_RUNTIME": "cpu",
            "PYTHONUNBUFFERED": "1",
            # one rank, as torchrun would describe it
            "RANK": "0",
            "LOCAL_RANK": "0",
            "WORLD_SIZE": "1",
            "LOCAL_WORLD_SIZE": "1",
            "MASTER_ADDR": "127.0.0.1",
        }
        with open(tmp / "sft.log", "w") as log:
            for attempt in range(1, PORT_ATTEMPTS + 1):
                env["MASTER_PORT"] = str(_free_port())
                log.write(f"$ MASTER_PORT={env['MASTER_PORT']} " + " ".join(command) + "\n")
                proc = subprocess.Popen(
                    command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, cwd=tmp
                )
                lines = _follow(proc, log, on_line)
                returncode = proc.wait()
                if returncode == 0 or not _lost_its_port(lines) or attempt == PORT_ATTEMPTS:
                    break
                log.write(f"# MASTER_PORT {env['MASTER_PORT']} was taken before the run bound it: again\n")
        exported = sorted((tmp / "checkpoints").glob("global_step_*/huggingface"), key=lambda p: p.parent.name)
        if returncode != 0 or not exported or not any(exported[-1].glob("*.safetensors")):
            raise SFTError(
                f"verl's SFT trainer failed (exit {returncode}) for base_model {str(base_model)!r}; "
                f"last output:\n{''.join(lines)}"
            )
        model = exported[-1]
        shutil.move(str(tmp / "sft.log"), model / "sft.log")
        meta = {"base_model": str(base_model), "train_files": [str(p) for p in files], **asdict(config)}
        (model / "sft.json").write_text(json.dumps(meta, indent=2))
        model.rename(out)
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    return out
