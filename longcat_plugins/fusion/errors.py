"""Errors of the fusion family. Each carries *every* problem found, not just the first, so one
run tells the user all that is wrong (which checkpoint, which file, which tensor)."""

from __future__ import annotations

from collections.abc import Sequence


class FusionError(Exception):
    """Base of everything the fusion engine refuses to do."""


class _ProblemList(FusionError):
    title = "problem(s)"

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = list(problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{len(self.problems)} {self.title}; nothing was written:\n{lines}")


class CheckpointError(_ProblemList):
    """A checkpoint directory that cannot be read: missing, missing shards, truncated files, bad index.

    ``partial`` is the readable part of the checkpoint (the shards that parsed, as a
    :class:`~longcat_plugins.fusion.checkpoint.Checkpoint`), when there is one, so the caller can still
    compare its tensors and report their mismatches in the same run. It is typed ``object`` here
    because the errors are the fusion family's leaf: the reader raises them, they never import it.
    """

    title = "checkpoint problem(s)"

    def __init__(self, problems: Sequence[str], partial: object | None = None) -> None:
        super().__init__(problems)
        self.partial = partial


class MismatchError(_ProblemList):
    """Experts whose tensors do not match the base (names, shapes, dtypes)."""

    title = "mismatch(es) between the experts and the base"


class OutputError(FusionError):
    """The output directory exists (without ``overwrite``) or overlaps an input."""


class InputError(CheckpointError, MismatchError, OutputError):
    """Problems of more than one kind (files, tensors, output) found in one run, listed together;
    an ``except`` for any one of the kinds catches it."""

    title = "problem(s) with the checkpoints and the output"
