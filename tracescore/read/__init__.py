"""The read layer: every SELECT of the read side, returning dataclasses and plain data.

Readers (reports, checks, monitors, the trust pages, the command line) query through here and
compute and render over what it returns; SQL lives only here and in :mod:`tracescore.store`.

- :mod:`.db`: opening a database read-only (SQLite or PostgreSQL), and the time arguments;
- :mod:`.window`: windows, segments and the SQL clauses every reader filters with;
- :mod:`.query`: aggregates over the hourly rollups (scores, records, skips, series, labels);
- :mod:`.model`: the dataclasses the report, trend and compare pages are built from;
- :mod:`.metric_info`: what each metric declares (direction, threshold, yes/no);
- :mod:`.trust_pairs`: a score's labelled (judge, human) pairs;
- :mod:`.rows`: records joined with their scores, streamed for export;
- :mod:`.monitoring`: the observations and figures a monitor is measured on.

Imports the store and :mod:`tracescore.stats`, never reports, monitor, trust or the command
line (an import-linter contract in pyproject.toml). Blocking I/O; never on the request path.
"""
