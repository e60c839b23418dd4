"""The store interface both backends implement, and the choice between them.

``db`` is a file path (SQLite, the embedded default) or a ``postgresql://`` /
``postgres://`` URL (PostgreSQL, for fleets). :func:`open_store` returns the matching backend;
every caller (writer thread, scoring worker, judge session, CLI) goes through it, so the rest
of tracescore never asks which backend it has.

Threading: a store object belongs to the thread that opened it (one connection each, as
SQLite requires). Every method does blocking I/O and must never run on the app's request path.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Protocol

from .._internal.db_faults import storage_fault
from .._internal.db_urls import PG_SCHEMES, is_postgres, redact_text, redact_url
from .roles import JudgeCaches, Labels, RecordsJobs, Scores, Space

__all__ = ["PG_SCHEMES", "StoreAPI", "is_postgres", "open_store", "redact_text", "redact_url",
           "storage_fault"]


class StoreAPI(RecordsJobs, Scores, JudgeCaches, Labels, Space, Protocol):
    """What the pipeline needs from a store (both backends implement it): the union of the
    roles of :mod:`.roles` — records and jobs, scores and their delivery, the judge's caches,
    labels, space. A stage that uses one part names that role instead."""


def open_store(db: str | os.PathLike[str], **kwargs: Any) -> StoreAPI:
    """The store for ``db``: :class:`~.postgres.PostgresStore` for a ``postgresql://`` URL
    (needs ``pip install 'tracescore[postgres]'``), else the SQLite :class:`~.sqlite.Store`.
    Creates or upgrades the schema. Blocking."""
    if is_postgres(db):
        from .postgres import PostgresStore

        return PostgresStore(str(db), **kwargs)
    from .sqlite import Store

    return Store(Path(db), **kwargs)
