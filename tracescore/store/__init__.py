"""Storage: records, scoring jobs, scores, feedback, judge cache and counters.

The database is the source of truth for reports; the full context text lives here even when
span attributes are truncated. Every method does blocking I/O and must never be called on the
app's request path (the writer thread, the scoring worker and the CLI call it).

- :mod:`.sqlite` — the embedded backend: one SQLite file in WAL mode through sqlite-utils, one
  :class:`Store` per thread; also the backend-neutral row types (:class:`Job`,
  :class:`NewJob`, job states) and the JSON helpers used to store them.

A second backend (PostgreSQL, for fleets) sits beside it behind the same method set.
"""

from __future__ import annotations

from .sqlite import (
    DONE,
    LEASED,
    MAX_METADATA_CHARS,
    PENDING,
    SCHEMA_VERSION,
    SKIPPED,
    Job,
    NewJob,
    Store,
    clean_text,
    dumps,
    record_row,
    row_to_record,
)

__all__ = ["DONE", "LEASED", "MAX_METADATA_CHARS", "PENDING", "SCHEMA_VERSION", "SKIPPED", "Job",
           "NewJob", "Store", "clean_text", "dumps", "record_row", "row_to_record"]
