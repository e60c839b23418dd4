"""Alert delivery against real HTTP servers on 127.0.0.1, on real SQLite files and a real
PostgreSQL database: payloads, once-per-change delivery, outages with backoff, permanent
failures, Retry-After, the URL kept secret, several deliverers on one database, OTel."""

from __future__ import annotations

import json
import logging
import random
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tracescore.monitor import notify as N
from tracescore.monitor import state as S
from tracescore.stats import Estimate
from tracescore.store import open_store

# -- a real webhook receiver -----------------------------------------------------------------


class Receiver:
    """An HTTP server on 127.0.0.1 in a thread. Answers POSTs from a script of (status,
    headers, body) — 200 once the script runs out — and keeps every request it got."""

    def __init__(self, port: int = 0, script: list[tuple[int, dict[str, str], str]] | None = None,
                 echo_path: bool = False, hold: threading.Event | None = None) -> None:
        self.script = deque(script or [])
        self.hold = hold  # set: answers wait for it (a slow receiver)
        self.got: list[dict[str, Any]] = []
        self.cond = threading.Condition()
        self.echo_path = echo_path
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.cond:
                    status, headers, text = (receiver.script.popleft() if receiver.script
                                             else (200, {}, "ok"))
                    receiver.got.append({"path": self.path, "headers": dict(self.headers),
                                         "body": json.loads(body), "status": status})
                    receiver.cond.notify_all()
                if receiver.hold is not None:
                    receiver.hold.wait(30)
                if receiver.echo_path:  # a hostile receiver: its error page shows the URL
                    text = f"{text} at http://127.0.0.1{self.path}"
                data = text.encode()
                self.send_response(status)
                for k, v in headers.items():
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        ThreadingHTTPServer.allow_reuse_address = True
        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,),
                                       daemon=True)
        self.thread.start()

    def url(self, path: str = "/hook") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def requests(self, path: str | None = None) -> list[dict[str, Any]]:
        with self.cond:
            return [r for r in self.got if path is None or r["path"] == path]

    def wait_for(self, n: int, timeout: float = 30.0) -> list[dict[str, Any]]:
        with self.cond:
            assert self.cond.wait_for(lambda: len(self.got) >= n, timeout), (
                f"got {len(self.got)} of {n} requests")
            return list(self.got)

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def receivers() -> Iterator[Callable[..., Receiver]]:
    made: list[Receiver] = []

    def make(**kw: Any) -> Receiver:
        r = Receiver(**kw)
        made.append(r)
        return r

    yield make
    for r in made:
        r.stop()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Chan:
    """A channel as the config helper builds it (``.name .kind .url .headers .timeout_s``)."""

    name: str
    kind: str
    url: str
    headers: dict[str, str] | None = None
    timeout_s: float = 5.0


class Ceiling(random.Random):
    """Full jitter at its ceiling: backoffs of exactly base·2^(attempt-1), for exact times."""

    def uniform(self, a: float, b: float) -> float:
        return b


def wait_until(pred: Callable[[], Any], timeout: float = 30.0, what: str = "") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        assert time.monotonic() < deadline, f"timed out waiting for {what or pred}"
        time.sleep(0.01)


@pytest.fixture
def store(db: str) -> Iterator[Any]:
    s = open_store(db)
    S.ensure_tables(s)
    assert S.acquire_lease(s, S.DEFAULT_LEASE, "ev", 1e9, now=0)
    yield s
    s.close()


def event(state: str = "ALERT", previous: str | None = "OK", **kw: Any) -> N.AlertEvent:
    args: dict[str, Any] = dict(
        monitor="faithfulness-prod", state=state, previous=previous, score="faithfulness",
        statistic="mean", window_s=3600,
        estimate=Estimate(240, 0.712, 0.66, 0.76, "betting confidence sequence"),
        condition="mean below 0.80", verdict="the interval lies below 0.80",
        command="tracescore check --monitor "
        "faithfulness-prod", db="/srv/app/ts.db", at=1_700_000_000.0,
        where={"environment": "prod"}, worst_trace_ids=["a1" * 16, "b2" * 16])
    args.update(kw)
    return N.AlertEvent(**args)


