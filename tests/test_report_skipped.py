"""The report's "skipped" column counts every record a metric did not score: the jobs skipped
before running (the record lacks an input) AND the scores a metric skipped when it ran (an
agent check on a record that is no agent run, a budgeted judge metric's records not selected).
The second kind used to show as 0. Checked against the raw rows, on SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from helpers import rows, run_cli

import tracescore
from tracescore import Metric
from tracescore.reports.report import RUN_SKIP
from tracescore.score import Score


class EvenOnly(Metric):
    """Scores the records whose query ends in an even digit; skips the others when run."""

    name = "even_only"
    requires = frozenset({"answer"})
    threshold = None

    def __call__(self, record: Any) -> Any:
        if int(record.query[-1]) % 2:
            return Score.skipped(self.name, "odd query: not applicable")
        return self.result(1.0)


def test_skipped_counts_run_time_skips_and_job_skips(db: str) -> None:
    ts = tracescore.init(db=db, metrics=[EvenOnly()], sample_rate=1.0)
    for i in range(10):
        ts.log_record(query=f"q{i}", answer="a" if i < 8 else None)  # q8, q9: no answer
    assert ts.flush(timeout=30)
    ts.shutdown()
    raw_skipped_scores = rows(db, "SELECT count(*) AS n FROM scores WHERE name = 'even_only'"
                                  " AND status = 'skipped'")[0]["n"]
    raw_skipped_jobs = rows(db, "SELECT count(*) AS n FROM jobs WHERE metric = 'even_only'"
                                " AND status = 'skipped'")[0]["n"]
    raw_ok = rows(db, "SELECT count(*) AS n FROM scores WHERE name = 'even_only'"
                      " AND status = 'ok'")[0]["n"]
    assert (raw_ok, raw_skipped_scores, raw_skipped_jobs) == (4, 4, 2)
    out = run_cli("report", "--db", db, "--json")
    m = json.loads(out.stdout)["metrics"]["even_only"]
    assert m["count"] == raw_ok
    assert m["skipped"] == raw_skipped_scores + raw_skipped_jobs
    reasons = {r["reason"]: r["records"] for r in m["skip_reasons"]}
    assert reasons == {RUN_SKIP: raw_skipped_scores, "record has no answer": raw_skipped_jobs}
    assert m["mostly_skipped"] is True  # 6 of 10
    text = " ".join(run_cli("report", "--db", db).stdout.split())  # (lines wrap at 80)
    assert f"skipped 6 of 10 records: {RUN_SKIP} (4); record has no answer (2)" in text
