"""What tracescore accepts: ids, contexts, metadata — checked at the public API, bounded
before anything is stored or exported.

Two uses. :func:`check_*` raise a clear ``TypeError``/``ValueError`` for the public API
(:meth:`Tracescore.log_record`, :meth:`Tracescore.add_feedback`, ...). :func:`sanitize_record`
runs on the writer thread for every record however it was built (framework adapters, direct
``submit``): it bounds metadata (cut and marked, never lost) and raises :class:`InvalidRecord`
with a short reason key for what cannot be repaired, which the writer counts.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from ..record import Context, RagRecord

_TRACE_RE = re.compile(r"[0-9a-fA-F]{32}")
_SPAN_RE = re.compile(r"[0-9a-fA-F]{16}")
_HEX48_RE = re.compile(r"[0-9a-fA-F]{48}")

#: Metadata deeper than this is cut (the cut value is replaced by :data:`CUT_MARK`).
MAX_METADATA_DEPTH = 16
#: At most this many values (leaves and containers) are kept per metadata mapping.
MAX_METADATA_ITEMS = 2_000
#: Longer metadata strings are cut to this many characters.
MAX_METADATA_STRING = 8_192
CUT_MARK = "[tracescore: cut]"
#: Added to a metadata mapping that was cut: which bounds it hit.
TRUNCATED_KEY = "tracescore.truncated"


class InvalidRecord(ValueError):
    """A record that cannot be stored; ``reason`` is a short key for counting."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason


#: Control characters (C0, DEL, C1, line/paragraph separators, bidi overrides): never in a
#: name tracescore stores and prints.
_NAME_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200e\u200f\u202a-\u202e"
                           r"\u2066-\u2069]")
#: A judge model's name is cut to this many characters.
MAX_MODEL_CHARS = 200


def clean_name(text: Any, limit: int = MAX_MODEL_CHARS) -> str:
    """A name from outside (a judge server's reported model) as stored: ``str()``-ed, control
    characters removed (an escape sequence would retitle or clear the terminal that prints
    it), whitespace trimmed, cut to ``limit``."""
    return _NAME_CONTROL.sub("", text if isinstance(text, str) else str(text)).strip()[:limit]


def is_number(x: Any) -> bool:
    """A real number: an int or float, not a bool, not NaN."""
    return isinstance(x, (int, float)) and not isinstance(x, bool) and x == x


def check_id(value: Any, n: int, what: str) -> str:
    """A trace (n=32) or span (n=16) id as lower-case hex; raises TypeError/ValueError."""
    if not isinstance(value, str):
        raise TypeError(f"{what} must be a str of {n} hex characters, got "
                        f"{type(value).__name__} {value!r:.40}")
    if not (_TRACE_RE if n == 32 else _SPAN_RE).fullmatch(value):
        raise ValueError(f"{what} must be {n} hex characters, got {value!r:.80}")
    if int(value, 16) == 0:
        raise ValueError(f"{what} must not be all zeros (an invalid OpenTelemetry id)")
    return value.lower()


def valid_ids(trace_id: Any, span_id: Any) -> bool:
    """Cheap check for the hot path (no exception on the common path)."""
    if type(trace_id) is str and type(span_id) is str:
        # (the common case: one match over both, 32 then 16 hex characters)
        return (len(trace_id) == 32 and len(span_id) == 16
                and _HEX48_RE.fullmatch(trace_id + span_id) is not None)
    return (isinstance(trace_id, str) and isinstance(span_id, str)
            and _TRACE_RE.fullmatch(trace_id) is not None
            and _SPAN_RE.fullmatch(span_id) is not None)


def hot_reason(record: Any) -> str | None:
    """Why ``record`` cannot even be sampled (a short reason key), or None. Cheap: the hot
    path calls it; :func:`sanitize_record` checks the rest on the writer thread."""
    if type(record) is not RagRecord and not isinstance(record, RagRecord):
        return "not_a_record"
    if not valid_ids(record.trace_id, record.span_id):
        return "invalid_id"
    md = record.metadata
    if type(md) is not dict and not isinstance(md, Mapping):
        return "invalid_metadata"
    return None


