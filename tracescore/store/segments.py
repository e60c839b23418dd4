"""Segments: the dimensions a record is compared by, with bounded cardinality.

A record's segment is its values of the *record dimensions*: ``release`` and ``environment``
(process-level, from ``init`` or the OpenTelemetry resource: :func:`release_environment`),
``model`` (:attr:`RagRecord.model`) and ``metadata.<key>`` for each metadata key declared with
``init(segments=[...])``. Values are ``str()``-ed, stripped of control characters and cut to
:data:`MAX_VALUE_CHARS`; a missing (or empty) value is None. The judge model and the metric
version are dimensions of a *score*, kept as columns of ``scores`` and ``hourly_scores``.

Bounded cardinality: per dimension at most ``limit`` distinct values are admitted (table
``segment_values``, shared by every process on the database); past that, a new value is stored
as :data:`OTHER` and the counter ``segments.overflow.<dim>`` is bumped once per record. A
million distinct tenants therefore cost ``limit`` rows and one counter, never a million
segments — and never unbounded memory: :class:`SegmentResolver` knows at most ``limit`` values
per dimension and at most :data:`MAX_CACHED_SEGMENTS` segment ids.

Bounded combinations: the values of several dimensions multiply (three declared keys of 60
values each make 216,000 combinations), so the ``segments`` table holds at most
``max_segments`` (``init(max_segments=...)``, default :data:`DEFAULT_MAX_SEGMENTS`) combinations.
Past that, a record of a new combination keeps its release and environment and has every other
dimension :data:`OTHER` (a few more rows, :data:`OVERFLOW_SLACK` at most; past those, every
dimension is :data:`OTHER`), and the counter ``segments.overflow.segments`` is bumped once per
such record — ``report`` and ``stats()`` show it with the per-dimension ones.

A segment's canonical key (``seg_key``: sorted JSON of its non-None values) maps to a
``seg_id`` through the ``segments`` table, get-or-create: ``INSERT … ON CONFLICT (seg_key) DO
NOTHING`` then ``SELECT``, so several processes on one PostgreSQL database agree. ``seg_id``
:data:`NONE_SEG` (0) is the segment with no value at all (created by the schema step).

Resolution runs on the writer thread (:meth:`Store.write_batch <.sqlite.Store.write_batch>`),
never on the app's: the request path only carries the record. New values and segments are
admitted in their own short transaction, committed before the batch's, so a failed batch
never leaves the in-memory cache pointing at rows that were rolled back.
"""

from __future__ import annotations

import json
import os
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..record import RagRecord
from .rollup import qmark_tx

__all__ = ["MAX_VALUE_CHARS", "NONE_SEG", "OTHER", "RECORD_DIMS", "SegmentResolver",
           "SegmentSpec", "clean_value", "ddl", "release_environment", "seg_key"]

#: The value a dimension's new values take once it has ``limit`` distinct values.
OTHER = "other"
#: Values are cut to this many characters.
MAX_VALUE_CHARS = 100
#: ``init(segment_limit=...)``'s default, and its largest allowed value.
DEFAULT_LIMIT = 100
MAX_LIMIT = 10_000
#: ``init(max_segments=...)``'s default (segments in the ``segments`` table), and its limits.
DEFAULT_MAX_SEGMENTS = 1000
MAX_MAX_SEGMENTS = 100_000
#: Degraded segments (release and environment kept) admitted past ``max_segments``.
OVERFLOW_SLACK = 100
#: The pseudo-dimension a record counts against when its combination was degraded.
COMBINATIONS = "segments"
#: At most this many declared metadata keys.
MAX_KEYS = 20
#: The record dimensions besides ``metadata.<key>``.
RECORD_DIMS = ("release", "environment", "model")
META = "metadata."
#: Counter (``counters`` table) of records whose value of ``<dim>`` became :data:`OTHER`.
OVERFLOW_COUNTER = "segments.overflow."
#: The segment with no value at all (release, environment, model unknown, no metadata key).
NONE_SEG = 0
NONE_KEY = "{}"
#: Segment ids a resolver keeps in memory (least recently used go first); also the size of
#: its cache of raw values → segment (emptied when full).
MAX_CACHED_SEGMENTS = 4096
#: pg_advisory_xact_lock(key, hashtext(dim)) while a dimension admits new values.
_PG_LOCK_KEY = 0x7473  # "ts"

_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")

#: OpenTelemetry resource attributes read for release and environment (semantic conventions;
#: ``deployment.environment`` is the name before 1.27).
RESOURCE_RELEASE = "service.version"
RESOURCE_ENVIRONMENT = ("deployment.environment.name", "deployment.environment")
ENV_RELEASE = "TRACESCORE_RELEASE"
ENV_ENVIRONMENT = "TRACESCORE_ENVIRONMENT"


