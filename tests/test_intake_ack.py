"""Issue 32: the acknowledging commit goes first. Background writers of a ``serve`` process
(assembler, pruning, forwarder) do not start a transaction while requests wait to be stored;
the writer waits for a background transaction in progress on a condition (not SQLite's busy
handler) and never longer than ``yield_s``; the spool's connection never checkpoints the WAL
(the assembler does, outside its transactions)."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path
from typing import Any

from helpers import wait_for
from intake_support import http_exporter, provider, serving

from tracescore.intake.otlp import SpanRow
from tracescore.intake.spool import Spool
from tracescore.store import open_store


def _rows(n: int, seed: int, body: int = 64) -> tuple[list[SpanRow], dict[str, bytes]]:
    rid = "r" * 32
    rows = [SpanRow(f"{seed:08x}{i:024x}", f"{i + 1:016x}", "" if i % 10 == 0 else
                    f"{i - i % 10 + 1:016x}", rid, os.urandom(body)) for i in range(n)]
    return rows, {rid: b"resource"}


def _db(tmp_path: Path) -> str:
    db = str(tmp_path / "ack.db")
    open_store(db).close()  # the schema
    return db


def test_a_background_transaction_waits_for_the_requests_waiting_to_be_stored(tmp_path):
    db = _db(tmp_path)
    spool = Spool(db, yield_s=60.0)
    blocker = sqlite3.connect(db, isolation_level=None, timeout=60)
    try:
        blocker.execute("BEGIN IMMEDIATE")  # another process's writer holds the lock
        rows, res = _rows(20, 1)
        ticket = spool.submit(rows, res)
        wait_for(lambda: spool._writing, what="the writer took the request")
        seen: dict[str, Any] = {}
        entered = threading.Event()

        def background() -> None:
            with spool.background():
                seen["acknowledged first"] = ticket.done.is_set()
                entered.set()

        th = threading.Thread(target=background)
        th.start()
        wait_for(lambda: spool.background_waits == 1, what="the background waits")
        assert not entered.is_set()
        blocker.execute("COMMIT")
        assert ticket.wait(60)
        assert entered.wait(60)
        th.join(60)
        assert seen == {"acknowledged first": True}
        assert spool.spans_stored == 20
    finally:
        blocker.close()
        spool.close()


def test_the_writer_waits_for_a_background_transaction_on_a_condition(tmp_path):
    db = _db(tmp_path)
    spool = Spool(db, yield_s=60.0)
    inside, release = threading.Event(), threading.Event()

    def background() -> None:
        with spool.background():
            store = open_store(db)
            try:
                with store.transaction():
                    store.conn.execute("INSERT INTO intake_resources(resource_id, body, "
                                       "created_at) VALUES ('bg', x'00', 0)")
                    inside.set()
                    release.wait(60)
            finally:
                store.close()

    th = threading.Thread(target=background)
    th.start()
    try:
        assert inside.wait(60)
        rows, res = _rows(30, 2)
        ticket = spool.submit(rows, res)
        # it waits for the background to end, outside SQLite (no busy-handler sleeps)
        wait_for(lambda: spool.writer_waits == 1, what="the writer waits for the background")
        assert not ticket.done.is_set()
        release.set()
        assert ticket.wait(60)
        assert spool.spans_stored == 30
    finally:
        release.set()
        th.join(60)
        spool.close()


def test_an_export_is_acknowledged_while_the_background_is_held(tmp_path):
    """A background writer that holds its turn (not the database) delays an acknowledgement by
    ``yield_s`` at most; the export succeeds through the real OTel exporter."""
    from opentelemetry.sdk.trace.export import SpanExportResult

    db = tmp_path / "held.db"
    with serving(db) as serve:
        serve.spool.yield_s = 0.3
        exported: list[Any] = []

        class Keep:
            def export(self, spans: Any) -> Any:
                exported.append(exporter.export(spans))
                return SpanExportResult.SUCCESS

            def shutdown(self) -> None:
                pass

            def force_flush(self, timeout_millis: int = 0) -> bool:
                return True

        exporter = http_exporter(serve)
        with serve.spool.background():
            tp = provider(Keep())
            with tp.get_tracer("t").start_as_current_span("root"):
                pass
            tp.force_flush()
            assert exported == [SpanExportResult.SUCCESS]
            assert serve.spool.writer_waits >= 1
            assert serve.stats()["spans_stored"] == 1


def test_the_spools_commits_never_checkpoint_the_assembler_does(tmp_path):
    """Each acknowledging commit appends to the WAL only: the database file does not grow
    while 6 MB of spans (over SQLite's 1,000-page autocheckpoint) are stored; the serve's
    assembler then checkpoints them into it, outside any transaction."""
    db = _db(tmp_path)
    base = os.path.getsize(db)
    spool = Spool(db)
    try:
        for k in range(6):
            rows, res = _rows(500, 10 + k, body=2048)
            assert spool.submit(rows, res).wait(60)
        assert spool.spans_stored == 3000
        assert os.path.getsize(db + "-wal") > 6_000_000
        assert os.path.getsize(db) == base
    finally:
        spool.close()
    with serving(db) as serve:
        serve.assembler.checkpoint_every_s = 0.05
        wait_for(lambda: os.path.getsize(db) > base + 5_000_000,
                 what="the assembler checkpointed the WAL into the database file")


def test_spool_stores_once_counts_retries_and_late_spans_on_both_backends(db):
    """The spool's two write paths (SQLite: multi-row VALUES; PostgreSQL: binary arrays
    through ``unnest``) store the same rows: a retried request adds nothing, the trace rows
    count spans and know their root, and spans of an assembled trace count as late."""
    from helpers import rows as q

    open_store(db).close()
    spool = Spool(db, grace_s=5.0)
    try:
        first, res = _rows(30, 7)  # (each span its own trace id)
        t = spool.submit(first, res)
        assert t.wait(60) and t.stored == 30
        again = spool.submit(first, res)
        assert again.wait(60) and again.stored == 0
        assert (spool.spans_stored, spool.spans_duplicate) == (30, 30)
        got = q(db, "SELECT trace_id, spans, root_span_id, ready_at, first_at FROM "
                   "intake_traces ORDER BY trace_id")
        assert len(got) == 30 and all(r["spans"] == 1 for r in got)
        roots = [r for r in got if r["root_span_id"]]
        assert len(roots) == 3  # every 10th span has no parent
        assert all(abs(r["ready_at"] - r["first_at"] - 5.0) < 1e-6 for r in roots)
        assert all(r["ready_at"] is None for r in got if not r["root_span_id"])
        assert q(db, "SELECT count(*) AS n FROM intake_resources")[0]["n"] == 1
        tid = first[5].trace_id
        store = open_store(db)
        try:
            with store.transaction():
                store.conn.execute(("UPDATE intake_traces SET state = 'done' WHERE trace_id = ?"
                                    ).replace("?", "%s" if store.dialect == "postgres"
                                              else "?"), (tid,))
        finally:
            store.close()
        late = SpanRow(tid, "f" * 16, first[5].span_id, first[5].resource_id, b"late")
        assert spool.submit([late], {}).wait(60)
        assert spool.late_spans == 1
        row = q(db, "SELECT spans, late_spans FROM intake_traces WHERE trace_id = ?", tid)[0]
        assert (row["spans"], row["late_spans"]) == (2, 1)
    finally:
        spool.close()


def test_background_threads_pause_while_a_request_is_answered(tmp_path):
    """Between two traces the assembler calls :meth:`Spool.pause`: while a request is under
    way it waits for that request's answer (the GIL and the CPU go to the request), not for
    requests that start later."""
    spool = Spool(_db(tmp_path), yield_s=60.0)
    try:
        spool.pause()  # nothing under way: returns at once
        assert spool.pauses == 0
        spool.request_started()
        done = threading.Event()

        def background() -> None:
            spool.pause()
            done.set()

        th = threading.Thread(target=background)
        th.start()
        wait_for(lambda: spool.pauses == 1, what="the background pauses")
        spool.request_started()  # a later request: not waited for
        assert not done.is_set()
        spool.request_ended()
        assert done.wait(60)
        th.join(60)
        spool.request_ended()
    finally:
        spool.close()


def test_pruning_goes_past_traces_whose_spans_are_gone(db):
    """Trace rows stay a day after their spans were pruned; pruning chose the oldest assembled
    traces, so once ``limit`` of them were spanless it deleted nothing more (4, 0, 0 spans
    here before the fix). Now it chooses among traces that still have spans."""
    from helpers import rows as q

    import tracescore
    from tracescore.intake.assembler import Assembler

    ts = tracescore.init(db=db, metrics=["exact_match"])
    try:
        spool = Spool(db)
        rows = [SpanRow(f"{t:032x}", f"{i + 1:016x}", "", "r" * 32, b"x")
                for t in range(1, 4) for i in range(2)]
        assert spool.submit(rows, {"r" * 32: b"res"}).wait(60)
        spool.close()
        store = open_store(db)
        try:
            with store.transaction():
                for t in range(1, 4):  # assembled long ago, oldest first
                    store.conn.execute(
                        ("UPDATE intake_traces SET state = 'done', done_at = ? WHERE "
                         "trace_id = ?").replace("?", "%s" if store.dialect == "postgres"
                                                 else "?"), (float(t), f"{t:032x}"))
        finally:
            store.close()
        a = Assembler(ts, keep_spans_s=0, keep_traces_s=1e12)
        assert [a.prune(limit=2), a.prune(limit=2), a.prune(limit=2)] == [4, 2, 0]
        assert q(db, "SELECT count(*) AS n FROM intake_spans")[0]["n"] == 0
        assert q(db, "SELECT count(*) AS n FROM intake_traces")[0]["n"] == 3  # kept a day
        a.keep_traces_s = 0
        a.prune()
        assert q(db, "SELECT count(*) AS n FROM intake_traces")[0]["n"] == 0
        a._drop_store()
    finally:
        ts.shutdown()


def test_serve_shortens_the_gil_switch_interval_while_it_runs(tmp_path):
    import sys

    from tracescore.intake import ServeConfig

    before = sys.getswitchinterval()
    with serving(tmp_path / "swi.db", config=ServeConfig(grace_s=0.2, switch_interval_s=0.002)):
        assert sys.getswitchinterval() == 0.002
    assert sys.getswitchinterval() == before
