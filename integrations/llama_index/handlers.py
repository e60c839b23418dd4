"""The LlamaIndex span and event handlers, and process-wide instrumentation: the handlers on
the root instrumentation dispatcher, and the vector-store search wrappers (stores.py)."""

from __future__ import annotations

import inspect
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

# Re-exported by llama_index.core.instrumentation without __all__, hence the ignore.
from llama_index.core.instrumentation import get_dispatcher  # type: ignore[attr-defined]
from llama_index.core.instrumentation.event_handlers import BaseEventHandler
from llama_index.core.instrumentation.events import BaseEvent
from llama_index.core.instrumentation.span import BaseSpan
from llama_index.core.instrumentation.span_handlers import BaseSpanHandler

from . import stores
from .capture import LlamaIndexCapture

if TYPE_CHECKING:
    from tracescore.client import Tracescore

__all__ = ["Instrumentation", "TracescoreEventHandler", "TracescoreSpanHandler", "instrument",
           "uninstrument"]


class TracescoreSpanHandler(BaseSpanHandler[BaseSpan]):
    """LlamaIndex span handler feeding a :class:`LlamaIndexCapture`.

    Overrides ``span_enter``/``span_exit``/``span_drop`` themselves: the capture keeps its own
    light map, so no per-span pydantic object is built and ``open_spans`` stays empty.
    """

    capture: Any = None

    def __init__(self, capture: LlamaIndexCapture) -> None:
        super().__init__()
        self.capture = capture

    @classmethod
    def class_name(cls) -> str:
        return "TracescoreSpanHandler"

    def span_enter(self, id_: str, bound_args: inspect.BoundArguments,
                   instance: Any | None = None, parent_id: str | None = None,
                   tags: dict[str, Any] | None = None, **kwargs: Any) -> None:
        self.capture.span_enter(id_, bound_args, instance, parent_id, tags)

    def span_exit(self, id_: str, bound_args: inspect.BoundArguments,
                  instance: Any | None = None, result: Any | None = None,
                  **kwargs: Any) -> None:
        self.capture.span_exit(id_, result)

    def span_drop(self, id_: str, bound_args: inspect.BoundArguments,
                  instance: Any | None = None, err: BaseException | None = None,
                  **kwargs: Any) -> None:
        self.capture.span_drop(id_, err)

    def close(self) -> None:
        self.capture.close()

    # Unused (span_enter/exit/drop are overridden) but abstract in BaseSpanHandler.
    def new_span(self, id_: str, bound_args: inspect.BoundArguments,
                 instance: Any | None = None, parent_span_id: str | None = None,
                 tags: dict[str, Any] | None = None, **kwargs: Any) -> BaseSpan | None:
        return None

    def prepare_to_exit_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any | None = None, result: Any | None = None,
                             **kwargs: Any) -> BaseSpan | None:
        return None

    def prepare_to_drop_span(self, id_: str, bound_args: inspect.BoundArguments,
                             instance: Any | None = None, err: BaseException | None = None,
                             **kwargs: Any) -> BaseSpan | None:
        return None


class TracescoreEventHandler(BaseEventHandler):
    """LlamaIndex event handler feeding a :class:`LlamaIndexCapture`."""

    capture: Any = None

    def __init__(self, capture: LlamaIndexCapture) -> None:
        super().__init__()
        self.capture = capture

    @classmethod
    def class_name(cls) -> str:
        return "TracescoreEventHandler"

    def handle(self, event: BaseEvent, **kwargs: Any) -> None:
        self.capture.handle_event(event)


# -- process-wide instrumentation ------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Instrumentation:
    """What :func:`instrument` installed (pass it to :func:`uninstrument`)."""

    capture: LlamaIndexCapture
    span_handler: TracescoreSpanHandler
    event_handler: TracescoreEventHandler


_active: Instrumentation | None = None
_install_lock = threading.Lock()


def instrument(ts: Tracescore) -> Instrumentation:
    """Capture every LlamaIndex run in the process for ``ts`` (idempotent).

    One pipeline at a time, as for LangChain: instrumenting another ``Tracescore`` replaces
    the previous one's handlers.
    """
    global _active
    with _install_lock:
        if _active is not None and _active.capture.ts is ts:
            return _active
        if _active is not None:
            _remove(_active)
        capture = LlamaIndexCapture(ts)
        handle = Instrumentation(capture, TracescoreSpanHandler(capture),
                                 TracescoreEventHandler(capture))
        root = get_dispatcher()
        root.add_span_handler(handle.span_handler)
        root.add_event_handler(handle.event_handler)
        stores.install(capture)
        _active = handle
        return handle


def uninstrument(handle: Instrumentation | None = None) -> None:
    """Remove ``handle``'s handlers (the active ones if None); open runs end unrecorded."""
    global _active
    with _install_lock:
        if handle is None:
            handle = _active
        if handle is None:
            return
        _remove(handle)
        if _active is handle:
            _active = None


def _remove(handle: Instrumentation) -> None:
    root = get_dispatcher()
    # Rebind rather than mutate: a dispatch in another thread keeps iterating the old list.
    root.span_handlers = [h for h in root.span_handlers if h is not handle.span_handler]
    root.event_handlers = [h for h in root.event_handlers if h is not handle.event_handler]
    stores.uninstall(handle.capture)
    handle.capture.close()
