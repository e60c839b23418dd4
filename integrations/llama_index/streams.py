"""Streamed answers: what the client actually received, and when a streaming run ends.

A streaming query engine returns a ``StreamingResponse`` before its answer exists; a chat
engine's ``stream_chat``/``astream_chat`` a ``StreamingAgentChatResponse`` whose answer a
history writer (a thread or task) streams into a queue the client reads. Either way the
record is built once the client is done with the stream, with exactly the text it received:

- read to its end: the record is complete;
- closed early (``close()``/``aclose()``, ``break`` out of ``async for`` then the event loop's
  finaliser), cancelled (``asyncio.CancelledError`` while waiting for the next chunk), or
  **dropped** — the response garbage-collected without being read to its end, even never
  started: the record holds the text read so far (possibly empty) with
  ``RagRecord.complete = False``, the root span has ``tracescore.answer.complete = false`` and
  status ``ERROR`` ("incomplete: the client stopped reading the stream after N characters").

Drops are seen with ``weakref.finalize`` on the stream wrapper (query engines) or on the
response (chat engines): deterministic under CPython's reference counting, and at the next
cyclic collection when the app's objects form a cycle. The run holds no strong reference to
the response meanwhile.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Generator, Iterator
from typing import Any

from llama_index.core.chat_engine.types import StreamingAgentChatResponse

from tracescore._internal.errors import handle_internal_errors

from ._model import Run, stream_parent

__all__ = ["ChatStreamTrack", "StreamsMixin", "track_chat_stream"]


class StreamsMixin:
    """Stream wrappers of :class:`~.capture.LlamaIndexCapture`."""

    _lock: threading.Lock

    def _finish(self, run: Run, abandoned: str | None = None) -> None:
        raise NotImplementedError

    def _wrap_stream(self, run: Run, gen: Iterator[str],
                     parts: list[str]) -> Generator[str, None, None]:
        try:
            while True:
                token = stream_parent.set(run.root)
                try:
                    item = next(gen)
                except StopIteration:
                    break
                finally:
                    stream_parent.reset(token)
                if isinstance(item, str):
                    parts.append(item)
                yield item
        except GeneratorExit:
            # Closed early (or collected): close the inner stream too (as ``yield from``
            # would), so the LLM call reports its end before the run is recorded.
            close = getattr(gen, "close", None)
            if close is not None:
                close()
            self._stream_ended(run, "".join(parts), None, closed=True)
            raise
        except BaseException as exc:
            self._stream_ended(run, "".join(parts), exc)
            raise
        self._stream_ended(run, "".join(parts), None)

    async def _wrap_astream(self, run: Run, agen: AsyncIterator[str],
                            parts: list[str]) -> AsyncGenerator[str, None]:
        try:
            while True:
                token = stream_parent.set(run.root)
                try:
                    item = await agen.__anext__()
                except StopAsyncIteration:
                    break
                finally:
                    stream_parent.reset(token)
                if isinstance(item, str):
                    parts.append(item)
                yield item
        except (GeneratorExit, asyncio.CancelledError):
            # Closed early, or the client's task was cancelled while waiting for a chunk:
            # a cut-off stream, not a failure of the app.
            aclose = getattr(agen, "aclose", None)
            try:
                if aclose is not None:
                    await aclose()
            finally:
                self._stream_ended(run, "".join(parts), None, closed=True)
            raise
        except BaseException as exc:
            self._stream_ended(run, "".join(parts), exc)
            raise
        self._stream_ended(run, "".join(parts), None)

    def _stream_ended(self, run: Run, text: str, err: BaseException | None,
                      closed: bool = False) -> None:
        with handle_internal_errors("llama_index.stream_end"):
            with self._lock:
                if run.done or run.answer_known:
                    return
                run.answer, run.answer_known = text, True
                run.incomplete = closed
                if err is not None:
                    run.error = err
                run.waits -= 1
                run.done = True
            # The stream is the last thing a streaming run does: spans still open now (an LLM
            # stream closed early never reports its end) are ended with it.
            self._finish(run)

    def _stream_dropped(self, run: Run, parts: list[str]) -> None:
        # weakref.finalize callback: the stream wrapper was collected without being read to
        # its end or closed. CPython calls weakref callbacks before it closes a collected
        # generator, so the text read so far comes from the list the wrapper shares, not from
        # the wrapper's GeneratorExit (which then finds the run done).
        with handle_internal_errors("llama_index.stream_dropped", reraise=False):
            self._stream_ended(run, "".join(parts), None, closed=True)

    # -- chat streams -----------------------------------------------------------------------
    def _reader_done(self, run: Run, text: str, closed: bool) -> None:
        """The client is done with a chat stream: finish the run unless the history writer is
        still running (its span's exit finishes it then)."""
        with handle_internal_errors("llama_index.chat_stream_end", reraise=False):
            with self._lock:
                if run.done or run.answer_known:
                    return
                run.answer, run.answer_known = text, True
                run.incomplete = closed
                run.waits -= 1
                if not (run.exited and not run.live and run.waits <= 0):
                    return
                run.done = True
            self._finish(run)


class ChatStreamTrack:
    """What the client of one ``StreamingAgentChatResponse`` has read (shared by every
    generator it takes from the response; holds no reference to the response itself)."""

    __slots__ = ("capture", "run", "parts", "settled", "__weakref__")

    def __init__(self, capture: StreamsMixin, run: Run) -> None:
        self.capture = capture
        self.run = run
        self.parts: list[str] = []
        self.settled = False

    def settle(self, text: str | None, closed: bool) -> None:
        if self.settled:
            return
        self.settled = True
        got = "".join(self.parts).strip() if text is None else text
        self.capture._reader_done(self.run, got, closed)

    def wrap(self, gen: Iterator[str], response: StreamingAgentChatResponse
             ) -> Generator[str, None, None]:
        try:
            for item in gen:
                if isinstance(item, str):
                    self.parts.append(item)
                yield item
        except GeneratorExit:
            close = getattr(gen, "close", None)
            if close is not None:
                close()
            self.settle(None, closed=True)
            raise
        self.settle(response.response, closed=False)

    async def awrap(self, agen: AsyncIterator[str], response: StreamingAgentChatResponse
                    ) -> AsyncGenerator[str, None]:
        try:
            async for item in agen:
                if isinstance(item, str):
                    self.parts.append(item)
                yield item
        except (GeneratorExit, asyncio.CancelledError):
            aclose = getattr(agen, "aclose", None)
            try:
                if aclose is not None:
                    await aclose()
            finally:
                self.settle(None, closed=True)
            raise
        self.settle(response.response, closed=False)

    def dropped(self) -> None:
        # weakref.finalize callback on the response: read no further than self.parts.
        self.settle(None, closed=True)


class _TrackedChatStream(StreamingAgentChatResponse):
    """A ``StreamingAgentChatResponse`` whose readers report to a :class:`ChatStreamTrack`.

    The response's class is swapped for this subclass (same fields, no slots: allowed, and
    ``isinstance`` checks in the app and in LlamaIndex still hold); ``response_gen`` is a
    property and ``async_response_gen`` a method there, so wrapping them is the one way to see
    what the client reads without touching the history writer's queue.
    """

    @property
    def response_gen(self) -> Generator[str, None, None]:
        gen: Generator[str, None, None] = \
            StreamingAgentChatResponse.response_gen.fget(self)  # type: ignore[attr-defined]
        track = self.__dict__.get("_tracescore_track")
        return gen if track is None else track.wrap(gen, self)

    def async_response_gen(self) -> AsyncGenerator[str, None]:
        agen = StreamingAgentChatResponse.async_response_gen(self)
        track = self.__dict__.get("_tracescore_track")
        return agen if track is None else track.awrap(agen, self)

    def __str__(self) -> str:
        text = StreamingAgentChatResponse.__str__(self)
        track = self.__dict__.get("_tracescore_track")
        if track is not None and self.is_done:
            track.settle(self.response, closed=False)  # the whole answer, read at once
        return text


def track_chat_stream(capture: StreamsMixin, run: Run, response: Any) -> bool:
    """Follow what the client reads of ``response`` (a ``StreamingAgentChatResponse``); False
    when it cannot be followed (a subclass of LlamaIndex's, an object without ``__dict__``)."""
    if type(response) is not StreamingAgentChatResponse:
        return False
    track = ChatStreamTrack(capture, run)
    try:
        response.__dict__["_tracescore_track"] = track
        response.__class__ = _TrackedChatStream
    except (AttributeError, TypeError):
        return False
    fin = weakref.finalize(response, track.dropped)
    fin.atexit = False
    return True
