"""The parts of :class:`tracescore.client.Tracescore` (the object ``tracescore.init`` returns).

- :mod:`.feedback` — what arrives after a run: ground truths, user feedback, human labels.
- :mod:`.lifecycle` — ``flush``, ``shutdown``, ``stats``.
- :mod:`.manual` — checking and building the record of ``log_record``, counting what it drops.
- :mod:`.planner` — :class:`~.planner.JobPlanner`: which jobs a record gets, the span holds.
- :mod:`.privacy` — :class:`~.privacy.Privacy`: content capture and ``redact``.
- :mod:`.setup` — functions that build the stages: database check, tracing, judge, services.

The planner and privacy parts are objects the client holds, with explicit inputs; the request
path calls their bound methods directly (the client binds them on itself at ``init``).
"""
