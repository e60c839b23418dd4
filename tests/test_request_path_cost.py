"""What the app pays per request and at start-up (issue 19's request-path, total-CPU and RSS rows).

- start-up imports only what capture needs: no nltk, rouge-score, scipy, scikit-learn, pandas
  or sqlite-utils until a metric scores (on an existing database);
- an unsampled request's record is built without what only a text row keeps (prompt,
  candidates, retrieval queries) — it is still written, compact — while a sampled or forced one
  keeps them;
- with no exporter, the adapters make no child spans (no one would receive them), and do again
  once a span processor is added;
- a steady stream of sampled records goes to the database in batches, not a transaction each.

Real LangChain objects (the offline example chain), real SQLite, real processes.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from helpers import records
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.outputs import ChatResult
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from tracescore.examples.langchain_rag import build_chain

import tracescore

HEAVY = ("nltk", "rouge_score", "scipy", "sklearn", "pandas", "sqlite_utils")
Q = "How long does a test ride last?"


def test_start_up_imports_no_metric_or_statistics_package(tmp_path: Path) -> None:
    db = tmp_path / "app.db"
    code = ("import sys, json, tracescore\n"
            f"ts = tracescore.init(db={str(db)!r})\n"
            "ts.shutdown(10)\n"
            f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)  # new db
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                         text=True)
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []


def test_the_first_score_still_loads_the_metrics(make_ts: Any) -> None:
    ts, _ = make_ts(metrics=["rouge", "bleu", "token_f1"])
    ts.log_record(query=Q, answer="A test ride lasts 45 minutes.",
                  ground_truths=["A test ride lasts up to 45 minutes."])
    assert ts.flush(60)
    from helpers import rows

    got = {r["name"]: r["value"] for r in rows(ts.db_path, "SELECT name, value FROM scores")}
    assert got["rouge1"] > 0.5 and got["token_f1"] > 0.5 and "bleu" in got


def _capture(ts: Any) -> list[Any]:
    """The records the handler submits (still submitted), or offers unbuilt (built on the
    writer thread, seen once the queue is flushed)."""
    seen: list[Any] = []
    submit = ts.submit
    offer = ts.offer_unbuilt

    def spy(record: Any, **kwargs: Any) -> Any:
        finish = kwargs.get("finish")
        if finish is None:
            seen.append(record)
        else:  # a sampled request's whole record, built on the writer from ``record``'s run
            def built(full: bool) -> Any:
                seen.append(finish(full))
                return seen[-1]

            kwargs["finish"] = built
        return submit(record, **kwargs)

    def spy_offer(u: float, failed: bool, flagged: bool, build: Any) -> Any:
        def built(full: bool) -> Any:
            seen.append(build(full))
            return seen[-1]

        return offer(u, failed, flagged, built)

    ts.submit = spy
    ts.offer_unbuilt = spy_offer
    return seen


@pytest.mark.parametrize("rate", [0.0, 1.0])
def test_an_unsampled_record_is_built_without_what_only_text_rows_keep(make_ts: Any,
                                                                       rate: float) -> None:
    ts, _ = make_ts(sample_rate=rate)
    seen = _capture(ts)
    answer = build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(60)
    (rec,) = seen
    assert rec.query == Q and rec.answer == answer and len(rec.contexts) >= 1
    stored = records(ts.db_path)
    assert len(stored) == 1  # every request is written
    if rate == 0.0:
        assert rec.prompt is None and rec.candidates == () and rec.retrieval_queries == ()
        assert stored[0]["text_kept"] == 0 and stored[0]["n_contexts"] == len(rec.contexts)
    else:
        assert rec.prompt and Q in rec.prompt and len(rec.candidates) == len(rec.contexts)
        assert stored[0]["prompt"] == rec.prompt and stored[0]["text_kept"] == 1


class _Broken(GenericFakeChatModel):
    def _generate(self, *args: Any, **kwargs: Any) -> ChatResult:
        raise ValueError("model down")


def test_a_forced_record_gets_the_full_record_though_its_rate_is_zero(make_ts: Any) -> None:
    ts, _ = make_ts(sample_rate=0.0)
    seen = _capture(ts)
    with pytest.raises(ValueError):
        build_chain(llm=_Broken(messages=iter(()))).invoke(
            Q, config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(60)
    (rec,) = seen
    assert rec.error and rec.prompt and Q in rec.prompt and rec.candidates
    assert records(ts.db_path)[0]["forced"] == "error"


def test_no_exporter_no_child_spans_until_a_processor_is_added(tmp_path: Path) -> None:
    ts = tracescore.init(db=tmp_path / "ts.db")
    try:
        assert not ts.spans_wanted
        deferred: list[Any] = []
        defer = ts.defer

        def spy(task: Any, **kw: Any) -> bool:
            deferred.append(task)
            return bool(defer(task, **kw))

        ts.defer = spy  # type: ignore[method-assign]
        seen = _capture(ts)
        handler = ts.langchain_handler()
        build_chain().invoke(Q, config={"callbacks": [handler]})
        assert ts.flush(60)  # (a sampled record is finished on the writer)
        assert deferred == [] and seen[0].contexts and seen[0].answer  # no span work
        exporter = InMemorySpanExporter()
        ts.tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
        assert ts.spans_wanted
        build_chain().invoke(Q, config={"callbacks": [handler]})
        assert ts.flush(60)
        spans = exporter.get_finished_spans()
        assert len(spans) > 5 and len({s.context.trace_id for s in spans}) == 1
    finally:
        ts.shutdown(10)


def test_a_steady_stream_of_sampled_records_is_written_in_batches(make_ts: Any,
                                                                  monkeypatch: Any) -> None:
    from tracescore.store.sqlite import Store

    batches: list[int] = []
    write = Store.write_batch

    def counting(self: Any, recs: Any, *args: Any, **kwargs: Any) -> Any:
        batches.append(len(recs))
        return write(self, recs, *args, **kwargs)

    monkeypatch.setattr(Store, "write_batch", counting)
    ts, _ = make_ts(metrics=["exact_match"])
    n = 200
    for i in range(n):
        ts.log_record(query=f"q{i}", answer="a", ground_truths=["a"])
        time.sleep(0.001)  # a request every millisecond or so
    assert ts.flush(60)
    assert sum(batches) == n
    assert len(batches) <= n // 4, batches  # was one transaction per sampled record
