"""tracescore: capture RAG runs as OpenTelemetry spans, score them in the background, attach
the scores back to the spans, and keep everything in SQLite.

The package follows the pipeline (``../shared/DESIGN.md``)::

    capture ──► record ──► sample ──► queue ──► score ──► attach ──► store / export
    integrations/ record.py sampling.py queue.py worker.py processor.py store/ export.py

:mod:`.client` wires the stages (``init`` returns its :class:`Tracescore`), from the validated
:mod:`.settings`; :mod:`.metrics`, :mod:`.judge` and :mod:`.embeddings` are what the scoring
worker runs; :mod:`.attributes` names every span attribute; :mod:`.score` is a metric's result.
Beside the pipeline: :mod:`.reports` (the reading side), :mod:`.cli` (the command line and the
demo), :mod:`.testing` (test doubles shipped with the library).

```python
import tracescore
ts = tracescore.init(db="tracescore.db", metrics=["rouge", "token_f1"], sample_rate=0.1)
chain.invoke(q, config={"callbacks": [ts.langchain_handler()]})
ts.flush(timeout=30); ts.shutdown()
```
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from .record import Context, RagRecord, TokenUsage  # noqa: E402
from .score import Score  # noqa: E402

#: Public names imported on first use (module ``__getattr__``, PEP 562): the store behind them
#: loads sqlite-utils, which loads pandas and numpy — ~0.4 s that ``import tracescore`` (every
#: CLI command, a worker's start-up before it can take a SIGTERM) must not pay up front.
_LAZY = {
    "Metric": ".metrics.base",
    "Retention": ".store.retention",
    "Tracescore": ".client",
    "add_label": ".labels",  # human labels: docs/trust.md
}

__all__ = ["Context", "Metric", "RagRecord", "Retention", "Score", "TokenUsage", "Tracescore",
           "init", "add_label",
           "available_metrics", "instrument", "__version__"]


def init(**kwargs: Any) -> Tracescore:
    """Start a tracescore pipeline. See :class:`tracescore.client.Tracescore` for arguments.

    Validates its arguments and fails with a clear message on an unknown metric name, a sample
    rate outside [0, 1] or a database path that cannot be written.
    """
    from .client import Tracescore

    return Tracescore(**kwargs)


def instrument(**kwargs: Any) -> Tracescore:
    """``init(**kwargs)``, then instrument every supported framework that is installed."""
    ts = init(**kwargs)
    ts.instrument()
    return ts


def available_metrics() -> list[str]:
    from .metrics import registry

    return registry.available()


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:  # (an AttributeError lets ``from tracescore import <submodule>`` work)
        raise AttributeError(f"module 'tracescore' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value  # looked up once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


if TYPE_CHECKING:  # pragma: no cover - for type checkers only
    from .client import Tracescore
    from .labels import add_label
    from .metrics.base import Metric
    from .store.retention import Retention
