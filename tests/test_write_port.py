"""Issue 35: the queue's writer calls the stages above it through one explicit port
(tracescore/write_port.py) — jobs per record, updates, the scorer's wake, scores on write —
and through nothing else. A real RecordQueue on a real SQLite file, with a port of our own."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from helpers import rows

from tracescore.queue import RecordQueue
from tracescore.record import RagRecord
from tracescore.sampling import Decision
from tracescore.score import Score
from tracescore.store import NewJob, StoreAPI
from tracescore.updates import GroundTruthUpdate
from tracescore.write_port import OnWriteScorer, PortFunctions, WritePort


def rec(i: int) -> RagRecord:
    return RagRecord(trace_id=format(0xC000 + i, "032x"), span_id=format(0xD000 + i, "016x"),
                     query=f"q{i}", answer=f"a{i}")


class Port:
    """A WritePort written by hand: records every call the writer makes."""

    def __init__(self, scorer: OnWriteScorer | None = None) -> None:
        self.planned: list[str] = []
        self.updates: list[Any] = []
        self.opened = 0
        self.asked = 0
        self.scorer = scorer
        self.threads: set[str] = set()

    def plan_jobs(self, record: RagRecord, decision: Decision) -> Sequence[NewJob]:
        self.threads.add(threading.current_thread().name)
        self.planned.append(record.record_id)
        return [NewJob(record.record_id, m, "1") for m in decision.metrics]

    def apply_update(self, store: StoreAPI, update: Any) -> None:
        self.updates.append(update)
        store.set_ground_truths(update.trace_id, update.ground_truths)

    def jobs_opened(self) -> None:
        self.opened += 1

    def on_write(self) -> OnWriteScorer | None:
        self.asked += 1
        return self.scorer


class Scorer:
    """An OnWriteScorer that scores metric "cheap" and leaves the others to the worker."""

    budget_s = 60.0
    delivery = "none"

    def __init__(self) -> None:
        self.stored_ids: list[str] = []

    def open(self) -> bool:
        return True

    def score_now(self, record: RagRecord, job: NewJob) -> list[Score] | None:
        if job.metric != "cheap":
            return None
        return [Score(name="cheap", value=0.25, metric="cheap", metric_version="1")]

    def stored(self, record_id: str, scores: Sequence[Score], refs: Sequence[Any]) -> None:
        self.stored_ids.append(record_id)


def test_the_writer_plans_updates_and_wakes_through_the_port(tmp_path: Path) -> None:
    db = str(tmp_path / "port.db")
    port = Port()
    q = RecordQueue(db, port)
    sampled = [rec(i) for i in range(5)]
    for r in sampled:
        assert q.put((r, Decision(0.1, ("m",))))
    assert q.put(rec(99))  # no metric sampled it: stored, no jobs planned for it
    assert q.flush(30)
    assert q.put(GroundTruthUpdate(sampled[0].trace_id, ("truth",)), record=False)
    assert q.flush(30)
    assert q.shutdown(30)
    assert sorted(port.planned) == sorted(r.record_id for r in sampled)
    assert port.threads == {"tracescore-writer"}  # the writer thread, never the caller's
    assert port.opened >= 1 and port.asked >= 1
    assert [u.trace_id for u in port.updates] == [sampled[0].trace_id]
    assert rows(db, "SELECT count(*) AS n FROM records")[0]["n"] == 6
    assert rows(db, "SELECT count(*) AS n FROM jobs WHERE status = 'pending'")[0]["n"] == 5
    [gt] = rows(db, "SELECT ground_truths FROM records WHERE trace_id = ?", sampled[0].trace_id)
    assert "truth" in gt["ground_truths"]


def test_scores_on_write_go_through_the_ports_scorer(tmp_path: Path) -> None:
    db = str(tmp_path / "scored.db")
    scorer = Scorer()
    port = Port(scorer)
    q = RecordQueue(db, port)
    records = [rec(i) for i in range(3)]
    for r in records:
        q.put((r, Decision(0.1, ("cheap", "slow"))))
    assert q.shutdown(30)
    assert sorted(scorer.stored_ids) == sorted(r.record_id for r in records)
    by_status = {r["metric"]: (r["status"], r["n"]) for r in rows(
        db, "SELECT metric, status, count(*) AS n FROM jobs GROUP BY metric, status")}
    assert by_status == {"cheap": ("done", 3), "slow": ("pending", 3)}
    assert rows(db, "SELECT count(*) AS n FROM scores WHERE name = 'cheap'")[0]["n"] == 3


def test_port_functions_is_a_write_port(tmp_path: Path) -> None:
    """The client's port, made of functions; without a scorer nothing is scored on write and
    without a wake nothing is called."""
    planned: list[str] = []
    port: WritePort = PortFunctions(
        lambda r, d: planned.append(r.record_id) or [NewJob(r.record_id, "m", "1")],
        lambda store, upd: None)
    assert port.on_write() is None
    port.jobs_opened()  # (no wake given: nothing to call)
    q = RecordQueue(str(tmp_path / "f.db"), port)
    q.put((rec(1), Decision(0.1, ("m",))))
    assert q.shutdown(30)
    assert planned == [rec(1).record_id]