def check_metadata(value: Any, what: str = "metadata") -> dict[str, Any]:
    """A metadata mapping, bounded (see :func:`bound_metadata`); raises TypeError otherwise."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} must be a mapping (dict) of str keys, got "
                        f"{type(value).__name__}")
    return bound_metadata(value)


def check_context(value: Any, i: int) -> Context:
    """A context given to the public API: a str, or a Context with a str text."""
    if isinstance(value, str):
        return Context(text=value)
    if not isinstance(value, Context):
        raise TypeError(f"contexts[{i}] must be a str or Context, got {type(value).__name__}")
    return _context(value, f"contexts[{i}]", TypeError)


def _context(c: Context, what: str, error: type[Exception]) -> Context:
    if not isinstance(c.text, str):
        raise error(f"{what}.text must be a str, got {type(c.text).__name__}")
    if c.id is not None and not isinstance(c.id, str):
        raise error(f"{what}.id must be a str or None, got {type(c.id).__name__}")
    if c.score is not None and (isinstance(c.score, bool)
                                or not isinstance(c.score, (int, float))):
        raise error(f"{what}.score must be a number or None, got {type(c.score).__name__}")
    if c.source is not None and not isinstance(c.source, str):
        raise error(f"{what}.source must be a str or None, got {type(c.source).__name__}")
    if c.metadata is not None and not isinstance(c.metadata, Mapping):
        raise error(f"{what}.metadata must be a mapping, got {type(c.metadata).__name__}")
    return c


def bound_metadata(value: Mapping[Any, Any]) -> dict[str, Any]:
    """A JSON-safe copy of ``value`` with bounded depth, size and string length.

    What goes beyond a bound is replaced by :data:`CUT_MARK`, and the mapping gets a
    ``"tracescore.truncated"`` entry naming the bounds hit. Never raises on odd values (they
    become their ``repr``), never recurses deeper than :data:`MAX_METADATA_DEPTH`.
    """
    state = _Bounds()
    out = state.copy(value, 0)
    assert isinstance(out, dict)
    if state.hit:
        out[TRUNCATED_KEY] = sorted(state.hit)
    return out


class _Bounds:
    __slots__ = ("items", "hit")

    def __init__(self) -> None:
        self.items = 0
        self.hit: set[str] = set()

    def copy(self, v: Any, depth: int) -> Any:
        self.items += 1
        if self.items > MAX_METADATA_ITEMS:
            self.hit.add("items")
            return CUT_MARK
        if v is None or isinstance(v, (bool, int)):
            return v
        if isinstance(v, float):
            return v if math.isfinite(v) else str(v)
        if isinstance(v, str):
            if len(v) > MAX_METADATA_STRING:
                self.hit.add("string_length")
                return v[:MAX_METADATA_STRING] + CUT_MARK
            return v
        if isinstance(v, Mapping) or isinstance(v, (list, tuple, set, frozenset)):
            if depth >= MAX_METADATA_DEPTH:
                self.hit.add("depth")
                return CUT_MARK
            if isinstance(v, Mapping):
                out: dict[str, Any] = {}
                for k, x in list(v.items()):
                    if self.items >= MAX_METADATA_ITEMS:
                        self.hit.add("items")
                        out[TRUNCATED_KEY + ".more"] = CUT_MARK
                        break
                    out[k if isinstance(k, str) else str(k)] = self.copy(x, depth + 1)
                return out
            seq = []
            for x in list(v):
                if self.items >= MAX_METADATA_ITEMS:
                    self.hit.add("items")
                    seq.append(CUT_MARK)
                    break
                seq.append(self.copy(x, depth + 1))
            return seq
        try:
            return repr(v)[:200]
        except Exception:
            return f"<{type(v).__name__}>"


def sanitize_record(record: Any) -> RagRecord:
    """Make a record storable, or raise :class:`InvalidRecord` (writer thread).

    Ids are normalised to lower case; metadata (the record's and its contexts') is bounded.
    """
    if not isinstance(record, RagRecord):
        raise InvalidRecord("not_a_record", f"expected a RagRecord, got {type(record).__name__}")
    try:
        trace_id = check_id(record.trace_id, 32, "trace_id")
    except (TypeError, ValueError) as exc:
        raise InvalidRecord("invalid_trace_id", str(exc)) from None
    try:
        span_id = check_id(record.span_id, 16, "span_id")
    except (TypeError, ValueError) as exc:
        raise InvalidRecord("invalid_span_id", str(exc)) from None
    for name in ("query", "answer", "error", "prompt", "session_id", "user_id", "model"):
        v = getattr(record, name)
        if v is not None and not isinstance(v, str):
            raise InvalidRecord(f"invalid_{name}",
                                f"{name} must be a str or None, got {type(v).__name__}")
    if not isinstance(record.metadata, Mapping):
        raise InvalidRecord("invalid_metadata",
                            f"metadata must be a mapping, got {type(record.metadata).__name__}")
    contexts = []
    try:
        for i, c in enumerate(record.contexts):
            if not isinstance(c, Context):
                raise InvalidRecord("invalid_context",
                                    f"contexts[{i}] must be a Context, got {type(c).__name__}")
            c = _context(c, f"contexts[{i}]", _InvalidContext)
            md = bound_metadata(c.metadata) if c.metadata else {}
            contexts.append(Context(c.text, c.id, c.score, md, c.source))
    except _InvalidContext as exc:
        raise InvalidRecord("invalid_context", str(exc)) from None
    except TypeError as exc:  # contexts not iterable
        raise InvalidRecord("invalid_context", str(exc)) from None
    gts = record.ground_truths
    if not all(isinstance(g, str) for g in gts):
        raise InvalidRecord("invalid_ground_truths", "ground_truths must all be str")
    return record.replace(trace_id=trace_id, span_id=span_id, contexts=tuple(contexts),
                          metadata=bound_metadata(record.metadata),
                          tags=tuple(str(t) for t in record.tags))


class _InvalidContext(ValueError):
    pass


# -- the writer's fast path --------------------------------------------------------------------
def is_sanitized(rec: Any) -> bool:
    """``rec`` is already what :func:`sanitize_record` would make of it (the common case:
    lower-case ids, text fields str, flat metadata within the bounds, plain contexts), so the
    queue's writer stores it as it is instead of copying it — that copy was a third of the writer's
    Python time per record. Anything else takes the full path."""
    if type(rec) is not RagRecord:
        return False
    t, s = rec.trace_id, rec.span_id
    if not (type(t) is str and type(s) is str and len(t) == 32 and len(s) == 16
            and _LOWER_HEX.fullmatch(t + s) and t != _ZERO_TRACE and s != _ZERO_SPAN):
        return False
    for v in (rec.query, rec.answer, rec.error, rec.prompt, rec.session_id, rec.user_id,
              rec.model):
        if v is not None and type(v) is not str:
            return False
    if not _flat(rec.metadata) or type(rec.tags) is not tuple or type(
            rec.ground_truths) is not tuple:
        return False
    for c in rec.contexts:
        if type(c) is not Context or type(c.text) is not str or not (
                c.id is None or type(c.id) is str) or not (
                c.source is None or type(c.source) is str) or not (
                c.score is None or type(c.score) in (int, float)) or (
                c.metadata and not _flat(c.metadata)) or type(c.metadata) is not dict:
            return False
    for x in rec.tags:
        if type(x) is not str:
            return False
    for x in rec.ground_truths:
        if type(x) is not str:
            return False
    return type(rec.contexts) is tuple


def _flat(md: Any) -> bool:
    """A dict of str keys and scalar values that :func:`bound_metadata` copies unchanged."""
    if type(md) is not dict or len(md) >= MAX_METADATA_ITEMS - 1:
        return False
    for k, v in md.items():
        if type(k) is not str:
            return False
        tv = type(v)
        if tv is str:
            if len(v) > MAX_METADATA_STRING:
                return False
        elif tv is float:
            if not math.isfinite(v):
                return False
        elif v is not None and tv is not int and tv is not bool:
            return False
    return True


_LOWER_HEX = re.compile(r"[0-9a-f]+")
_ZERO_TRACE, _ZERO_SPAN = "0" * 32, "0" * 16
