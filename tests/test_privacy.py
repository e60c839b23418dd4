"""Issue 11 §3: capture_content=False and redact cover every string tracescore stores,
exports or prints; configured keys and bearer tokens never land in errors or logs."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from helpers import rows, run_cli
from langchain_core.callbacks import CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import RunnableLambda

from tracescore.judge.openai_judge import OpenAIJudge
from tracescore.testing.judge import Fault, ScriptedJudgeServer, lexical_responder

SECRET = "Zanzibar-42-secret"  # the app's users' and documents' text
EMAIL = "alice.secret@example.com"
KEY = "sk-test-ABCDEFGHIJKLMNOP0123456789"


class Docs(BaseRetriever):
    def _get_relevant_documents(self, query: str, *,
                                run_manager: CallbackManagerForRetrieverRun) -> list[Document]:
        return [Document(page_content=f"doc {i} about {SECRET}", id=f"d{i}",
                         metadata={"author": f"{SECRET} author", "n": i}) for i in range(3)]


def failing_chain() -> Any:
    def boom(docs: Any) -> str:
        raise ValueError(f"cannot answer {SECRET} for {EMAIL}")

    return Docs() | RunnableLambda(boom)


def everything_kept(db: Path, exporter: Any) -> str:
    """Every byte of the database files, every span attribute and status, and `show`."""
    parts = [p.read_bytes().decode("utf-8", "replace")
             for p in db.parent.glob(db.name + "*")]
    for s in exporter.get_finished_spans():
        parts.append(json.dumps({k: str(v) for k, v in s.attributes.items()}))
        parts.append(str(s.status.description))
    for r in rows(db, "SELECT trace_id FROM records"):
        parts.append(run_cli("show", r["trace_id"], "--db", db).output)
        parts.append(run_cli("show", r["trace_id"], "--db", db, "--json").output)
    return "\n".join(parts)


def run_app(ts: Any) -> str:
    handler = ts.langchain_handler()
    with pytest.raises(ValueError):
        failing_chain().invoke(f"question about {SECRET}", config={
            "callbacks": [handler], "metadata": {"user_id": EMAIL, "note": f"{SECRET} note",
                                                 "nested": {"deep": [SECRET]}}})
    assert ts.flush(10)
    [row] = rows(ts.db_path, "SELECT trace_id FROM records")
    ts.add_feedback(row["trace_id"], "down", comment=f"my {SECRET} was wrong")
    assert ts.flush(10)
    return str(row["trace_id"])


def test_capture_off_keeps_no_free_text_anywhere(make_ts: Any, db_path: Path) -> None:
    ts, exporter = make_ts(metrics=["rouge"], capture_content=False)
    run_app(ts)
    ts.shutdown(10)
    kept = everything_kept(db_path, exporter)
    assert SECRET not in kept and EMAIL not in kept
    [rec] = rows(db_path, "SELECT * FROM records")
    assert rec["error"] == "ValueError"  # the exception type stays
    assert rec["user_id"].startswith("sha256:") and len(rec["user_id"]) == 23
    md = json.loads(rec["metadata"])
    assert md["note"] == f"<redacted: {len(SECRET) + 5} chars>"  # keys and lengths stay
    [fb] = rows(db_path, "SELECT * FROM feedback")
    assert fb["comment"] is None and fb["value"] == 0.0
    statuses = {s.status.description for s in exporter.get_finished_spans()
                if s.status.description}
    assert statuses == {"ValueError"}


def test_redact_applies_to_every_string(make_ts: Any, db_path: Path) -> None:
    def redact(text: str) -> str:
        return text.replace(SECRET, "[SECRET]").replace(EMAIL, "[EMAIL]")

    ts, exporter = make_ts(metrics=["rouge"], redact=redact)
    run_app(ts)
    ts.shutdown(10)
    kept = everything_kept(db_path, exporter)
    assert SECRET not in kept and EMAIL not in kept
    assert "[SECRET]" in kept  # redacted, not dropped
    [rec] = rows(db_path, "SELECT * FROM records")
    assert rec["error"] == "ValueError: cannot answer [SECRET] for [EMAIL]"
    assert rec["user_id"] == "[EMAIL]"
    ctx = json.loads(rec["contexts"])[0]
    assert ctx["metadata"]["author"] == "[SECRET] author"
    [fb] = rows(db_path, "SELECT * FROM feedback")
    assert fb["comment"] == "my [SECRET] was wrong"


def test_a_judge_that_echoes_the_api_key_gets_it_scrubbed(make_ts: Any, db_path: Path,
                                                          caplog: Any) -> None:
    echo = json.dumps({"error": {"message": f"Incorrect API key provided: {KEY}. "
                                            f"Header was 'Authorization: Bearer {KEY}'",
                                 "type": "invalid_request_error"}}).encode()
    caplog.set_level(logging.DEBUG, logger="tracescore")
    with ScriptedJudgeServer(lexical_responder) as srv:
        srv.inject(*[Fault(status=401, raw=echo)] * 5)
        ts, _ = make_ts(metrics=["coherence"], judge_canary=False,
                        judge=OpenAIJudge("m", base_url=srv.base_url, api_key=KEY))
        for i in range(3):
            ts.log_record(query="q", answer=f"an answer {i}")
        assert ts.flush(30)
    errors = [r["error"] for r in rows(db_path, "SELECT error FROM scores")]
    errors += [r["error"] for r in rows(db_path, "SELECT error FROM judge_calls")]
    assert any(e and "401" in e for e in errors)
    for e in errors:
        assert KEY not in (e or "")
    assert "[REDACTED]" in " ".join(e or "" for e in errors)
    raw = "".join(p.read_bytes().decode("utf-8", "replace")
                  for p in db_path.parent.glob(db_path.name + "*"))
    assert KEY not in raw
    assert KEY not in caplog.text


def test_scrub_covers_bearer_tokens_and_registered_keys() -> None:
    from tracescore._internal.secrets import register_secret, scrub

    register_secret("my-own-key-value")
    text = scrub("auth failed: Bearer abc.def-ghi_123 key=my-own-key-value api_key: zzzzzzzz")
    assert "abc.def-ghi_123" not in text and "my-own-key-value" not in text
    assert "zzzzzzzz" not in text
    assert scrub("nothing secret here") == "nothing secret here"
