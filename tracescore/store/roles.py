"""The store by role: the parts of :class:`~.base.StoreAPI` a stage can depend on.

Both backends implement every role (``StoreAPI`` is their union); a stage, a helper or a test
double names only the role it uses, so its dependency on the store says what it touches:

- :class:`RecordsJobs` — records and their scoring jobs (the queue's writer, the worker's
  leases and completions, updates that arrive later);
- :class:`Scores` — stored scores and their delivery to the backend (the delivery ledger,
  the redelivery sweep), and the counters;
- :class:`JudgeCaches` — the judge's cache, call log, daily cost and health;
- :class:`Labels` — human labels, label plans and the judge canary's history;
- :class:`MonitorStateRole` — the monitors' state, history and notification outbox
  (:mod:`.monitor_state`);
- :class:`Space` — what retention asks of the engine (bytes, vacuum);
- :class:`Connection` — what every role shares: the transaction, close, the fault test.

Only types here (``typing.Protocol``); nothing runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ..record import RagRecord
    from ..sampling import Decision
    from ..score import Score
    from .rows import Job, NewJob
    from .segments import SegmentSpec

__all__ = ["Connection", "JudgeCaches", "Labels", "MonitorStateRole", "RecordsJobs", "Scores",
           "Space"]


class Connection(Protocol):
    """What every role shares."""

    #: "sqlite" or "postgres"
    dialect: str
    #: whether several hosts may share the database (redelivery must not race other workers)
    shared: bool

    def transaction(self) -> AbstractContextManager[Any]: ...
    def close(self) -> None: ...
    def unavailable(self, exc: BaseException) -> bool:
        """Whether ``exc`` is a fault that passes (locked, busy, full, server away), not a bad
        statement: the writer then keeps its batch in memory and retries, the scorer keeps
        its scores. :func:`~.base.storage_fault` names the kind (``disk_full``,
        ``db_io_error``, ``db_unavailable``) for both backends."""


class RecordsJobs(Connection, Protocol):
    """Records and their scoring jobs."""

    def register_metrics(self, metrics: Sequence[Any]) -> None: ...
    def write_batch(self, records: Sequence[tuple[RagRecord, Decision]], jobs: Sequence[NewJob],
                    counters: Mapping[str, int] | None = None, *,
                    keep_full_text: bool = True,
                    segments: SegmentSpec | None = None,
                    scored: Sequence[tuple[NewJob, Sequence[Score]]] = (),
                    delivery: str | None = None) -> list[list[tuple[int, Score]] | None]:
        """Records and jobs in one transaction, with their rollups (only rows inserted count);
        ``segments``: the process's release/environment/metadata keys (each record's seg_id);
        ``scored``: jobs scored on the writer, stored done with their scores (their score
        ids returned in order, None for a job that existed already)."""
    def add_feedback(self, trace_id: str, name: str, value: float | None, label: str | None,
                     comment: str | None, created_at: float) -> None: ...
    def set_ground_truths(self, trace_id: str,
                          ground_truths: Sequence[str]) -> list[RagRecord]: ...
    def insert_jobs_if_missing(self, jobs: Sequence[NewJob]) -> int: ...
    def upsert_jobs(self, jobs: Sequence[NewJob]) -> int: ...
    def lease_jobs(self, owner: str, limit: int, lease_s: float,
                   metrics: Sequence[str]) -> list[Job]: ...
    def lease_lost_job(self, owner: str, lease_s: float,
                       metrics: Sequence[str]) -> Job | None: ...
    def has_lost_jobs(self, metrics: Sequence[str]) -> bool: ...
    def complete_jobs(self, owner: str, done: Sequence[tuple[Job, Sequence[Score]]],
                      delivery: str | None = None, *,
                      judge_models: Mapping[int, str] | None = None
                      ) -> list[list[tuple[int, Score]] | None]:
        """``judge_models``: job id → the judge model of its scores (judge metrics)."""
    def complete_job(self, job: Job, owner: str, scores: Sequence[Score],
                     delivery: str | None = None, *,
                     judge_model: str = "") -> list[tuple[int, Score]] | None: ...
    def renew_leases(self, owner: str, job_ids: Sequence[int], lease_s: float) -> None: ...
    def release_job(self, job: Job, owner: str, reason: str | None = None) -> None: ...
    def defer_job(self, job: Job, owner: str, delay_s: float, reason: str) -> None: ...
    def has_open_jobs(self, metrics: Sequence[str]) -> bool: ...
    def open_job_count(self, metrics: Sequence[str] | None = None) -> int: ...
    def open_jobs_for(self, record_id: str) -> int: ...
    def load_records(self, record_ids: Iterable[str]) -> dict[str, RagRecord]: ...
    def records_for_trace(self, trace_id: str) -> list[RagRecord]: ...


class Scores(Connection, Protocol):
    """Stored scores, their delivery to the backend, and the counters."""

    def bump_counters(self, counters: Mapping[str, int]) -> None: ...
    def counters(self) -> dict[str, int]: ...
    def scores_for(self, record_id: str,
                   undelivered_only: bool = False) -> list[dict[str, Any]]: ...
    def mark_delivered(self, score_ids: Sequence[int], how: str) -> None: ...
    def mark_delivered_many(self, batches: Sequence[tuple[Sequence[int], str]]) -> None: ...
    def undelivered_record_ids(self, limit: int = 1000,
                               older_than: float | None = None) -> list[str]: ...


class JudgeCaches(Connection, Protocol):
    """The judge's cache, call log, daily cost and health."""

    def judge_cache_get(self, key: str) -> Any: ...
    def judge_cache_put(self, key: str, step: str, model: str, version: str, value: Any,
                        input_tokens: int, output_tokens: int) -> None: ...
    def judge_call_log(self, *, record_id: str | None, step: str, model: str,
                       input_tokens: int, output_tokens: int, latency_ms: float,
                       cost_usd: float | None, error: str | None) -> None: ...
    def judge_cost_today(self) -> float: ...
    def set_judge_health(self, model: str, agreement: float, cases: int, degenerate: bool,
                         detail: Any) -> None: ...