def change(store: Any, ev: N.AlertEvent, channels: list[Any], at: float | None = None) -> None:
    """What the evaluator does on a state change: the state, its history, its outbox rows."""
    assert S.save_evaluation(
        store, ev.monitor, owner="ev", state=ev.state, estimate=ev.estimate, detail={}, test_state=None, streak=0, pending=None,
        notify=N.outbox_items(ev, channels), at=ev.at if at is None else at, now=1)


# -- payloads --------------------------------------------------------------------------------
def test_webhook_payload_has_stable_documented_keys() -> None:
    p = N.webhook_payload(event())
    assert set(p) == {"version", "type", "monitor", "state", "previous", "at", "time", "score",
                      "statistic", "window_s", "where", "estimate", "condition", "verdict",
                      "worst_trace_ids", "command", "db", "text"}
    assert p["version"] == 1 and p["type"] == "tracescore.monitor.state_change"
    assert p["estimate"] == {"value": 0.712, "lo": 0.66, "hi": 0.76, "n": 240,
                             "method": "betting confidence sequence"}
    assert p["time"] == "2023-11-14T22:13:20Z" and p["where"] == {"environment": "prod"}
    assert p["worst_trace_ids"] == ["a1" * 16, "b2" * 16]
    # no data: numbers are null, never NaN (which is not JSON)
    p = N.webhook_payload(event("NO_DATA", estimate=Estimate(0, float("nan"), None, float("inf"),
                                                        "betting confidence sequence")))
    json.dumps(p, allow_nan=False)
    assert p["estimate"]["value"] is None and p["estimate"]["hi"] is None
    assert p["previous"] == "OK"
    assert N.webhook_payload(event(previous=None))["previous"] is None


def test_slack_payload_shape() -> None:
    p = N.slack_payload(event(condition="mean < 0.80 & falling"))
    assert set(p) == {"text", "blocks"}
    assert p["text"].startswith("[ALERT] monitor faithfulness-prod: faithfulness mean 0.712")
    assert all(b["type"] in ("section", "context") for b in p["blocks"])
    texts = json.dumps(p["blocks"])
    for part in ("*ALERT*", "(was OK)", "faithfulness (mean)", "last 1h where environment=prod",
                 "0.712 [0.66, 0.76] (n=240), betting confidence sequence",
                 "the interval lies below 0.80", "a1" * 16, "b2" * 16,
                 "`tracescore check --monitor faithfulness-prod`", "/srv/app/ts.db",
                 "mean &lt; 0.80 &amp; falling"):  # mrkdwn escapes & < >
        assert part in texts, part
    fields = p["blocks"][1]["fields"]
    assert [f["text"].split("\n")[0] for f in fields] == [
        "*Score*", "*Window*", "*Estimate*", "*Condition*", "*Verdict*"]
    # many trace ids: a few shown, the rest counted
    many = N.slack_payload(event(worst_trace_ids=[f"t{i}" for i in range(9)]))
    assert "and 4 more" in json.dumps(many)
    assert N.payload_for("slack", event()) == N.slack_payload(event())
    with pytest.raises(ValueError, match="unknown channel kind"):
        N.payload_for("pagerduty", event())
    with pytest.raises(ValueError, match="state must be one of"):
        event("RED")


