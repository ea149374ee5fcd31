"""The file tools (search, read_file, write_file, edit) over one workspace directory, confined to it.

These run in the agent-loop worker, not in the sandbox, so they must never follow the model out of
the workspace: a path is refused when it is absolute, climbs out with ``..``, or passes through a
symlink (the shell tool can create symlinks to anything; none is ever followed), and only regular
files are opened (a FIFO made with ``mkfifo`` would block the worker). Reads and writes are
bounded (a huge file is read in a window, a huge write refused) and binary files are refused. Every
refusal is a tool error the model sees, never an exception.
"""

from __future__ import annotations

import os
import re
import stat
from dataclasses import dataclass

from longcat_plugins.environments.contract import ToolResult

#: what read_file returns at most (bytes); larger files are read in a window of lines
MAX_READ_BYTES = 64 * 1024
#: the largest content write_file / edit accept (bytes)
MAX_WRITE_BYTES = 256 * 1024
#: files search skips (bytes)
MAX_SEARCH_FILE_BYTES = 1024 * 1024
#: search results returned at most
MAX_SEARCH_HITS = 50
#: files search visits at most
MAX_SEARCH_FILES = 2000


class PathRefused(ValueError):
    """A model-supplied path that leaves the workspace, or is not a regular file where one is needed."""


def err(message: str) -> ToolResult:
    return ToolResult(f"Error: {message}", ok=False)


