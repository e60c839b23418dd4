"""Small helpers shared by tests (import as ``from helpers import ...``)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any


def rows(db: Path | str, sql: str, *args: Any) -> list[dict[str, Any]]:
    conn = sqlite3.connect(str(db))
    conn.row_factory = sqlite3.Row
    try:
        return [dict(r) for r in conn.execute(sql, args).fetchall()]
    finally:
        conn.close()


def records(db: Path | str) -> list[dict[str, Any]]:
    out = rows(db, "SELECT * FROM records ORDER BY created_at, rowid")
    for r in out:
        r["contexts"] = json.loads(r["contexts"])
        r["ground_truths"] = json.loads(r["ground_truths"])
        r["metadata"] = json.loads(r["metadata"])
    return out


def scores(db: Path | str, record_id: str | None = None) -> dict[str, dict[str, Any]]:
    sql = "SELECT * FROM scores" + (" WHERE record_id = ?" if record_id else "")
    got = rows(db, sql, *([record_id] if record_id else []))
    return {r["name"]: r for r in got} if record_id else {str(r["score_id"]): r for r in got}


def jobs(db: Path | str, record_id: str) -> dict[str, dict[str, Any]]:
    return {r["metric"]: r for r in rows(db, "SELECT * FROM jobs WHERE record_id=?", record_id)}


# -- two tiny metrics the capture tests use to see what a record carried --------------------
from tracescore import Metric  # noqa: E402


class ContextCount(Metric):
    name = "context_count"
    requires = frozenset({"contexts"})
    threshold = None

    def __call__(self, record: Any) -> Any:
        return self.result(len(record.contexts), f"{len(record.contexts)} contexts")


class AnswerLength(Metric):
    name = "answer_length"
    requires = frozenset({"answer"})
    threshold = None

    def __call__(self, record: Any) -> Any:
        return self.result(len(record.answer))


def capture_metrics() -> list[Metric]:
    return [ContextCount(), AnswerLength()]
