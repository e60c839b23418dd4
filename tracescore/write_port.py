"""The queue's writer's one port: everything the background writer asks of the stages above it.

The writer (:class:`tracescore.queue.RecordQueue`, on its own thread) stores records and their
jobs. It needs four things it must not know the owners of — which jobs a record gets, how a
ground-truth or feedback update is applied, who to wake once a batch opened jobs, and who may
score cheap local metrics in the record's own transaction (scores on write) — and it gets them
from ONE object passed in, a :class:`WritePort`, instead of calling up into the client, the
on-write scorer and the worker. The client builds the port from its parts
(:class:`PortFunctions`); a bench or a test builds one from plain functions.

Only types here: nothing at run time imports a stage.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from .record import RagRecord
    from .sampling import Decision
    from .score import Score
    from .store import NewJob, StoreAPI
    from .updates import FeedbackUpdate, GroundTruthUpdate

__all__ = ["OnWriteScorer", "PortFunctions", "WritePort"]


class OnWriteScorer(Protocol):
    """Scores a sampled record's cheap local jobs on the writer thread
    (:class:`tracescore.scoring.on_write.ScoresOnWrite`)."""

    #: a batch's metrics scored on write stop after this long (the rest become jobs)
    budget_s: float

    def open(self) -> bool:
        """Whether the writer may score anything now."""
        ...

    def score_now(self, record: RagRecord, job: NewJob) -> list[Score] | None:
        """``job``'s scores computed now, or None: it goes to the worker as a job."""
        ...

    @property
    def delivery(self) -> str | None:
        """The ``delivery`` the store writes with scores stored on write."""
        ...

    def stored(self, record_id: str, scores: Sequence[Score], refs: Sequence[Any]) -> None:
        """A job scored on write is committed (``refs``: its stored score ids)."""
        ...


class WritePort(Protocol):
    """What the writer thread calls, and nothing else above it."""

    def plan_jobs(self, record: RagRecord, decision: Decision) -> Sequence[NewJob]:
        """The scoring jobs of a record the writer is about to store."""
        ...

    def apply_update(self, store: StoreAPI, update: GroundTruthUpdate | FeedbackUpdate) -> None:
        """Apply a ground-truth or feedback update on the writer's store."""
        ...

    def jobs_opened(self) -> None:
        """A committed batch may have opened jobs (wakes the scorer). Non-blocking."""
        ...

    def on_write(self) -> OnWriteScorer | None:
        """The scorer of jobs on write, or None: every job goes to the worker."""
        ...


@dataclass
class PortFunctions:
    """A :class:`WritePort` made of functions (the client's parts; a bench's stubs)."""

    plan: Callable[[RagRecord, Decision], Sequence[NewJob]]
    update: Callable[[StoreAPI, GroundTruthUpdate | FeedbackUpdate], None]
    opened: Callable[[], None] | None = None
    scorer: OnWriteScorer | None = None

    def plan_jobs(self, record: RagRecord, decision: Decision) -> Sequence[NewJob]:
        return self.plan(record, decision)

    def apply_update(self, store: StoreAPI, update: GroundTruthUpdate | FeedbackUpdate) -> None:
        self.update(store, update)

    def jobs_opened(self) -> None:
        if self.opened is not None:
            self.opened()

    def on_write(self) -> OnWriteScorer | None:
        return self.scorer
