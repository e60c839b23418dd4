"""Building an oracle database in a temporary directory, and reading the figures a user gets:
the JSON of the CLI (click's runner, in this process, at a fixed "now") or the page data the
HTML renderers take."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from .build import BASE, Clock, Spec, build
from .expect import View


@contextlib.contextmanager
def built(spec: Spec) -> Iterator[tuple[str, View]]:
    """``spec`` written to a fresh SQLite file: (its path, the raw rows' view)."""
    # (in memory where the machine has a tmpfs: the file is real SQLite, the fsyncs cheap)
    shm = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
    with tempfile.TemporaryDirectory(prefix="oracle-", dir=shm) as d:
        path = os.path.join(d, "ts.db")
        rows = build(path, spec)
        yield path, View(rows)


@contextlib.contextmanager
def frozen_now(now: float) -> Iterator[None]:
    """``time.time()`` of the readers (``--since``, the comparison's windows) is ``now``."""
    import tracescore.read.db as db_mod
    import tracescore.reports.compare as compare_mod

    mods = (db_mod, compare_mod)
    old = [m.time for m in mods]
    for m in mods:
        m.time = Clock(now)  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for m, o in zip(mods, old):
            m.time = o  # type: ignore[attr-defined]


def cli(*args: Any, now: float | None = None, ok: tuple[int, ...] = (0,)) -> Any:
    """``tracescore ARGS`` in this process; the parsed JSON output (``--json`` is added)."""
    from click.testing import CliRunner

    from tracescore.cli import main

    with frozen_now(BASE + 10 * 3600 if now is None else now):
        res = CliRunner().invoke(main, [*map(str, args), "--json"])
    assert res.exit_code in ok, (res.exit_code, res.output, res.exception)
    return (json.loads(res.stdout) if res.stdout.strip() else None), res.exit_code


def since_arg(now: float, since: float | None) -> str:
    """``--since`` as a duration that lands on ``since`` (a fixed ``now``)."""
    return "all" if since is None else f"{now - since}s"
