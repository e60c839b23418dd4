"""The parts of :class:`tracescore.client.Tracescore` (the object ``tracescore.init`` returns).

- :mod:`.feedback` — what arrives after a run: ground truths, user feedback, human labels.
- :mod:`.lifecycle` — ``flush``, ``shutdown``, ``stats``.
- :mod:`.manual` — checking and building the record of ``log_record``.
"""
