"""Record assembly shared by the framework adapters: which retrieved documents reached the
answering model (the record's contexts) and every candidate beside them.

An adapter notes each document-producing step of a run as a :class:`Retrieval` while the run
goes on (cheap: a list append), and calls :func:`assemble` once, when the root run ends. The
decision is made from the framework's own tree, never from prompt strings:

1. **Outermost step wins.** A step inside another document-producing step (a base retriever
   inside ``ContextualCompressionRetriever`` or ``EnsembleRetriever``, a retriever inside a
   tool whose artifact holds documents, a vector-store search inside a graph node that returns
   documents into the state) is *inner*: its documents are candidates; the outer step's output
   is what went on towards the model. An inner document the outer step did not pass on was
   dropped by the outer step (a compressor, reranker, filter, grader, fusion).
2. **A step run again replaces itself.** A later retrieval of the same loop key (the same graph
   node run again, the same state key written again — LangGraph's last-value channels)
   supersedes the earlier one: the "grade → rewrite → retrieve again" loop answers from its
   last retrieval. A superseded retrieval made by a tool call stays when the answering model's
   prompt still holds that call's ``ToolMessage`` (a ReAct agent's several searches).
3. **Tool calls the answering model never saw** (their ``ToolMessage`` is not in its prompt,
   when that prompt holds tool messages at all) are dropped. A call inside another tool
   call (a sub-agent's search inside the supervisor's ``research`` tool) was seen when the
   enclosing call was: the model saw a reply derived from the documents, which are then the
   evidence the answer rests on (their candidates say ``via="<tool> (tool reply)"``).
   Likewise documents a graph node's own model call turned into text that a later answering
   call read (a map-reduce branch's summary): ``via="<node> (model text)"``.
4. Contexts are the kept documents in the order their steps ran (retrievers by start, tools
   and nodes by end; parallel ``Send`` branches of one graph step in the order of their
   tasks, whatever order their threads ran in), **de-duplicated by content**: the same text found by two steps (BM25 and
   a vector store in an ensemble; a copy a reranker made) is one context, with its first
   step's source and the first id any copy had. Documents a tool or node passed on keep the
   source of the retriever (tool, node) inside it that found them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from tracescore.record import Candidate, Context

__all__ = ["MAX_CANDIDATES", "Retrieval", "assemble"]

#: Candidates kept per record (the contexts are never cut; candidates beyond are not stored).
MAX_CANDIDATES = 500

#: Retrieval kinds. A "retriever" inside a tool or node gives its documents their source.
RETRIEVER = "retriever"
SEARCH = "search"
TOOL = "tool"
NODE = "node"
EXTERNAL = "external"


@dataclass(slots=True)
class Retrieval:
    """One step's documents, as noted while the run goes on."""

    seq: int                      # order: retrievers at their start, other steps at their end
    source: str                   # the step's name (retriever class, tool, node, store search)
    contexts: Sequence[Context]
    kind: str = RETRIEVER
    #: Sequence numbers of the runs enclosing the step (to find the steps inside an outer one;
    #: a tuple of ints is not tracked by the garbage collector, a frozenset is).
    ancestors: frozenset[int] | tuple[int, ...] = frozenset()
    #: The run that produced it (its own sequence number).
    run_seq: int = -1
    #: Set when an outer document-producing step encloses it: that step's name (and run).
    within: str | None = None
    within_seq: int | None = None
    #: Supersession: a later retrieval with the same key and a later round replaces this one
    #: (rounds: the graph steps of the enclosing nodes, outermost first).
    loop_key: str | None = None
    loop_round: tuple[int, ...] = (0,)
    #: The tool call whose result carried these documents, if any.
    tool_call: str | None = None
    #: Every enclosing tool call, innermost first: (call id, tool name, tool run).
    tool_calls: tuple[tuple[str, str, int], ...] = ()
    #: Order among steps: (graph step, Send task index) of the enclosing nodes, outermost first.
    order: tuple[tuple[int, int], ...] = ()
    #: The enclosing graph node run: (its sequence number, its name).
    node: tuple[int, str] | None = None


