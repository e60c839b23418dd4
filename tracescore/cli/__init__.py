"""The ``tracescore`` command line (click): ``demo``, ``report``, ``show``, ``export``,
``compare``, ``check``, ``monitor``, ``calibrate``, ``judge-check``, ``ui``, ``worker``,
``serve``, ``copy-to-postgres``.

- :mod:`.commands` — the click group and one function per command; each parses its options
  and hands the work to :mod:`tracescore.reports` (reading) or :mod:`.demo`.
- :mod:`._options` — what the commands share: ``--db``/``--since``/``--where``, output files.
- :mod:`.maintenance` — ``prune`` and ``copy-to-postgres``.
- :mod:`.browse` — ``export`` (rows as JSONL/CSV) and ``ui`` (Datasette).
- :mod:`.demo` — the demo runner: the bundled offline RAG app traced and scored end to end.
- :mod:`.monitoring` — ``compare``, ``check`` and ``monitor``: comparisons and monitors.
- :mod:`.worker` — ``tracescore worker``: the scoring process of a fleet (signals, health).
- :mod:`.serve` — ``tracescore serve``: the OTLP intake (docs/otlp.md).
"""

from __future__ import annotations

import sys

if sys.argv[1:2] in (["worker"], ["serve"]):
    # `tracescore worker`: the stop handlers before the imports below and click's parsing
    # (tens of ms, seconds on a busy host), so that a SIGTERM then is a clean stop (exit 0)
    from .worker import install_early_stop_handlers

    install_early_stop_handlers()

# label, prune, copy-to-postgres, compare, check, monitor, serve, export and ui are registered
# when looked up (commands.LAZY_COMMANDS): a read command does not import them
from .commands import main

__all__ = ["main"]