# -- one delivery ----------------------------------------------------------------------------
def test_deliver_raises_by_kind(receivers: Callable[..., Receiver]) -> None:
    r = receivers(script=[(503, {}, "down"), (429, {"Retry-After": "7"}, "slow down"),
                          (400, {}, "invalid_payload"), (302, {"Location": "/x"}, ""),
                          (500, {"Retry-After": "Wed, 21 Oct 2015 07:28:00 GMT"}, "")])

    def fails() -> N.DeliveryError:
        with pytest.raises(N.DeliveryError) as info:
            N.deliver(r.url(), {"a": 1}, channel="ops", timeout_s=5)
        return info.value

    e = fails()
    assert (e.permanent, e.retry_after) == (False, None)
    assert str(e) == "channel ops: HTTP 503 'down'"
    e = fails()
    assert (e.permanent, e.retry_after) == (False, 7.0)
    e = fails()
    assert e.permanent and "HTTP 400 'invalid_payload'" in str(e)
    e = fails()
    assert e.permanent and "redirect" in str(e)
    e = fails()
    assert not e.permanent and e.retry_after == 0.0  # a date in the past: now
    N.deliver(r.url(), {"b": 2}, channel="ops", headers={"X-Token": "t"})  # 200
    last = r.requests()[-1]
    assert last["body"] == {"b": 2} and last["headers"]["X-Token"] == "t"
    assert last["headers"]["Content-Type"].startswith("application/json")
    # nobody listening: retryable
    with pytest.raises(N.DeliveryError) as info:
        N.deliver(f"http://127.0.0.1:{free_port()}/hook", {}, channel="ops", timeout_s=2)
    assert not info.value.permanent and "connection failed" in str(info.value)
    for bad in ("file:///etc/passwd", "ftp://example.org/x", "not a url"):
        with pytest.raises(N.DeliveryError, match="not an http") as info:
            N.deliver(bad, {}, channel="ops")
        assert info.value.permanent


# -- delivery through the outbox -------------------------------------------------------------
def test_a_webhook_receives_the_alert_once_per_state_change(
        store: Any, db: str, receivers: Callable[..., Receiver]) -> None:
    r = receivers()
    chans = [Chan("ops", "webhook", r.url("/ops"), {"Authorization": "Bearer tok123456"}),
             Chan("chat", "slack", r.url("/slack"))]
    notifier = N.Notifier(db, chans, interval_s=30, base_s=0.01).start()
    try:
        seq = [event("OK", None, at=1000.0), event("ALERT", "OK", at=1060.0),
               event("ALERT", "ALERT", at=1120.0), event("OK", "ALERT", at=1180.0)]
        sent = 0
        for i, ev in enumerate(seq):
            change(store, ev, chans if i else [])  # the first state: no notification
            notifier.wake()
            sent += 2 if i in (1, 3) else 0
            r.wait_for(sent)
            wait_until(lambda: S.outbox_counts(store)["pending"] == 0, what="outbox drained")
    finally:
        assert notifier.stop(10)
    # nothing left to send: another pass sends nothing
    assert N.deliver_due(store, chans) == 0
    assert S.outbox_counts(store) == {"pending": 0, "sent": 4, "failed": 0}
    hooks = r.requests("/ops")
    assert [h["body"] for h in hooks] == [N.webhook_payload(seq[1]), N.webhook_payload(seq[3])]
    assert hooks[0]["headers"]["Authorization"] == "Bearer tok123456"
    assert hooks[0]["headers"]["Idempotency-Key"] != hooks[1]["headers"]["Idempotency-Key"]
    assert [h["body"] for h in r.requests("/slack")] == [
        N.slack_payload(seq[1]), N.slack_payload(seq[3])]
    assert len(r.requests()) == 4
    assert store.counters().get("notify.sent") == 4
    assert [h.state for h in S.history(store)] == ["OK", "ALERT", "OK"]


