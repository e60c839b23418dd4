"""The framework entry points of :class:`tracescore.client.Tracescore` (its documented methods
delegate here and carry these docstrings): the LangChain callback handler, and instrumenting
LangChain and LlamaIndex process-wide. The integrations are imported only when asked for."""

from __future__ import annotations

import importlib.util
from typing import Any


def langchain_handler(ts: Any) -> Any:
    """A LangChain callback handler bound to this pipeline (one per Tracescore)."""
    if ts._langchain_handler is None:
        from ..integrations.langchain import TracescoreCallbackHandler

        ts._langchain_handler = TracescoreCallbackHandler(ts)
    return ts._langchain_handler


def instrument_langchain(ts: Any) -> None:
    """Trace every LangChain run in the process (through langchain_core's configure hook).

    Without LangChain: an ImportError that says ``pip install 'tracescore[langchain]'``."""
    from ..integrations.langchain import instrument

    instrument(ts.langchain_handler())


def uninstrument_langchain(ts: Any) -> None:
    from ..integrations.langchain import uninstrument

    uninstrument(ts._langchain_handler)


def instrument_llama_index(ts: Any) -> None:
    """Trace every LlamaIndex query, retrieval and LLM call (root instrumentation dispatcher).

    Without LlamaIndex: an ImportError that says ``pip install 'tracescore[llama-index]'``."""
    from ..integrations.llama_index import instrument

    ts._llama_index = instrument(ts)


def uninstrument_llama_index(ts: Any) -> None:
    if ts._llama_index is not None:
        from ..integrations.llama_index import uninstrument

        uninstrument(ts._llama_index)
        ts._llama_index = None


def instrument(ts: Any) -> list[str]:
    """Instrument every supported framework that is installed; returns their names."""
    done = []
    if _installed("langchain_core"):
        ts.instrument_langchain()
        done.append("langchain")
    if _installed("llama_index.core"):
        ts.instrument_llama_index()
        done.append("llama_index")
    return done


def _installed(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:  # the parent package is missing
        return False
