"""The reading side: everything that turns a tracescore database into something to look at.

Nothing here runs on the app's request path or writes to the database; every function opens
the database read-only and may run while an app is writing to it.

- :mod:`.summary` — ``tracescore report`` and ``show``: per-metric summaries, worst records,
  judge health and usage, one record in full; text and JSON formatting.
- :mod:`.html` — ``report --html``: one self-contained page with charts.
- :mod:`.rows` — ``tracescore export``: records joined with scores as JSONL or CSV rows.
- :mod:`.calibration` — ``tracescore calibrate``: judge metrics against users' feedback.
- :mod:`.rgb` — ``report --rgb``: RGB's four abilities aggregated from live records.
- :mod:`.ui` — ``tracescore ui``: the database in Datasette, with canned queries.
- :mod:`.rollups` — the hourly aggregates of pruned records, added to the raw rows' numbers.
"""
