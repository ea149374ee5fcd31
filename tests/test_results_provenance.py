"""Every figure file says where it came from: each ``bench/results/*.json`` carries a complete
provenance record (``bench/provenance.py``), and what could not be re-measured since records
existed lives under ``bench/results/archive/``, each file listed with its reason in that folder's
README. A figure nobody can trace to a commit, command, seed and machine must not look current."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
from conftest import REPO

RESULTS = REPO / "bench" / "results"
ARCHIVE = RESULTS / "archive"


def _bench_provenance() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_provenance", REPO / "bench" / "provenance.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


prov = _bench_provenance()


def _results() -> list[Path]:
    return sorted(p for p in RESULTS.glob("*.json") if not p.name.endswith(".provenance.json"))


def test_there_are_results_to_check() -> None:
    assert len(_results()) >= 5, "the glob must find the results files"


@pytest.mark.parametrize("path", _results(), ids=lambda p: p.name)
def test_every_results_file_records_its_provenance(path: Path) -> None:
    gaps = prov.missing(prov.record_of(path))
    assert not gaps, (
        f"bench/results/{path.name} lacks a complete provenance record: {gaps}. Re-measure it with its bench "
        "(which writes the record), or move it to bench/results/archive/ and list it in archive/README.md"
    )


def test_every_sidecar_belongs_to_a_list_file() -> None:
    for sidecar in RESULTS.glob("*.provenance.json"):
        data = RESULTS / sidecar.name.replace(".provenance.json", ".json")
        assert data.is_file(), f"{sidecar.name}: no {data.name} beside it"
        assert isinstance(json.loads(data.read_text()), list), f"{data.name} is an object: its record is its key"


def _archive_listing() -> dict[str, str]:
    """``- `name.json`: reason`` lines of archive/README.md."""
    text = (ARCHIVE / "README.md").read_text()
    return {m.group(1): m.group(2).strip() for m in re.finditer(r"^- `([\w.-]+\.json)`: (.+)$", text, re.M)}


def test_archived_files_are_listed_with_a_reason() -> None:
    listed = _archive_listing()
    files = {p.name for p in ARCHIVE.glob("*.json")}
    assert files, "archive/ holds the files that could not be re-measured"
    assert not files - set(listed), f"archived without a reason in archive/README.md: {sorted(files - set(listed))}"
    assert not set(listed) - files, f"archive/README.md lists files that are not there: {sorted(set(listed) - files)}"
    assert all(len(reason) > 20 for reason in listed.values()), "each archived file says why"
    current = {p.name for p in _results()}
    assert not files & current, f"both current and archived: {sorted(files & current)} (delete the archived copy)"


def test_docs_that_quote_an_archived_file_say_so() -> None:
    docs = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
    bad = []
    for doc in docs:
        for i, line in enumerate(doc.read_text().splitlines(), 1):
            for name in re.findall(r"bench/results/archive/([\w.-]+\.json)", line):
                if not (ARCHIVE / name).is_file():
                    bad.append(f"{doc.name}:{i}: archive/{name} does not exist")
            # a quote, not the path a command writes (`--out bench/results/x.json`)
            for name in re.findall(r"(?<!--out )bench/results/([\w.-]+\.json)", line):
                if not (RESULTS / name).is_file() and (ARCHIVE / name).is_file():
                    bad.append(f"{doc.name}:{i}: {name} is archived: quote bench/results/archive/{name}")
    assert not bad, "\n".join(bad)


def test_missing_names_each_gap_and_accepts_a_complete_record() -> None:
    record = prov.provenance(seeds=[0, 1], command=["python", "bench/x.py", "--seeds", "0,1"])
    assert prov.missing(record) == []
    assert record["command"] == "python bench/x.py --seeds 0,1"
    assert set(prov.REQUIRED_VERSIONS) <= set(record["versions"]) and set(prov.REQUIRED_MACHINE) <= set(
        record["machine"]
    )
    broken = {**record, "commit": "abc123", "seeds": "none"}
    del broken["date_utc"]
    gaps = prov.missing(broken)
    assert any(g.startswith("provenance.commit") for g in gaps)
    assert any(g.startswith("provenance.date_utc") for g in gaps)
    assert any(g.startswith("provenance.seeds") for g in gaps)
    # one record per invocation: an unrecorded earlier invocation keeps the file incomplete
    assert prov.missing([record, record]) == []
    assert prov.missing([{"unrecorded": "old rows"}, record])
    assert prov.missing(None) == ["provenance: absent"]


def test_an_append_run_keeps_earlier_records_and_flags_unrecorded_rows(tmp_path: Path) -> None:
    record = prov.provenance(seeds=[0])
    out = tmp_path / "r.json"
    out.write_text(json.dumps({"runs": [{"seed": 1}]}))  # written before records existed
    kept = prov.earlier(out)
    assert prov.missing(prov.stamp({"runs": []}, record, kept)["provenance"]), "old rows must stay unaccounted for"
    out.write_text(json.dumps(prov.stamp({"runs": [{"seed": 1}]}, record)))
    stamped = prov.stamp({"runs": [{"seed": 1}, {"seed": 2}]}, record, prov.earlier(out))
    assert isinstance(stamped["provenance"], list) and len(stamped["provenance"]) == 2
    assert prov.missing(stamped["provenance"]) == []
    assert prov.earlier(out, append=False) == []


def test_the_record_names_the_checked_out_commit() -> None:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True)
    if head.returncode != 0:
        pytest.skip("not a git checkout (an exported tree)")
    assert prov.provenance()["commit"] == head.stdout.strip()
    assert prov.provenance(command=None)["command"].split()[0] == Path(sys.executable).name


def test_dirty_is_about_the_code_not_results_an_earlier_bench_rewrote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session runs benches one after another; the second must not record ``dirty`` because the
    first rewrote its results file, while any change to the code still counts."""

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), *args], check=True, capture_output=True)

    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "run.json").write_text("{}\n")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("init", "-q")
    git("add", "-A")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    monkeypatch.setattr(prov, "REPO", tmp_path)
    monkeypatch.delenv(prov.ENV_COMMIT, raising=False)
    assert prov.provenance()["dirty"] is False
    (tmp_path / "bench" / "results" / "run.json").write_text('{"rewritten": true}\n')
    assert prov.provenance()["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert prov.provenance()["dirty"] is True
