"""The parts of :class:`tracescore.client.Tracescore` (the object ``tracescore.init`` returns).

- :mod:`.feedback` — :class:`~.feedback.Feedback`: what arrives after a run: ground truths,
  user feedback, human labels.
- :mod:`.lifecycle` — :class:`~.lifecycle.Lifecycle`: ``flush``, ``shutdown``, ``stats``.
- :mod:`.frameworks` — the LangChain handler, instrumenting LangChain and LlamaIndex.
- :mod:`.manual` — checking and building the record of ``log_record``, counting what it drops.
- :mod:`.planner` — :class:`~.planner.JobPlanner`: which jobs a record gets, the span holds.
- :mod:`.privacy` — :class:`~.privacy.Privacy`: content capture and ``redact``.
- :mod:`.setup` — functions that build the stages: database check, tracing, judge, services.

The client inherits nothing: the feedback, life-cycle, planner and privacy parts are objects it
holds, with explicit inputs; its documented methods delegate to them and carry their text; the
request path calls the planner's and privacy's bound methods directly (the client binds them
on itself at ``init``).
"""
