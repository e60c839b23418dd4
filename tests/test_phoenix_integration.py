"""Arize Phoenix as a real backend: a LangChain RAG run traced by tracescore, read back from Phoenix.

The test starts a real Phoenix server (``arize-phoenix`` from PyPI) as a subprocess on loopback,
with its own working dir (its SQLite database lives there), exports tracescore's spans to it
over OTLP/HTTP, and reads them back through Phoenix's REST API
(``GET /v1/projects/{project}/spans``).

Phoenix pulls in ~150 packages, so it lives in a venv of its own: ``TRACESCORE_PHOENIX_PYTHON``
names that venv's python (``.ci/phoenix-venv.sh DIR`` creates it and prints the path). Without
the variable the test is skipped on a developer machine, and fails under CI (``CI`` set), so CI
cannot skip it quietly.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

import pytest
from helpers import records

import tracescore
from tracescore import Metric
from tracescore import attributes as A

pytestmark = pytest.mark.integration

PHOENIX_PYTHON_ENV = "TRACESCORE_PHOENIX_PYTHON"
READY_TIMEOUT_S = 90.0
SPANS_TIMEOUT_S = 30.0
PROJECT = "default"  # tracescore's own TracerProvider sets no openinference.project.name
Q = "What battery capacity does the Cargo have?"

# No request leaves this machine: loopback only, and an opener that ignores *_proxy variables.
_HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def _in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def _unavailable(reason: str) -> NoReturn:
    """Skip on a developer machine; fail under CI, where the integration test must run."""
    if _in_ci():
        pytest.fail(f"{reason} (CI is set, so this integration test must run, not skip: "
                    f"see the docstring of {Path(__file__).name})", pytrace=False)
    pytest.skip(reason)


# -- the Phoenix server ------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get_json(url: str, timeout: float = 5.0) -> Any:
    with _HTTP.open(url, timeout=timeout) as resp:
        return json.load(resp)


def _tail(path: Path, n: int = 60) -> str:
    try:
        lines = path.read_text(errors="replace").splitlines()
    except OSError:
        return "(no log)"
    return "\n".join(lines[-n:])


class PhoenixServer:
    def __init__(self, python: str, workdir: Path):
        self.python = python
        self.workdir = workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "phoenix.log"
        self.port = self.grpc_port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.start_seconds = 0.0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        # Nothing of a developer's own Phoenix/OTel setup leaks in (a database URL, a collector).
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("PHOENIX_", "OTEL_")) and k.lower() not in
               ("http_proxy", "https_proxy", "all_proxy")}
        env.update({
            "PHOENIX_WORKING_DIR": str(self.workdir),  # its SQLite db and caches live here
            "PHOENIX_HOST": "127.0.0.1",
            "PHOENIX_PORT": str(self.port),
            # the OTLP/gRPC receiver cannot be turned off (it binds [::]:port); give it a free port
            "PHOENIX_GRPC_PORT": str(self.grpc_port),
            # no phone-home: telemetry pixels off, no public-internet fetches (web fonts, the
            # WASM sandbox binary download at startup), no agent assistant
            "PHOENIX_TELEMETRY_ENABLED": "false",
            "PHOENIX_ALLOW_EXTERNAL_RESOURCES": "false",
            "PHOENIX_DISABLE_AGENT_ASSISTANT": "true",
            "PHOENIX_LOG_MIGRATIONS": "false",
            "PYTHONUNBUFFERED": "1",
            "NO_PROXY": "127.0.0.1,localhost",
        })
        return env

    def start(self) -> None:
        """Start on free loopback ports; retry with new ports if one was taken meanwhile."""
        t0 = time.monotonic()
        for attempt in range(3):
            self.port, self.grpc_port = _free_port(), _free_port()
            with self.log_path.open("ab") as log:
                log.write(f"--- attempt {attempt + 1}: port {self.port}, grpc {self.grpc_port}\n"
                          .encode())
                self.proc = subprocess.Popen(
                    [self.python, "-m", "phoenix.server.main", "serve"],
                    cwd=self.workdir, env=self.env(), stdin=subprocess.DEVNULL,
                    stdout=log, stderr=subprocess.STDOUT,
                    start_new_session=True,  # own process group: teardown kills all of it
                )
            if self._wait_ready(t0 + READY_TIMEOUT_S):
                self.start_seconds = time.monotonic() - t0
                return
            exited = self.proc.poll() is not None
            self.stop()
            log_text = _tail(self.log_path, 200).lower()
            if exited and ("address already in use" in log_text or "errno 98" in log_text):
                continue
            break
        raise AssertionError(
            f"Phoenix did not become ready at {self.url} within {READY_TIMEOUT_S:.0f}s "
            f"(exit code {self.proc.returncode if self.proc else None}); log tail:\n"
            f"{_tail(self.log_path)}")

    def _wait_ready(self, deadline: float) -> bool:
        assert self.proc is not None
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                return False
            try:
                with _HTTP.open(f"{self.url}/readyz", timeout=2) as resp:
                    if resp.status == 200:  # the database answers, migrations are done
                        return True
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        return False

    def stop(self) -> None:
        proc, self.proc = self.proc, None
        if proc is None:
            return
        for sig, wait_s in ((signal.SIGTERM, 15), (signal.SIGKILL, 10)):
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                proc.wait(wait_s)
            except subprocess.TimeoutExpired:
                continue
            # the leader is gone; anything it left in its group goes too
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            break
        if proc.poll() is None:
            proc.wait(10)

    def spans(self, trace_id: str) -> list[dict[str, Any]]:
        query = urllib.parse.urlencode({"trace_id": trace_id, "limit": 1000})
        body = _get_json(f"{self.url}/v1/projects/{PROJECT}/spans?{query}")
        return list(body["data"])


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PhoenixServer]:
    _otlp_exporter_class()  # before spending seconds on the server
    python = os.environ.get(PHOENIX_PYTHON_ENV, "").strip()
    if not python:
        _unavailable(f"{PHOENIX_PYTHON_ENV} is not set (a python with arize-phoenix installed)")
    if not (os.path.isfile(python) and os.access(python, os.X_OK)):
        pytest.fail(f"{PHOENIX_PYTHON_ENV}={python!r} is not an executable file", pytrace=False)
    server = PhoenixServer(os.path.abspath(python), tmp_path_factory.mktemp("phoenix-workdir"))
    try:
        server.start()
        yield server
    finally:
        server.stop()


# -- the traced run ----------------------------------------------------------------------------

class AnswerInContexts(Metric):
    """Share of the answer's words that occur in the retrieved contexts (needs no reference)."""

    name = "answer_in_contexts"
    requires = frozenset({"answer", "contexts"})
    threshold = 0.5

    def __call__(self, record: Any) -> Any:
        words = re.findall(r"\w+", record.answer.lower())
        context_words = set(re.findall(r"\w+", " ".join(c.text for c in record.contexts).lower()))
        share = sum(w in context_words for w in words) / max(1, len(words))
        return self.result(share, f"{share:.2f} of the answer's words are in the contexts")


