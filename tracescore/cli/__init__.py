"""The ``tracescore`` command line (click): ``demo``, ``report``, ``show``, ``export``,
``compare``, ``check``, ``monitor``, ``calibrate``, ``judge-check``, ``ui``, ``worker``,
``copy-to-postgres``.

- :mod:`.commands` — the click group and one function per command; each parses its options
  and hands the work to :mod:`tracescore.reports` (reading) or :mod:`.demo`.
- :mod:`.demo` — the demo runner: the bundled offline RAG app traced and scored end to end.
- :mod:`.monitoring` — ``compare``, ``check`` and ``monitor``: comparisons and monitors.
- :mod:`.worker` — ``tracescore worker``: the scoring process of a fleet (signals, health).
"""

from __future__ import annotations

from . import monitoring as _monitoring  # noqa: F401  (registers compare, check, monitor)
from .commands import main

__all__ = ["main"]
