"""The reading side's pages: everything that turns read-layer data into something to look at.

Nothing here runs on the app's request path or writes to the database. Query, compute, render:
the read layer (:mod:`tracescore.read`: opening a database, the rollup aggregates, the
dataclasses every renderer takes, metric declarations, labelled pairs, export rows) reads the
database and returns plain data; the modules here compute over it; renderers take that data,
never a connection.

Pages as data (issue 35: their remaining SQL moves into :mod:`tracescore.read`):
- :mod:`.report` — ``tracescore report`` as data (intervals on every number), and the data of
  the HTML page.
- :mod:`.compare` — ``tracescore compare``: two segments or two time windows, per score, with
  intervals, adjusted p-values and verdicts.
- :mod:`.show` — ``tracescore show``: one record in full.
- :mod:`.calibration` — ``tracescore calibrate``: judge metrics against users' feedback.
- :mod:`.rgb` — ``report --rgb``: RGB's four abilities aggregated from live records.

Renderers (no I/O):
- :mod:`.report_text`, :mod:`.textfmt` — the human text output.
- :mod:`.html` — ``report --html``, ``compare --html``: self-contained pages (a module per page).
- :mod:`.ui` — ``tracescore ui``: the database in Datasette, with canned queries.
"""
