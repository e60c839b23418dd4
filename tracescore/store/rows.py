"""What both stores share about rows: the job values (:class:`Job`, :class:`NewJob`) and
statuses, text and JSON made storable (:func:`clean_text`, :func:`dumps`), and the conversions
between a :class:`~tracescore.record.RagRecord` and its ``records`` row (:func:`record_row`,
:func:`row_to_record`), a metric and its ``metrics`` row, and the rollup facts of a row.
Pure functions; no I/O."""

from __future__ import annotations

import json
import math
import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .._internal.secrets import scrub
from ..record import Candidate, Context, RagRecord, TokenUsage
from ..sampling import Decision
from .agent_rows import agent_from_json, agent_to_json
from .compact import COMPACT_COLUMNS, compact_contexts_json, text_facts
from .rollup import Delta
from .segments import NONE_SEG, SegmentSpec

#: 1: the first schema; 2: compact rows and rollups of pruned rows; 3: segments and hourly
#: rollups kept up to date on write; 4: human labels, label plans, canary history (see
#: .migrations).
MAX_METADATA_CHARS = 65_536

PENDING, LEASED, DONE, SKIPPED = "pending", "leased", "done", "skipped"


@dataclass(frozen=True, slots=True)
class Job:
    job_id: int
    record_id: str
    metric: str
    metric_version: str
    attempts: int
    created_at: float = 0.0


@dataclass(frozen=True, slots=True)
class NewJob:
    record_id: str
    metric: str
    metric_version: str
    status: str = PENDING
    reason: str | None = None


def clean_text(s: str) -> str:
    """Make ``s`` storable (and OTLP-encodable) as UTF-8: lone surrogates become ``\\udXXX``
    escapes. (ASCII text — most of it — is known clean without encoding a copy.)"""
    if s.isascii():
        return s
    try:
        s.encode("utf-8")
        return s
    except UnicodeEncodeError:
        return s.encode("utf-8", "backslashreplace").decode("utf-8")


def dumps(value: Any, limit: int | None = None) -> str:
    """JSON for storage: never raises (unknown objects become their repr), bounded if asked."""
    text = clean_text(_DUMPS.encode(value))
    if limit is not None and len(text) > limit:
        return json.dumps({"tracescore.truncated": True, "chars": len(text), "head": text[:1000]})
    return text


def _fallback(o: Any) -> Any:  # (the ``default`` of _DUMPS, below)
    if isinstance(o, float) and not math.isfinite(o):
        return str(o)
    if isinstance(o, (set, frozenset, tuple)):
        return list(o)
    return repr(o)[:1000]


#: values JSON takes as they are (floats apart: NaN and infinities are not JSON)
_JSON_PLAIN = frozenset({str, int, bool, type(None)})

#: :func:`dumps`' encoder, built once (``json.dumps`` with options builds one per call)
_DUMPS = json.JSONEncoder(default=_fallback, ensure_ascii=False, allow_nan=False)


def _json_safe(value: Any) -> Any:
    """Floats like NaN are not JSON; make them strings instead of failing the batch. (A
    flat dict of str keys and plain values — a context's metadata, a score's details — is
    JSON as it is: returned itself, not walked and copied. Written for every context of
    every record, the walk cost ~2 µs a dict.)"""
    if type(value) is dict:
        for k, v in value.items():
            t = type(v)
            if type(k) is not str or (t not in _JSON_PLAIN and (
                    t is not float or not math.isfinite(v))):
                break
        else:
            return value
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_safe(v) for v in value]
    return value


_RECORD_COLS = (
    "record_id", "trace_id", "span_id", "created_at", "source", "query", "answer", "contexts",
    "n_contexts", "ground_truths", "metadata", "tags", "session_id", "user_id", "latency_ms",
    "input_tokens", "output_tokens", "model", "error", "content_captured", "sample_u",
    "sampled", "sampled_metrics", "forced", "prompt", "retrieval_queries",
    *(name for name, _ in COMPACT_COLUMNS), "release", "environment", "seg_id",
    "candidates", "complete", "agent",
)
_CREATED = _RECORD_COLS.index("created_at")
_SEG = _RECORD_COLS.index("seg_id")
_FACT_COLS = tuple(_RECORD_COLS.index(c) for c in (
    "created_at", "seg_id", "sampled", "text_kept", "error", "input_tokens", "output_tokens",
    "latency_ms"))
