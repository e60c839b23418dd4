"""Webhook delivery against hostile receivers on 127.0.0.1: one that drips its answer a
byte at a time (one deadline per delivery; other channels do not wait for it), and URLs with
``user:password@`` (sent as Basic auth; the password never in an error, the outbox or a log)."""

from __future__ import annotations

import base64
import json
import logging
import socket
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from test_monitor_notify import Ceiling, Chan, Receiver, change, event, receivers, store

from tracescore.monitor import notify as N
from tracescore.monitor import state as S

__all__ = ["receivers", "store"]  # (fixtures, imported to be found)


class Drip:
    """A receiver that reads the request, then answers one byte every ``every_s`` seconds,
    for at most ``for_s`` seconds (a status line that never ends). Records when each
    connection ended and why."""

    def __init__(self, every_s: float = 0.2, for_s: float = 30.0) -> None:
        self.every_s, self.for_s = every_s, for_s
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.started = threading.Event()
        self.ended: list[tuple[float, str]] = []  # (monotonic time, "client closed" | "done")
        self.cond = threading.Condition()
        self._stop = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hook"

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            threading.Thread(target=self._drip, args=(conn,), daemon=True).start()

    def _drip(self, conn: socket.socket) -> None:
        with conn:
            data = b""
            while b"\r\n\r\n" not in data:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                data += chunk
            head, _, body = data.partition(b"\r\n\r\n")
            length = next((int(line.split(b":", 1)[1]) for line in head.split(b"\r\n")
                           if line.lower().startswith(b"content-length:")), 0)
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                body += chunk
            self.started.set()
            answer = (b"HTTP/1.1 200 OK\r\n" + b"X-Pad: " + b"." * 10_000)
            end = time.monotonic() + self.for_s
            why = "done"
            for b in answer:
                if time.monotonic() > end or self._stop.is_set():
                    break
                try:
                    conn.sendall(bytes([b]))
                except OSError:
                    why = "client closed"
                    break
                # a closed peer shows as EOF on our side: check between bytes
                conn.settimeout(self.every_s)
                try:
                    if conn.recv(1) == b"":
                        why = "client closed"
                        break
                except TimeoutError:
                    pass
            with self.cond:
                self.ended.append((time.monotonic(), why))
                self.cond.notify_all()

    def wait_ended(self, timeout: float = 60.0) -> tuple[float, str]:
        with self.cond:
            assert self.cond.wait_for(lambda: self.ended, timeout)
            return self.ended[0]

    def close(self) -> None:
        self._stop.set()
        self.sock.close()


@pytest.fixture
def drip() -> Iterator[Callable[..., Drip]]:
    made: list[Drip] = []

    def make(**kw: Any) -> Drip:
        d = Drip(**kw)
        made.append(d)
        return d

    yield make
    for d in made:
        d.close()


def test_a_dripping_receiver_is_cut_off_at_the_channel_timeout(drip: Callable[..., Drip]
                                                               ) -> None:
    """One deadline for the whole delivery: before, each byte restarted urllib's per-read
    timeout, and the drip held the POST for as long as it lasted (here 30 s)."""
    d = drip(every_s=0.2, for_s=30.0)
    t0 = time.monotonic()
    with pytest.raises(N.DeliveryError, match=r"^channel slow: timed out \(no complete "
                                              r"answer within 1 s\)$") as info:
        N.deliver(d.url(), {"a": 1}, timeout_s=1.0, channel="slow")
    assert not info.value.permanent
    when, why = d.wait_ended()
    # the receiver saw the client go while it still had most of its 30 s to drip
    assert why == "client closed" and when - t0 < 20.0


def test_a_slow_channel_does_not_hold_up_the_others(
        store: Any, drip: Callable[..., Drip], receivers: Callable[..., Receiver]) -> None:
    """``check``'s pass: the healthy channel gets its POST while the slow one is still being
    dripped (before: after it, as the channels were delivered one after another); the slow
    one is retried later with a 'timed out' error."""
    d = drip(every_s=0.2, for_s=15.0)
    ok = receivers()
    # the slow channel's row first, so a one-after-another pass would reach it first
    slow_ch, ok_ch = Chan("a-slow", "webhook", d.url(), timeout_s=3.0), \
        Chan("b-ok", "webhook", ok.url())
    change(store, event(), [slow_ch, ok_ch], at=1000.0)
    got_at: list[float] = []

    def watch() -> None:
        ok.wait_for(1, timeout=60)
        got_at.append(time.monotonic())

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    sent = N.deliver_due(store, [slow_ch, ok_ch], now=1000.0, base_s=1.0, rng=Ceiling())
    watcher.join(60)
    assert sent == 1
    assert d.started.is_set()
    slow_end, why = d.wait_ended()
    assert got_at and got_at[0] < slow_end, "the healthy channel waited for the slow one"
    assert why == "client closed"
    rows = {r.channel: r for r in S.outbox_rows(store)}
    assert rows["b-ok"].status == "sent"
    assert rows["a-slow"].status == "pending"
    assert rows["a-slow"].last_error == ("channel a-slow: timed out (no complete answer "
                                         "within 3 s)")


