"""Sessions in the store and the closer, on both backends: turns open a session durably,
the closer waits for the turns' jobs, a turn during a close wins over the close, a dead
closer's claim runs out, closers in many threads close each session once, and the
background closer closes an idle session by itself."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from helpers import execute, rows, wait_for

from tracescore.record import RagRecord
from tracescore.sampling import Decision
from tracescore.sessions.closer import LEASE_S, MAX_WAIT_S, close_due, parse_idle
from tracescore.store import open_store
from tracescore.store import sessions as S
from tracescore.testing import ScriptedMetric

IDLE = 60.0


def turn(session: str, i: int, answer: str | None = "an answer", **kw: Any) -> RagRecord:
    t = time.time_ns()
    return RagRecord(trace_id=f"{i:032x}", span_id=f"{i + 1:016x}", query=f"question {i}?",
                     answer=answer, session_id=session, start_time_ns=t - 1000,
                     end_time_ns=t, **kw)


def write(store: Any, *recs: RagRecord) -> None:
    store.write_batch([(r, Decision(0.5, ())) for r in recs], [])


def later(extra: float = 1.0) -> float:
    return time.time() + IDLE + extra


def state(db: str, key: str) -> dict[str, Any]:
    [row] = rows(db, "SELECT * FROM sessions WHERE session_id = ?", key)
    return row


def session_rows(db: str, key: str) -> dict[str, dict[str, Any]]:
    trace, span = S.session_record_id(key)
    return {r["name"]: r for r in rows(db, "SELECT * FROM scores WHERE record_id = ?",
                                       f"{trace}-{span}")}


def test_turns_open_a_session_that_survives_a_restart(db: str) -> None:
    store = open_store(db)
    write(store, turn("s-1", 1), turn("s-1", 2), turn("other", 3))
    write(store, turn("s-1", 1))  # a replay: not a turn again
    store.close()
    s = state(db, "s-1")
    assert (s["status"], s["version"]) == ("open", 1)
    store = open_store(db)  # "restart": the state is in the database
    try:
        assert close_due(store, IDLE, now=time.time()).closed == []  # not idle yet
        got = close_due(store, IDLE, now=later())
        assert sorted(got.closed) == ["other", "s-1"]
    finally:
        store.close()
    assert session_rows(db, "s-1")["session.turns"]["value"] == 2
    assert session_rows(db, "other")["session.repeated_questions"]["status"] == "skipped"


def test_a_turn_during_the_close_wins(db: str) -> None:
    store = open_store(db)
    try:
        write(store, turn("s-1", 1))
        [c] = S.claim(store, "closer-a", later(), IDLE, LEASE_S)
        write(store, turn("s-1", 2))  # arrives while closer-a scores the session
        assert not S.finish(store, "closer-a", c, turn("s-1", 9), None, [], time.time())
        assert state(db, "s-1")["status"] == "open" and session_rows(db, "s-1") == {}
        got = close_due(store, IDLE, now=later())
        assert got.closed == ["s-1"]
        assert session_rows(db, "s-1")["session.turns"]["value"] == 2
    finally:
        store.close()


def test_a_dead_closers_claim_runs_out(db: str) -> None:
    store = open_store(db)
    try:
        write(store, turn("s-1", 1))
        [c] = S.claim(store, "dead", later(), IDLE, LEASE_S)  # and then the process died
        assert close_due(store, IDLE, now=later()).closed == []  # held by its lease
        assert close_due(store, IDLE, now=later(LEASE_S + 1)).closed == ["s-1"]
        assert not S.finish(store, "dead", c, turn("s-1", 9), None, [], time.time())
        assert state(db, "s-1")["closes"] == 1
    finally:
        store.close()


def test_closers_side_by_side_close_each_session_once(db: str) -> None:
    store = open_store(db)
    keys = [f"s-{i}" for i in range(40)]
    write(store, *(turn(k, i) for i, k in enumerate(keys)))
    store.close()
    closed: list[list[str]] = []
    start = threading.Barrier(4)

    def closer() -> None:
        own = open_store(db)
        mine: list[str] = []
        try:
            start.wait()
            while got := close_due(own, IDLE, now=later(), limit=3).closed:
                mine += got
        finally:
            own.close()
        closed.append(mine)

    threads = [threading.Thread(target=closer) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert sorted(k for mine in closed for k in mine) == sorted(keys)
    assert {r["closes"] for r in rows(db, "SELECT closes FROM sessions")} == {1}
    [roll] = rows(db, "SELECT sum(n_ok) AS n FROM hourly_scores WHERE name = 'session.turns'")
    assert roll["n"] == len(keys)


def test_the_closer_waits_for_the_turns_jobs(make_ts: Any, db_path: Any) -> None:
    """A turn still being scored holds its session open (deferred), so the turn-level
    aggregates see every turn's score; after MAX_WAIT_S it closes with what there is."""
    from tracescore.examples.langchain_rag import build_chain

    gate = threading.Event()
    metric = ScriptedMetric(lambda r: 0.25, name="slow", gate=gate)
    ts, _ = make_ts(metrics=[metric], session_idle=IDLE)
    try:
        with ts.run(session_id="chat"):
            build_chain().invoke("What battery does the Cargo have?",
                                 config={"callbacks": [ts.langchain_handler()]})
        wait_for(lambda: rows(db_path, "SELECT 1 FROM sessions"), what="the session")
        assert ts.close_sessions(now=later()).deferred == ["chat"]
        # waited long enough (a judge down for hours): closed with the scores there are
        assert ts.close_sessions(now=later(MAX_WAIT_S + 1)).closed == ["chat"]
        got = session_rows(str(db_path), "chat")
        assert "turn_jobs_open" in got["session.turns"]["details"]
        assert "session.slow.worst" not in got
    finally:
        gate.set()
    assert ts.flush(30)
    # the next turn re-opens it; this close sees every turn's score
    ts.log_record(query="and the Trail?", answer="500 Wh", session_id="chat")
    assert ts.flush(30)
    assert ts.close_sessions(now=later()).closed == ["chat"]
    got = session_rows(str(db_path), "chat")
    assert got["session.turns"]["value"] == 2
    assert "turn_jobs_open" not in got["session.turns"]["details"]
    assert got["session.slow.worst"]["value"] == 0.25
    assert got["session.slow.worst"]["details"]  # the worst turn named