def clean_value(value: Any) -> str | None:
    """A dimension value as stored: ``str()``-ed, control characters removed, cut to
    :data:`MAX_VALUE_CHARS`; None for a missing or empty value."""
    if value is None:
        return None
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # a metadata object whose __str__ fails: no value, not a failed batch
        return None
    text = _CONTROL.sub("", text).strip()[:MAX_VALUE_CHARS]
    return text or None


@dataclass(frozen=True)
class SegmentSpec:
    """What a process's records are segmented by (picklable: it travels to the writer).

    ``release``/``environment``: the process's (see :func:`release_environment`); ``keys``:
    declared metadata keys; ``limit``: distinct values admitted per dimension;
    ``max_segments``: combinations admitted in all."""

    release: str | None = None
    environment: str | None = None
    keys: tuple[str, ...] = ()
    limit: int = DEFAULT_LIMIT
    max_segments: int = DEFAULT_MAX_SEGMENTS

    def dims(self, record: RagRecord) -> dict[str, str | None]:
        """The record's raw dimension values (cleaned; not yet bounded)."""
        out: dict[str, str | None] = {"release": clean_value(self.release),
                                      "environment": clean_value(self.environment),
                                      "model": clean_value(record.model)}
        if self.keys:
            md = record.metadata if isinstance(record.metadata, Mapping) else {}
            for k in self.keys:
                out[META + k] = clean_value(md.get(k))
        return out


def seg_key(dims: Mapping[str, str | None]) -> str:
    """The canonical key of a segment: sorted JSON of its non-None values."""
    return json.dumps({k: v for k, v in dims.items() if v is not None}, sort_keys=True,
                      ensure_ascii=False, separators=(",", ":"))


def release_environment(release: str | None, environment: str | None, resource: Any,
                        environ: Mapping[str, str] | None = None
                        ) -> tuple[str | None, str | None]:
    """The process's release and environment: the ``init`` argument; else the tracer
    provider's resource (``service.version``; ``deployment.environment.name``, or the older
    ``deployment.environment`` — ``Resource.create`` reads ``OTEL_RESOURCE_ATTRIBUTES``);
    else ``$TRACESCORE_RELEASE`` / ``$TRACESCORE_ENVIRONMENT``; else None."""
    env = os.environ if environ is None else environ
    attrs: Mapping[str, Any] = getattr(resource, "attributes", None) or {}
    if release is None:
        release = clean_value(attrs.get(RESOURCE_RELEASE)) or clean_value(env.get(ENV_RELEASE))
    if environment is None:
        environment = next((v for v in (clean_value(attrs.get(k)) for k in RESOURCE_ENVIRONMENT)
                            if v), None) or clean_value(env.get(ENV_ENVIRONMENT))
    return release, environment


def ddl(dialect: str) -> tuple[str, ...]:
    """The ``segments`` and ``segment_values`` tables (schema version 3)."""
    seg_id = "BIGSERIAL PRIMARY KEY" if dialect == "postgres" else "INTEGER PRIMARY KEY"
    return (
        f"""CREATE TABLE IF NOT EXISTS segments (
            seg_id {seg_id}, seg_key TEXT NOT NULL UNIQUE, release TEXT, environment TEXT,
            model TEXT, meta TEXT NOT NULL DEFAULT '{{}}', first_seen DOUBLE PRECISION)""",
        """CREATE TABLE IF NOT EXISTS segment_values (
            dim TEXT NOT NULL, value TEXT NOT NULL, PRIMARY KEY (dim, value))"""
        + (" WITHOUT ROWID" if dialect == "sqlite" else ""),
    )


def _raw_key(record: RagRecord, spec: SegmentSpec) -> tuple[Any, ...] | None:
    """What a record's segment depends on, when every value is a str or None (else None: the
    full path; 1, 1.0 and True are equal keys but different values)."""
    model = record.model
    if model is not None and type(model) is not str:
        return None
    if not spec.keys:
        return (spec, model)
    md = record.metadata
    if not isinstance(md, Mapping):
        return None
    vals = tuple(md.get(k) for k in spec.keys)
    for v in vals:
        if v is not None and type(v) is not str:
            return None
    return (spec, model, vals)


def _marks(n: int) -> str:
    return ",".join("?" * n)


def _chunks(items: Sequence[Any], n: int = 500) -> Iterable[Sequence[Any]]:
    """``items`` in slices of ``n`` (the store's ``IN (...)`` lists stay under SQLite's
    parameter limit); the store's one chunker."""
    for i in range(0, len(items), n):
        yield items[i:i + n]


