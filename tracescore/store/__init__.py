"""Storage: records, scoring jobs, scores, feedback, judge cache and counters.

The database is the source of truth for reports; the full context text lives here even when
span attributes are truncated. Every method does blocking I/O and must never be called on the
app's request path (the writer thread, the scoring worker and the CLI call it).

- :mod:`.sqlite` — the embedded backend: one SQLite file in WAL mode through sqlite-utils, one
  :class:`Store` per thread; also the backend-neutral row types (:class:`Job`,
  :class:`NewJob`, job states) and the JSON helpers used to store them.
- :mod:`.postgres` — PostgreSQL through psycopg 3, for fleets (``db="postgresql://..."``).
- :mod:`.base` — :class:`StoreAPI` (the method set both implement) and :func:`open_store`,
  which picks the backend from ``db``.
- :mod:`.migrations` — the ordered, versioned schema steps of each backend.
- :mod:`.compat` — the reading side's SQL on a PostgreSQL connection (dialect differences).
- :mod:`.copy` — ``tracescore copy-to-postgres``: a SQLite history into PostgreSQL.
- bounded storage: :mod:`.compact` (text-less rows for unsampled records), :mod:`.retention`
  (the pruner and its background thread), :mod:`.rollup` (hourly aggregates per segment, kept
  up to date as rows are written, that outlive it).
- :mod:`.segments` — what records are compared by (release, environment, model, declared
  metadata keys), with bounded cardinality: :class:`SegmentSpec`, the ``segments`` table.
"""

from __future__ import annotations

from .base import StoreAPI, is_postgres, open_store, redact_url
from .rows import (
    DONE,
    LEASED,
    MAX_METADATA_CHARS,
    PENDING,
    SKIPPED,
    Job,
    NewJob,
    clean_text,
    dumps,
    record_row,
    row_to_record,
)
from .segments import SegmentSpec
from .sqlite import SCHEMA_VERSION, Store

__all__ = ["DONE", "LEASED", "MAX_METADATA_CHARS", "PENDING", "SCHEMA_VERSION", "SKIPPED", "Job",
           "NewJob", "SegmentSpec", "Store", "StoreAPI", "clean_text", "dumps", "is_postgres",
           "open_store", "record_row", "redact_url", "row_to_record"]