def enclose(retrievals: Iterable[Retrieval], outer_seq: int, outer_name: str) -> None:
    """Mark the retrievals made inside the run ``outer_seq`` as inner to ``outer_name``."""
    for r in retrievals:
        if r.within is None and outer_seq in r.ancestors:
            r.within = outer_name
            r.within_seq = outer_seq


def _order(r: Retrieval) -> tuple[tuple[tuple[int, int], ...], int]:
    return r.order, r.seq


def assemble(retrievals: Sequence[Retrieval], prompt_tool_calls: frozenset[str] = frozenset(),
             candidates: bool = True, answer_seq: int | None = None,
             step_models: Mapping[int, int] | None = None,
             ) -> tuple[tuple[Context, ...], tuple[Candidate, ...]]:
    """(contexts, candidates) of a run from its retrievals (rules in the module docstring).

    ``candidates=False``: no candidates (a record stored compact keeps none).
    ``answer_seq``: the answering model call's run; ``step_models``: tool or graph node run →
    its last model call (outside retrievers), to tell a step that wrote text from its
    documents (a sub-agent's reply, a branch's summary)."""
    models = step_models or {}

    def wrote(step: int, after: int) -> bool:
        model = models.get(step)
        return model is not None and model > after and model != answer_seq

    if not retrievals:
        return (), ()
    if len(retrievals) == 1 and retrievals[0].within is None \
            and retrievals[0].within_seq is None:  # the common request: one retrieval step
        return _single(retrievals[0], prompt_tool_calls, candidates, wrote)
    ordered = sorted(retrievals, key=_order)
    latest: dict[str, tuple[int, ...]] = {}
    for r in ordered:
        if r.within is None and r.loop_key is not None and r.contexts:
            latest[r.loop_key] = max(latest.get(r.loop_key, r.loop_round), r.loop_round)
    dropped: dict[int, str] = {}  # id(retrieval) → why its documents were not kept
    via: dict[int, str] = {}  # id(retrieval) → the derived text the model saw instead
    for r in ordered:
        if r.within is not None:
            continue
        seen_call = False
        if r.tool_calls and prompt_tool_calls:
            for i, (call, name, tool) in enumerate(r.tool_calls):
                if call in prompt_tool_calls:
                    seen_call = True
                    if i or wrote(tool, r.seq):  # the reply was written from the documents
                        via[id(r)] = f"{name} (tool reply)"
                    break
        if prompt_tool_calls and r.tool_call is not None and not seen_call:
            dropped[id(r)] = "not in the answering model's prompt"
        elif (r.loop_key is not None and r.loop_round < latest.get(r.loop_key, r.loop_round)
              and not seen_call):
            dropped[id(r)] = f"retrieved again ({r.loop_key})"
        elif id(r) not in via and r.node is not None and wrote(r.node[0], r.seq):
            via[id(r)] = f"{r.node[1]} (model text)"
    # provenance: a retriever (tool, node) inside a tool or node names the documents it found;
    # a raw vector-store search inside one is that step's own implementation
    by_text: dict[str, Context] = {}
    for r in ordered:
        if r.kind != SEARCH and r.within is not None:
            for c in r.contexts:
                by_text.setdefault(c.text, c)
    contexts: list[Context] = []
    index: dict[str, int] = {}
    for r in ordered:
        if r.within is not None or id(r) in dropped:
            continue
        for c in r.contexts:
            i = index.get(c.text)
            if i is not None:
                if contexts[i].id is None and c.id is not None:
                    contexts[i] = replace(contexts[i], id=c.id)
                continue
            if r.kind in (TOOL, NODE) and c.text in by_text:
                c = by_text[c.text]
            index[c.text] = len(contexts)
            contexts.append(c)
    kept = set(index)
    if any(c.id is None for c in contexts):  # a reranker's copy: the id its original had
        ids: dict[str, str] = {}
        for r in ordered:
            for c in r.contexts:
                if c.id is not None:
                    ids.setdefault(c.text, c.id)
        contexts = [replace(c, id=ids.get(c.text)) if c.id is None else c for c in contexts]
    if not candidates:
        return tuple(contexts), ()
    # An inner step's document the step enclosing it handed on is ONE candidate: the outer
    # step's, under the source its context has (rule 4: the retriever inside a tool or node;
    # the tool or node itself for a raw store search; a wrapping retriever's own name), with
    # the inner copy's id and score if it lacks them. An inner document not handed on was
    # dropped by the enclosing step; a document of a superseded or unseen step is dropped
    # (with that reason) even when another step found it again.
    outer_texts: dict[int | None, set[str]] = {}
    for r in ordered:
        outer_texts.setdefault(r.run_seq, set()).update(c.text for c in r.contexts)
    passed: dict[tuple[int, str], tuple[Context, str]] = {}
    for r in ordered:
        if r.within_seq is not None:
            texts = outer_texts.get(r.within_seq, ())
            for c in r.contexts:
                if c.text in texts:
                    passed.setdefault((r.within_seq, c.text), (c, r.kind))
    out: list[Candidate] = []
    for r in ordered:
        why = dropped.get(id(r))
        inner = r.within_seq is not None
        for c in r.contexts:
            if len(out) >= MAX_CANDIDATES:
                break
            if inner and c.text in outer_texts.get(r.within_seq, ()):
                continue  # handed on: counted once, as the enclosing step's candidate
            source = r.source
            hit = passed.get((r.run_seq, c.text))
            if hit is not None:
                first, kind = hit
                if kind != SEARCH and r.kind in (TOOL, NODE):
                    source = first.source or source  # as its context (rule 4)
                if c.id is None or c.score is None:
                    c = replace(c, id=c.id if c.id is not None else first.id,
                                score=c.score if c.score is not None else first.score)
            is_kept = not inner and why is None and c.text in kept
            out.append(Candidate(
                text=c.text, id=c.id, score=c.score, source=source, kept=is_kept,
                dropped_by=None if is_kept else (why or r.within or "dropped"),
                via=via.get(id(r)) if is_kept else None))
    return tuple(contexts), tuple(out)