class SegmentResolver:
    """Records → ``seg_id`` for one store object (so one thread: not thread-safe).

    Memory is bounded: per dimension the admitted values it has seen (at most the limit),
    and :data:`MAX_CACHED_SEGMENTS` segment ids. Blocking I/O on a cache miss only.
    """

    def __init__(self, max_segments: int = MAX_CACHED_SEGMENTS) -> None:
        self.max_segments = max_segments
        self.reset()

    def reset(self) -> None:
        """Forget everything (after a failed transaction the caller was part of)."""
        self._known: dict[str, set[str]] = {}
        #: dimensions that hold ``limit`` values: every value not known here is OTHER
        self._full: set[str] = set()
        self._ids: OrderedDict[str, int] = OrderedDict({NONE_KEY: NONE_SEG})
        #: combinations past ``max_segments`` → the seg_id that stands in for them
        self._over: dict[str, int] = {}
        #: (spec, model, metadata values) → resolution, for records whose values are all
        #: str or None (the writer's hot loop: no cleaning, no JSON on a hit)
        self._fast: dict[tuple[Any, ...], tuple[int, tuple[str, ...]]] = {}

    def known_values(self, dim: str) -> int:
        """How many values of ``dim`` this resolver holds in memory."""
        return len(self._known.get(dim, ()))

    def resolve(self, store: Any, records: Sequence[RagRecord], spec: SegmentSpec,
                now: float) -> list[tuple[int, tuple[str, ...]]]:
        """Per record: (seg_id, the dimensions whose value became :data:`OTHER`)."""
        out: list[tuple[int, tuple[str, ...]] | None] = []
        keys: list[tuple[Any, ...] | None] = []
        todo: list[int] = []
        fast = self._fast
        for i, r in enumerate(records):
            key = _raw_key(r, spec)
            hit = fast.get(key) if key is not None else None
            keys.append(key)
            out.append(hit)
            if hit is None:
                todo.append(i)
        if todo:
            got = self.resolve_dims(store, [spec.dims(records[i]) for i in todo], spec.limit,
                                    now, max_segments=spec.max_segments)
            if len(fast) + len(todo) > self.max_segments:
                fast.clear()  # bounded: a flood of distinct values empties it, never grows it
            for i, res in zip(todo, got):
                out[i] = res
                key = keys[i]
                if key is not None:
                    fast[key] = res
        return out  # type: ignore[return-value]  # (every slot is filled above)

    def resolve_dims(self, store: Any, raw: Sequence[Mapping[str, str | None]], limit: int,
                     now: float, *, max_segments: int = DEFAULT_MAX_SEGMENTS
                     ) -> list[tuple[int, tuple[str, ...]]]:
        unknown: dict[str, dict[str, None]] = {}  # dim → new values, in order of arrival
        for dims in raw:
            for dim, v in dims.items():
                if v is not None and dim not in self._full \
                        and v not in self._known.get(dim, ()):
                    unknown.setdefault(dim, {})[v] = None
        if unknown:
            self._admit(store, unknown, limit)
        bounded: list[tuple[dict[str, str | None], tuple[str, ...]]] = []
        for dims in raw:
            out: dict[str, str | None] = {}
            over: list[str] = []
            for dim, v in dims.items():
                if v is None:
                    continue
                if v in self._known.get(dim, ()):
                    out[dim] = v
                else:
                    out[dim] = OTHER
                    over.append(dim)
            bounded.append((out, tuple(over)))
        keys = [seg_key(d) for d, _ in bounded]
        found: dict[str, int] = {}
        missing: dict[str, dict[str, str | None]] = {}
        over_ids = self._over
        if len(over_ids) > self.max_segments:
            over_ids.clear()  # bounded like the rest (before the lookups that rely on it)
        for key, (dims, _) in zip(keys, bounded):
            if key in over_ids:
                continue
            sid = self._ids.get(key)
            if sid is None:
                missing[key] = dims
            else:
                found[key] = sid
                self._ids.move_to_end(key)
        if missing:
            made, degraded = self._create(store, missing, now, max_segments)
            found.update(made)
            for key, stand_in in degraded.items():
                over_ids[key] = made[stand_in]
        return [(over_ids[k], (*over, COMBINATIONS)) if k in over_ids else (found[k], over)
                for k, (_, over) in zip(keys, bounded)]

    def _admit(self, store: Any, unknown: Mapping[str, Mapping[str, None]], limit: int) -> None:
        """Look the new values up, admit those there is room for (own transaction)."""
        pg = getattr(store, "dialect", "sqlite") == "postgres"
        learned: dict[str, set[str]] = {}
        full: set[str] = set()
        with qmark_tx(store) as conn:
            for dim in sorted(unknown):  # sorted: the advisory locks in one order
                if pg:  # one process at a time counts and admits a dimension's values
                    conn.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))",
                                 (_PG_LOCK_KEY, dim))
                values = list(unknown[dim])
                have: set[str] = set()
                for chunk in _chunks(values):
                    have.update(r[0] for r in conn.execute(
                        f"SELECT value FROM segment_values WHERE dim = ? AND value IN "
                        f"({_marks(len(chunk))})", (dim, *chunk)).fetchall())
                new = [v for v in values if v not in have]
                if new:
                    count = int(conn.execute("SELECT count(*) FROM segment_values WHERE dim = ?",
                                             (dim,)).fetchone()[0])
                    take = new[:max(0, limit - count)]
                    if take:
                        conn.executemany("INSERT INTO segment_values (dim, value) VALUES (?, ?)"
                                         " ON CONFLICT (dim, value) DO NOTHING",
                                         [(dim, v) for v in take])
                    have.update(take)
                    if count + len(take) >= limit:
                        # Full: learn every admitted value once (at most ~limit), so later
                        # unknown values are OTHER without a query per record.
                        have.update(r[0] for r in conn.execute(
                            "SELECT value FROM segment_values WHERE dim = ? LIMIT ?",
                            (dim, max(limit, count) + len(take))).fetchall())
                        full.add(dim)
                learned[dim] = have
        # (only after the commit: a rolled-back admission must not stay cached)
        for dim, have in learned.items():
            self._known.setdefault(dim, set()).update(have)
        self._full |= full

    def _create(self, store: Any, missing: Mapping[str, Mapping[str, str | None]],
                now: float, max_segments: int) -> tuple[dict[str, int], dict[str, str]]:
        """Get-or-create the segments of ``missing`` (own transaction), within
        ``max_segments``: (key → seg_id, key of a combination past the bound → the key of the
        segment that stands in for it, in the first mapping too)."""
        out: dict[str, int] = {}
        degraded: dict[str, str] = {}
        keys = sorted(missing)
        with qmark_tx(store) as conn:
            if getattr(store, "dialect", "sqlite") == "postgres":  # one process counts at once
                conn.execute("SELECT pg_advisory_xact_lock(?, hashtext(?))",
                             (_PG_LOCK_KEY, COMBINATIONS))
            for chunk in _chunks(keys):
                for sid, key in conn.execute(
                        f"SELECT seg_id, seg_key FROM segments WHERE seg_key IN "
                        f"({_marks(len(chunk))})", tuple(chunk)).fetchall():
                    out[key] = int(sid)
            new = [k for k in keys if k not in out]
            if new:
                count = int(conn.execute("SELECT count(*) FROM segments").fetchone()[0])
                room = max(0, max_segments + 1 - count)  # (+1: NONE_SEG is not a combination)
                take, rest = new[:room], new[room:]
                stand_in: dict[str, dict[str, str | None]] = {}
                for key in rest:
                    d = _degrade(missing[key], all_of=count + len(stand_in)
                                 >= max_segments + 1 + OVERFLOW_SLACK)
                    sk = seg_key(d)
                    degraded[key] = sk
                    if sk not in out:
                        stand_in[sk] = d
                rows = [_segment_row(k, missing[k], now) for k in take]
                rows += [_segment_row(k, d, now) for k, d in stand_in.items()]
                conn.executemany(
                    "INSERT INTO segments (seg_key, release, environment, model, meta,"
                    " first_seen) VALUES (?,?,?,?,?,?) ON CONFLICT (seg_key) DO NOTHING", rows)
                wanted = [r[0] for r in rows]
                for chunk in _chunks(wanted):
                    for sid, key in conn.execute(
                            f"SELECT seg_id, seg_key FROM segments WHERE seg_key IN "
                            f"({_marks(len(chunk))})", tuple(chunk)).fetchall():
                        out[key] = int(sid)
        # (only after the commit: a rolled-back creation must not stay cached; a degraded
        # combination is cached under its own key, so it is not counted again)
        for key, sid in out.items():
            self._ids[key] = sid
            self._ids.move_to_end(key)
        while len(self._ids) > self.max_segments:
            self._ids.popitem(last=False)
        return out, degraded


def _degrade(dims: Mapping[str, str | None], *, all_of: bool) -> dict[str, str | None]:
    """A combination past the bound: release and environment kept (unless ``all_of``), every
    other dimension that has a value :data:`OTHER`."""
    keep = () if all_of else ("release", "environment")
    return {k: (v if k in keep else OTHER) for k, v in dims.items() if v is not None}


def _segment_row(key: str, d: Mapping[str, str | None], now: float) -> tuple[Any, ...]:
    meta = {k[len(META):]: v for k, v in d.items() if k.startswith(META)}
    return (key, d.get("release"), d.get("environment"), d.get("model"),
            json.dumps(meta, sort_keys=True, ensure_ascii=False), now)