#: a row's :data:`_FACT_COLS`, in :meth:`.rollup.Delta.add_record`'s order
_FACTS_OF = operator.itemgetter(*_FACT_COLS)
_NO_SEGMENTS = SegmentSpec()

#: A new score row, its segment its record's (``NONE_SEG`` for a record not stored); returns
#: nothing when the record has a score of that name already.
_INSERT_SCORE = (
    "INSERT INTO scores(job_id, record_id, trace_id, name, metric, metric_version, value, label,"
    " explanation, status, error, duration_ms, details, created_at, delivery, seg_id,"
    " judge_model, rec) SELECT ?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,"
    " coalesce((SELECT seg_id FROM records WHERE record_id = ?), ?), ?,"
    " (SELECT seq FROM records WHERE record_id = ?) WHERE true"
    " ON CONFLICT(rec, name) DO NOTHING RETURNING score_id, seg_id")
#: The stored scores of a record, as :meth:`.rollup.Delta.add_score` takes them.
_OLD_SCORES = ("SELECT name, created_at, seg_id, metric_version, judge_model, metric, value,"
               " label, status FROM scores WHERE rec = (SELECT seq FROM records"
               " WHERE record_id = ?)")


def add_record_row(delta: Delta, row: Sequence[Any]) -> None:
    """A :func:`record_row` tuple into ``delta`` (both backends)."""
    c = _FACT_COLS
    delta.add_record(row[c[0]], row[c[1]], row[c[2]], row[c[3]], row[c[4]], row[c[5]],
                     row[c[6]], row[c[7]])


def _opt(s: str | None) -> str | None:
    return None if s is None else clean_text(s)


#: The columns of a metric's declaration (``metrics`` table), in :func:`metric_row`'s order.
METRIC_COLS = ("metric", "version", "kind", "score_names", "higher_is_better", "threshold",
               "description", "updated_at", "is_binary")


def metric_row(m: Any, now: float) -> tuple[Any, ...]:
    """What a configured metric declares, as a ``metrics`` row (both backends)."""
    return (m.name, m.version, m.kind, dumps(list(m.names())),
            None if m.higher_is_better is None else int(m.higher_is_better),
            m.threshold, m.description, now, int(bool(getattr(m, "binary", False))))


def _error(r: RagRecord) -> str | None:
    """The run's error as stored: secrets scrubbed."""
    return _opt(scrub(r.error) if r.error else None)


