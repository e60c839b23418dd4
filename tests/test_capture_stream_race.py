"""LangGraph's async ``stream_mode="messages"`` hands each chunk to its stream queue with
``loop.call_soon_threadsafe(queue.put_nowait, item)``. At a client's cut, a chunk the model
already produced may still wait among the loop's ready callbacks, not yet in the queue: it
never reaches the client, and the record must not count it as received (on a loaded CI machine
the record held "About 80" where the client had read "About "). Real asyncio queues and loops,
real LangChain message chunks."""

from __future__ import annotations

import asyncio

from langchain_core.messages import AIMessageChunk

from integrations.langchain.runs import _queued_chunks


def _item(msg_id: str, text: str) -> tuple:
    return ((), "messages", (AIMessageChunk(content=text, id=msg_id), {}))


def test_chunks_scheduled_into_the_queue_count_as_not_received() -> None:
    async def main() -> tuple[int, int, int]:
        q: asyncio.Queue = asyncio.Queue()
        loop = asyncio.get_running_loop()
        q.put_nowait(_item("m1", "About "))  # in the queue: not yet read by the client
        loop.call_soon_threadsafe(q.put_nowait, _item("m1", "80"))  # on its way
        loop.call_soon_threadsafe(q.put_nowait, _item("m2", "other message"))
        cancelled = loop.call_soon_threadsafe(q.put_nowait, _item("m1", "never"))
        cancelled.cancel()
        before = _queued_chunks(q, "m1")
        await asyncio.sleep(0)  # the loop runs the scheduled puts
        after = _queued_chunks(q, "m1")
        return before, after, q.qsize()

    before, after, size = asyncio.run(main())
    assert before == 2  # one queued + one scheduled (the cancelled one does not count)
    assert after == 2 and size == 3  # the same chunks, now all in the queue


def test_a_thread_queue_outside_a_loop_counts_its_items_only() -> None:
    from collections import deque

    class SyncQueue:  # LangGraph's sync stream queue keeps a deque in ``_queue``
        def __init__(self) -> None:
            self._queue = deque([_item("m1", "a"), _item("m1", "b")])

    assert _queued_chunks(SyncQueue(), "m1") == 2
