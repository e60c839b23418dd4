"""Which run owns the record of the current request, across frameworks.

The unit is the user's request: one record per outermost run, whatever framework it belongs
to. When a LangChain agent's tool calls a LlamaIndex query engine (or a LlamaIndex workflow
awaits a LangChain chain), the inner framework's root run must not make a record of its own:
it hands what it retrieved (and its answer, if the owner has none) to the outer run's record.

The outermost live run of any framework is kept in a ``ContextVar``: code the outer run calls
(in the same thread or task, or in executors and tasks that copy the context, as both
frameworks do) sees it. A framework that already keeps its current run in a context variable
of its own (LangChain's ``var_child_runnable_config``) registers a *resolver* instead
(:func:`register_resolver`): it finds the owner from that framework's own tree only when an
inner framework asks, so it costs nothing per run, and cannot mix up runs that one context
starts together (a LangChain ``batch``). An adapter's root run:

- calls :func:`current_owner` when it starts; if that is an owner of *another* framework, it
  makes no record, hands its final contexts over with :meth:`Owner.add_contexts` and its answer
  with :meth:`Owner.offer_answer`, and parents its spans on :attr:`Owner.span`;
- otherwise it :func:`claim`\\ s ownership with its own :class:`Owner` and :func:`release`\\ s it
  when it ends.

A run of the *same* framework inside an owner is nested by that framework's own tree
(LangChain's ``parent_run_id``, LlamaIndex's parent span id), never through this module: a
LangChain ``batch`` starts several roots from one thread and each must stay a root.

Releasing marks the owner dead as well as resetting the variable: a stream ended in another
context (an async generator closed by the event loop) cannot reset the variable where it was
set, and a dead owner left behind is ignored by :func:`current_owner`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from contextvars import ContextVar, Token
from typing import Any

from tracescore.record import Context

__all__ = ["Owner", "OwnerToken", "claim", "current_owner", "register_resolver", "release"]

#: Called with (contexts, step, final) when another framework hands documents over.
ContextSink = Callable[[Sequence[Context], str, bool], None]
#: Called with the inner framework's answer text (the owner keeps it only if it has none).
AnswerSink = Callable[[str], None]

_current: ContextVar[Owner | None] = ContextVar("tracescore_record_owner", default=None)
#: Functions that find the live owner from a framework's own context (see the module doc),
#: with the framework each belongs to.
_resolvers: list[tuple[Callable[[], Owner | None], str | None]] = []


class Owner:
    """The outermost live run of a request: the one that makes the record.

    ``framework`` is ``"langchain"``, ``"llama_index"`` or ``"tracescore"``; ``trace_id`` the
    32-hex trace id of its root span; ``span`` that root span (an OTel ``Span``), for the inner
    framework's spans to nest under. The sinks are the owning adapter's own functions; they
    run on the caller's thread and must only append (the request path).
    """

    __slots__ = ("framework", "trace_id", "span", "live", "_contexts", "_answer")

    def __init__(self, framework: str, trace_id: str, span: Any, contexts: ContextSink,
                 answer: AnswerSink | None = None) -> None:
        self.framework = framework
        self.trace_id = trace_id
        self.span = span
        self.live = True
        self._contexts = contexts
        self._answer = answer

    def add_contexts(self, contexts: Sequence[Context], *, step: str, final: bool) -> None:
        """Documents another framework retrieved inside this run.

        ``step`` names what produced them (the retriever, postprocessor or engine);
        ``final`` is True when they are the output of that framework's outermost retriever or
        postprocessor — what reached its model — and False for inner candidates.
        """
        if self.live and contexts:
            self._contexts(contexts, step, final)

    def offer_answer(self, answer: str | None) -> None:
        """The inner framework's answer: the owner's record takes it only if it ends with none
        of its own (a LangChain chain whose last step is a LlamaIndex query engine)."""
        if self.live and answer and self._answer is not None:
            self._answer(answer)

    def __repr__(self) -> str:
        return f"Owner({self.framework!r}, trace_id={self.trace_id!r}, live={self.live})"


class OwnerToken:
    """What :func:`claim` returns; give it back to :func:`release`."""

    __slots__ = ("owner", "token")

    def __init__(self, owner: Owner, token: Token[Owner | None]) -> None:
        self.owner = owner
        self.token = token


def current_owner(other_than: str | None = None) -> Owner | None:
    """The outermost live run of the calling context, of any framework: a claimed owner
    first (claims are made by outer runs only), else what a registered resolver finds.

    ``other_than``: the asking framework; its own resolver is skipped (a root run defers only
    to another framework's owner, and asking its own tree costs a lookup per root run)."""
    owner = _current.get()
    if owner is not None and owner.live:
        return owner
    for resolve, framework in _resolvers:
        if framework is not None and framework == other_than:
            continue
        try:
            found = resolve()
        except Exception:  # a resolver must never break the inner framework's run
            found = None
        if found is not None and found.live:
            return found
    return None


def register_resolver(resolve: Callable[[], Owner | None], framework: str | None = None
                      ) -> None:
    """Add a function that finds the live owner from ``framework``'s own context
    (idempotent)."""
    if all(resolve is not r for r, _ in _resolvers):
        _resolvers.append((resolve, framework))


def claim(owner: Owner) -> OwnerToken:
    """Make ``owner`` the current owner of the calling context."""
    return OwnerToken(owner, _current.set(owner))


def release(token: OwnerToken) -> None:
    """End ``token``'s ownership: the owner is dead at once, the variable reset if it can be.

    Never raises: a token used in another context (a stream closed by the event loop) cannot
    reset the variable there, and the dead owner it leaves is ignored.
    """
    token.owner.live = False
    try:
        _current.reset(token.token)
    except ValueError:
        pass