def record_row(r: RagRecord, d: Decision, now: float, keep_full_text: bool = True,
               segments: SegmentSpec | None = None, seg_id: int = NONE_SEG) -> tuple[Any, ...]:
    """The ``records`` row of ``r`` (columns :data:`_RECORD_COLS`); ``segments``: the process's
    release and environment; ``seg_id``: the record's segment."""
    spec = segments or _NO_SEGMENTS
    seg = (spec.release, spec.environment, seg_id)
    created = r.end_time_ns / 1e9 if r.end_time_ns else now
    usage = (r.usage.input_tokens if r.usage else None,
             r.usage.output_tokens if r.usage else None)
    # (empty metadata and tags — most records — skip the JSON encoder's Python layer)
    metadata = dumps(_json_safe(dict(r.metadata)), MAX_METADATA_CHARS) if r.metadata else "{}"
    tags = dumps(list(r.tags)) if r.tags else "[]"
    if not keep_full_text and not d.metrics and r.content_captured:  # (should_compact)
        q_chars, q_hash = text_facts(r.query)
        a_chars, a_hash = text_facts(r.answer)
        return (
            r.record_id, r.trace_id, r.span_id, created, r.source, None, None,
            compact_contexts_json(r, dumps), len(r.contexts), "[]", metadata, tags,
            r.session_id, r.user_id, r.latency_ms, *usage, r.model, _error(r),
            int(r.content_captured), d.u, 0, "[]", d.forced, None, None,
            0, q_chars, q_hash, a_chars, a_hash, *seg, None, int(r.complete), None,
        )
    contexts = [
        {"text": clean_text(c.text), "id": c.id, "score": c.score,
         "metadata": _json_safe(dict(c.metadata)), "source": c.source}
        for c in r.contexts
    ]
    return (
        r.record_id, r.trace_id, r.span_id, created, r.source, _opt(r.query), _opt(r.answer),
        dumps(contexts), len(r.contexts), dumps([clean_text(g) for g in r.ground_truths]),
        metadata, tags,
        r.session_id, r.user_id, r.latency_ms, *usage,
        r.model, _error(r), int(r.content_captured), d.u, int(d.sampled),
        dumps(list(d.metrics)), d.forced, _opt(r.prompt),
        dumps([clean_text(q) for q in r.retrieval_queries]) if r.retrieval_queries else None,
        1, None, None, None, None, *seg, _candidates(r), int(r.complete), _agent(r),
    )


def _candidates(r: RagRecord) -> str | None:
    """``records.candidates``: every retrieved candidate and the step that produced or
    dropped it (schema v5), NULL when the run had none."""
    if not r.candidates:
        return None
    return dumps([{"text": clean_text(c.text), "id": c.id, "score": c.score,
                   "source": c.source, "kept": c.kept, "dropped_by": c.dropped_by}
                  if c.via is None else
                  {"text": clean_text(c.text), "id": c.id, "score": c.score,
                   "source": c.source, "kept": c.kept, "dropped_by": c.dropped_by,
                   "via": c.via}
                  for c in r.candidates])


def _agent(r: RagRecord) -> str | None:
    """``records.agent`` (SQLite 12 / PostgreSQL 11): the tool calls and offered tools."""
    return None if r.agent is None else dumps(_json_safe(agent_to_json(r.agent)))


def _stored_candidates(raw: str | None) -> tuple[Candidate, ...]:
    return tuple(
        Candidate(text=c.get("text") or "", id=c.get("id"), score=c.get("score"),
                  source=c.get("source"), kept=bool(c.get("kept", True)),
                  dropped_by=c.get("dropped_by"), via=c.get("via"))
        for c in json.loads(raw or "[]"))


def row_to_record(row: Mapping[str, Any]) -> RagRecord:
    compact = row.get("text_kept") == 0
    contexts = () if compact else tuple(
        Context(text=c["text"], id=c.get("id"), score=c.get("score"),
                metadata=c.get("metadata") or {}, source=c.get("source"))
        for c in json.loads(row["contexts"] or "[]")
    )
    candidates = () if compact else _stored_candidates(row.get("candidates"))
    agent = None if compact else agent_from_json(json.loads(row.get("agent") or "null"))
    usage = None
    if row["input_tokens"] is not None or row["output_tokens"] is not None:
        usage = TokenUsage(row["input_tokens"] or 0, row["output_tokens"] or 0)
    return RagRecord(
        trace_id=row["trace_id"], span_id=row["span_id"], query=row["query"],
        contexts=contexts, answer=row["answer"],
        ground_truths=tuple(json.loads(row["ground_truths"] or "[]")),
        metadata=json.loads(row["metadata"] or "{}"), tags=tuple(json.loads(row["tags"] or "[]")),
        session_id=row["session_id"], user_id=row["user_id"], usage=usage, model=row["model"],
        error=row["error"], source=row["source"] or "manual",
        content_captured=bool(row["content_captured"]), prompt=row.get("prompt"),
        retrieval_queries=tuple(json.loads(row.get("retrieval_queries") or "[]")),
        compact=compact,
        candidates=candidates, complete=row.get("complete", 1) != 0, agent=agent,
    )
