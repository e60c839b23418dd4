"""Completions (:class:`CompletionWriter`, a part the scoring worker holds): a job's scores are
cleaned (secrets scrubbed, ids checked), stored with the job's ``done`` mark in one transaction
guarded by the lease owner — several jobs' completions in one commit — and handed to the span
attacher. A database that refuses (full, locked, away) keeps them in memory, with no attempt
spent, until it takes writes again. Loop thread; blocking database I/O."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._internal.db_faults import DISK_FULL, IO_ERROR, NOTICE, storage_fault
from .._internal.errors import record_internal_error
from .._internal.secrets import scrub
from ..judge.session import JudgeSession
from ..metrics.base import Metric
from ..processor import ScoreAttachingProcessor, ScoreRef
from ..score import Score
from ..store import Job, StoreAPI
from .calls import _refused, _with
from .failing import FailingMetrics


class CompletionWriter:
    """Stores scores and tells the exporter and the span attacher (loop thread; the on-write
    bookkeeping on the writer thread).

    Explicit inputs: ``db_path`` (named in the fault notices), ``metrics`` (by name),
    ``failing`` (the worker's :class:`FailingMetrics`), ``attacher`` (or None), ``owner()``
    (the lease owner, new after a fork) and ``stopping()`` (the worker is stopping: a refusal
    raises instead of waiting). Set by the worker's owner after init: ``redact``,
    ``on_scores``, ``judge_session``; by the loop at each run: ``loop``. Its own state: the
    counts of jobs scored here and error scores among them, the completions waiting for this
    tick's commit, the jobs running (``running``), and the write fault in progress."""

    def __init__(self, db_path: str, metrics: Mapping[str, Metric], failing: FailingMetrics, *,
                 attacher: ScoreAttachingProcessor | None, owner: Callable[[], str],
                 stopping: Callable[[], bool],
                 on_scores: Callable[[str, Sequence[ScoreRef]], None] | None = None) -> None:
        self.db_path = db_path
        self.metrics = metrics
        self.failing = failing
        self.attacher = attacher
        self.owner = owner
        self.stopping = stopping
        #: Called once per stored job with its scores (export: log records, histogram points).
        self.on_scores = on_scores
        #: the app's redaction function (Tracescore sets it)
        self.redact: Callable[[str], str] | None = None
        #: the judge session of judge metrics (for the judge model of their scores)
        self.judge_session: JudgeSession | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        #: jobs scored (and error scores among them) by the loop
        self.scored = 0
        self.errors = 0
        #: jobs running on the loop (one alone commits at once) and completions of this tick
        self.running = 0
        self.pending: list[tuple[Job, list[Score], asyncio.Future[Any]]] = []
        #: the database error that stopped the last read/write, or None
        self.db_unavailable: str | None = None
        #: a write refused for a reason that passes (disk full, I/O error, lock) and not yet
        #: followed by one that passed: scores wait in memory meanwhile (see store_scores)
        self.write_fault: str | None = None
        self._recovered_at = 0.0

    def reset(self) -> None:
        """A new run of the loop (after a fork or a restart): the dead run's state goes."""
        self.pending = []
        self.running = 0

    async def store_scores(self, store: StoreAPI, job: Job,
                           scores: list[Score]) -> list[ScoreRef] | None:
        """:meth:`complete`, retried with a backoff while the database refuses the write for
        a reason that passes (a full disk, an I/O error, a lock): the scores wait here (bounded
        by the jobs in flight), the job stays leased (renewed by the loop) and its attempt is
        not spent, the metric does not run again. Raises when stopping."""
        pause = 0.1
        while True:
            try:
                refs = await self.complete(store, job, scores)
            except Exception as exc:
                if self.stopping() or not self.db_fault(store, exc):
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            self.db_ok()
            return refs

    def db_fault(self, store: StoreAPI, exc: BaseException) -> bool:
        """Whether ``exc`` is a refusal that passes; if so it is noted (``stats()``, the one
        warning of :data:`NOTICE`) and, after a full disk or an I/O error, the connection is
        opened again (at most once a second) so the next try does not inherit a broken one."""
        if not _refused(store, exc):
            return False
        kind = storage_fault(exc) or "db_unavailable"
        self.write_fault = self.db_unavailable = f"{type(exc).__name__}: {exc}"
        NOTICE.fault(self.db_path, "scorer", kind, str(exc))
        recover = getattr(store, "recover", None)
        if kind in (DISK_FULL, IO_ERROR) and recover is not None \
                and time.monotonic() - self._recovered_at >= 1.0:
            self._recovered_at = time.monotonic()
            try:
                recover()
            except Exception as reopen_exc:  # still full: the next try opens it again
                if storage_fault(reopen_exc) is None:
                    record_internal_error("worker.recover", reopen_exc)
        return True

    def db_ok(self) -> None:
        """A write passed: a fault, if one was open, is over for the scorer."""
        if self.write_fault is not None:
            self.write_fault = self.db_unavailable = None
            NOTICE.resumed(self.db_path, "scorer")

    def clean(self, s: Score) -> Score:
        """Keys out of error texts; the app's ``redact`` over explanations and errors (a
        judge's reason may quote the answer) before a score is stored or exported."""
        error = scrub(s.error) if s.error else s.error
        explanation = s.explanation
        if self.redact is not None:
            error = self.redact(error) if error else error
            explanation = self.redact(explanation) if explanation else explanation
        if error is s.error and explanation is s.explanation:
            return s
        return _with(s, error=error, explanation=explanation)

    async def complete(self, store: StoreAPI, job: Job,
                       scores: list[Score]) -> list[ScoreRef] | None:
        """Store a job's scores: the jobs that finish in the same loop tick share one
        transaction (one commit instead of one per job); each keeps its own lease check. A job
        with no other job in flight commits at once (waiting a tick would only add latency)."""
        assert self.loop is not None
        if self.running <= 1 and not self.pending:
            return store.complete_job(job, self.owner(), scores,
                                      None if self.attacher is not None else "none",
                                      judge_model=self.model_of(job, scores))
        fut: asyncio.Future[list[ScoreRef] | None] = self.loop.create_future()
        self.pending.append((job, scores, fut))
        if len(self.pending) == 1:
            self.loop.call_soon(self._commit, store)
        return await fut

    def _commit(self, store: StoreAPI) -> None:
        batch, self.pending = self.pending, []
        delivery = None if self.attacher is not None else "none"
        results: list[Any]
        models = {j.job_id: self.model_of(j, s) for j, s, _ in batch}
        try:
            results = list(store.complete_jobs(self.owner(), [(j, s) for j, s, _ in batch],
                                               delivery, judge_models=models))
        except Exception:  # one bad job must not fail the others: store them one by one
            results = []
            for j, s, _ in batch:
                try:
                    results.append(store.complete_job(j, self.owner(), s, delivery,
                                                      judge_model=models[j.job_id]))
                except Exception as exc:
                    results.append(exc)
        for (_, _, fut), r in zip(batch, results):
            if fut.done():  # its task was cancelled (stopping)
                continue
            if isinstance(r, Exception):
                fut.set_exception(r)
            else:
                fut.set_result(r)

    def model_of(self, job: Job, scores: Sequence[Score]) -> str:
        """The judge model of one job's scores: the model its judge reported for them (the
        details' ``judge``), so two jobs of one metric in one transaction, scored before and
        after a provider changed the model behind its name, each carry their own; else the
        metric's (:meth:`judge_model`)."""
        for s in scores:
            judge = s.details.get("judge") if isinstance(s.details, dict) else None
            if isinstance(judge, dict) and (judge.get("reported") or judge.get("configured")):
                return str(judge.get("reported") or judge.get("configured"))
        return self.judge_model(job.metric)

    def judge_model(self, metric: str) -> str:
        """The judge model that scores ``metric`` (its scores' ``judge_model`` segment), or
        ``""`` for a local metric."""
        m = self.metrics.get(metric)
        session = self.judge_session
        if m is None or m.kind != "judge" or session is None:
            return ""
        try:
            # (H7, judge identity) the model the judge server reported behind this metric's
            # last score when known, else the configured one (JudgeSession.model_of)
            return str(session.model_of(metric) or "")
        except Exception:  # a judge without a model name: still a judge metric's score
            return ""

    def scores_stored(self, job: Job, scores: Sequence[Score],
                       refs: Sequence[ScoreRef]) -> None:
        """A job's scores are stored (``refs``): count them, tell the exporter and the span
        attacher. Isolated like :meth:`stored`: the job is done, so a failure of either must
        not give it back."""
        self.scored += 1
        self.errors += sum(1 for s in scores if s.status == "error")
        self.failing.note(scores)
        self.stored(job.record_id, refs)
        if self.attacher is not None:
            try:
                self.attacher.job_done(job.record_id, refs)
            except Exception as exc:
                record_internal_error("worker.job_done", exc)

    def stored_on_write(self, record_id: str, scores: Sequence[Score],
                        refs: Sequence[ScoreRef]) -> None:
        """Writer thread: a record's scores stored on write (scoring/on_write.py), told as
        :meth:`scores_stored` tells the loop's (the on-write scorer counts them itself)."""
        self.failing.note(scores)
        self.stored(record_id, refs)
        if self.attacher is not None:
            try:
                self.attacher.job_done(record_id, refs)
            except Exception as exc:
                record_internal_error("worker.job_done", exc)

    def stored(self, record_id: str, refs: Sequence[ScoreRef]) -> None:
        """Tell the exporter about stored scores: exactly once per job, since only the lease
        owner gets here. Isolated: the job is already done, so a failure must not give it back."""
        if self.on_scores is None or not refs:
            return
        try:
            self.on_scores(record_id, refs)
        except Exception as exc:
            record_internal_error("worker.on_scores", exc)
