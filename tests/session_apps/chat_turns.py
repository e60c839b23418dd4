"""A chat app process for the session tests: the bundled example chain, captured through
LangChain callbacks, turns given as JSON (session key, question index), one ``ts.run`` scope
per turn; stores everything and exits (its sessions stay open in the database).

    python chat_turns.py DB RELEASE '[["chat-1", 0], ["chat-1", 1]]'
"""

from __future__ import annotations

import json
import sys

from tracescore.examples.langchain_rag import build_chain, load_questions

from tracescore.testing import ScriptedMetric, in_memory


class Faith(ScriptedMetric):
    """A turn-level score with a threshold (a stand-in for faithfulness): deterministic per
    question, so the session aggregates are recomputed by the test from the stored rows."""

    threshold = 0.5


def main() -> None:
    db, release, spec = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    questions = [q["question"] for q in load_questions()]
    metric = Faith(lambda r: 0.9 if len(r.query or "") % 2 == 0 else 0.2, name="faith")
    ts, _ = in_memory(db=db, metrics=[metric], release=release, session_idle="5m")
    chain = build_chain()
    for session, i in spec:
        with ts.run(session_id=session, user_id="u-1"):
            chain.invoke(questions[i], config={"callbacks": [ts.langchain_handler()]})
    assert ts.flush(60)
    ts.shutdown(30)


if __name__ == "__main__":
    main()
