"""Optional extras: importing a framework or saying which extra to install."""

from __future__ import annotations


def require(module: str, extra: str) -> None:
    """Import ``module`` or raise an :class:`ImportError` that says which extra to install.

    The import itself is the test, not ``importlib.util.find_spec``: that raises a bare
    ``ModuleNotFoundError`` for ``llama_index.core`` when ``llama_index`` is missing, and says
    nothing of a framework that is present but fails to import (a broken or partial install).
    """
    import importlib

    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise ImportError(
            f"this tracescore integration needs {module!r} ({exc}): "
            f"pip install 'tracescore[{extra}]'", name=module
        ) from exc
