"""A real OpenAI-compatible HTTP server on 127.0.0.1 for testing judges (and your setup).

``ScriptedJudgeServer`` answers ``POST /v1/chat/completions`` like an OpenAI server would (so
the real ``openai`` client talks to it over real HTTP), from a responder function you give it:
``responder(step, data, request) -> dict | str``, where ``step`` is the tracescore judge step
the prompt belongs to (``extract``, ``contexts``, ``statements``, ``opinions``, ``binary``,
``summary_coherence``, ``coherence``, ``geval_steps``, ``geval``, ``rgb``, the session
steps ``session_relevancy``, ``session_facts``, ``session_retention``, or ``other``) and
``data`` is the JSON document the prompt carries. The paired ``extract+contexts`` prompt
(:mod:`tracescore.judge.pairing`) is counted under that name and answered part by part: the
responder is asked for ``extract`` and for ``contexts`` with each part's data, and the two
answers make the paired reply. It counts calls per step and injects faults:
HTTP errors with ``Retry-After``, slow responses, truncated or malformed bodies.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

from .._internal.json_server import Fault, Response, ScriptedServer, error_response, pause
from ..judge import prompts as P
from ..judge import ragas_steps as RS
from ..judge.rgb_steps import RGB_TASK
from ..sessions import judged as SJ

Responder = Callable[[str, Any, dict[str, Any]], "dict[str, Any] | str | Fault"]

_STEP_BY_TASK = {
    P.EXTRACT_TASK[:60]: "extract",
    P.CONTEXTS_TASK[:60]: "contexts",
    P.STATEMENTS_TASK[:60]: "statements",
    P.OPINIONS_TASK[:60]: "opinions",
    P.BINARY_TASK[:60]: "binary",
    P.SUMMARY_COHERENCE_TASK[:60]: "summary_coherence",
    P.TEXT_COHERENCE_TASK[:60]: "coherence",
    P.GEVAL_STEPS_TASK[:60]: "geval_steps",
    P.GEVAL_TASK[:60]: "geval",
    RS.QUESTIONS_TASK[:60]: "ragas_questions",
    RS.ENTITIES_TASK[:60]: "ragas_entities",
    RS.SENTENCES_TASK[:60]: "ragas_sentences",
    RGB_TASK[:60]: "rgb",
    P.PAIR_TASK[:60]: P.PAIR_STEP,
    SJ.RELEVANCY_TASK[:60]: "session_relevancy",
    SJ.FACTS_TASK[:60]: "session_facts",
    SJ.RETENTION_TASK[:60]: "session_retention",
}


def parse_prompt(messages: list[dict[str, Any]]) -> tuple[str, Any]:
    """(step, data) from a tracescore judge prompt; ("other", None) for anything else."""
    user = next((m for m in messages if m.get("role") == "user"), None)
    content = str(user.get("content", "")) if user else ""
    if not content.startswith("TASK\n"):
        return "other", None
    task = content[5:].split("\n", 1)[0]
    step = _STEP_BY_TASK.get(task[:60], "other")
    data = None
    if "\n\nDATA\n" in content:
        try:
            data = json.loads(content.split("\n\nDATA\n", 1)[1])
        except json.JSONDecodeError:
            data = None
    if any(m.get("role") == "assistant" for m in messages):
        step = step + ":repair"
    return step, data


def _envelope(choices: Any, **extra: Any) -> bytes:
    body = {"id": "chatcmpl-broken", "object": "chat.completion", "created": 0,
            "model": "test-judge", "choices": choices, **extra}
    return json.dumps(body).encode()


#: HTTP 200 bodies that are not a usable chat completion, as seen from real proxies and
#: half-compatible servers: inject them with ``server.inject(broken_envelope(kind))``.
BROKEN_ENVELOPES: dict[str, bytes] = {
    "choice_is_a_string": _envelope(["I am a string, not a choice"]),
    "completions_choice": _envelope([{"index": 0, "text": '{"score": 4}',
                                      "finish_reason": "stop"}]),
    "message_null": _envelope([{"index": 0, "message": None, "finish_reason": "stop"}]),
    "content_not_a_string": _envelope([{"index": 0, "finish_reason": "stop",
                                        "message": {"role": "assistant", "content": 42}}]),
    "no_choices": _envelope([]),
    "error_object": json.dumps({"error": {"message": "upstream overloaded",
                                          "type": "server_error"}}).encode(),
}


def broken_envelope(kind: str) -> Fault:
    """A :class:`Fault` that answers one request 200 with ``BROKEN_ENVELOPES[kind]``."""
    return Fault(status=200, raw=BROKEN_ENVELOPES[kind])


class ScriptedJudgeServer(ScriptedServer):
    def __init__(self, responder: Responder, *, delay_s: float = 0.0,
                 logprobs: Callable[[str, Any], list[dict[str, Any]] | None] | None = None):
        self.responder = responder
        self.logprobs = logprobs
        self.calls: Counter[str] = Counter()
        #: (time.monotonic() at arrival, step, HTTP status sent) per request, in arrival order
        self.log: list[tuple[float, str, int]] = []
        self.inflight = 0
        self.max_inflight = 0
        super().__init__(delay_s=delay_s)

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def __enter__(self) -> ScriptedJudgeServer:
        super().__enter__()
        return self

    def respond(self, path: str, req: dict[str, Any]) -> Response:
        step, data = parse_prompt(req.get("messages", []))
        with self._lock:
            self.calls[step] += 1
            self.requests.append(req)
            fault = self.next_fault()
            self.inflight += 1
            self.max_inflight = max(self.max_inflight, self.inflight)
            arrived = time.monotonic()
            # logged at arrival, under the lock, so the log is in arrival order (appending
            # when the answer is sent put a slow request after faster later ones)
            slot = len(self.log)
            self.log.append((arrived, step, 0))
        status = 500
        try:
            status, body, headers = self._answer(step, data, req, fault)
            return status, body, headers
        finally:
            with self._lock:
                self.inflight -= 1
                self.log[slot] = (arrived, step, status)

    def _answer(self, step: str, data: Any, req: dict[str, Any],
                fault: Fault | None) -> Response:
        out: Any = None
        if fault is None:
            # A responder may answer with a Fault too (fail only some requests).
            base = step.split(":")[0]
            if base == P.PAIR_STEP and isinstance(data, dict):
                parts = {name: self.responder(name, part, req) for name, part in data.items()}
                fault = next((p for p in parts.values() if isinstance(p, Fault)), None)
                out = None if fault is not None else parts
            else:
                out = self.responder(base, data, req)
            if isinstance(out, Fault):
                fault, out = out, None
        pause(self, fault)
        failed = error_response(fault) if fault is not None else None
        if failed is not None:
            return failed
        if fault is not None and fault.body is not None:
            text = fault.body
        else:
            text = out if isinstance(out, str) else json.dumps(out)
        choice: dict[str, Any] = {"index": 0, "finish_reason": "stop",
                                  "message": {"role": "assistant", "content": text}}
        if req.get("logprobs") and self.logprobs is not None:
            content = self.logprobs(step, data)
            if content is not None:
                choice["logprobs"] = {"content": content}
        prompt_tokens = len(json.dumps(req)) // 4
        body = {
            "id": "chatcmpl-test", "object": "chat.completion", "created": 0,
            "model": req.get("model", "test-judge"), "choices": [choice],
            "usage": {"prompt_tokens": prompt_tokens,
                      "completion_tokens": max(1, len(text) // 4),
                      "total_tokens": prompt_tokens + max(1, len(text) // 4)},
        }
        return 200, json.dumps(body).encode(), {}


# -- a deterministic lexical judge (for tests, benchmarks and offline demos; not for real use) --
_STOP = frozenset(
    "a an the is are was were be been of to in on at for and or with by as it its this that "
    "what which who how does do did can i you we they he she my your our their from has have "
    "had not no will would should could about into than then there here".split()
)


def _content(text: str) -> set[str]:
    from ..metrics.text import answer_tokens

    return {t for t in answer_tokens(text) if t not in _STOP}


def _covered(part: str, whole: str, at: float = 0.6) -> bool:
    words = _content(part)
    return bool(words) and len(words & _content(whole)) / len(words) >= at


_warm_lock = threading.Lock()
_warm = False


def _warm_up() -> None:
    # tracescore.text builds its tables on first use (~0.2 s of CPU each); without this lock
    # every server thread of a concurrent burst builds them at once, stalling all of them.
    global _warm
    with _warm_lock:
        if not _warm:
            from ..metrics.text import split_sentences

            split_sentences("Warm up. The tables!")
            _content("Warm up, the tables.")
            _warm = True


def lexical_responder(step: str, data: Any, request: dict[str, Any]) -> dict[str, Any]:
    """Answers every tracescore judge step by word overlap: deterministic, cheap, honest-ish."""
    from ..metrics.text import split_sentences

    if not _warm:
        _warm_up()

    if step == "extract":
        out = {}
        for k, t in data["texts"].items():
            sents = split_sentences(t)
            entry: dict[str, Any] = {"statements": sents}
            if k in data.get("opinions_for", []):
                entry["opinions"] = [s for s in sents if _content(s) & {
                    "best", "worst", "think", "believe", "terrible", "great", "awful"}]
            out[k] = entry
        return {"texts": out}
    if step == "contexts":
        q, refs = data["question"], data["references"]
        return {"contexts": [
            {"index": i, "relevant": "yes" if len(_content(q) & _content(c)) >= 2 else "no",
             "useful": ["yes" if _covered(r, c, 0.5) else "no" for r in refs],
             "contradicted": "no", "reason": "word overlap"}
            for i, c in enumerate(data["contexts"])]}
    if step == "statements":
        q = data["question"]
        ctx = "\n".join(data["contexts"])
        refs = data["reference_statements"]
        answer = "\n".join(data["answer_statements"])
        return {
            "answer_statements": [
                {"index": i, "relevant": "yes" if _content(s) & _content(q) else "idk",
                 "supported": "yes" if _covered(s, ctx) else "idk",
                 "in_reference": ["yes" if _covered(s, "\n".join(r)) else "no" for r in refs]}
                for i, s in enumerate(data["answer_statements"])],
            "reference_verdicts": [
                [{"index": i, "attributable": "yes" if _covered(s, ctx) else "no",
                  "covered": "yes" if _covered(s, answer) else "no"} for i, s in enumerate(r)]
                for r in refs],
        }
    if step == "opinions":
        return {"opinions": [{"index": i, "biased": "no", "toxic": "no", "reason": "neutral"}
                             for i, _ in enumerate(data["opinions"])]}
    if step == "binary":
        out = {}
        for c in data["checks"]:
            if c == "correctness":
                ok = _covered(data["reference"], data["answer"], 0.5)
            elif c == "faithfulness":
                ok = _covered(data["answer"], "\n".join(data["contexts"]))
            elif c == "relevance":
                ok = bool(_content(data["answer"]) & _content(data["question"]))
            else:
                ok = True
            out[c] = {"value": "Y" if ok else "N", "reasoning": "word overlap"}
        return out
    if step in ("summary_coherence", "coherence"):
        return {"score": 4, "reason": "reads in order"}
    if step == "geval_steps":
        return {"steps": ["Read the question.", "Read the answer.", "Rate it 1-5."]}
    if step == "geval":
        return {"score": 4}
    if step == "rgb":
        return {"contexts": [{"index": i, "counterfactual": "no", "reason": "word overlap"}
                             for i, _ in enumerate(data["contexts"])],
                "statements": [{"index": j, "supported_by": [i for i, c in
                                                             enumerate(data["contexts"])
                                                             if _covered(s, c)]}
                               for j, s in enumerate(data["statements"])]}
    return {"error": "unknown step"}
