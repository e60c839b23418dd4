"""`RagRecord`: the one currency between pipeline stages.

A record is immutable. Stages that learn more (ground truths that arrive later, sampling
decisions) make a new record with :func:`dataclasses.replace`.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

#: The inputs a metric can require from a record.
QUERY = "query"
CONTEXTS = "contexts"
ANSWER = "answer"
GROUND_TRUTHS = "ground_truths"
#: An agent run: the record carries tool calls or the tools offered to the model
#: (:class:`AgentRun`); the deterministic agent checks require it.
AGENT = "agent"
INPUTS = frozenset({QUERY, CONTEXTS, ANSWER, GROUND_TRUTHS, AGENT})
#: What :meth:`RagRecord.missing` names for an answer stream the client cut off.
CUT_OFF_ANSWER = "complete answer (answer cut off: the client stopped reading the stream)"


@dataclass(frozen=True, slots=True)
class Context:
    """One retrieved document, in the order the app retrieved it.

    ``score`` is the retriever's score of the document, or None. A score that is not a
    finite number (NaN, ±inf — some vector stores answer so for a missing or degenerate
    distance) is stored as None: no usable number, and the document and its record are kept
    (neither JSON nor the databases hold NaN or infinity). Framework adapters build contexts
    from store results too, so this is not an error that could lose their record.
    """

    text: str
    id: str | None = None
    score: float | None = None
    metadata: Mapping[str, Any] = field(default_factory=dict)
    #: Name of the retriever that returned it (several retrievers may feed one answer).
    source: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.score, float) and not math.isfinite(self.score):
            object.__setattr__(self, "score", None)  # frozen: the one way to set it here


@dataclass(frozen=True, slots=True)
class Candidate:
    """One document some retrieval step returned, whether or not it reached the model.

    ``source`` is the step that produced it (a retriever, a vector-store search, a tool, a
    graph node); ``kept`` tells whether it is among the record's contexts (it reached the
    answering model); ``dropped_by`` names the step that left it out (a compressor, reranker
    or filter wrapping the retriever, a later retrieval that replaced it) when it did not.
    ``via`` says how a kept document reached the model when the model saw a text derived
    from it rather than the document itself: ``"<tool> (tool reply)"`` (a sub-agent or
    sub-graph behind a tool wrote the reply from it), ``"<node> (model text)"`` (a model call
    of the graph node that retrieved it summarised it), or for a document the model saw only
    in pieces (``kept`` false), ``"split into the chunks the model saw"`` (LlamaIndex's
    ``CitationQueryEngine``); None when the model saw the document itself.
    The same text found by two steps is two candidates: each step's hit is evidence.
    """

    text: str
    id: str | None = None
    score: float | None = None
    source: str | None = None
    kept: bool = True
    dropped_by: str | None = None
    via: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.score, float) and not math.isfinite(self.score):
            object.__setattr__(self, "score", None)


@dataclass(frozen=True, slots=True)
class TokenUsage:
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens
        )


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool offered to the model: its name, description and declared JSON schema of its
    arguments (None when the framework declared none)."""

    name: str
    description: str | None = None
    schema: Mapping[str, Any] | None = None


@dataclass(frozen=True, slots=True)
class ToolCall:
    """One tool call the model asked for, and what came back.

    ``step``: the agent's model turn that asked for it (1 = the first model call of the
    request). ``arguments``: the arguments as the model gave them (a JSON object, or the raw
    string when they were not one); arguments too long to keep are replaced by
    ``{"tracescore.truncated": <chars>}`` and ``arguments_cut`` is set (their validation is
    then not checked). ``ok``: the tool returned a result (False: it raised, the framework
    answered with an error message — an unknown tool, arguments it rejected — or no result
    was seen, ``error`` says which). ``result`` / ``error`` are clipped texts.
    """

    name: str
    arguments: Any = None
    step: int = 0
    id: str | None = None
    ok: bool = True
    result: str | None = None
    error: str | None = None
    arguments_cut: bool = False