def _single(r: Retrieval, prompt_tool_calls: frozenset[str], candidates: bool,
            wrote: Callable[[int, int], bool]
            ) -> tuple[tuple[Context, ...], tuple[Candidate, ...]]:
    """:func:`assemble` of one retrieval inside no other step: the same rules, without the
    bookkeeping that several steps need (the request path pays for it)."""
    via: str | None = None
    seen_call = False
    if r.tool_calls and prompt_tool_calls:
        for i, (call, name, tool) in enumerate(r.tool_calls):
            if call in prompt_tool_calls:
                seen_call = True
                if i or wrote(tool, r.seq):
                    via = f"{name} (tool reply)"
                break
    why: str | None = None
    if prompt_tool_calls and r.tool_call is not None and not seen_call:
        why = "not in the answering model's prompt"
    elif via is None and r.node is not None and wrote(r.node[0], r.seq):
        via = f"{r.node[1]} (model text)"
    contexts: list[Context] = []
    if why is None:
        index: dict[str, int] = {}
        for c in r.contexts:
            i = index.get(c.text)
            if i is None:
                index[c.text] = len(contexts)
                contexts.append(c)
            elif contexts[i].id is None and c.id is not None:
                contexts[i] = replace(contexts[i], id=c.id)
    if not candidates:
        return tuple(contexts), ()
    source = r.source
    kept = why is None
    return tuple(contexts), tuple(
        Candidate(text=c.text, id=c.id, score=c.score, source=source, kept=kept,
                  dropped_by=why, via=via if kept else None)
        for c in r.contexts[:MAX_CANDIDATES])
