"""Issue 11 §4: scores whose span export failed go out again seconds after the backend
returns (a backoff of 1, 2, 4 … s while it stays down), each exactly once."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers import rows

import tracescore
from tracescore import attributes as A
from tracescore.testing import OtlpReceiver, ScriptedMetric

pytestmark = pytest.mark.integration


@pytest.fixture
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver("http/protobuf") as rx:
        yield rx


def test_failed_exports_are_resent_seconds_after_the_backend_returns(
        receiver: OtlpReceiver, monkeypatch: pytest.MonkeyPatch, db_path: Path) -> None:
    for k, v in receiver.env().items():
        monkeypatch.setenv(k, v)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "1")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "100")
    ts = tracescore.init(db=db_path, exporter="otlp",
                         metrics=[ScriptedMetric(lambda r: 0.5, name="m")])
    try:
        receiver.down = True
        n = 20
        for i in range(n):
            ts.log_record(query=f"q{i}", answer="a")  # scores go out on carrier spans
        deadline = time.monotonic() + 30
        while ts.stats()["scores_export_failed"] < n:
            assert time.monotonic() < deadline, ts.stats()
            time.sleep(0.05)
        time.sleep(2.5)  # down for a while: the sweeps back off (1 s, 2 s) and fail again
        receiver.down = False
        up = time.monotonic()
        while rows(db_path, "SELECT count(*) AS n FROM scores WHERE delivery IS NULL")[0]["n"]:
            assert time.monotonic() - up < 20, "scores were not sent again within seconds"
            time.sleep(0.05)
        took = time.monotonic() - up
        assert took < 10.0, took  # was 200-285 s (a fixed 120 s sweep)
        assert ts.flush(10)
    finally:
        ts.shutdown(10)
    got = Counter(s.attributes.get(A.SCORED_SPAN_ID) for s in receiver.spans()
                  if s.attributes.get(A.SPAN_KIND) == A.KIND_EVALUATOR)
    recs = rows(db_path, "SELECT span_id FROM records")
    assert {r["span_id"] for r in recs} == set(got)
    assert set(got.values()) == {1}  # every score arrived exactly once
