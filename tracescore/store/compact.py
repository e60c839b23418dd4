"""Compact rows: what is kept of a record whose text is not (issue 13).

An unsampled record is stored without its text unless ``keep_full_text=True``: the reports
need its ids, time, latency, token usage, model, error type and sampling decision, plus the
length and a content hash of the query, each context and the answer (to spot repeated
questions or documents, and to tell how big the text was) — not the text itself.

Compaction runs on the writer thread (:meth:`Store.write_batch`), never on the app's thread.
A compact record cannot be scored later: metrics that need its text are *skipped* with
:func:`skip_reason` (never a silent 0, never an error storm).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from ..record import RagRecord

#: Columns schema version 2 adds to ``records`` (NULL in rows written before it: full text).
COMPACT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("text_kept", "INTEGER"), ("query_chars", "INTEGER"), ("query_hash", "TEXT"),
    ("answer_chars", "INTEGER"), ("answer_hash", "TEXT"),
)

#: The content-hash scheme: the first 8 bytes of BLAKE2b as 16 hex characters (equality and
#: de-duplication, not security).
HASH_NAME = "blake2b-64"


def content_hash(text: str) -> str:
    h = _BLAKE2B_64.copy()  # (a copy costs less than a new object's keyword arguments)
    h.update(text.encode("utf-8", "backslashreplace"))
    return h.hexdigest()


_BLAKE2B_64 = hashlib.blake2b(digest_size=8)


def compact_contexts_json(record: RagRecord, dump: Callable[[Any], str]) -> str:
    """``dump(compact_contexts(record))`` — the same text — without a dict and a JSON encoder
    pass per plain context (no id, score or source: what most records have). The writer
    stores a compact row per unsampled record, and the JSON encoder's Python layer cost more
    than the hashing. ``dump``: the store's JSON encoder (``", "`` and ``": "`` separators,
    non-ASCII as it is), for the contexts that have an id, a score or a source."""
    parts = []
    for c in record.contexts:
        text = c.text
        if c.id is None and c.score is None and c.source is None:
            parts.append(f'{{"chars": {len(text)}, "hash": "{content_hash(text)}"}}')
        else:
            parts.append(dump(_compact(text, c.id, c.score, c.source)))
    return "[" + ", ".join(parts) + "]"


def should_compact(record: RagRecord, sampled: bool, keep_full_text: bool) -> bool:
    """Whether ``record`` is stored compact: not sampled, text captured, and not kept."""
    return not keep_full_text and not sampled and record.content_captured


def compact_contexts(record: RagRecord) -> list[dict[str, Any]]:
    """Per context: its id, retrieval score and source when set, its length and hash."""
    return [_compact(c.text, c.id, c.score, c.source) for c in record.contexts]


def compact_stored_contexts(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """:func:`compact_contexts` of a full row's stored ``contexts`` JSON (deferred compaction)."""
    return [_compact(c.get("text") or "", c.get("id"), c.get("score"), c.get("source"))
            for c in items]


def _compact(text: str, id_: Any, score: Any, source: Any) -> dict[str, Any]:
    item: dict[str, Any] = {"chars": len(text), "hash": content_hash(text)}
    if id_ is not None:
        item["id"] = id_
    if score is not None:
        item["score"] = score
    if source is not None:
        item["source"] = source
    return item


def text_facts(text: str | None) -> tuple[int | None, str | None]:
    if text is None:
        return None, None
    return len(text), content_hash(text)


def skip_reason(sample_rate: float | None = None, window_s: float | None = None) -> str:
    """Why a metric cannot score a compact record (the job's and the score's reason)."""
    rate = "" if sample_rate is None else f"sample_rate {sample_rate:g}, "
    if window_s is not None:
        return (f"record stored compact: text not kept ({rate}not sampled; its text was "
                f"dropped after the keep_full_text window of {window_s:g} s)")
    return (f"record stored compact: text not kept ({rate}keep_full_text=False; it was not "
            "sampled when it was written)")
