"""How each language is compiled (once per submission) and run (once per test case)."""

from __future__ import annotations

import os
import shutil
import sys
from dataclasses import dataclass


@dataclass(frozen=True)
class Language:
    """``compile`` and ``run`` are argv templates; ``{src}`` and ``{exe}`` are paths in the run dir."""

    name: str
    source_name: str
    run: tuple[str, ...]
    compile: tuple[str, ...] | None = None
    exe_name: str = "solution"

    def compile_argv(self, src: str, exe: str) -> list[str] | None:
        return [a.format(src=src, exe=exe) for a in self.compile] if self.compile else None

    def run_argv(self, src: str, exe: str) -> list[str]:
        return [a.format(src=src, exe=exe) for a in self.run]


def _python() -> str:
    """A system interpreter the sandbox uid can execute (pyenv/venv pythons often live under /root)."""
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("python3") or os.path.realpath(sys.executable)


LANGUAGES: dict[str, Language] = {
    "python": Language(
        "python",
        "solution.py",
        run=(_python(), "-I", "-S", "-B", "{src}"),
        # byte-compiling surfaces syntax errors once, not as a failure of every case
        compile=(
            _python(),
            "-I",
            "-S",
            "-c",
            "import sys; compile(open(sys.argv[1]).read(), sys.argv[1], 'exec')",
            "{src}",
        ),
    ),
    "cpp": Language(
        "cpp",
        "solution.cpp",
        compile=("g++", "-O2", "-std=c++17", "-pipe", "-o", "{exe}", "{src}"),
        run=("{exe}",),
    ),
    "c": Language(
        "c", "solution.c", compile=("gcc", "-O2", "-std=c11", "-pipe", "-o", "{exe}", "{src}", "-lm"), run=("{exe}",)
    ),
}
ALIASES = {"py": "python", "python3": "python", "c++": "cpp", "cc": "cpp", "cxx": "cpp"}


def get_language(name: str) -> Language:
    """The language called ``name`` (aliases accepted); ValueError naming the known ones otherwise."""
    key = ALIASES.get(name.lower(), name.lower())
    if key not in LANGUAGES:
        raise ValueError(f"sandbox language {name!r} is not supported; known: {', '.join(sorted(LANGUAGES))}")
    return LANGUAGES[key]
