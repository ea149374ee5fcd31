"""longcat_plugins.atomic: a write that fails leaves the old file and no temporary file behind."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from longcat_plugins.atomic import replacing, write_json_atomic, write_parquet_atomic, write_text_atomic


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    with pytest.raises(RuntimeError, match="mid-write"), replacing(target) as tmp:
        tmp.write_text("half of the new")
        raise RuntimeError("mid-write")
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_writers_replace_the_target_and_create_its_folder(tmp_path: Path) -> None:
    text = write_text_atomic(tmp_path / "a" / "t.yaml", "tools: []\n")
    assert text.read_text() == "tools: []\n"
    doc = write_json_atomic(tmp_path / "b" / "d.json", {"z": 1, "a": [2]}, sort_keys=True)
    assert doc.read_text() == '{"a": [2], "z": 1}\n'
    assert json.loads(doc.read_text()) == {"a": [2], "z": 1}
    frame = pd.DataFrame({"x": [1, 2, 3]})
    table = write_parquet_atomic(frame, tmp_path / "c" / "f.parquet")
    assert pd.read_parquet(table)["x"].tolist() == [1, 2, 3]
    assert sorted(p.name for p in (tmp_path / "c").iterdir()) == ["f.parquet"]
