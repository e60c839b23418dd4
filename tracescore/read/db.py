"""Opening a tracescore database for reading, and the time arguments of the read commands.

Every read command opens the database through :func:`open_db` (read-only; SQLite or a
``postgresql://`` URL) and parses ``--since`` / window lengths with :func:`parse_since` /
:func:`parse_duration`. Blocking I/O.
"""

from __future__ import annotations

import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from ..store import SCHEMA_VERSION

__all__ = ["DatabaseError", "has_table", "open_db", "parse_duration", "parse_since"]


class DatabaseError(Exception):
    """The database is missing, unreadable or not a tracescore database."""


#: The oldest schema the read commands can read: version 3 brought the hourly rollups every
#: read stands on (both backends). A database an older tracescore wrote is upgraded in place
#: the first time this version's store opens it (an app's ``init``, ``tracescore worker``);
#: a read never writes, so it says so instead of failing on a missing table.
MIN_READ_VERSION = 3


def _too_old(where: str, version: Any, latest: int) -> DatabaseError:
    return DatabaseError(
        f"{where} has schema version {version}, written by an older tracescore: the read "
        f"commands need version {MIN_READ_VERSION} or later (this tracescore writes "
        f"{latest}). A read never writes; upgrade it in place once by opening it with this "
        "version's store — start the app or `tracescore worker` on it, or run: python -c "
        "\"from tracescore.store import open_store; open_store('DB').close()\" (DB: the "
        "path or URL)")


# -- opening ---------------------------------------------------------------------------------
def open_db(path: str | Path) -> sqlite3.Connection:
    """Open a tracescore database read-only; :class:`DatabaseError` with a clear reason if not.

    ``path`` may be a ``postgresql://`` URL: the connection is then a
    :class:`~tracescore.store.compat.PgConnection`, which runs the same SQL (typed as
    ``sqlite3.Connection`` for the readers: it has the methods they use).
    """
    if isinstance(path, str) and path.startswith(("postgresql://", "postgres://")):
        return _open_pg(path)
    p = Path(path)
    if not p.exists():
        raise DatabaseError(f"database not found: {p}")
    if p.is_dir():
        raise DatabaseError(f"{p} is a folder, not a tracescore database")
    # mode=ro: a report never writes, and works on a file the user may only read.
    uri = p.resolve().as_uri() + "?mode=ro"
    try:
        conn = sqlite3.connect(uri, uri=True, timeout=30.0)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA busy_timeout=30000")
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.Error as exc:
        raise DatabaseError(f"cannot read {p} as a SQLite database: not a tracescore "
                            f"database or it is corrupt ({exc})") from exc
    missing = {"records", "jobs", "scores", "counters", "meta"} - tables
    if missing:
        conn.close()
        raise DatabaseError(
            f"{p} is not a tracescore database (no {', '.join(sorted(missing))} table)"
        )
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    if row is not None and int(row[0]) < MIN_READ_VERSION:
        conn.close()
        raise _too_old(str(p), row[0], SCHEMA_VERSION)
    if row is not None and int(row[0]) > SCHEMA_VERSION:
        conn.close()
        raise DatabaseError(
            f"{p} has schema version {row[0]}, newer than this tracescore understands "
            f"({SCHEMA_VERSION}); upgrade tracescore"
        )
    return conn


def _open_pg(url: str) -> sqlite3.Connection:
    from ..store import redact_url
    from ..store.base import redact_text
    from ..store.compat import PgConnection
    from ..store.migrations import POSTGRES_MIGRATIONS

    try:
        conn = PgConnection(url, read_only=True)  # a report never writes, as on SQLite
        tables = conn.table_names()
    except ImportError as exc:
        raise DatabaseError(str(exc)) from None
    except Exception as exc:  # psycopg.Error: server down, no such database, auth
        raise DatabaseError(
            f"cannot read {redact_url(url)}: {redact_text(str(exc), url)}".strip()) from None
    missing = {"records", "jobs", "scores", "counters", "meta"} - tables
    if missing:
        conn.close()
        raise DatabaseError(f"{redact_url(url)} is not a tracescore database "
                            f"(no {', '.join(sorted(missing))} table)")
    row = conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    latest = POSTGRES_MIGRATIONS[-1].version
    if row is not None and int(row[0]) < MIN_READ_VERSION:
        conn.close()
        raise _too_old(redact_url(url), row[0], latest)
    if row is not None and int(row[0]) > latest:
        conn.close()
        raise DatabaseError(f"{redact_url(url)} has schema version {row[0]}, newer than this "
                            f"tracescore understands ({latest}); upgrade tracescore")
    return conn  # type: ignore[return-value]


def has_table(conn: sqlite3.Connection, name: str) -> bool:
    """Whether the database has table ``name`` (older databases lack newer tables)."""
    from ..store.compat import has_table as has

    return has(conn, name)


# -- --since ---------------------------------------------------------------------------------
_SINCE_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw])\s*$")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_since(text: str | None, now: float | None = None) -> float | None:
    """``"30m"``, ``"1h"``, ``"2d"``, ``"1w"`` → a unix-seconds cutoff; ``"all"``/None → None."""
    if text is None or text.strip().lower() == "all":
        return None
    m = _SINCE_RE.match(text.lower())
    if not m:
        raise ValueError(
            f"{text!r} is not a duration; use a number and a unit (s, m, h, d, w), e.g. 30m, "
            "1h, 2d, or 'all'"
        )
    now = time.time() if now is None else now
    return now - float(m.group(1)) * _UNIT_S[m.group(2)]




def parse_duration(text: str) -> float:
    """``"30m"``, ``"1h"``, ``"2d"``, ``"1w"`` → seconds (ValueError with the accepted forms)."""
    m = _SINCE_RE.match(text.lower())
    if not m:
        raise ValueError(
            f"{text!r} is not a duration; use a number and a unit (s, m, h, d, w), e.g. 30m, "
            "1h, 2d")
    return float(m.group(1)) * _UNIT_S[m.group(2)]