def test_a_503_outage_is_redelivered_with_backoff_and_counted(
        store: Any, receivers: Callable[..., Receiver]) -> None:
    r = receivers(script=[(503, {}, "maintenance"), (503, {}, "maintenance")])
    chans = {"ops": ("webhook", r.url(), {}, 5.0)}  # the mapping form
    change(store, event(), [Chan("ops", "webhook", r.url())], at=1000.0)
    kw: dict[str, Any] = dict(base_s=2.0, rng=Ceiling())
    assert N.deliver_due(store, chans, now=1000.0, **kw) == 0
    [row] = S.outbox_rows(store)
    assert (row.status, row.attempts, row.next_at) == ("pending", 1, 1002.0)
    assert row.last_error == "channel ops: HTTP 503 'maintenance'"
    assert N.deliver_due(store, chans, now=1001.9, **kw) == 0  # backing off
    assert len(r.requests()) == 1
    assert N.deliver_due(store, chans, now=1002.0, **kw) == 0  # 503 again: 4 s now
    assert S.outbox_rows(store)[0].next_at == 1006.0
    assert N.deliver_due(store, chans, now=1006.0, **kw) == 1  # back: delivered
    got = r.requests()
    assert [g["status"] for g in got] == [503, 503, 200]
    assert got[0]["body"] == got[2]["body"] == N.webhook_payload(event())
    assert len({g["headers"]["Idempotency-Key"] for g in got}) == 1  # one notification
    [row] = S.outbox_rows(store)
    assert (row.status, row.attempts, row.sent_at, row.last_error) == ("sent", 3, 1006.0, None)
    counters = store.counters()
    assert (counters.get("notify.retried"), counters.get("notify.sent"),
            counters.get("notify.failed", 0)) == (2, 1, 0)


def test_a_receiver_down_entirely_then_started_gets_it(
        store: Any, db: str, receivers: Callable[..., Receiver]) -> None:
    """A background notifier keeps retrying a receiver nobody listens on; once it starts,
    the alert arrives, once."""
    port = free_port()
    chans = [Chan("ops", "webhook", f"http://127.0.0.1:{port}/hook", timeout_s=2)]
    notifier = N.Notifier(db, chans, interval_s=30, base_s=0.02, cap_s=0.2).start()
    try:
        change(store, event(), chans, at=time.time())
        notifier.wake()
        wait_until(lambda: store.counters().get("notify.retried", 0) >= 2, what="retries")
        assert S.outbox_counts(store)["pending"] == 1
        r = receivers(port=port)
        [got] = r.wait_for(1)
        assert got["body"] == N.webhook_payload(event())
        wait_until(lambda: S.outbox_counts(store)["sent"] == 1, what="sent")
    finally:
        assert notifier.stop(10)
    assert len(r.requests()) == 1
    [row] = S.outbox_rows(store)
    assert row.attempts >= 3 and row.status == "sent"
    assert store.counters()["notify.sent"] == 1


def test_a_400_fails_at_once_and_is_counted(
        store: Any, receivers: Callable[..., Receiver]) -> None:
    r = receivers(script=[(400, {}, "invalid_payload")])
    chans = [Chan("chat", "slack", r.url())]
    change(store, event(), chans, at=1000.0)
    assert N.deliver_due(store, chans, now=1000.0) == 0
    [row] = S.outbox_rows(store)
    assert (row.status, row.attempts) == ("failed", 1)
    assert row.last_error == "channel chat: HTTP 400 'invalid_payload'"
    assert N.deliver_due(store, chans, now=5000.0) == 0
    assert len(r.requests()) == 1  # never retried
    assert store.counters().get("notify.failed") == 1
    assert "notify.retried" not in store.counters()


def test_out_of_attempts_fails(store: Any, receivers: Callable[..., Receiver]) -> None:
    r = receivers(script=[(500, {}, "")] * 3)
    chans = [Chan("ops", "webhook", r.url())]
    change(store, event(), chans, at=0.0)
    for t in range(3):
        N.deliver_due(store, chans, now=1000.0 * (t + 1), max_attempts=3, base_s=1.0)
    [row] = S.outbox_rows(store)
    assert (row.status, row.attempts) == ("failed", 3)
    assert row.last_error == "channel ops: HTTP 500 (after 3 attempts)"
    c = store.counters()
    assert (c["notify.retried"], c["notify.failed"], c.get("notify.sent", 0)) == (2, 1, 0)


def test_retry_after_is_honoured(store: Any, receivers: Callable[..., Receiver]) -> None:
    r = receivers(script=[(429, {"Retry-After": "30"}, "rate limited")])
    chans = [Chan("ops", "webhook", r.url())]
    change(store, event(), chans, at=1000.0)
    kw: dict[str, Any] = dict(base_s=2.0, rng=Ceiling())  # own backoff: 2 s
    assert N.deliver_due(store, chans, now=1000.0, **kw) == 0
    assert S.outbox_rows(store)[0].next_at == 1030.0
    assert N.deliver_due(store, chans, now=1029.0, **kw) == 0
    assert len(r.requests()) == 1
    assert N.deliver_due(store, chans, now=1030.0, **kw) == 1
    assert [g["status"] for g in r.requests()] == [429, 200]