@dataclass
class Workspace:
    """One episode's working tree; ``uid`` owns its files (the sandbox runs shell commands as it)."""

    root: str
    uid: int | None = None

    # -- paths -----------------------------------------------------------------------------
    def resolve(self, path: object, *, must_exist: bool = True) -> str:
        """The absolute path of ``path`` inside the workspace, or :class:`PathRefused` saying why."""
        if not isinstance(path, str) or not path.strip():
            raise PathRefused("path must be a non-empty string")
        if "\x00" in path:
            raise PathRefused("path contains a NUL byte")
        if os.path.isabs(path):
            raise PathRefused(f"{path!r} is absolute; use a path relative to the repository root")
        norm = os.path.normpath(path)
        if norm == ".." or norm.startswith("../"):
            raise PathRefused(f"{path!r} leaves the repository")
        parts = [] if norm == "." else norm.split(os.sep)
        cur = self.root
        for k, part in enumerate(parts):
            cur = os.path.join(cur, part)
            try:
                st = os.lstat(cur)
            except FileNotFoundError:
                if must_exist:
                    raise PathRefused(f"{path!r} does not exist") from None
                return os.path.join(self.root, *parts)
            if stat.S_ISLNK(st.st_mode):
                raise PathRefused(f"{'/'.join(parts[: k + 1])!r} is a symlink; symlinks are not followed")
            if k < len(parts) - 1 and not stat.S_ISDIR(st.st_mode):
                raise PathRefused(f"{'/'.join(parts[: k + 1])!r} is not a directory")
        return cur

    def rel(self, abspath: str) -> str:
        return os.path.relpath(abspath, self.root)

    def _regular(self, abspath: str, path: str) -> os.stat_result:
        st = os.lstat(abspath)
        if stat.S_ISDIR(st.st_mode):
            raise PathRefused(f"{path!r} is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise PathRefused(f"{path!r} is not a regular file")
        return st

    def _read_bytes(self, abspath: str, limit: int) -> bytes:
        fd = os.open(abspath, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                raise PathRefused(f"{self.rel(abspath)!r} is not a regular file")
            return os.read(fd, limit)
        finally:
            os.close(fd)

    # -- tools -----------------------------------------------------------------------------
    def read_file(self, path: object, start_line: object = 1, end_line: object = None) -> ToolResult:
        """Lines ``start_line``..``end_line`` (1-based, inclusive) with numbers, at most MAX_READ_BYTES."""
        try:
            abspath = self.resolve(path)
            st = self._regular(abspath, str(path))
            start = _positive_int(start_line, "start_line", 1)
            end = None if end_line is None else _positive_int(end_line, "end_line", start)
        except PathRefused as exc:
            return err(str(exc))
        # a window is found by scanning at most 4x the read budget: enough for any text file a task holds
        try:
            data = self._read_bytes(abspath, MAX_READ_BYTES * 4)
        except (OSError, PathRefused) as exc:
            return err(f"cannot read {path!r}: {exc}")
        if b"\x00" in data[:8192]:
            return err(f"{path!r} is a binary file ({st.st_size} bytes); read_file shows text only")
        text = data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if text.endswith("\n"):
            lines = lines[:-1]
        if start > max(1, len(lines)) and st.st_size > len(data):
            return err(
                f"{path!r} is {st.st_size} bytes; read_file reaches only its first {len(data)} bytes "
                f"({len(lines)} lines); use shell (e.g. sed -n) for the rest"
            )
        if start > max(1, len(lines)):
            return err(f"start_line {start} is past the end of {path!r} ({len(lines)} lines)")
        stop = len(lines) if end is None else min(end, len(lines))
        out, size = [], 0
        for n in range(start, stop + 1):
            row = f"{n:5d}  {lines[n - 1]}"
            size += len(row) + 1
            if size > MAX_READ_BYTES:
                out.append(f"... (output cut at {MAX_READ_BYTES} bytes; read from line {n} with start_line)")
                break
            out.append(row)
        if st.st_size > len(data) and stop == len(lines):
            out.append(f"... (file is {st.st_size} bytes; only the first {len(data)} were read)")
        return ToolResult("\n".join(out) if out else "(empty file)", ok=True)

    def write_file(self, path: object, content: object) -> ToolResult:
        """Create or overwrite a text file (parent directories created)."""
        if not isinstance(content, str):
            return err("content must be a string")
        data = content.encode()
        if len(data) > MAX_WRITE_BYTES:
            return err(f"content is {len(data)} bytes; write_file accepts at most {MAX_WRITE_BYTES}")
        try:
            abspath = self.resolve(path, must_exist=False)
            if os.path.lexists(abspath):
                self._regular(abspath, str(path))
            self._mkdirs(os.path.dirname(abspath))
        except PathRefused as exc:
            return err(str(exc))
        self._write(abspath, data)
        return ToolResult(f"Wrote {len(data)} bytes to {self.rel(abspath)}.", ok=True)

    def edit(self, path: object, old: object, new: object) -> ToolResult:
        """Replace the one exact occurrence of ``old`` by ``new``."""
        if not isinstance(old, str) or not old:
            return err("old must be a non-empty string")
        if not isinstance(new, str):
            return err("new must be a string")
        try:
            abspath = self.resolve(path)
            st = self._regular(abspath, str(path))
        except PathRefused as exc:
            return err(str(exc))
        if st.st_size > MAX_WRITE_BYTES:
            return err(f"{path!r} is {st.st_size} bytes; edit works on files up to {MAX_WRITE_BYTES}")
        data = self._read_bytes(abspath, MAX_WRITE_BYTES + 1)
        if b"\x00" in data:
            return err(f"{path!r} is a binary file; edit works on text only")
        text = data.decode("utf-8", errors="replace")
        count = text.count(old)
        if count == 0:
            return err(f"old string not found in {path!r}; read the file and copy the text exactly")
        if count > 1:
            return err(f"old string occurs {count} times in {path!r}; include more context so it is unique")
        updated = text.replace(old, new, 1).encode()
        if len(updated) > MAX_WRITE_BYTES:
            return err(f"the edited file would be {len(updated)} bytes; at most {MAX_WRITE_BYTES}")
        self._write(abspath, updated)
        return ToolResult(f"Edited {self.rel(abspath)}: 1 occurrence replaced.", ok=True)

    def search(self, pattern: object, path: object = ".") -> ToolResult:
        """Lines matching the regular expression ``pattern`` in text files under ``path``."""
        if not isinstance(pattern, str) or not pattern:
            return err("pattern must be a non-empty string")
        if len(pattern) > 500:
            return err("pattern is longer than 500 characters")
        try:
            regex = re.compile(pattern)
        except re.error as exc:
            return err(f"pattern is not a valid regular expression: {exc}")
        try:
            base = self.resolve(path)
        except PathRefused as exc:
            return err(str(exc))
        hits: list[str] = []
        files = 0
        for abspath in self._walk(base):
            files += 1
            if files > MAX_SEARCH_FILES or len(hits) >= MAX_SEARCH_HITS:
                break
            try:
                st = os.lstat(abspath)
                if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_SEARCH_FILE_BYTES:
                    continue
                data = self._read_bytes(abspath, MAX_SEARCH_FILE_BYTES)
            except (OSError, PathRefused):
                continue
            if b"\x00" in data[:8192]:
                continue
            for n, line in enumerate(data.decode("utf-8", errors="replace").split("\n"), 1):
                if regex.search(line):
                    hits.append(f"{self.rel(abspath)}:{n}: {line[:200]}")
                    if len(hits) >= MAX_SEARCH_HITS:
                        hits.append(f"... (stopped at {MAX_SEARCH_HITS} matches)")
                        break
        return ToolResult("\n".join(hits) if hits else "No matches.", ok=True)

    # -- helpers ---------------------------------------------------------------------------
    def _walk(self, base: str) -> list[str]:
        if not stat.S_ISDIR(os.lstat(base).st_mode):
            return [base]
        out = []
        for dirpath, dirnames, filenames in os.walk(base, followlinks=False):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d != "__pycache__")
            out.extend(os.path.join(dirpath, f) for f in sorted(filenames))
            if len(out) > MAX_SEARCH_FILES:
                break
        return out

    def _mkdirs(self, abspath: str) -> None:
        rel = os.path.relpath(abspath, self.root)
        cur = self.root
        for part in [] if rel == "." else rel.split(os.sep):
            cur = os.path.join(cur, part)
            if not os.path.lexists(cur):
                os.mkdir(cur, 0o755)
                self._own(cur)
            elif not stat.S_ISDIR(os.lstat(cur).st_mode):
                raise PathRefused(f"{os.path.relpath(cur, self.root)!r} is not a directory")

    def _write(self, abspath: str, data: bytes) -> None:
        fd = os.open(abspath, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        self._own(abspath)

    def _own(self, abspath: str) -> None:
        if self.uid is not None:
            os.lchown(abspath, self.uid, self.uid)


def _positive_int(value: object, name: str, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise PathRefused(f"{name} must be an integer")
    try:
        n = int(value)
    except ValueError:
        raise PathRefused(f"{name} must be an integer, got {value!r}") from None
    if n < 1:
        raise PathRefused(f"{name} must be >= 1, got {n}")
    return n
