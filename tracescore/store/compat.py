"""A DB-API connection to either backend for the reading side (reports, CLI, tests).

The readers write their SQL once, in the dialect both engines agree on, with ``?``
placeholders, and read rows by index or by name (``sqlite3.Row``). On SQLite that is a plain
``sqlite3`` connection. On PostgreSQL, :class:`PgConnection` wraps a psycopg connection and
:func:`translate` applies the few dialect differences the readers hit — every one of them is
listed here, nowhere else:

- placeholders: ``?`` → ``%s`` (and a literal ``%`` → ``%%``);
- ``CAST(x AS INTEGER)`` truncates on SQLite but rounds on PostgreSQL → ``CAST(trunc(x) …)``;
- ``CROSS JOIN … ON`` (SQLite's hint to keep the join order) → ``JOIN … ON``;
- ``INDEXED BY name`` (SQLite's index hint) → nothing;
- catalogue questions (``has_table``/``table_names``) go through methods, not
  ``sqlite_master``.

The one condition each backend writes its own way: a trace's records
(:func:`trace_records`, :func:`trace_join`, :func:`trace_prefix`). On SQLite they are a range
of the primary key (``record_id`` is ``TRACE-SPAN``), so ``records`` needs no index on
``trace_id`` (one randomly placed page write less per record written and per record pruned,
issue 19); PostgreSQL keeps its ``trace_id`` index and the plain ``=`` (a non-C collation
does not order ``-`` and ``.`` byte-wise, so the range would be wrong there).

Portable SQL the readers use instead of SQLite-only forms: ``sum(CASE WHEN … THEN 1 ELSE 0
END)`` rather than ``sum(<boolean>)``, an alias on every subquery in ``FROM``, ``CASE`` or
Python rather than two-argument ``min``/``max``.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from typing import Any

__all__ = ["PgConnection", "PgRow", "connect_reader", "has_table", "trace_join",
           "trace_prefix", "trace_records", "translate"]

_TOKEN = re.compile(r"'(?:[^']|'')*'|\"(?:[^\"])*\"|\?|%")
_CAST_INT = re.compile(r"CAST\((.+?) AS INTEGER\)", re.IGNORECASE)
_CROSS = re.compile(r"\bCROSS JOIN\b", re.IGNORECASE)
_INDEXED_BY = re.compile(r"\s+INDEXED BY \w+", re.IGNORECASE)


def translate(sql: str) -> str:
    """SQLite-flavoured reader SQL → PostgreSQL (see the module docstring)."""
    def repl(m: re.Match[str]) -> str:
        tok = m.group(0)
        if tok == "?":
            return "%s"
        if tok == "%":
            return "%%"
        return tok.replace("%", "%%") if tok[0] == "'" else tok
    sql = _CAST_INT.sub(lambda m: f"CAST(trunc({m.group(1)}) AS INTEGER)", sql)
    sql = _CROSS.sub("JOIN", sql)
    sql = _INDEXED_BY.sub("", sql)  # SQLite's index hint; PostgreSQL's planner has statistics
    return _TOKEN.sub(repl, sql)


def _by_key(conn: Any) -> bool:
    """Whether ``conn`` (a connection or a store) finds a trace's records by primary-key range:
    SQLite only. Anything not known to be SQLite gets the plain ``trace_id =``, right on
    every backend."""
    return isinstance(conn, sqlite3.Connection) or getattr(conn, "dialect", None) == "sqlite"


def trace_records(conn: Any, trace_id: str, records: str = "") -> tuple[str, tuple[str, ...]]:
    """(SQL condition, its parameters): the rows of ``records`` (an alias, or "" for the bare
    table) of trace ``trace_id``. On SQLite a range of ``record_id`` — every record id is
    ``f"{trace_id}-{span_id}"`` (:attr:`~tracescore.record.RagRecord.record_id`), and ``.``
    follows ``-`` in byte order — plus the ``trace_id`` itself, so the condition is exact even
    for a row of another shape; elsewhere ``trace_id = ?``. (On SQLite that check is written
    ``+trace_id``: a term no index may serve, so the planner never builds an automatic index
    over every record for it instead of seeking the range.)"""
    p = f"{records}." if records else ""
    if _by_key(conn):
        return (f"{p}record_id >= ? AND {p}record_id < ? AND +{p}trace_id = ?",
                (trace_id + "-", trace_id + ".", trace_id))
    return f"{p}trace_id = ?", (trace_id,)


def trace_join(conn: Any, trace: str, records: str = "r") -> str:
    """SQL condition: ``records`` (an alias) are the records of the trace in ``trace``, a
    column of a table read before them (``l.trace_id``): :func:`trace_records` for a join,
    so SQLite drives from that table and seeks each trace's range of the primary key."""
    if _by_key(conn):
        return (f"{records}.record_id >= {trace} || '-' AND {records}.record_id < {trace} || '.'"
                f" AND +{records}.trace_id = {trace}")
    return f"{records}.trace_id = {trace}"