def test_the_url_is_never_stored_or_logged(
        store: Any, db: str, receivers: Callable[..., Receiver],
        caplog: pytest.LogCaptureFixture) -> None:
    """A Slack URL is a credential: whatever happens, no DB row and no log line holds it —
    even when the receiver's error page echoes it."""
    secret = "/services/T0SECRET1/B0SECRET2/xoxSECRETtoken3"
    flaky = receivers(script=[(503, {}, "unavailable")], echo_path=True)
    refusing = receivers(script=[(404, {}, "no_service")], echo_path=True)
    chans = [Chan("secret-flaky", "slack", flaky.url(secret)),
             Chan("secret-refusing", "slack", refusing.url(secret)),
             Chan("secret-down", "webhook", f"http://127.0.0.1:{free_port()}{secret}",
                  timeout_s=2)]
    caplog.set_level(logging.DEBUG)
    change(store, event(), chans, at=1000.0)
    N.deliver_due(store, chans, now=1000.0, base_s=1.0, rng=Ceiling())
    N.deliver_due(store, chans, now=2000.0, base_s=1.0, rng=Ceiling())
    counts = S.outbox_counts(store)
    assert counts == {"pending": 1, "sent": 1, "failed": 1}  # down / flaky / refusing
    # every row of every table tracescore wrote to
    for table in ("monitor_state", "monitor_history", "monitor_lease", "monitor_outbox",
                  "counters"):
        for row in store.conn.execute(f"SELECT * FROM {table}").fetchall():
            text = json.dumps([str(v) for v in row])
            assert "SECRET" not in text, (table, text)
    errors = {r.channel: r.last_error for r in S.outbox_rows(store)}
    assert errors["secret-refusing"].startswith("channel secret-refusing: HTTP 404")
    assert errors["secret-down"].startswith("channel secret-down: connection failed")
    logged = [rec.getMessage() + (rec.exc_text or "") for rec in caplog.records]
    assert any("secret-refusing" in line for line in logged)  # the channel is named
    assert not [line for line in logged if "SECRET" in line]


def test_two_notifiers_on_one_database_send_each_row_once(
        store: Any, db: str, receivers: Callable[..., Receiver]) -> None:
    """Two notifier threads (own connections; on PostgreSQL as two fleet workers would be)
    share one outbox: every notification arrives exactly once."""
    r = receivers()
    chans = [Chan("ops", "webhook", r.url())]
    total = 30
    for i in range(total):
        change(store, event(monitor=f"m{i:02d}"), chans, at=time.time())
    notifiers = [N.Notifier(db, chans, interval_s=30, batch=3, name=f"n{i}").start()
                 for i in range(2)]
    try:
        for n in notifiers:
            n.wake()
        r.wait_for(total)
        wait_until(lambda: S.outbox_counts(store)["sent"] == total, what="all sent")
    finally:
        for n in notifiers:
            assert n.stop(10)
    monitors = [g["body"]["monitor"] for g in r.requests()]
    assert sorted(monitors) == [f"m{i:02d}" for i in range(total)]
    assert store.counters()["notify.sent"] == total
    assert all(row.attempts == 1 for row in S.outbox_rows(store))


