"""Monitor states, history, the evaluator lease and the outbox — on real SQLite files and a
real PostgreSQL database (the ``db`` fixture runs each test on both)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest

from tracescore.monitor import state as S
from tracescore.stats import Estimate
from tracescore.store import open_store


@pytest.fixture
def stores(db: str) -> Iterator[Any]:
    """Open stores on ``db`` (one per "process"), monitor tables ensured; closed after."""
    opened: list[Any] = []

    def make() -> Any:
        s = open_store(db)
        S.ensure_tables(s)
        opened.append(s)
        return s

    yield make
    for s in opened:
        s.close()


def _save(store: Any, monitor: str, state: str, *, owner: str = "a", at: float = 100.0,
          notify: list[S.OutboxItem] | None = None, now: float | None = None,
          **kw: Any) -> bool:
    figures: dict[str, Any] = dict(value=0.7, lo=0.6, hi=0.8, n=120)
    figures.update({k: kw.pop(k) for k in list(figures) if k in kw})
    args: dict[str, Any] = dict(detail={"why": "test"}, test_state={"log_wealth": [0.5, -1.25]},
                                streak=0, pending=None)
    args.update(kw)
    args["estimate"] = Estimate(figures["n"], figures["value"], figures["lo"], figures["hi"], "t")
    return S.save_evaluation(store, monitor, owner=owner, state=state, notify=notify, at=at,
                             now=at if now is None else now, **args)


def _item(channel: str = "ops", n: int = 0) -> S.OutboxItem:
    return S.OutboxItem(channel, "webhook", {"n": n})


def test_tables_are_created_once_and_named_the_same_on_both_backends(stores: Any) -> None:
    s = stores()
    S.ensure_tables(s)  # idempotent
    for table in ("monitor_state", "monitor_history", "monitor_lease", "monitor_outbox"):
        s.conn.execute(f"SELECT * FROM {table} WHERE 1 = 0")
    assert S.ddl("sqlite") != S.ddl("postgres")
    assert all("IF NOT EXISTS" in stmt for stmt in S.DDL["postgres"])
    with pytest.raises(ValueError, match="unknown dialect"):
        S.ddl("mysql")


def test_one_lease_holder_it_expires_and_the_holder_renews(stores: Any) -> None:
    a, b = stores(), stores()  # two connections: two evaluators
    assert S.acquire_lease(a, "monitors", "A", 10, now=100)
    assert not S.acquire_lease(b, "monitors", "B", 10, now=105)
    assert S.acquire_lease(a, "monitors", "A", 10, now=108)  # renewed until 118
    assert S.lease_holder(b, "monitors") == ("A", 118)
    assert not S.acquire_lease(b, "monitors", "B", 10, now=117.9)
    assert S.acquire_lease(b, "monitors", "B", 10, now=118.5)  # expired: B takes it
    assert not S.acquire_lease(a, "monitors", "A", 10, now=119)
    assert not S.release_lease(a, "monitors", "A")  # not A's to give back
    assert S.release_lease(b, "monitors", "B")
    assert S.lease_holder(a, "monitors") is None
    assert S.acquire_lease(a, "monitors", "A", 10, now=120)
    # another lease name is another lease
    assert S.acquire_lease(b, "other", "B", 10, now=120)
    # the default clock (the database's on PostgreSQL)
    assert S.acquire_lease(a, "live", "A", 30)
    assert not S.acquire_lease(b, "live", "B", 30)
    with pytest.raises(ValueError, match="ttl_s"):
        S.acquire_lease(a, "live", "A", 0)


def _in_thread(db: str, fn: Any) -> Any:
    """Run ``fn(store)`` on a store this thread opens and closes (stores are per thread)."""
    s = open_store(db)
    try:
        S.ensure_tables(s)
        return fn(s)
    finally:
        s.close()


def test_racing_evaluators_one_wins_each_round(db: str, stores: Any) -> None:
    """Threads with their own connections race for fresh leases: one winner per round
    (PostgreSQL: the upsert's row lock; SQLite: the write transaction)."""
    s = stores()  # the schema first: racing here is about the lease, not about migrating
    workers = 4
    rounds = 15
    wins: list[list[str]] = [[] for _ in range(rounds)]
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def race(i: int, store: Any) -> None:
        for r in range(rounds):
            barrier.wait(timeout=30)
            if S.acquire_lease(store, f"race-{r}", f"w{i}", 60):
                wins[r].append(f"w{i}")

    def run(i: int) -> None:
        try:
            _in_thread(db, lambda store: race(i, store))
        except BaseException as exc:  # reported below, not lost in the thread
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    assert [len(w) for w in wins] == [1] * rounds
    for r, [winner] in enumerate(wins):
        assert S.lease_holder(s, f"race-{r}")[0] == winner  # type: ignore[index]


def test_history_and_outbox_only_on_a_change(stores: Any) -> None:
    s = stores()
    assert S.acquire_lease(s, S.DEFAULT_LEASE, "a", 1000, now=0)
    # a monitor's first state is a change (from nothing)
    assert _save(s, "m", "OK", at=100)
    [first] = S.history(s, "m")
    assert (first.state, first.previous, first.at, first.n) == ("OK", None, 100, 120)
    # unchanged: state row updated, no history, no notification (even if offered)
    assert _save(s, "m", "OK", at=110, value=0.75, streak=1, pending="ALERT",
                 notify=[_item()])
    st = S.load_states(s)["m"]
    assert (st.state, st.since, st.checked_at, st.value, st.streak, st.pending) == (
        "OK", 100, 110, 0.75, 1, "ALERT")
    assert len(S.history(s, "m")) == 1
    assert S.outbox_counts(s) == {"pending": 0, "sent": 0, "failed": 0}
    # a change: one history row, one outbox row per item, notified_at set
    assert _save(s, "m", "ALERT", at=120, value=0.61,
                 notify=[_item("ops", 1), S.OutboxItem("chat", "slack", {"text": "x"})])
    st = S.load_states(s)["m"]
    assert (st.state, st.since, st.notified_at, st.streak, st.pending) == (
        "ALERT", 120, 120, 0, None)
    assert st.detail == {"why": "test"} and st.test_state == {"log_wealth": [0.5, -1.25]}
    newest = S.history(s, "m")[0]
    assert (newest.state, newest.previous, newest.value) == ("ALERT", "OK", 0.61)
    rows = sorted(S.outbox_rows(s), key=lambda r: r.channel)
    assert [(r.monitor, r.channel, r.url_ref, r.kind, r.status, r.next_at, r.attempts)
            for r in rows] == [("m", "chat", "chat", "slack", "pending", 120, 0),
                               ("m", "ops", "ops", "webhook", "pending", 120, 0)]
    assert rows[1].payload == {"n": 1}
    # still ALERT: nothing queued; unless the renotify interval passed
    assert _save(s, "m", "ALERT", at=130, notify=[_item("ops", 2)])
    assert S.outbox_counts(s)["pending"] == 2
    assert S.load_states(s)["m"].notified_at == 120
    assert _save(s, "m", "ALERT", at=140, notify=[_item("ops", 3)], renotify=True)
    assert S.outbox_counts(s)["pending"] == 3
    assert S.load_states(s)["m"].notified_at == 140
    assert len(S.history(s, "m")) == 2
    # history filters: by monitor, since, limit; newest first
    assert _save(s, "other", "NO_DATA", at=150, value=None, lo=None, hi=None, n=0)
    assert [h.monitor for h in S.history(s)] == ["other", "m", "m"]
    assert [h.at for h in S.history(s, since=120)] == [150, 120]
    assert len(S.history(s, limit=1)) == 1
    other = S.load_states(s)["other"]
    assert (other.value, other.n, other.state) == (None, 0, "NO_DATA")
    S.mark_notified(s, "other", 155)
    assert S.load_states(s)["other"].notified_at == 155


def test_a_lost_lease_writes_nothing(stores: Any) -> None:
    a, b = stores(), stores()
    assert S.acquire_lease(a, S.DEFAULT_LEASE, "A", 10, now=100)
    assert _save(a, "m", "OK", owner="A", at=101)
    # A's lease ran out (it stalled): its evaluation is dropped, whole
    assert not _save(a, "m", "ALERT", owner="A", at=111, notify=[_item()])
    # B took over; A, still running, must not write either
    assert S.acquire_lease(b, S.DEFAULT_LEASE, "B", 10, now=112)
    assert not _save(a, "m", "ALERT", owner="A", at=113, notify=[_item()])
    assert not _save(b, "m", "ALERT", owner="nobody", at=113, notify=[_item()])
    assert S.load_states(b)["m"].state == "OK"
    assert len(S.history(b)) == 1
    assert S.outbox_counts(b)["pending"] == 0
    assert _save(b, "m", "ALERT", owner="B", at=114, notify=[_item()])
    assert S.outbox_counts(a)["pending"] == 1


def test_bad_input_is_refused(stores: Any) -> None:
    s = stores()
    assert S.acquire_lease(s, S.DEFAULT_LEASE, "a", 1000, now=0)
    with pytest.raises(ValueError, match="state must be one of"):
        _save(s, "m", "BROKEN")
    with pytest.raises(ValueError, match="pending must be one of"):
        _save(s, "m", "OK", pending="SOON")
    with pytest.raises(ValueError, match="not its URL"):
        S.OutboxItem("https://hooks.slack.com/services/x", "slack", {})
    with pytest.raises(TypeError, match="OutboxItem"):
        _save(s, "m", "OK", notify=[{"channel": "ops"}])  # type: ignore[list-item]
    # NaN is stored as NULL on both engines; infinities and NaN in JSON as strings
    assert _save(s, "m", "OK", value=float("nan"), detail={"x": float("inf")})
    st = S.load_states(s)["m"]
    assert st.value is None and st.detail == {"x": "inf"}


def test_outbox_claims_retries_and_outcomes(stores: Any) -> None:
    a, b = stores(), stores()
    assert S.acquire_lease(a, S.DEFAULT_LEASE, "ev", 10_000, now=0)
    assert _save(a, "m1", "ALERT", owner="ev", at=100, notify=[_item("ops", 1)])
    assert _save(a, "m2", "ALERT", owner="ev", at=105, notify=[_item("chat", 2)])
    assert S.next_due(a) == 100
    assert S.due_outbox(a, 99, 10) == []  # not due yet
    # only the channels a deliverer knows
    assert S.due_outbox(a, 200, 10, channels=[]) == []
    [r1] = S.due_outbox(a, 200, 10, channels=["ops"], owner="n1", claim_s=60)
    assert (r1.monitor, r1.attempts, r1.payload) == ("m1", 1, {"n": 1})
    # claimed: another deliverer skips it; the claim's end is when it is due again
    assert S.due_outbox(b, 201, 10, channels=["ops"], owner="n2") == []
    assert S.next_due(b, ["ops"]) == 260
    # n1 stalled past its claim: n2 takes the row over; n1 can no longer finish it
    [again] = S.due_outbox(b, 261, 10, channels=["ops"], owner="n2")
    assert (again.id, again.attempts) == (r1.id, 2)
    assert not S.outbox_sent(a, r1.id, owner="n1")
    assert S.outbox_retry(b, r1.id, "channel ops: HTTP 503", 300, owner="n2")
    [row] = S.outbox_rows(b, monitor="m1")
    assert (row.status, row.next_at, row.last_error) == ("pending", 300, "channel ops: HTTP 503")
    [r1] = S.due_outbox(a, 300, 10, channels=["ops"], owner="n1")
    assert r1.attempts == 3
    assert S.outbox_sent(a, r1.id, owner="n1", at=301)
    assert not S.outbox_sent(a, r1.id, owner="n1")  # once
    [r2] = S.due_outbox(b, 400, 10, owner="n2")
    assert S.outbox_failed(b, r2.id, "channel chat: HTTP 400 'invalid_payload'", owner="n2")
    assert S.outbox_counts(a) == {"pending": 0, "sent": 1, "failed": 1}
    assert S.next_due(a) is None
    sent = S.outbox_rows(a, status="sent")[0]
    assert (sent.sent_at, sent.last_error, sent.attempts) == (301, None, 3)
    assert S.outbox_rows(a, status="failed")[0].last_error.startswith("channel chat: HTTP 400")


def test_concurrent_claims_are_disjoint(db: str, stores: Any) -> None:
    """Deliverers on their own connections claiming at once never get the same row."""
    s = stores()
    assert S.acquire_lease(s, S.DEFAULT_LEASE, "ev", 10_000, now=0)
    total = 40
    for i in range(total):
        assert _save(s, f"m{i}", "ALERT", owner="ev", at=100, notify=[_item("ops", i)])
    workers = 3
    got: list[list[int]] = [[] for _ in range(workers)]
    barrier = threading.Barrier(workers)
    errors: list[BaseException] = []

    def drain(i: int, store: Any) -> None:
        barrier.wait(timeout=30)
        while rows := S.due_outbox(store, 200, 3, owner=f"n{i}", claim_s=600):
            for r in rows:
                got[i].append(r.payload["n"])
                assert S.outbox_sent(store, r.id, owner=f"n{i}", at=201)

    def run(i: int) -> None:
        try:
            _in_thread(db, lambda store: drain(i, store))
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    every = [n for g in got for n in g]
    assert sorted(every) == list(range(total))  # each row once
    assert S.outbox_counts(s) == {"pending": 0, "sent": total, "failed": 0}
