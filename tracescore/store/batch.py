"""The queue writer's batch as the store takes it: (record, decision) pairs, made when read.

:class:`~tracescore.queue.RecordQueue`'s writer hands a :class:`Pairs` to
:meth:`Store.write_batch <tracescore.store.base.StoreAPI.write_batch>`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from ..record import RagRecord
from ..sampling import Decision, trace_fraction

__all__ = ["Pairs"]


class Pairs(Sequence[tuple[RagRecord, Decision]]):
    """The writer's batch as the (record, decision) pairs the store takes, each made when it
    is read. A record no metric sampled and no rule forced waits in the buffer alone (see
    :meth:`Tracescore.submit`): its decision is a function of its trace id, made again here
    (``u`` once per batch). Why: every object that waits in the buffer for longer than a few
    young collections reaches the collector's oldest generation, and each full collection
    costs in proportion to all of them (a tight ``log_record`` loop spent a quarter of its
    time there); a pair made here dies as soon as its row is built."""

    __slots__ = ("items", "_u")

    def __init__(self, items: list[Any]) -> None:
        self.items = items
        self._u: list[float] | None = None

    @staticmethod
    def decision(item: Any) -> Decision:
        return Decision(trace_fraction(item.trace_id), ()) if type(item) is RagRecord \
            else item[1]

    def __len__(self) -> int:
        return len(self.items)

    def records(self) -> list[RagRecord]:
        """The records alone (no pair made): what :meth:`Store.write_batch` reads first."""
        return [x if type(x) is RagRecord else x[0] for x in self.items]

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self.items)))]
        item = self.items[i]
        return (item, self.decision(item)) if type(item) is RagRecord else item

    def __iter__(self) -> Iterator[tuple[RagRecord, Decision]]:
        u = self._u
        if u is None:  # (floats: nothing for the collector)
            u = self._u = [trace_fraction(x.trace_id) if type(x) is RagRecord else 0.0
                           for x in self.items]
        for item, ui in zip(self.items, u):
            yield (item, Decision(ui, ())) if type(item) is RagRecord else item
