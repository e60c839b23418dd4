"""The scoring worker's parts (:class:`tracescore.worker.ScoringWorker` is the worker).

- :mod:`.batches` — local jobs scored together: one executor call and one commit per batch.
- :mod:`.deliveries` — scores handed to the span attacher, their delivery marks, redelivery.
- :mod:`.completions` — a job's scores stored with its ``done`` mark, exactly once.
- :mod:`.calls` — calling a metric safely and turning its output into scores.
- :mod:`.on_write` — scores on write: the background writer scores cheap built-in local
  metrics as it stores a sampled record, in the same transaction.
"""
