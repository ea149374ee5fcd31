"""Small repository tasks with hidden tests, generated locally and deterministically per seed.

A task is a few-file Python package in which one function is broken (``mode="bug"``) or missing
(``mode="missing"``: its body raises ``NotImplementedError``), a public failing test under
``tests/``, and hidden tests the agent never sees (the reward). Expected values come from the
function's correct implementation, run here at generation time. Difficulty knobs:
``distractors`` (extra modules with similar helpers to search through), ``depth`` (how deep the
target module sits in sub-packages) and ``hidden`` (hidden tests per task).

Output (``write_tasks``)::

    OUT/tasks/<task_id>/repo/...      the pristine workspace the agent starts from
    OUT/tasks/<task_id>/task.json     statement, target, hidden tests, golden file content
    OUT/tasks.parquet                 verl rows: agent_name longcat_code_agent, extra_info.task_dir
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

AGENT_NAME = "longcat_code_agent"
DATA_SOURCE = "longcat_code_env"


@dataclass(frozen=True)
class _Template:
    fn: str
    params: str
    doc: str
    body: str  # correct body (indented 4)
    bugs: tuple[str, ...]  # broken bodies
    args: Callable[[random.Random], tuple[Any, ...]]


def _ints(rng: random.Random, n: int, lo: int = -20, hi: int = 20) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcde") for _ in range(rng.randint(1, 4)))


TEMPLATES: tuple[_Template, ...] = (
    _Template(
        "clamp",
        "x, lo, hi",
        "Return x limited to the closed interval [lo, hi].",
        "    return max(lo, min(x, hi))\n",
        ("    return min(lo, max(x, hi))\n", "    return max(lo, min(x, hi - 1))\n"),
        lambda r: (r.randint(-30, 30), r.randint(-10, 0), r.randint(1, 10)),
    ),
    _Template(
        "prefix_sums",
        "xs",
        "Return the running totals of xs: out[i] = xs[0] + ... + xs[i].",
        "    out, total = [], 0\n    for x in xs:\n        total += x\n        out.append(total)\n    return out\n",
        (
            "    out, total = [], 0\n    for x in xs:\n        out.append(total)\n        total += x\n    return out\n",
            "    return [sum(xs[:i]) for i in range(len(xs))]\n",
        ),
        lambda r: (_ints(r, r.randint(1, 8)),),
    ),
    _Template(
        "dedupe",
        "xs",
        "Return xs without repeated items, keeping the first occurrence of each, in order.",
        "    seen, out = set(), []\n    for x in xs:\n        if x not in seen:\n            seen.add(x)\n            out.append(x)\n    return out\n",
        ("    return sorted(set(xs))\n", "    return list(set(xs))[::-1]\n"),
        lambda r: (_ints(r, r.randint(2, 10), 0, 5),),
    ),
    _Template(
        "chunk",
        "xs, n",
        "Split xs into consecutive lists of length n (the last one may be shorter).",
        "    return [xs[i : i + n] for i in range(0, len(xs), n)]\n",
        (
            "    return [xs[i : i + n] for i in range(0, len(xs) - n, n)]\n",
            "    return [xs[i : i + n - 1] for i in range(0, len(xs), n)]\n",
        ),
        lambda r: (_ints(r, r.randint(1, 9)), r.randint(1, 4)),
    ),
    _Template(
        "count_words",
        "text",
        "Return a dict mapping each whitespace-separated word of text (lower-cased) to its count.",
        "    counts = {}\n    for w in text.lower().split():\n        counts[w] = counts.get(w, 0) + 1\n    return counts\n",
        (
            "    counts = {}\n    for w in text.split():\n        counts[w] = counts.get(w, 0) + 1\n    return counts\n",
            "    return {w: 1 for w in text.lower().split()}\n",
        ),
        lambda r: (" ".join(r.choice([_word(r), _word(r).upper(), "ab"]) for _ in range(r.randint(1, 7))),),
    ),
    _Template(
        "rotate",
        "xs, k",
        "Return xs rotated right by k positions (k may exceed len(xs)); [] stays [].",
        "    if not xs:\n        return []\n    k %= len(xs)\n    return xs[-k:] + xs[:-k] if k else list(xs)\n",
        (
            "    if not xs:\n        return []\n    return xs[k:] + xs[:k]\n",
            "    if not xs:\n        return []\n    return xs[-k:] + xs[:-k]\n",
        ),
        lambda r: (_ints(r, r.randint(0, 7)), r.randint(0, 12)),
    ),
    _Template(
        "digit_sum",
        "n",
        "Return the sum of the decimal digits of the integer n (the sign is ignored).",
        "    return sum(int(d) for d in str(abs(n)))\n",
        (
            "    return sum(int(d) for d in str(n) if d.isdigit()) + (1 if n < 0 else 0)\n",
            "    return n % 10 + n // 10 % 10\n",
        ),
        lambda r: (r.randint(-99999, 99999),),
    ),
    _Template(
        "is_palindrome",
        "s",
        "Return True when s reads the same backwards, ignoring case and non-alphanumeric characters.",
        "    t = [c.lower() for c in s if c.isalnum()]\n    return t == t[::-1]\n",
        ("    return s == s[::-1]\n", "    t = [c for c in s if c.isalnum()]\n    return t == t[::-1]\n"),
        lambda r: (r.choice(["Aba", "a b A", "abc", "No lemon, no melon", "xY!yx", "ab", "Race car", "z"]),),
    ),
)

_HELPERS = (
    ("normalize", "s", "    return ' '.join(s.split())\n"),
    ("head", "xs, n", "    return list(xs[:n])\n"),
    ("total", "xs", "    return sum(xs)\n"),
    ("pairs", "xs", "    return list(zip(xs, xs[1:]))\n"),
    ("flatten", "xss", "    return [x for xs in xss for x in xs]\n"),
)
_PACKAGES = ("toolkit", "utilbox", "corelib", "helpers", "kitchen")
_MODULES = ("ops", "listing", "textual", "numbers", "misc")


@dataclass(frozen=True)
class CodeTask:
    """One generated task (everything :func:`write_tasks` puts on disk)."""

    task_id: str
    statement: str
    files: dict[str, str]  # the pristine repo, path -> text
    target_path: str
    fn: str
    mode: str
    hidden: list[dict[str, str]]  # {"name", "code"}: the reward's tests
    golden: dict[str, str]  # path -> correct text (the repo with the fix)
    public_test: str
    golden_edit: dict[str, str]  # {"path", "old", "new"}: the fix as one edit call
    meta: dict[str, Any] = field(default_factory=dict)


def _function(t: _Template, body: str) -> str:
    return f'def {t.fn}({t.params}):\n    """{t.doc}"""\n{body}'


def _reference(t: _Template) -> Callable[..., Any]:
    ns: dict[str, Any] = {}
    exec(_function(t, t.body), ns)  # noqa: S102 - our own template, at generation time
    return ns[t.fn]


def make_task(seed: int, mode: str = "bug", distractors: int = 1, depth: int = 0, hidden: int = 6) -> CodeTask:
    """One task, a pure function of its arguments."""
    if mode not in ("bug", "missing"):
        raise ValueError(f"mode must be 'bug' or 'missing', got {mode!r}")
    if not 0 <= distractors <= len(_HELPERS):
        raise ValueError(f"distractors must be in [0, {len(_HELPERS)}], got {distractors}")
    if not 0 <= depth <= 3:
        raise ValueError(f"depth must be in [0, 3], got {depth}")
    if hidden < 1:
        raise ValueError(f"hidden must be >= 1, got {hidden}")
    rng = random.Random(f"code-task-{seed}-{mode}-{distractors}-{depth}-{hidden}")
    t = rng.choice(TEMPLATES)
    ref = _reference(t)
    pkg = rng.choice(_PACKAGES)
    sub = [f"part{k}" for k in range(depth)]
    mod = rng.choice(_MODULES)
    pkg_dir = "/".join([pkg, *sub])
    target_path = f"{pkg_dir}/{mod}.py"
    dotted = ".".join([pkg, *sub, mod])

    # cases: the public one and the hidden ones are all distinct, and every broken body fails the public one
    seen: set[str] = set()
    cases: list[tuple[tuple[Any, ...], Any]] = []
    for _ in range(200):
        args = t.args(rng)
        key = repr(args)
        if key in seen:
            continue
        seen.add(key)
        cases.append((args, ref(*args)))
        if len(cases) > hidden + 20:
            break
    bug = rng.choice(t.bugs)
    broken = _broken(t, bug)
    public = next((c for c in cases if _fails(broken, t.fn, c)), None) if mode == "bug" else cases[0]
    if public is None:
        raise RuntimeError(f"template {t.fn}: no case tells the bug apart (seed {seed})")
    rest = [c for c in cases if c is not public]
    # hidden: prefer cases the broken version fails, then the others (partial credit is possible)
    failing = [c for c in rest if _fails(broken, t.fn, c)] if mode == "bug" else rest
    passing = [c for c in rest if c not in failing]
    chosen = (failing[: max(1, hidden // 2)] + passing + failing[max(1, hidden // 2) :])[:hidden]

    body = bug if mode == "bug" else '    raise NotImplementedError("TODO")\n'
    helpers = rng.sample(_HELPERS, distractors)
    target_src = "\n\n".join([_function(t, body)] + [f"def {h}({p}):\n{b}" for h, p, b in helpers[:1]]) + "\n"
    golden_src = "\n\n".join([_function(t, t.body)] + [f"def {h}({p}):\n{b}" for h, p, b in helpers[:1]]) + "\n"
    files: dict[str, str] = {}
    parts = [pkg, *sub]
    for k in range(len(parts)):
        files["/".join(parts[: k + 1]) + "/__init__.py"] = ""
    files[target_path] = target_src
    for h, p, b in helpers[1:]:
        files[f"{pkg_dir}/{h}_utils.py"] = f"def {h}({p}):\n{b}"
    args, expected = public
    public_test = (
        f"from {dotted} import {t.fn}\n\n\ndef test_{t.fn}():\n    assert {t.fn}(*{args!r}) == {expected!r}\n"
        f'\n\nif __name__ == "__main__":\n    test_{t.fn}()\n    print("passed")\n'
    )
    files[f"tests/test_{t.fn}.py"] = public_test
    what = "is broken" if mode == "bug" else "is not implemented"
    statement = (
        f"In this repository, the function `{t.fn}` in package `{pkg}` {what}: {t.doc} "
        f"The test tests/test_{t.fn}.py fails (run it with: PYTHONPATH=. python3 tests/test_{t.fn}.py). "
        "Fix the function without changing its signature, then call submit."
    )
    files["README.md"] = f"# {pkg}\n\nA small utility package.\n"
    hidden_tests = [
        {"name": f"hidden_{k}", "code": f"from {dotted} import {t.fn}\nassert {t.fn}(*{a!r}) == {e!r}\n"}
        for k, (a, e) in enumerate(chosen)
    ]
    return CodeTask(
        task_id=f"code-{seed:05d}",
        statement=statement,
        files=files,
        target_path=target_path,
        fn=t.fn,
        mode=mode,
        hidden=hidden_tests,
        golden={target_path: golden_src},
        public_test=f"tests/test_{t.fn}.py",
        golden_edit={"path": target_path, "old": _function(t, body), "new": _function(t, t.body)},
        meta={"template": t.fn, "distractors": distractors, "depth": depth, "module": dotted, "seed": seed},
    )


def _broken(t: _Template, bug: str) -> Callable[..., Any]:
    ns: dict[str, Any] = {}
    exec(_function(t, bug), ns)  # noqa: S102 - our own template
    return ns[t.fn]


def _fails(fn: Callable[..., Any], name: str, case: tuple[tuple[Any, ...], Any]) -> bool:
    args, expected = case
    try:
        return fn(*args) != expected
    except Exception:  # noqa: BLE001 - a crash is a failure
        return True


def write_task(task: CodeTask, task_dir: Path) -> None:
    """``task_dir/repo/`` (the pristine workspace) and ``task_dir/task.json``."""
    repo = task_dir / "repo"
    for rel, text in task.files.items():
        path = repo / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    (task_dir / "task.json").write_text(json.dumps(asdict(task), indent=1, sort_keys=True))


def load_task(task_dir: str | Path) -> CodeTask:
    """The task written by :func:`write_task`; a ValueError naming the file when it is not one."""
    path = Path(task_dir) / "task.json"
    try:
        data = json.loads(path.read_text())
        return CodeTask(**data)
    except (OSError, json.JSONDecodeError, TypeError) as exc:
        raise ValueError(f"{path}: not a code task ({type(exc).__name__}: {exc})") from exc


def task_rows(tasks: list[tuple[CodeTask, Path]], split: str, start_index: int = 0) -> list[dict[str, Any]]:
    """verl RL rows (``agent_name`` set) for tasks written at the given directories."""
    return [
        {
            "data_source": DATA_SOURCE,
            "prompt": [{"role": "user", "content": task.statement}],
            "ability": "code_agent",
            "reward_model": {"style": "hidden_tests", "ground_truth": str(len(task.hidden))},
            "extra_info": {
                "index": start_index + i,
                "task_dir": str(path.resolve()),
                "task_id": task.task_id,
                "split": split,
            },
            "agent_name": AGENT_NAME,
        }
        for i, (task, path) in enumerate(tasks)
    ]


def write_tasks(
    out: str | Path,
    n: int,
    seed: int = 0,
    mode: str = "mixed",
    distractors: int = 1,
    depth: int = 0,
    hidden: int = 6,
    split: str = "train",
) -> Path:
    """``n`` tasks under ``out/tasks/`` and ``out/tasks.parquet``; ``mode`` bug, missing or mixed (alternating)."""
    import pandas as pd

    if mode not in ("bug", "missing", "mixed"):
        raise ValueError(f"mode must be 'bug', 'missing' or 'mixed', got {mode!r}")
    out = Path(out)
    written = []
    for k in range(n):
        task_mode = mode if mode != "mixed" else ("bug", "missing")[k % 2]
        task = make_task(seed * 100_000 + k, task_mode, distractors, depth, hidden)
        task_dir = out / "tasks" / task.task_id
        write_task(task, task_dir)
        written.append((task, task_dir))
    pd.DataFrame(task_rows(written, split)).to_parquet(out / "tasks.parquet")
    return out / "tasks.parquet"