@dataclass(frozen=True, slots=True)
class AgentRun:
    """What an agent did in one request: the tools offered, the calls made (in the order the
    model asked for them), and how many model calls and agent steps it took.

    ``model_calls``: every model call of the request (answering, tool choosing, and any
    inside tools); ``steps``: the agent's own model turns (model calls outside tools and
    retrievers). ``calls_dropped``: calls beyond the per-record bound, not kept.
    """

    tools: tuple[ToolSpec, ...] = ()
    calls: tuple[ToolCall, ...] = ()
    model_calls: int = 0
    steps: int = 0
    calls_dropped: int = 0


@dataclass(frozen=True, slots=True)
class RagRecord:
    """One RAG interaction: the query, what was retrieved, what was answered.

    ``trace_id`` / ``span_id`` are lower-case hex (32 / 16 chars) of the root span the record
    was built from; together they identify the record (``record_id``).
    """

    trace_id: str
    span_id: str
    query: str | None = None
    contexts: tuple[Context, ...] = ()
    answer: str | None = None
    ground_truths: tuple[str, ...] = ()
    metadata: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = ()
    session_id: str | None = None
    user_id: str | None = None
    start_time_ns: int | None = None
    end_time_ns: int | None = None
    usage: TokenUsage | None = None
    model: str | None = None
    error: str | None = None
    source: str = "manual"
    #: False when content capture was off: text fields are then None/empty on purpose.
    content_captured: bool = True
    #: The prompt of the app's last LLM call ("role: content" blocks), for metrics that
    #: re-ask the app's own model (SelfCheckGPT).
    prompt: str | None = None
    #: The queries the app's retrievers and retrieval tools were given (an agent's or a query
    #: rewriter's own wording), in order, without repeats. ``query`` stays the user's message.
    retrieval_queries: tuple[str, ...] = ()
    #: True when the record was loaded from a compact row (not sampled when it was written,
    #: ``keep_full_text=False``): its query, contexts and answer text were not kept.
    compact: bool = False
    #: Every document the run's retrieval steps returned, with the step that produced it and,
    #: if it did not reach the model, the step that dropped it. ``contexts`` are the kept ones.
    candidates: tuple[Candidate, ...] = ()
    #: False when the client stopped reading a streamed answer (a closed or cancelled stream):
    #: ``answer`` then holds exactly the text the client received.
    complete: bool = True
    #: The agent's tool calls and offered tools (None: not an agent run, or not captured).
    agent: AgentRun | None = None

    @property
    def record_id(self) -> str:
        return f"{self.trace_id}-{self.span_id}"

    @property
    def latency_ms(self) -> float | None:
        if self.start_time_ns is None or self.end_time_ns is None:
            return None
        return (self.end_time_ns - self.start_time_ns) / 1e6

    def has(self, what: str) -> bool:
        """Whether the record carries the input ``what`` (one of :data:`INPUTS`)."""
        if what == QUERY:
            return bool(self.query)
        if what == ANSWER:
            return self.answer is not None and self.answer != ""
        if what == CONTEXTS:
            return len(self.contexts) > 0
        if what == GROUND_TRUTHS:
            return len(self.ground_truths) > 0
        if what == AGENT:
            return self.agent is not None and bool(self.agent.calls or self.agent.tools)
        raise ValueError(f"unknown record input {what!r}; expected one of {sorted(INPUTS)}")

    def missing(self, requires: frozenset[str]) -> list[str]:
        """The inputs of ``requires`` the record lacks. An answer the client cut off
        (``complete=False``) is not an answer to score: metrics that require the answer are
        skipped with the reason :data:`CUT_OFF_ANSWER`; metrics over the query and contexts
        alone still score the record (its retrieval happened in full)."""
        out = sorted(r for r in requires if not self.has(r))
        if not self.complete and ANSWER in requires and ANSWER not in out:
            out.append(CUT_OFF_ANSWER)
        return out

    def replace(self, **changes: Any) -> RagRecord:
        return dataclasses.replace(self, **changes)
