"""When the writer waits for more records before a transaction (``RecordQueue.linger_s``): a
lone request is written at once; a burst after a quiet spell lingers from its second record
on, not only once the records' mean gap has come down (issue 19)."""

from __future__ import annotations

import time
from typing import Any

import pytest
from helpers import wait_for

from tracescore.store.sqlite import Store
from tracescore.testing import ScriptedMetric

#: long enough that a writer which lingers cannot be mistaken for a slow one under load (its
#: threshold, LINGER_S / 4, stays under the 1 s a gap is capped at)
LINGER_S = 3.0


@pytest.fixture
def batches(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of records of each ``write_batch`` (SQLite), in order."""
    seen: list[int] = []
    real = Store.write_batch

    def write_batch(self: Store, records: Any, *args: Any, **kwargs: Any) -> Any:
        seen.append(len(records))
        return real(self, records, *args, **kwargs)

    monkeypatch.setattr(Store, "write_batch", write_batch)
    return seen


def _quiet(ts: Any) -> Any:
    """``ts``'s queue after a long quiet spell: mean gap far above the linger threshold, the
    last record long ago."""
    q = ts.queue
    q.linger_s = LINGER_S
    q._gap = 1000.0
    q._last_put = time.monotonic() - 100.0
    return q


def test_a_lone_request_after_a_quiet_spell_does_not_linger(make_ts: Any) -> None:
    """The writer decides when it wakes (``_busy``): after a lone request, not busy."""
    ts, _ = make_ts(metrics=[ScriptedMetric(lambda r: 0.5, name="m")])
    q = _quiet(ts)
    ts.log_record(query="q", answer="a")
    assert not q._busy()
    ts.log_record(query="q2", answer="a2")  # a second one right after it: busy
    assert q._busy()


def test_a_burst_after_a_quiet_spell_lingers_from_its_second_record(make_ts: Any,
                                                                    batches: list[int]) -> None:
    ts, _ = make_ts(metrics=[ScriptedMetric(lambda r: 0.5, name="m")])
    ts.log_record(query="warm", answer="up")
    assert ts.flush(20)
    q = _quiet(ts)
    before = q.written
    ts.log_record(query="q0", answer="a0")  # the burst's first: written at once
    wait_for(lambda: q.written == before + 1, 20, "the burst's first record written")
    del batches[:]
    q._last_put = time.monotonic()  # (as if q0 had come just now, however long it took)
    ts.log_record(query="q1", answer="a1")  # the second, right after: the writer lingers,
    assert q._gap * 4 > q.linger_s  # (though the mean gap alone says "quiet")
    time.sleep(0.3)  # (a writer that did not linger writes it within this; see below)
    assert q.written == before + 1 and batches == []
    for i in range(2, 8):
        ts.log_record(query=f"q{i}", answer=f"a{i}")
    assert ts.flush(20)  # a flush cuts the lingering short
    assert q.written == before + 8
    assert batches == [7]  # the burst's other records: one transaction


def test_the_busy_rule(make_ts: Any) -> None:
    """The rule itself: busy by the mean gap, or by the last one; quiet only when both are
    at or above ``linger_s / 4``."""
    ts, _ = make_ts(metrics=[ScriptedMetric(lambda r: 0.5, name="m")])
    q = ts.queue
    q.linger_s = 0.04
    for mean, last, busy in ((1.0, 1.0, False), (1.0, 0.001, True), (0.001, 1.0, True),
                             (0.001, 0.001, True), (0.01, 0.01, False)):
        q._gap, q._last_gap = mean, last
        assert q._busy() is busy, (mean, last)


def test_records_that_come_in_during_a_write_linger_with_the_next_ones(
        make_ts: Any, batches: list[int], monkeypatch: pytest.MonkeyPatch) -> None:
    """A busy stream's records that arrive while a batch is being written are not a
    transaction of their own right after it: they wait for the next wake and linger."""
    import threading

    ts, _ = make_ts(metrics=[ScriptedMetric(lambda r: 0.5, name="m")])
    ts.log_record(query="warm", answer="up")
    assert ts.flush(20)
    q = ts.queue
    inside, go = threading.Event(), threading.Event()
    del batches[:]
    real = Store.write_batch  # (the fixture's: it counts each batch's records first)

    def write_batch(self: Store, records: Any, *args: Any, **kwargs: Any) -> Any:
        if not batches:  # the first batch: held until the records after it are in
            inside.set()
            go.wait(20)
        return real(self, records, *args, **kwargs)

    monkeypatch.setattr(Store, "write_batch", write_batch)
    q.linger_s = 0.0  # the first record: written at once
    ts.log_record(query="q0", answer="a0")
    assert inside.wait(20)
    for i in (1, 2):  # they come in while q0's batch is being written
        ts.log_record(query=f"q{i}", answer=f"a{i}")
    q.linger_s = LINGER_S
    q._gap = q._last_gap = 0.001  # a busy stream
    go.set()
    wait_for(lambda: q.written >= 2, 20, "q0 written")  # (after the warm-up record)
    time.sleep(0.3)  # (a writer that did not wait writes them within this)
    assert batches == [1] and q.written == 1 + 1  # (the warm-up record, q0)
    assert ts.flush(20)  # a flush cuts the lingering short
    assert batches == [1, 2]
