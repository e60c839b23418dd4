"""``tracescore label --import`` on hostile or unusual files: clear errors (exit 2, nothing
written) instead of tracebacks, Excel's UTF-8 CSV with a byte order mark read, and a big file
streamed in chunks inside one transaction."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from helpers import rows, run_cli

from tracescore.cli import label as L
from tracescore.store import open_store

TRACE = "a" * 32


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "ts.db"
    open_store(str(path)).close()
    return path


def _refused(db: Path, f: Path, said: str) -> None:
    result = run_cli("label", "--db", db, "--import", f)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        result.exception
    assert said in result.output, result.output
    assert rows(db, "SELECT count(*) AS n FROM labels") == [{"n": 0}]


def test_a_400_digit_number_is_an_error_not_a_traceback(db: Path, tmp_path: Path) -> None:
    f = tmp_path / "l.jsonl"
    f.write_text(json.dumps({"trace_id": TRACE, "name": "exact_match", "value": 1}) + "\n"
                 + f'{{"trace_id": "{TRACE}", "name": "token_f1", "value": {"9" * 400}}}\n')
    _refused(db, f, "line 2")
    g = tmp_path / "c.jsonl"
    g.write_text(f'{{"trace_id": "{TRACE}", "name": "token_f1", "value": 0.5, '
                 f'"created_at": {"9" * 400}}}\n')
    _refused(db, g, "line 1")


def test_json_nested_100k_deep_is_an_error(db: Path, tmp_path: Path) -> None:
    f = tmp_path / "l.jsonl"
    f.write_text('{"trace_id": "' + TRACE + '", "name": "token_f1", "value": '
                 + "[" * 100_000 + "]" * 100_000 + "}\n")
    _refused(db, f, "line 1: not a label (JSON nested too deeply)")


def test_a_csv_cell_over_the_field_limit_is_an_error(db: Path, tmp_path: Path) -> None:
    f = tmp_path / "l.csv"
    f.write_text("trace_id,name,value,comment\n"
                 f"{TRACE},exact_match,1,ok\n"
                 f"{TRACE},exact_match,1,{'x' * 140_000}\n", encoding="utf-8")
    _refused(db, f, "line 3: not a CSV row of labels")


def test_an_excel_utf8_csv_with_a_bom_is_read(db: Path, tmp_path: Path) -> None:
    """Excel's "CSV UTF-8" starts with a byte order mark: before, the first column read as
    '\\ufefftrace_id' and the file was refused as missing column trace_id."""
    f = tmp_path / "excel.csv"
    f.write_bytes("\ufefftrace_id,name,value,comment\r\n".encode()
                  + f"{TRACE},exact_match,1,très bien\r\n".encode())
    result = run_cli("label", "--db", db, "--import", f)
    assert result.exit_code == 0, result.output
    assert "imported 1 label" in result.output
    assert rows(db, "SELECT trace_id, comment FROM labels") == [
        {"trace_id": TRACE, "comment": "très bien"}]
    j = tmp_path / "bom.jsonl"
    j.write_bytes(b"\xef\xbb\xbf" + json.dumps({"trace_id": "b" * 32, "name": "exact_match",
                                                 "value": 0}).encode() + b"\n")
    assert run_cli("label", "--db", db, "--import", j).exit_code == 0


def test_a_big_import_is_streamed_in_chunks_in_one_transaction(
        db: Path, tmp_path: Path, monkeypatch: Any) -> None:
    """Memory holds one chunk (before: every row of the file, checked, then written: a 100 MB
    file took 475 MB). A bad row at the very end still leaves nothing written."""
    monkeypatch.setattr(L, "IMPORT_CHUNK", 50)
    calls: list[int] = []
    real = type(open_store(str(db))).add_labels

    def counting(self: Any, labels: Any) -> int:
        labels = list(labels)
        calls.append(len(labels))
        return real(self, labels)

    monkeypatch.setattr(type(open_store(str(db))), "add_labels", counting)
    lines = [json.dumps({"trace_id": f"{i:032x}", "name": "exact_match", "value": i % 2})
             for i in range(1, 131)]
    good = tmp_path / "good.jsonl"
    good.write_text("\n".join(lines) + "\n")
    result = run_cli("label", "--db", db, "--import", good)
    assert result.exit_code == 0, result.output
    assert "imported 130 labels" in result.output
    assert calls == [50, 50, 30]
    assert rows(db, "SELECT count(*) AS n FROM labels") == [{"n": 130}]
    bad = tmp_path / "bad.jsonl"
    bad.write_text("\n".join(lines).replace('"exact_match"', '"token_f1"') + "\n"
                   + json.dumps({"trace_id": TRACE, "name": "token_f1", "value": 7}) + "\n")
    calls.clear()
    _refused_after_writes = run_cli("label", "--db", db, "--import", bad)
    assert _refused_after_writes.exit_code == 2
    assert "line 131" in _refused_after_writes.output
    assert calls == [50, 50]  # two chunks written, then rolled back with the rest
    assert rows(db, "SELECT count(*) AS n FROM labels WHERE name = 'token_f1'") == [{"n": 0}]
