"""The test judge server for the paired ``extract+contexts`` call (:mod:`tracescore.judge.pairing`).

``ScriptedJudgeServer`` here is the library's, with two additions these tests need: the paired
prompt is counted under its own step name (``extract+contexts``, ``:repair`` for its repair),
and a per-step responder (``Script``, ``lexical_responder``, ...) answers it one part at a time:
each part of its DATA goes to the responder under the part's step name, and the answers are
put together as the paired reply. (A test that answers the paired prompt itself uses the
library's server, which calls its responder with step ``extract+contexts``.)
"""

from __future__ import annotations

from typing import Any

from tracescore.judge import prompts as P
from tracescore.testing import judge as TJ

PAIR = P.PAIR_STEP
# The step name of the paired prompt, by its task line (as the module names every step's).
TJ._STEP_BY_TASK.setdefault(P.PAIR_TASK[:60], PAIR)


def answer_pairs(responder: Any) -> Any:
    """``responder`` that also answers the paired prompt, part by part."""

    def respond(step: str, data: Any, request: dict[str, Any]) -> Any:
        if step == PAIR and isinstance(data, dict):
            return {name: responder(name, part, request) for name, part in data.items()}
        return responder(step, data, request)

    return respond


class ScriptedJudgeServer(TJ.ScriptedJudgeServer):
    def __init__(self, responder: Any, **kw: Any) -> None:
        super().__init__(answer_pairs(responder), **kw)