def test_background_closer_closes_an_idle_session(make_ts: Any, db_path: Any) -> None:
    from tracescore.examples.langchain_rag import build_chain

    ts, _ = make_ts(metrics=[ScriptedMetric(lambda r: 1.0, name="m")], session_idle=0.2)
    with ts.run(session_id="quick"):
        build_chain().invoke("What battery does the Cargo have?",
                             config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(30)
    wait_for(lambda: rows(db_path, "SELECT 1 FROM sessions WHERE status = 'closed'"),
             what="the session closed by the background closer")
    assert session_rows(str(db_path), "quick")["session.turns"]["value"] == 1
    assert ts.stats()["sessions"]["closed"] == 1


@pytest.mark.parametrize("value, seconds", [("5m", 300.0), ("90s", 90.0), (2, 2.0),
                                            ("0.5", 0.5), (None, None)])
def test_session_idle_parses(value: Any, seconds: float | None) -> None:
    assert parse_idle(value) == seconds


@pytest.mark.parametrize("value", ["soon", 0, -1, True, [5], float("nan"), float("inf")])
def test_session_idle_rejects(make_ts: Any, value: Any) -> None:
    with pytest.raises((ValueError, TypeError), match="session_idle|duration"):
        make_ts(session_idle=value)


def test_monitors_on_session_scores_are_known(make_ts: Any) -> None:
    """A scoring app's monitors may watch session scores: the cheap ones, and the turn-level
    aggregates of its metrics (with the metric's direction)."""
    mons = [{"name": "repeats", "score": "session.repeated_questions", "threshold": 0.2},
            {"name": "worst", "score": "session.m.worst", "threshold": 0.5}]
    make_ts(metrics=[ScriptedMetric(name="m")], monitors=mons, session_idle="5m")
    with pytest.raises(ValueError, match="session.nope"):
        make_ts(metrics=[ScriptedMetric(name="m")], session_idle="5m",
                monitors=[{"name": "x", "score": "session.nope", "threshold": 0.2}])


def test_labels_on_session_scores_in_the_app(make_ts: Any, db_path: Any) -> None:
    ts, _ = make_ts(metrics=[ScriptedMetric(name="m")], session_idle="5m")
    ts.log_record(query="q", answer="a", session_id="s")
    assert ts.flush(20)
    ts.close_sessions(now=later(300))
    trace, span = S.session_record_id("s")
    ts.add_label(trace, "session.m.worst", 0.5, annotator="ann")
    ts.add_label(trace, "session.abandoned", 0, annotator="ann")
    with pytest.raises(ValueError, match="unknown score name"):
        ts.add_label(trace, "session.nope", 1)
    assert ts.flush(20)
    got = rows(str(db_path), "SELECT name, value FROM labels ORDER BY name")
    assert got == [{"name": "session.abandoned", "value": 0.0},
                   {"name": "session.m.worst", "value": 0.5}]


def test_retention_forgets_a_closed_session_with_its_records(db: str) -> None:
    from tracescore.store.retention import Retention, prune

    store = open_store(db)
    try:
        old = time.time() - 40 * 86400
        for i, key in enumerate(["gone", "kept"]):
            t = old if key == "gone" else time.time()
            write(store, RagRecord(trace_id=f"{i + 7:032x}", span_id=f"{i + 7:016x}",
                                   query="q", answer="a", session_id=key,
                                   end_time_ns=int(t * 1e9)))
        assert sorted(close_due(store, IDLE, now=later()).closed) == ["gone", "kept"]
        # (its turn was written 40 days ago: as the writer would have noted it then)
        execute(db, f"UPDATE sessions SET touched_at = {old} WHERE session_id = 'gone'")
        res = prune(store, Retention.resolve("30d"))
        assert res.records == 2 and res.sessions == 1  # its turn and its own record
    finally:
        store.close()
    assert [r["session_id"] for r in rows(db, "SELECT session_id FROM sessions")] == ["kept"]
