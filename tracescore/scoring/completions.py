"""Completions (:class:`Completions`, mixed into the scoring worker): a job's scores are
cleaned (secrets scrubbed, ids checked), stored with the job's ``done`` mark in one transaction
guarded by the lease owner — several jobs' completions in one commit — and handed to the span
attacher. A database that refuses (full, locked, away) keeps them in memory, with no attempt
spent, until it takes writes again. Loop thread; blocking database I/O."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from .._internal.db_faults import DISK_FULL, IO_ERROR, NOTICE, storage_fault
from .._internal.errors import record_internal_error
from .._internal.secrets import scrub
from ..processor import ScoreRef
from ..score import Score
from ..store import Job, StoreAPI
from .calls import _refused, _with


class Completions:
    """The worker's completion methods (state lives on the worker)."""

    async def _store_scores(self, store: StoreAPI, job: Job,
                            scores: list[Score]) -> list[ScoreRef] | None:
        """:meth:`_complete`, retried with a backoff while the database refuses the write for
        a reason that passes (a full disk, an I/O error, a lock): the scores wait here (bounded
        by the jobs in flight), the job stays leased (renewed by the loop) and its attempt is
        not spent, the metric does not run again. Raises when stopping."""
        pause = 0.1
        while True:
            try:
                refs = await self._complete(store, job, scores)
            except Exception as exc:
                if self._stopping or not self._db_fault(store, exc):
                    raise
                await asyncio.sleep(pause)
                pause = min(pause * 2, 2.0)
                continue
            self._db_ok()
            return refs

    def _db_fault(self, store: StoreAPI, exc: BaseException) -> bool:
        """Whether ``exc`` is a refusal that passes; if so it is noted (``stats()``, the one
        warning of :data:`NOTICE`) and, after a full disk or an I/O error, the connection is
        opened again (at most once a second) so the next try does not inherit a broken one."""
        if not _refused(store, exc):
            return False
        kind = storage_fault(exc) or "db_unavailable"
        self._write_fault = self.db_unavailable = f"{type(exc).__name__}: {exc}"
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

    def _db_ok(self) -> None:
        """A write passed: a fault, if one was open, is over for the scorer."""
        if self._write_fault is not None:
            self._write_fault = self.db_unavailable = None
            NOTICE.resumed(self.db_path, "scorer")

    def _clean(self, s: Score) -> Score:
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

    async def _complete(self, store: StoreAPI, job: Job,
                        scores: list[Score]) -> list[ScoreRef] | None:
        """Store a job's scores: the jobs that finish in the same loop tick share one
        transaction (one commit instead of one per job); each keeps its own lease check. A job
        with no other job in flight commits at once (waiting a tick would only add latency)."""
        assert self._loop is not None
        if self._running_jobs <= 1 and not self._completions:
            return store.complete_job(job, self.owner, scores,
                                      None if self.attacher is not None else "none",
                                      judge_model=self.model_of(job, scores))
        fut: asyncio.Future[list[ScoreRef] | None] = self._loop.create_future()
        self._completions.append((job, scores, fut))
        if len(self._completions) == 1:
            self._loop.call_soon(self._commit_completions, store)
        return await fut

    def _commit_completions(self, store: StoreAPI) -> None:
        batch, self._completions = self._completions, []
        delivery = None if self.attacher is not None else "none"
        results: list[Any]
        models = {j.job_id: self.model_of(j, s) for j, s, _ in batch}
        try:
            results = list(store.complete_jobs(self.owner, [(j, s) for j, s, _ in batch],
                                               delivery, judge_models=models))
        except Exception:  # one bad job must not fail the others: store them one by one
            results = []
            for j, s, _ in batch:
                try:
                    results.append(store.complete_job(j, self.owner, s, delivery,
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

    def _scores_stored(self, job: Job, scores: Sequence[Score],
                       refs: Sequence[ScoreRef]) -> None:
        """A job's scores are stored (``refs``): count them, tell the exporter and the span
        attacher. Isolated like :meth:`_stored`: the job is done, so a failure of either must
        not give it back."""
        self._scored += 1
        self._errors += sum(1 for s in scores if s.status == "error")
        self.failing.note(scores)
        self._stored(job.record_id, refs)
        if self.attacher is not None:
            try:
                self.attacher.job_done(job.record_id, refs)
            except Exception as exc:
                record_internal_error("worker.job_done", exc)

    def _stored(self, record_id: str, refs: Sequence[ScoreRef]) -> None:
        """Tell the exporter about stored scores: exactly once per job, since only the lease
        owner gets here. Isolated: the job is already done, so a failure must not give it back."""
        if self.on_scores is None or not refs:
            return
        try:
            self.on_scores(record_id, refs)
        except Exception as exc:
            record_internal_error("worker.on_scores", exc)