def _otlp_exporter_class() -> Any:
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError as exc:
        _unavailable(f"opentelemetry-exporter-otlp-proto-http is not installed ({exc})")
    return OTLPSpanExporter


def _otlp_exporter(endpoint: str) -> Any:
    import requests  # a dependency of the OTLP/HTTP exporter

    session = requests.Session()
    session.trust_env = False  # loopback only: ignore *_proxy variables
    return _otlp_exporter_class()(endpoint=endpoint, session=session, timeout=10)


def _wait_for_spans(server: PhoenixServer, trace_id: str, ready: Any) -> list[dict[str, Any]]:
    """Poll Phoenix's REST API until ``ready(spans)``; Phoenix inserts spans in batches."""
    deadline = time.monotonic() + SPANS_TIMEOUT_S
    spans: list[dict[str, Any]] = []
    while True:
        spans = server.spans(trace_id)
        if ready(spans) or time.monotonic() > deadline:
            return spans
        time.sleep(0.25)


def test_langchain_run_lands_in_phoenix_with_documents_and_scores(phoenix, tmp_path):
    from tracescore.examples.langchain_rag import KeywordRetriever, build_chain

    db = tmp_path / "ts.db"
    ts = tracescore.init(
        db=db,
        metrics=["rgb_rejection", AnswerInContexts(), "token_f1"],
        span_exporter=_otlp_exporter(f"{phoenix.url}/v1/traces"),
    )
    try:
        answer = build_chain().invoke(Q, config={"callbacks": [ts.langchain_handler()]})
        assert ts.flush(30)  # scored, and the RAG root span released with its scores
        [rec] = records(db)
        trace_id, root_span_id = rec["record_id"].split("-")
        assert trace_id == rec["trace_id"]
        # the reference arrives after the run: token_f1 is a late score, on a carrier span
        ts.add_ground_truth(trace_id, ["The Cargo ships with a 750 Wh battery."])
        assert ts.flush(30)
    finally:
        shut_down = ts.shutdown(30)  # exports everything still batched
    assert shut_down

    expected_docs = KeywordRetriever().invoke(Q)  # the example retriever itself, untraced
    assert len(expected_docs) == 3

    def by_kind(spans: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
        return [s for s in spans if s["span_kind"] == kind]

    def complete(spans: list[dict[str, Any]]) -> bool:
        ids = {s["context"]["span_id"] for s in spans}
        return (root_span_id in ids and len(by_kind(spans, A.KIND_RETRIEVER)) == 1
                and len(by_kind(spans, A.KIND_LLM)) == 1
                and len(by_kind(spans, A.KIND_EVALUATOR)) == 1)

    spans = _wait_for_spans(phoenix, trace_id, complete)
    assert complete(spans), (
        f"Phoenix has {len(spans)} span(s) of trace {trace_id} after {SPANS_TIMEOUT_S:.0f}s: "
        f"{[(s['name'], s['span_kind']) for s in spans]}\nPhoenix log tail:\n"
        f"{_tail(phoenix.log_path)}")
    assert {s["context"]["trace_id"] for s in spans} == {trace_id}
    by_id = {s["context"]["span_id"]: s for s in spans}

    # the RAG root span: the trace's root, with input/output and the scores as attributes
    root = by_id[root_span_id]
    [trace_root] = [s for s in spans if s["parent_id"] is None]
    assert trace_root is root
    attrs = root["attributes"]
    assert root["span_kind"] == A.KIND_CHAIN  # Phoenix moves openinference.span.kind here
    assert attrs[A.RAG_ROOT] is True
    assert attrs[A.RECORD_ID] == rec["record_id"]
    assert attrs[A.INPUT_VALUE] == Q
    assert attrs[A.OUTPUT_VALUE] == answer
    assert attrs[A.score_attribute("rgb_rejection")] == 0.0  # the example answers, no refusal
    assert attrs[A.score_attribute("answer_in_contexts")] == 1.0  # extractive: all from contexts
    assert A.score_attribute("token_f1") not in attrs  # that one came late
    assert A.SCORES_LATE not in attrs
    evals = {attrs[A.evaluation(i, "name")]: i for i in range(2)}
    assert set(evals) == {"rgb_rejection", "answer_in_contexts"}
    i = evals["answer_in_contexts"]
    assert attrs[A.evaluation(i, "score")] == 1.0
    assert attrs[A.evaluation(i, "label")] == "pass"
    assert attrs[A.evaluation(i, "explanation")] == "1.00 of the answer's words are in the contexts"
    i = evals["rgb_rejection"]
    assert attrs[A.evaluation(i, "score")] == 0.0
    assert attrs[A.evaluation(i, "explanation")] == "no refusal phrase found"
    assert A.evaluation(2, "name") not in attrs

    # the retriever span: under the root, with the example retriever's documents
    [retr] = by_kind(spans, A.KIND_RETRIEVER)
    p = retr
    while p["parent_id"] is not None:
        p = by_id[p["parent_id"]]
    assert p is root
    rattrs = retr["attributes"]
    assert rattrs[A.INPUT_VALUE] == Q
    for i, doc in enumerate(expected_docs):
        assert rattrs[A.retrieval_document(i, A.DOCUMENT_ID)] == doc.id
        assert rattrs[A.retrieval_document(i, A.DOCUMENT_CONTENT)] == doc.page_content
        assert rattrs[A.retrieval_document(i, A.DOCUMENT_SCORE)] == \
            pytest.approx(doc.metadata["score"])
        # tracescore sends document.metadata as a JSON string; Phoenix stores it parsed
        meta_key = A.retrieval_document(i, A.DOCUMENT_METADATA)
        if meta_key in rattrs:
            meta = rattrs[meta_key]
            meta = json.loads(meta) if isinstance(meta, str) else meta
            assert meta["source"] == doc.metadata["source"]
        else:
            assert rattrs[f"{meta_key}.source"] == doc.metadata["source"]
    assert A.retrieval_document(len(expected_docs), A.DOCUMENT_ID) not in rattrs

    # the late score: an EVALUATOR span in the same trace, child of the RAG root span
    [carrier] = by_kind(spans, A.KIND_EVALUATOR)
    cattrs = carrier["attributes"]
    assert carrier["parent_id"] == root_span_id
    assert cattrs[A.SCORED_SPAN_ID] == root_span_id
    assert cattrs[A.evaluation(0, "name")] == "token_f1"
    assert cattrs[A.score_attribute("token_f1")] == cattrs[A.evaluation(0, "score")]
    assert 0.0 < cattrs[A.score_attribute("token_f1")] <= 1.0
