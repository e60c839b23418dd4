"""Framework adapters, shipped as ``tracescore.integrations``.

Each adapter imports its framework lazily; the tracescore core never imports LangChain or
LlamaIndex. A missing framework gives a clear ``pip install 'tracescore[...]'`` message.
"""

from __future__ import annotations


def require(module: str, extra: str) -> None:
    import importlib.util

    if importlib.util.find_spec(module) is None:
        raise ImportError(
            f"this tracescore integration needs {module!r}: pip install 'tracescore[{extra}]'"
        )