def trace_prefix(conn: Any, prefix: str) -> tuple[str, tuple[str, ...]]:
    """(SQL condition, its parameters): records whose trace id starts with ``prefix``, lower-case
    hex of at most 32 characters (a trace id's prefix is its record id's prefix: on SQLite
    the primary key's range serves it)."""
    cond = "trace_id >= ? AND trace_id < ?"
    args = (prefix, prefix + "g")  # ("g" follows every hex digit)
    if _by_key(conn):
        return "record_id >= ? AND record_id < ? AND " + cond, args + args
    return cond, args


class PgRow(tuple):  # type: ignore[type-arg]
    """A row readable by index and by column name, like ``sqlite3.Row``."""

    _names: tuple[str, ...] = ()

    def keys(self) -> list[str]:
        return list(self._names)

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, str):
            try:
                return tuple.__getitem__(self, self._names.index(key))
            except ValueError:
                raise IndexError(f"no such column: {key}") from None
        return tuple.__getitem__(self, key)


def _row_factory(cursor: Any) -> Any:
    names = tuple(c.name for c in cursor.description or ())
    cls = type("Row", (PgRow,), {"_names": names, "__slots__": ()})

    def make(values: Sequence[Any]) -> PgRow:
        return cls(values)  # type: ignore[no-any-return]
    return make


class PgCursor:
    def __init__(self, cur: Any) -> None:
        self._cur = cur

    @property
    def description(self) -> Any:
        return [(c.name, None, None, None, None, None, None) for c in self._cur.description or ()]

    @property
    def rowcount(self) -> int:
        return int(self._cur.rowcount)

    def fetchone(self) -> Any:
        return self._cur.fetchone()

    def fetchall(self) -> list[Any]:
        return list(self._cur.fetchall())

    def fetchmany(self, size: int = 1) -> list[Any]:
        return list(self._cur.fetchmany(size))

    def __iter__(self) -> Iterator[Any]:
        return iter(self._cur)

    def close(self) -> None:
        self._cur.close()


def connect(url: str, *, timeout_s: float = 5.0,
            read_only: bool = False) -> Any:
    """An autocommit PostgreSQL connection; ``timeout_s`` bounds the connect (the server may be
    down); ``read_only``: every statement runs in a read-only transaction (reports).
    psycopg is imported here: the SQLite path never loads it."""
    import psycopg

    if read_only:
        return psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(timeout_s)),
                               application_name="tracescore",
                               options="-c default_transaction_read_only=on")
    return psycopg.connect(url, autocommit=True, connect_timeout=max(1, int(timeout_s)),
                           application_name="tracescore")



class PgConnection:
    """A psycopg connection that speaks the readers' SQL (autocommit; ``?`` placeholders;
    rows like ``sqlite3.Row``). One per thread, like a ``sqlite3`` connection."""

    dialect = "postgres"

    def __init__(self, url: str, *, timeout_s: float = 10.0, read_only: bool = False) -> None:
        self.url = url
        self.conn = connect(url, timeout_s=timeout_s, read_only=read_only)
        self.conn.row_factory = _row_factory

    def execute(self, sql: str, params: Sequence[Any] = ()) -> PgCursor:
        return PgCursor(self.conn.execute(translate(sql), tuple(params)))

    def executemany(self, sql: str, rows: Sequence[Sequence[Any]]) -> PgCursor:
        cur = self.conn.cursor()
        cur.executemany(translate(sql), rows)
        return PgCursor(cur)

    def table_names(self) -> set[str]:
        return {r[0] for r in self.conn.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_schema = current_schema()")}

    def commit(self) -> None:  # autocommit
        pass

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> PgConnection:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def has_table(conn: Any, name: str) -> bool:
    """Whether the database behind ``conn`` (sqlite3 or :class:`PgConnection`) has ``name``."""
    if isinstance(conn, PgConnection):
        return name in conn.table_names()
    return conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                        (name,)).fetchone() is not None


def connect_reader(db: str) -> Any:
    """A reading connection to ``db``: :class:`PgConnection` for a URL, else ``sqlite3`` with
    ``sqlite3.Row`` rows (read-write; reports open SQLite read-only themselves)."""
    if db.startswith(("postgresql://", "postgres://")):
        return PgConnection(db)
    conn = sqlite3.connect(db, timeout=30.0)
    conn.row_factory = sqlite3.Row
    return conn
