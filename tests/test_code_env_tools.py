"""The code environment's file tools against a reference workspace: what they return, and every way
out of the workspace (``../``, absolute paths, symlinks, FIFOs) or past the bounds (huge, binary
files) refused with a tool error that says why, nothing outside touched."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from longcat_plugins.environments.code_env import workspace as wsmod
from longcat_plugins.environments.code_env.workspace import Workspace

FILES = {
    "pkg/__init__.py": "",
    "pkg/ops.py": "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n",
    "pkg/util.py": "def twice(x):\n    return 2 * x\n",
    "tests/test_ops.py": "from pkg.ops import add\n\n\ndef test_add():\n    assert add(1, 2) == 3\n",
}


@pytest.fixture
def ws(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    (tmp_path / "secret.txt").write_text("TOP SECRET\n")
    return Workspace(str(root))


def test_read_file_numbers_lines_and_windows(ws: Workspace) -> None:
    r = ws.read_file("pkg/ops.py")
    assert r.ok and r.content.splitlines()[0] == "    1  def add(a, b):"
    assert len(r.content.splitlines()) == 6
    r = ws.read_file("pkg/ops.py", 5, 6)
    assert r.content.splitlines() == ["    5  def sub(a, b):", "    6      return a - b"]
    assert not ws.read_file("pkg/ops.py", 99).ok
    assert "start_line must be >= 1" in ws.read_file("pkg/ops.py", 0).content
    assert "does not exist" in ws.read_file("pkg/nope.py").content
    assert "is a directory" in ws.read_file("pkg").content


def test_write_file_creates_and_overwrites(ws: Workspace) -> None:
    assert ws.write_file("pkg/new/mod.py", "X = 1\n").ok
    assert Path(ws.root, "pkg/new/mod.py").read_text() == "X = 1\n"
    assert ws.write_file("pkg/util.py", "Y = 2\n").ok
    assert Path(ws.root, "pkg/util.py").read_text() == "Y = 2\n"
    assert "content must be a string" in ws.write_file("a.py", 3).content
    assert "is not a directory" in ws.write_file("pkg/util.py/x.py", "").content


def test_edit_replaces_exactly_one_occurrence(ws: Workspace) -> None:
    r = ws.edit("pkg/ops.py", "def add(a, b):\n    return a - b", "def add(a, b):\n    return a + b")
    assert r.ok, r.content
    assert Path(ws.root, "pkg/ops.py").read_text().startswith("def add(a, b):\n    return a + b\n")
    before = Path(ws.root, "pkg/ops.py").read_text()
    r = ws.edit("pkg/ops.py", "return a - b", "return 0")  # only sub's is left: unique now
    assert r.ok
    r = ws.edit("pkg/util.py", "return", "yield")
    assert r.ok
    r = ws.edit("pkg/ops.py", "    return", "    pass")
    assert not r.ok and "occurs 2 times" in r.content and "more context" in r.content
    r = ws.edit("pkg/ops.py", "nowhere to be found", "x")
    assert not r.ok and "not found" in r.content
    assert not ws.edit("pkg/ops.py", "", "x").ok
    assert Path(ws.root, "pkg/ops.py").read_text() != before  # the two good edits applied, the bad ones not
    assert (
        "return 0" in Path(ws.root, "pkg/ops.py").read_text() and "pass" not in Path(ws.root, "pkg/ops.py").read_text()
    )


def test_search_finds_lines_with_paths(ws: Workspace) -> None:
    r = ws.search(r"def \w+\(a, b\)")
    assert r.ok and r.content.splitlines() == ["pkg/ops.py:1: def add(a, b):", "pkg/ops.py:5: def sub(a, b):"]
    assert ws.search("twice", "pkg/util.py").content == "pkg/util.py:1: def twice(x):"
    assert ws.search("zzz").content == "No matches."
    assert "not a valid regular expression" in ws.search("(").content


@pytest.mark.parametrize("path", ["../secret.txt", "pkg/../../secret.txt", "..", "/etc/passwd", "/", ""])
def test_escapes_are_refused(ws: Workspace, path: str) -> None:
    for r in (
        ws.read_file(path),
        ws.write_file(path, "pwned"),
        ws.edit(path, "SECRET", "pwned"),
        ws.search("SECRET|root", path),
    ):
        assert not r.ok and r.content.startswith("Error:"), (path, r)
        assert any(w in r.content for w in ("absolute", "leaves the repository", "non-empty")), r.content
    assert Path(ws.root).parent.joinpath("secret.txt").read_text() == "TOP SECRET\n"


def test_symlinks_are_never_followed(ws: Workspace) -> None:
    secret = str(Path(ws.root).parent / "secret.txt")
    os.symlink(secret, os.path.join(ws.root, "link.txt"))
    os.symlink(str(Path(ws.root).parent), os.path.join(ws.root, "updir"))
    for r in (
        ws.read_file("link.txt"),
        ws.write_file("link.txt", "pwned"),
        ws.edit("link.txt", "SECRET", "pwned"),
        ws.read_file("updir/secret.txt"),
        ws.write_file("updir/new.txt", "pwned"),
        ws.search("SECRET", "updir"),
    ):
        assert not r.ok and "symlink" in r.content, r
    assert "SECRET" not in ws.search("SECRET").content  # the walk skips links too
    assert Path(secret).read_text() == "TOP SECRET\n"
    assert not (Path(ws.root).parent / "new.txt").exists()


def test_fifo_and_devices_are_not_opened(ws: Workspace) -> None:
    os.mkfifo(os.path.join(ws.root, "pipe"))
    assert "not a regular file" in ws.read_file("pipe").content
    assert "not a regular file" in ws.write_file("pipe", "x").content
    assert ws.search("x").ok  # and the walk does not block on it


def test_huge_and_binary_files_are_bounded(ws: Workspace) -> None:
    big = Path(ws.root, "big.txt")
    big.write_text("".join(f"line {k}\n" for k in range(200_000)))  # ~1.3 MB
    r = ws.read_file("big.txt")
    assert r.ok and len(r.content) <= wsmod.MAX_READ_BYTES + 200 and "output cut" in r.content
    r = ws.read_file("big.txt", 20_000, 20_001)
    assert r.ok and r.content == "20000  line 19999\n20001  line 20000", r.content
    r = ws.read_file("big.txt", 150_000, 150_002)
    assert not r.ok and "reaches only its first" in r.content and "sed -n" in r.content
    assert not ws.edit("big.txt", "line 5\n", "x").ok
    assert "at most" in ws.write_file("x.txt", "y" * (wsmod.MAX_WRITE_BYTES + 1)).content
    Path(ws.root, "blob.bin").write_bytes(b"\x7fELF\x00\x01\x02" * 100)
    assert "binary file" in ws.read_file("blob.bin").content
    assert "binary file" in ws.edit("blob.bin", "ELF", "x").content
    assert "blob.bin" not in ws.search("ELF").content


def test_ownership_follows_the_workspace_uid(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("chown needs root")
    root = tmp_path / "ws"
    root.mkdir()
    ws = Workspace(str(root), uid=61999)
    assert ws.write_file("a/b.py", "x = 1\n").ok
    assert os.stat(root / "a").st_uid == 61999 and os.stat(root / "a/b.py").st_uid == 61999
