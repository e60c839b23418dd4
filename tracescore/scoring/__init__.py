"""The scoring worker's parts (:class:`tracescore.worker.ScoringWorker` is the worker).

Each is an object the worker holds, with explicit inputs (no mixins):

- :mod:`.batches` — :class:`~.batches.BatchRunner`: local jobs scored together, one executor
  call and one commit per batch.
- :mod:`.deliveries` — scores handed to the span attacher, their delivery marks, redelivery.
- :mod:`.completions` — :class:`~.completions.CompletionWriter`: a job's scores stored with its
  ``done`` mark, exactly once; the exporter and the attacher told.
- :mod:`.limits` — :class:`~.limits.Limits`: the settings the worker and its parts share.
- :mod:`.returns`, :mod:`.lost`, :mod:`.supervisor`, :mod:`.failing` — jobs given back, lost
  jobs run alone, the loop's restarts, metrics failing on every record.
- :mod:`.calls` — calling a metric safely and turning its output into scores.
- :mod:`.on_write` — scores on write: the background writer scores cheap built-in local
  metrics as it stores a sampled record, in the same transaction.
"""
