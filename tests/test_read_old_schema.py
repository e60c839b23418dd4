"""A database an older tracescore wrote (before the hourly rollups, schema version 2) is not
"corrupt": the read commands say which version it is and how to upgrade it in place, and after
that one step the report reads it (both backends)."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from helpers import is_pg

import tracescore
from tracescore.cli import main
from tracescore.store import migrations, open_store


def test_a_version_2_database_gets_a_clear_message_then_reads(
        db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    name = "POSTGRES_MIGRATIONS" if is_pg(db) else "SQLITE_MIGRATIONS"
    with monkeypatch.context() as m:
        m.setattr(migrations, name, getattr(migrations, name)[:2])
        open_store(db).close()
    res = CliRunner().invoke(main, ["report", "--db", db])
    assert res.exit_code != 0
    assert "schema version 2, written by an older tracescore" in res.output, res.output
    assert "open_store('DB').close()" in res.output and "corrupt" not in res.output
    open_store(db).close()  # the step the message names: upgrades in place
    ts = tracescore.init(db=db, metrics=["exact_match"])
    ts.log_record(query="q", answer="a", ground_truths=["a"])
    assert ts.flush(30)
    ts.shutdown()
    res = CliRunner().invoke(main, ["report", "--db", db, "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output)["records"] == 1