class Labels(Connection, Protocol):
    """Human labels, label plans, the judge canary's history (schema 4, :mod:`.labels`)."""

    def add_label(self, trace_id: str, name: str, value: float | None, *,
                  annotator: str | None = None, comment: str | None = None,
                  source: str = "manual", created_at: float | None = None,
                  metric_version: str | None = None, record_id: str | None = None) -> None:
        """Replaces the same annotator's label of that record; ``record_id`` None: the trace's
        newest; ``metric_version`` None: the record's stored score's."""
    def add_labels(self, rows: Iterable[Mapping[str, Any]]) -> int: ...
    def labels(self, name: str | None = None,
               since: float | None = None) -> list[dict[str, Any]]: ...
    def add_label_plan(self, plan_id: str, rows: Iterable[Mapping[str, Any]]) -> int: ...
    def label_plan(self, plan_id: str) -> list[dict[str, Any]]: ...
    def add_canary_run(self, row: Mapping[str, Any]) -> None: ...
    def canary_runs(self, judge_model: str | None = None,
                    since: float | None = None) -> list[dict[str, Any]]: ...


class Space(Connection, Protocol):
    """What retention asks of the engine (:mod:`.retention`)."""

    def used_bytes(self) -> tuple[int, int]:
        """(bytes in use, bytes on disk)."""
    def auto_vacuum_mode(self) -> str: ...
    def give_back_space(self, pages_per_step: int = 2048, *, pause_s: float = 0.05,
                        stop: Any = None) -> int:
        """Return freed space to the file system where the engine needs it (SQLite)."""
    def vacuum_full(self) -> None:
        """Rewrite the database once, offline (SQLite; a no-op on PostgreSQL)."""


class MonitorStateRole(Connection, Protocol):
    """What the monitor-state role (:mod:`.monitor_state`: states, history, the evaluator's
    lease, the notification outbox) needs of a backend: its connection and its dialect. The
    SQL and the backend checks are that module's, inside the store; the monitors call its
    functions and never see a connection."""

    @property
    def conn(self) -> Any: ...