def test_many_channels_are_delivered_at_once_but_bounded(
        store: Any, receivers: Callable[..., Receiver]) -> None:
    """Every receiver holds its answer until all have a request in flight: only a pass that
    delivers the channels side by side gets them all (bounded by MAX_PARALLEL)."""
    n = N.MAX_PARALLEL
    hold = threading.Event()
    rs = [receivers(hold=hold) for _ in range(n)]
    chans = [Chan(f"c{i}", "webhook", r.url(), timeout_s=30.0) for i, r in enumerate(rs)]
    change(store, event(), chans, at=1000.0)

    def release() -> None:
        for r in rs:
            r.wait_for(1, timeout=60)
        hold.set()

    t = threading.Thread(target=release, daemon=True)
    t.start()
    try:
        assert N.deliver_due(store, chans, now=1000.0) == n
    finally:
        hold.set()
    t.join(10)
    assert S.outbox_counts(store)["sent"] == n


# -- user:password@ --------------------------------------------------------------------------
PASSWORD = "hunter2-Pa55word"


def test_userinfo_without_a_port_never_shows_the_password(
        store: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Before: urllib read ``hunter2-Pa55word@127.0.0.1`` as a port and said so, password
    and all, in the error stored in the outbox and printed by ``check``."""
    caplog.set_level(logging.DEBUG)
    with socket.socket() as s:  # a port nothing listens on: connection refused
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    for url in (f"http://alice:{PASSWORD}@127.0.0.1/hook",
                f"http://alice:{PASSWORD}@127.0.0.1:{port}/hook"):
        with pytest.raises(N.DeliveryError) as info:
            N.deliver(url, {"a": 1}, timeout_s=2.0, channel="ops")
        assert PASSWORD not in str(info.value) and "alice" not in str(info.value)
    ch = Chan("ops", "webhook", f"http://alice:{PASSWORD}@127.0.0.1/hook", timeout_s=2.0)
    change(store, event(), [ch], at=1000.0)
    N.deliver_due(store, [ch], now=1000.0, base_s=1.0, rng=Ceiling())
    (row,) = S.outbox_rows(store)
    assert row.status == "pending" and row.last_error.startswith("channel ops: ")
    for table in ("monitor_outbox", "counters"):
        for values in store.conn.execute(f"SELECT * FROM {table}").fetchall():
            assert PASSWORD not in json.dumps([str(v) for v in values])
    logged = [rec.getMessage() + (rec.exc_text or "") for rec in caplog.records]
    assert not [line for line in logged if PASSWORD in line]


def test_userinfo_is_sent_as_basic_auth(receivers: Callable[..., Receiver]) -> None:
    r = receivers()
    N.deliver(f"http://alice:{PASSWORD.replace('-', '%2D')}@127.0.0.1:{r.port}/hook",
              {"a": 1}, timeout_s=5.0, channel="ops")
    (got,) = r.wait_for(1)
    auth = got["headers"]["Authorization"]
    assert auth == "Basic " + base64.b64encode(f"alice:{PASSWORD}".encode()).decode()
    assert got["path"] == "/hook"


def test_an_error_page_that_echoes_the_userinfo_is_scrubbed(
        receivers: Callable[..., Receiver]) -> None:
    r = receivers(script=[(500, {}, f"bad login alice:{PASSWORD}")])
    with pytest.raises(N.DeliveryError) as info:
        N.deliver(f"http://alice:{PASSWORD}@127.0.0.1:{r.port}/hook", {"a": 1},
                  timeout_s=5.0, channel="ops")
    assert info.value.reason.startswith("channel ops: HTTP 500")
    assert PASSWORD not in info.value.reason
