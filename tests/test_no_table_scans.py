"""No statement of a whole working day scans ``scores`` or ``jobs``: every SQLite connection
tracescore opens while an app logs records scored by local metrics and a budgeted judge
(decisions, the judge's sums, the proxy's learning reads), feedback arrives, the report,
comparison, show and a prune run, is traced, and each statement that touches those tables is
planned with EXPLAIN QUERY PLAN. Both tables grow with history; a full scan of either is a
read that slows with every record (their record-id lookups go through ``records.seq``, the
index ``rec`` since schema 13: a statement written before that, or by code that did not know
it, joins them by ``record_id`` and scans)."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import trace_statements

from tracescore.cli import main
from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.store import open_store
from tracescore.testing import in_memory
from tracescore.testing.judge import ScriptedJudgeServer, lexical_responder

CONTEXTS = ["The Cargo ships with a 750 Wh battery.", "Warranty lasts two years."]
ANSWERS = ["The Cargo ships with a 750 Wh battery.", "It has a 500 Wh battery, verified.",
           "Warranty lasts two years.", "Bananas are yellow."]


def _plans(db: str, statements: list[str]) -> dict[str, list[str]]:
    conn = sqlite3.connect(db)
    out: dict[str, list[str]] = {}
    try:
        for sql in dict.fromkeys(statements):
            low = sql.lower()
            if not re.search(r"\b(scores|jobs)\b", low) or not low.lstrip().startswith(
                    ("select", "update", "delete", "insert", "with")):
                continue
            if low.rstrip().endswith("and 1 = 0"):  # (no segment matches: reads nothing)
                continue
            text = re.sub(r"\bInf\b", "1e999", sql)
            try:
                out[sql] = [str(r[3]) for r in conn.execute("EXPLAIN QUERY PLAN " + text)]
            except sqlite3.Error:  # (a temp table of another connection, a dropped one)
                continue
    finally:
        conn.close()
    return out


def test_a_working_day_scans_neither_scores_nor_jobs(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    db = str(tmp_path / "ts.db")
    open_store(db).close()  # (the schema's one-time steps are not a day's reads)
    seen, stop_tracing = trace_statements(monkeypatch)
    with ScriptedJudgeServer(lexical_responder) as srv:
        ts, _ = in_memory(db, metrics=["faithfulness", "token_f1"],
                          judge=OpenAIJudge("scripted", base_url=srv.base_url),
                          judge_canary=False, judge_budget="30/day", release="v1")
        try:
            ids = []
            for i in range(40):
                meta = {"tracescore.force_sample": True} if i % 10 == 0 else {}
                ids.append(ts.log_record(query=f"What battery, {i}?", contexts=CONTEXTS,
                                         answer=ANSWERS[i % len(ANSWERS)],
                                         ground_truths=[ANSWERS[0]], metadata=meta))
            assert ts.flush(120)
            # negative feedback on a record the budget did not judge reopens its decision
            trace = sqlite3.connect(db).execute(
                "SELECT r.trace_id FROM judge_decisions d JOIN records r"
                " ON r.record_id = d.record_id WHERE d.selected = 0 LIMIT 1").fetchone()
            if trace is not None:
                ts.add_feedback(trace[0], 0.0)
            assert ts.flush(60)
        finally:
            ts.shutdown()
    runner = CliRunner()
    for args in (["report", "--db", db], ["report", "--db", db, "--json"],
                 ["compare", "--db", db, "--current", "1h", "--baseline", "1d"],
                 ["prune", "--db", db, "--older-than", "1d", "--dry-run"],
                 ["prune", "--db", db, "--older-than", "1d"]):
        res = runner.invoke(main, args)
        assert res.exit_code in (0, 1), (args, res.output)
    stop_tracing()
    plans = _plans(db, seen)
    assert len(plans) >= 20, len(plans)  # (the day's statements were traced)
    scans = {sql: plan for sql, plan in plans.items()
             if any(p.startswith("SCAN") and re.search(r"\b(scores|jobs|s|j)\b", p)
                    and "INDEX" not in p for p in plan)}
    assert not scans, "\n\n".join(f"{s}\n  {p}" for s, p in scans.items())
