"""The PostgreSQL backend's shared statements and helpers (the lease statements, text
PostgreSQL can hold)."""

from __future__ import annotations

from typing import Any

from .migrations import OPEN_JOBS

#: the database's clock (every host of a fleet agrees on it)
NOW = "extract(epoch FROM clock_timestamp())::float8"


def _nul_free(value: Any) -> Any:
    # PostgreSQL text cannot hold NUL (SQLite can): keep it visible instead of failing the batch.
    if isinstance(value, str) and "\x00" in value:
        return value.replace("\x00", "\\u0000")
    return value


#: The lease statement (``which``: the order and limit of the first pass, or the records of
#: the second); rows another worker is leasing right now are skipped, not waited for. A lease
#: costs no attempt (attempts count runs, see :meth:`.sqlite.Store.lease_jobs`).
_LEASE = (
    "UPDATE jobs SET status='leased', lease_owner=%(owner)s, lease_until=%(until)s, "
    "updated_at=%(now)s WHERE job_id IN ("
    " SELECT job_id FROM jobs WHERE metric = ANY(%(metrics)s) AND status='pending'"
    f"  AND {OPEN_JOBS}"
    "  AND (lease_until IS NULL OR lease_until <= %(now)s)"
    " {which} FOR UPDATE SKIP LOCKED) "
    "RETURNING job_id, record_id, metric, metric_version, attempts, created_at, rec")

#: One job whose lease ran out (its holder died or hung), the lost run counted; fewest
#: attempts first (see ``Store.lease_lost_job`` of .sqlite).
_LEASE_LOST = (
    "UPDATE jobs SET status='leased', lease_owner=%(owner)s, lease_until=%(until)s, "
    "attempts = attempts + 1, updated_at=%(now)s WHERE job_id = ("
    " SELECT job_id FROM jobs WHERE metric = ANY(%(metrics)s) AND status='leased'"
    f"  AND {OPEN_JOBS}"
    "  AND lease_until < %(now)s ORDER BY attempts, job_id LIMIT 1 FOR UPDATE SKIP LOCKED) "
    "RETURNING job_id, record_id, metric, metric_version, attempts, created_at")
