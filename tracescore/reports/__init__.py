"""The reading side: everything that turns a tracescore database into something to look at.

Nothing here runs on the app's request path or writes to the database; every function opens
the database read-only and may run while an app is writing to it. Query, then render: one
layer reads the database and returns plain data; renderers take that data, never a connection.

Query (blocking I/O, returns data):
- :mod:`.db` — opening a database read-only (SQLite or PostgreSQL), ``--since`` / durations.
- :mod:`.query` — the query layer over the hourly rollups, by segment: what every reader uses.
- :mod:`.report` — ``tracescore report`` as data (intervals on every number), and the data of
  the HTML page.
- :mod:`.compare` — ``tracescore compare``: two segments or two time windows, per score, with
  intervals, adjusted p-values and verdicts.
- :mod:`.show` — ``tracescore show``: one record in full.
- :mod:`.metric_info` — what each metric declares (direction, threshold, yes/no).
- :mod:`.rows` — ``tracescore export``: records joined with scores as JSONL or CSV rows.
- :mod:`.calibration` — ``tracescore calibrate``: judge metrics against users' feedback.
- :mod:`.rgb` — ``report --rgb``: RGB's four abilities aggregated from live records.

Data and renderers (no I/O):
- :mod:`.model` — the dataclasses every renderer takes.
- :mod:`.report_text`, :mod:`.textfmt` — the human text output.
- :mod:`.html` — ``report --html``, ``compare --html``: self-contained pages (a module per page).
- :mod:`.ui` — ``tracescore ui``: the database in Datasette, with canned queries.
"""
