"""A LlamaIndex run's contexts (what reached the answering model) and candidates (every
retrieved document, with the step that dropped it), from the steps noted while it ran.

Decided from LlamaIndex's own tree and the values its calls passed, never from prompt text:

1. **Consumed steps give way.** A retriever's, vector-store search's or postprocessor's output
   that a later postprocessor or synthesizer took as input went on through that step; only what
   comes out of the last step of a chain reaches the model. A synthesizer's input is what its
   model saw. So a query engine's contexts are its synthesizer's input (after every node
   postprocessor: similarity cut-offs, rerankers, ``LLMRerank``), a chat engine's or a
   workflow step's the postprocessor's output, a retriever's on its own its output.
2. **Outermost retriever wins.** A retriever called inside another retriever (the inner
   retrievers of ``QueryFusionRetriever``, a recursive retriever's) produced candidates; the
   outer retriever's output is what went on. A vector-store search made by a retriever is that
   retriever's (it is not noted twice).
3. **Model text is not evidence.** A synthesizer's input node that no retrieval step of the run
   produced, in a run with other synthesizers, is another synthesizer's answer
   (``SubQuestionQueryEngine``'s "Sub question: … Response: …" nodes, a multi-selection
   ``RouterQueryEngine``'s combined responses): left out; the sub-engines' own synthesizer
   inputs are the contexts.
5. **Chunks the model saw, not the nodes they were cut from.** A synthesizer's input that no
   retrieval produced whose text (less a ``Source N:`` label line) is a piece of a retrieved
   text — ``CitationQueryEngine``'s citation chunks — went on from that text: the chunks are
   the contexts (source: the retriever of their node), the retrieved node a candidate with
   ``via`` "split into the chunks the model saw" (``kept`` false: it is not a context).
6. Contexts are in the order the steps ran (each list in its own order), de-duplicated by
   content, with the first retrieval step that found the text as ``source`` and the first id
   any copy had.

Candidates: each retrieval step's hit is one candidate (the same text found by two steps is
two; LangChain's ``integrations/_record.py`` merges a hit an enclosing step handed on, LlamaIndex
does not yet), ``kept`` when its text is among the contexts, else ``dropped_by`` names the
postprocessor that took it out (``"<name> (raised)"`` when it raised: nothing went on), else
the retriever that wrapped the one that found it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tracescore.record import Candidate, Context

from .._record import MAX_CANDIDATES
from ._model import STEP_EXTERNAL, STEP_POSTPROCESS, STEP_RETRIEVE, STEP_SYNTHESIZE, Step
from .extract import node_context

__all__ = ["assemble"]

_PRODUCERS = (STEP_RETRIEVE, STEP_EXTERNAL)


def assemble(steps: Sequence[Step], candidates: bool = True
             ) -> tuple[list[Context], list[Candidate]]:
    """(contexts, candidates) of a run from its steps (rules in the module docstring).

    ``candidates=False``: no candidates (a record stored compact keeps none)."""
    ordered = sorted(steps, key=lambda s: s.seq)
    memo: dict[int, Context] = {}

    def ctx(n: Any) -> Context:
        got = memo.get(id(n))
        if got is None:
            got = memo[id(n)] = node_context(n, None)
        return got

    outputs = {id(s): [ctx(n) for n in s.nodes] for s in ordered}
    if any(s.ids is not None for s in ordered):
        by_id = {c.id: c for cs in outputs.values() for c in cs if c.id is not None}
        for s in ordered:
            if s.ids is not None:
                # ids only: the text is the node's that a later step got for the same id
                outputs[id(s)] = [replace(by_id[i], score=score) for i, score in s.ids
                                  if i in by_id]
    produced: dict[str, str] = {}  # text -> the first retrieval step that found it
    synths = 0
    for s in ordered:
        if s.kind in _PRODUCERS:
            for c in outputs[id(s)]:
                produced.setdefault(c.text, c.source or s.name)
        elif s.kind == STEP_SYNTHESIZE:
            synths += 1
    # Rule 5: a synthesizer's input no retrieval produced, cut from a retrieved text
    # (CitationQueryEngine's "Source N:" chunks): chunk text -> the text it was cut from.
    derived: dict[str, str] = {}
    for s in ordered:
        if s.kind == STEP_SYNTHESIZE:
            for c in outputs[id(s)]:
                if c.text not in produced:
                    whole = _cut_from(c.text, produced)
                    if whole is not None:
                        derived[c.text] = whole
    # A step's output went on (as a whole: what the consumer left out, it dropped) when a
    # later postprocessor or synthesizer took any of it (or a chunk cut from it) as input.
    consumed: set[int] = set()
    later: set[str] = set()
    for s in reversed(ordered):
        if s.kind in (*_PRODUCERS, STEP_POSTPROCESS) \
                and any(c.text in later for c in outputs[id(s)]):
            consumed.add(id(s))
        if s.kind == STEP_POSTPROCESS:
            later.update(ctx(n).text for n in s.inputs or ())
        elif s.kind == STEP_SYNTHESIZE:
            later.update(c.text for c in outputs[id(s)])
            if derived:
                later.update(derived[c.text] for c in outputs[id(s)] if c.text in derived)
    contexts: list[Context] = []
    index: dict[str, int] = {}
    for s in ordered:
        if s.within is not None or id(s) in consumed \
                or (s.kind == STEP_EXTERNAL and not s.final):
            continue
        for c in outputs[id(s)]:
            if s.kind == STEP_SYNTHESIZE and synths > 1 and c.text not in produced \
                    and c.text not in derived:
                continue  # another synthesizer's answer, not evidence
            i = index.get(c.text)
            if i is not None:
                if contexts[i].id is None and c.id is not None:
                    contexts[i] = replace(contexts[i], id=c.id)
                continue
            index[c.text] = len(contexts)
            source = produced.get(derived.get(c.text, c.text), c.source or s.name)
            contexts.append(c if source == c.source else
                            Context(c.text, c.id, c.score, c.metadata, source))
    if not candidates:
        return contexts, []
    cut_texts = set(derived.values())
    out: list[Candidate] = []
    for s in ordered:
        if s.kind not in _PRODUCERS:
            continue
        for c in outputs[id(s)]:
            if len(out) >= MAX_CANDIDATES:
                break
            kept = c.text in index
            cut = not kept and c.text in cut_texts
            out.append(Candidate(
                text=c.text, id=c.id, score=c.score, source=c.source or s.name, kept=kept,
                dropped_by=None if kept or cut else _dropped_by(c.text, s, ordered, ctx),
                via=CUT_VIA if cut else None))
    return contexts, out


#: How a retrieved text reached the model when the model saw only chunks cut from it.
CUT_VIA = "split into the chunks the model saw"
#: Shortest chunk body matched against the retrieved texts (shorter is no evidence of a cut).
_MIN_CUT = 16


def _cut_from(text: str, produced: dict[str, str]) -> str | None:
    """The retrieved text ``text`` was cut from: its body (without a ``Source N:`` label
    line, as CitationQueryEngine writes it) is a piece of that text; else None. Runs at the
    root's end only, for synthesizer inputs no retrieval produced."""
    body = text.split("\n", 1)[1] if text.startswith("Source ") and "\n" in text else text
    body = body.strip()
    if len(body) < _MIN_CUT:
        return None
    return next((p for p in produced if body in p), None)


def _dropped_by(text: str, step: Step, ordered: Sequence[Step], ctx: Any) -> str:
    for s in ordered:
        if s.seq > step.seq and s.kind == STEP_POSTPROCESS:
            if any(ctx(n).text == text for n in s.inputs or ()) \
                    and not any(ctx(n).text == text for n in s.nodes):
                return s.name
    return step.within or "not passed on to the model"
