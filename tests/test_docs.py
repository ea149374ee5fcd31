"""The hook reference is generated from the code and must be current; docs quote only committed
bench results and cite paper sections, not internal ids."""

import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import REPO


def test_hook_reference_is_current() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_hook_docs.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_figure_tables_are_rendered_from_their_results_files() -> None:
    """scripts/render_docs.py --check: every results-table block equals what its file renders."""
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "render_docs.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_render_docs_rejects_a_table_that_names_another_file(tmp_path: Path) -> None:
    """The marker names the results file; a table quoted under the wrong file is an error, not a render."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("render_docs", REPO / "scripts" / "render_docs.py")
    assert spec is not None and spec.loader is not None
    render_docs = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(render_docs)
    good = "<!-- results-table: losses (bench/results/losses.json) -->\n| stale |\n<!-- /results-table: losses -->\n"
    rendered, names = render_docs.render(good, "x.md")
    assert names == ["losses"] and "| stale |" not in rendered and "`longcat_gspo` / `gspo`" in rendered
    assert render_docs.render(rendered, "x.md")[0] == rendered  # rendering is idempotent
    wrong = good.replace("bench/results/losses.json", "bench/results/engines.json")
    with pytest.raises(SystemExit, match="names bench/results/engines.json, but it is rendered from"):
        render_docs.render(wrong, "x.md")
    with pytest.raises(SystemExit, match="unknown results-table 'nope'"):
        render_docs.render(good.replace("losses", "nope"), "x.md")


def test_readme_test_command_is_what_ci_runs() -> None:
    text = (REPO / "README.md").read_text()
    block = text.split("<!-- test-command -->", 1)[1].split("<!-- /test-command -->", 1)[0]
    assert "pytest" in block and "setup-cpu.sh" in block
    assert "<!-- test-command -->" in (REPO / ".ci" / "run").read_text()


DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
#: the component ids of the internal design notes (A1 GSPO, R1 math, S3 load balancing, ...):
#: users do not have that file, so docs name the paper section instead
SPEC_ID = re.compile(r"\b[ASDREFV][1-9]\b|SPEC\.md")


def _committed(path: Path) -> bool:
    if not (REPO / ".git").exists():  # an exported tree (sdist): the file itself must be there
        return path.is_file()
    listed = subprocess.run(
        ["git", "ls-files", "--error-unmatch", str(path.relative_to(REPO))], cwd=REPO, capture_output=True
    )
    return listed.returncode == 0


def test_every_bench_result_a_doc_names_is_in_the_repo() -> None:
    named = {
        (doc.name, m)
        for doc in DOCS
        for m in re.findall(r"(?<!--out )bench/results/((?:archive/)?[\w.-]+\.json)", doc.read_text())
    }
    assert named, "the docs quote bench results; the pattern must find them"
    missing = [
        f"{doc}: bench/results/{name}"
        for doc, name in sorted(named)
        if not _committed(REPO / "bench" / "results" / name)
    ]
    assert not missing, f"figures must come from a committed result file: {missing}"
    assert "bench/results" not in (REPO / ".gitignore").read_text()


def test_docs_cite_paper_sections_not_internal_ids() -> None:
    hits = [
        f"{doc.relative_to(REPO)}:{i}: {line.strip()}"
        for doc in DOCS
        for i, line in enumerate(doc.read_text().splitlines(), 1)
        if SPEC_ID.search(line)
    ]
    assert not hits, "\n".join(hits)


def test_component_summaries_cite_no_internal_ids() -> None:
    """What `longcat-plugins list` prints for every built-in component."""
    from longcat_plugins.host import Host

    host = Host().load()
    hits = [f"{c.ref}: {c.summary}" for c, _ in host.all_components() if SPEC_ID.search(c.summary)]
    assert not hits, hits


def test_mkdocs_builds_strict_with_math(tmp_path: Path) -> None:
    config = (REPO / "mkdocs.yml").read_text()
    assert "pymdownx.arithmatex" in config and "mathjax" in config.lower()
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(tmp_path / "site")],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert 'class="arithmatex"' in (tmp_path / "site" / "algorithms" / "index.html").read_text()
