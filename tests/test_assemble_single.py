"""The one-retrieval fast path of ``integrations._record.assemble`` (issue 33: the request path)
gives what the general rules give for the same retrieval.

The general path is reached with the same retrieval plus an empty one (no documents, no loop
key: it adds nothing under any rule), so each case compares the two paths directly.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from tracescore.integrations._record import NODE, RETRIEVER, SEARCH, TOOL, Retrieval, assemble

from tracescore.record import Context

texts = st.sampled_from(["a", "b", "c", "d é", "a"])
contexts = st.lists(st.builds(Context, text=texts,
                              id=st.one_of(st.none(), st.sampled_from(["1", "2", "3"])),
                              score=st.one_of(st.none(), st.floats(0, 1))), max_size=8)


@settings(max_examples=300, deadline=None)
@given(docs=contexts, kind=st.sampled_from([RETRIEVER, SEARCH, TOOL, NODE]),
       loop_key=st.one_of(st.none(), st.just("k")),
       node=st.one_of(st.none(), st.just((7, "agent"))),
       models=st.sampled_from([{}, {7: 20}, {7: 3}, {8: 20}]), candidates=st.booleans(),
       calls=st.sampled_from([(), (("c1", "search", 8),),
                              (("c2", "inner", 9), ("c1", "search", 8))]),
       prompt=st.sampled_from([frozenset(), frozenset({"c1"}), frozenset({"c3"})]))
def test_single_retrieval_equals_the_general_rules(
        docs: list[Context], kind: str, loop_key: str | None, node: tuple[int, str] | None,
        models: dict[int, int], candidates: bool, calls: tuple[tuple[str, str, int], ...],
        prompt: frozenset[str]) -> None:
    r = Retrieval(seq=5, source="Retriever", contexts=docs, kind=kind, run_seq=5,
                  loop_key=loop_key, node=node, tool_call=calls[0][0] if calls else None,
                  tool_calls=calls)
    empty = Retrieval(seq=99, source="Other", contexts=[], run_seq=99)
    fast = assemble([r], prompt, candidates=candidates, answer_seq=30, step_models=models)
    general = assemble([r, empty], prompt, candidates=candidates, answer_seq=30,
                       step_models=models)
    assert fast == general
    if docs and candidates:
        assert len(fast[1]) == len(docs)  # every document is a candidate, duplicates too
        dropped = bool(prompt) and bool(calls) and not any(c[0] in prompt for c in calls)
        assert all(c.kept is not dropped for c in fast[1])