def test_stopping_mid_pass_gives_the_claimed_rows_back(
        store: Any, db: str, receivers: Callable[..., Receiver]) -> None:
    """stop() during a slow POST: that one finishes, the rest of the batch is due again at
    once for the next deliverer (not after the claim runs out)."""
    hold = threading.Event()
    r = receivers(hold=hold)
    chans = [Chan("ops", "webhook", r.url())]
    for i in range(3):
        change(store, event(monitor=f"m{i}"), chans, at=time.time())
    notifier = N.Notifier(db, chans, interval_s=30, batch=3).start()
    try:
        r.wait_for(1)  # the first POST is in flight, held by the receiver
        assert not notifier.stop(timeout=0)  # asks it to stop; does not wait
    finally:
        hold.set()
    assert notifier.stop(10)
    assert len(r.requests()) == 1
    assert S.outbox_counts(store) == {"pending": 2, "sent": 1, "failed": 0}
    rest = S.due_outbox(store, time.time(), 10, owner="next")
    assert len(rest) == 2 and all(row.attempts == 1 for row in rest)


def test_rows_of_unknown_channels_wait(store: Any, receivers: Callable[..., Receiver]) -> None:
    """A deliverer configured without a channel leaves its rows for one that has it."""
    r = receivers()
    change(store, event(), [Chan("elsewhere", "webhook", "http://unused.invalid/")], at=10.0)
    assert N.deliver_due(store, [Chan("ops", "webhook", r.url())], now=20.0) == 0
    assert N.deliver_due(store, [], now=20.0) == 0
    assert S.outbox_counts(store)["pending"] == 1 and not r.requests()


def test_backoff_is_full_jitter_under_a_cap() -> None:
    rng = random.Random(7)
    for attempt in range(1, 20):
        d = N.backoff_s(attempt, base_s=2.0, cap_s=600.0, rng=rng)
        assert 0.0 <= d <= min(600.0, 2.0 * 2 ** (attempt - 1))
    assert N.backoff_s(12, rng=Ceiling()) == 600.0
    assert N.backoff_s(1, rng=Ceiling()) == 2.0


def test_notifier_waits_out_an_unavailable_database(
        tmp_path: Any, caplog: pytest.LogCaptureFixture) -> None:
    """A database that cannot be opened: the thread says so, keeps trying, stops cleanly."""
    missing = tmp_path / "no-such-dir" / "ts.db"
    caplog.set_level(logging.WARNING, logger="tracescore")
    N._last_warn.pop("notifier-db", None)  # the warning is rate-limited per process
    n = N.Notifier(str(missing), [Chan("ops", "webhook", "http://127.0.0.1:9/")],
                   interval_s=0.05).start()
    try:
        wait_until(lambda: any("database is unavailable" in r.getMessage()
                               for r in caplog.records), what="the warning")
        assert n.alive
    finally:
        assert n.stop(10)


# -- OpenTelemetry ---------------------------------------------------------------------------
def test_one_otel_log_record_per_state_change() -> None:
    from opentelemetry._logs import SeverityNumber
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    exporter = InMemoryLogRecordExporter()
    provider = LoggerProvider(shutdown_on_exit=False)
    provider.add_log_record_processor(SimpleLogRecordProcessor(exporter))
    logger = provider.get_logger("tracescore")
    N.emit_state_change(logger, event("ALERT", "OK"))
    N.emit_state_change(logger, event("NO_DATA", "ALERT", estimate=Estimate.missing("betting confidence sequence")))
    N.emit_state_change(None, event())  # no logger: nothing, no error
    alert, no_data = (r.log_record for r in exporter.get_finished_logs())
    assert alert.event_name == no_data.event_name == "tracescore.monitor.state_change"
    assert alert.severity_number == SeverityNumber.WARN
    assert no_data.severity_number == SeverityNumber.INFO
    assert dict(alert.attributes or {}) == {
        "tracescore.monitor.name": "faithfulness-prod", "tracescore.monitor.state": "ALERT",
        "tracescore.monitor.previous": "OK", "tracescore.monitor.score": "faithfulness",
        "tracescore.monitor.value": 0.712, "tracescore.monitor.lo": 0.66,
        "tracescore.monitor.hi": 0.76, "tracescore.monitor.n": 240}
    assert "tracescore.monitor.value" not in dict(no_data.attributes or {})
    assert str(alert.body).startswith("[ALERT] monitor faithfulness-prod")
    assert alert.timestamp == 1_700_000_000 * 10**9
    provider.shutdown()
