"""The hook reference is generated from the code and must be current."""

import subprocess
import sys

from conftest import REPO


def test_hook_reference_is_current() -> None:
    proc = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "gen_hook_docs.py"), "--check"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr


def test_readme_test_command_is_what_ci_runs() -> None:
    text = (REPO / "README.md").read_text()
    block = text.split("<!-- test-command -->", 1)[1].split("<!-- /test-command -->", 1)[0]
    assert "pytest" in block and "setup-cpu.sh" in block
    assert "<!-- test-command -->" in (REPO / ".ci" / "run").read_text()
