"""Session metrics an LLM judge scores, as DeepEval defines them: conversation relevancy and
knowledge retention (``deepeval/metrics/conversation_relevancy``,
``deepeval/metrics/knowledge_retention``; docs/sessions.md gives the definitions and where we
differ).

They run as ordinary judge jobs on the session's own record (the closer creates the jobs when
it closes the session, and re-opens them when a late turn makes it close again), in the
worker with the judge session: retries, circuit breaker, rate limit, daily budget, the
canary and the judge cache all apply. Each verdict is one judge *step* whose cache key is its
content — a turn, its window of earlier turns, the facts known before it — so a session that
re-closes after a late turn pays only for the new turn's verdicts.

- ``session.conversation_relevancy`` (DeepEval ``ConversationRelevancyMetric``): for each answered
  turn, the judge sees the sliding window of the last ``WINDOW`` turns up to it and says
  whether the last answer is relevant to the last question (``no`` only when completely
  irrelevant). Score = verdicts other than ``no`` / verdicts; a session without an answered
  turn scores 1 (as DeepEval).
- ``session.knowledge_retention`` (DeepEval ``KnowledgeRetentionMetric``): for each turn, the facts
  the user's message states (given the conversation before it) are extracted; for each
  answered turn with facts known from the user's messages up to it, the judge says whether
  the answer forgets or contradicts them (``yes`` = attrition; asking to confirm or clarify is
  not). Score = verdicts ``no`` / verdicts. DeepEval gives 0 to a conversation with no
  verdict; we skip it instead ("no facts to retain"): 0 would read as total forgetting.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..judge import prompts as P
from ..judge.session import JudgeSession, Usage
from ..metrics.judged import JudgeMetric
from ..record import QUERY, RagRecord
from ..score import Score

__all__ = ["SESSION_JUDGE_METRICS", "ConversationRelevancy", "KnowledgeRetention",
           "relevancy_score", "resolve_session_metrics", "retention_score"]

#: DeepEval's default sliding window (turns up to and including the judged one)
WINDOW = 10
#: characters of a question or answer sent to the judge
MAX_CHARS = 4000

RELEVANCY_VERSION = "session-relevancy-v1"
RELEVANCY_TASK = (
    "The DATA holds the last turns of a conversation between a user and an assistant, oldest "
    "first; each turn has the user's `input` and the assistant's `actual_output`. Decide "
    "whether the LAST `actual_output` is relevant to the LAST `input`, using the earlier "
    "turns as context. Answer `no` only if the last output is COMPLETELY irrelevant to the "
    "last input; a vague output to a vague input (a greeting) is not irrelevant.")
RELEVANCY_FORMAT = ('{"verdict": "yes|no", "reason": "why, when the verdict is no (empty '
                    'otherwise)"}')

FACTS_VERSION = "session-facts-v1"
FACTS_TASK = (
    "The DATA holds the earlier turns of a conversation (`previous`) and the user's latest "
    "message (`message`). List the facts the user states about themselves or their situation "
    "IN `message` (names, numbers, dates, preferences, constraints), as short key/value "
    "pairs; use the earlier turns only to understand the message. Take the message at face "
    "value. No facts: an empty list.")
FACTS_FORMAT = '{"facts": [{"what": "<what the fact is about>", "value": "<the fact>"}, ...]}'

RETENTION_VERSION = "session-retention-v1"
RETENTION_TASK = (
    "The DATA holds facts the user stated earlier in a conversation (`knowledge`, taken at "
    "face value) and the assistant's latest message (`message`). Decide whether the message "
    "shows the assistant forgot or contradicted that knowledge: it asks again for something "
    "already stated, or says something that disagrees with it. Asking to confirm, clarify or "
    "correct is NOT forgetting. Verdict `yes` means forgotten or contradicted.")
RETENTION_FORMAT = ('{"verdict": "yes|no", "reason": "what was forgotten, with the '
                    'correction (empty when no)"}')


def _schema(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}


_VERDICT_SCHEMA = _schema({"verdict": {"type": "string", "enum": ["yes", "no"]},
                           "reason": {"type": "string", "maxLength": 600}})
_FACTS_SCHEMA = _schema({"facts": {"type": "array", "maxItems": 30, "items": _schema(
    {"what": {"type": "string", "maxLength": 200}, "value": {"type": "string",
                                                          "maxLength": 300}})}})


def _verdict(data: Any) -> dict[str, str]:
    if not isinstance(data, dict):
        raise ValueError("reply must be a JSON object")
    v = str(data.get("verdict", "")).strip().lower()
    if v not in ("yes", "no"):
        raise ValueError(f"verdict must be yes or no, got {data.get('verdict')!r:.60}")
    return {"verdict": v, "reason": str(data.get("reason") or "")[:600]}


def _facts(data: Any) -> dict[str, str]:
    """The facts of a reply as {what: value} (the last value of a repeated key wins, as a
    user's correction does in DeepEval's extraction)."""
    if not isinstance(data, dict) or not isinstance(data.get("facts"), list):
        raise ValueError("reply must be a JSON object with a list `facts`")
    out: dict[str, str] = {}
    for f in data["facts"][:30]:
        if not isinstance(f, dict):
            raise ValueError("each fact must be an object with `what` and `value`")
        what, value = str(f.get("what") or "").strip(), str(f.get("value") or "").strip()
        if what and value:
            out[what[:200]] = value[:300]
    return out


def _cut(text: str | None) -> str:
    t = text or ""
    return t if len(t) <= MAX_CHARS else t[:MAX_CHARS] + "…"


def _answered(t: RagRecord) -> bool:
    return bool(t.query) and bool((t.answer or "").strip()) and not t.error


def relevancy_score(verdicts: Sequence[str]) -> float:
    """DeepEval's conversation relevancy from its verdicts: the share not ``no``; 1 without
    verdicts."""
    if not verdicts:
        return 1.0
    return sum(1 for v in verdicts if v.strip().lower() != "no") / len(verdicts)


def retention_score(verdicts: Sequence[str]) -> float | None:
    """DeepEval's knowledge retention from its verdicts: the share ``no`` (no attrition);
    None without verdicts (DeepEval: 0, see the module docstring)."""
    if not verdicts:
        return None
    return sum(1 for v in verdicts if v.strip().lower() == "no") / len(verdicts)


class _SessionJudgeMetric(JudgeMetric):
    """A judge metric of a session's own record: it reads the session's turns."""

    requires = frozenset({QUERY})
    value_range = (0.0, 1.0)
    threshold = 0.5  # DeepEval's default

    async def evaluate(self, record: RagRecord, session: JudgeSession,
                       usage: Usage) -> Score:
        if record.source != "session" or not record.session_id:
            return Score.skipped(self.name, "not a session's record", metric=self.name,
                                 metric_version=self.version)
        from ..store.sessions import session_turns

        turns = [r for r, _ in session_turns(session.store(), record.session_id)]
        return await self.judge_turns(turns, session, usage, record.record_id)

    async def judge_turns(self, turns: Sequence[RagRecord], session: JudgeSession,
                          usage: Usage, record_id: str | None = None) -> Score:
        raise NotImplementedError


class ConversationRelevancy(_SessionJudgeMetric):
    name = "session.conversation_relevancy"
    description = ("Share of a session's answered turns whose answer is relevant to its "
                   "question in the context of the last 10 turns (DeepEval)")

    async def judge_turns(self, turns: Sequence[RagRecord], session: JudgeSession,
                          usage: Usage, record_id: str | None = None) -> Score:
        pairs = [{"input": _cut(t.query), "actual_output": _cut(t.answer)}
                 for t in turns if _answered(t)]
        verdicts: list[dict[str, str]] = []
        for i in range(len(pairs)):
            payload = {"turns": pairs[max(0, i + 1 - WINDOW):i + 1]}
            r = await session.step("session_relevancy", RELEVANCY_VERSION, payload,
                                   P.messages(RELEVANCY_TASK, payload, RELEVANCY_FORMAT),
                                   _verdict, json_schema=_VERDICT_SCHEMA, max_tokens=400,
                                   record_id=record_id)
            usage.add("session_relevancy", r)
            verdicts.append(dict(r.data))
        score = relevancy_score([v["verdict"] for v in verdicts])
        bad = [{"turn": i + 1, "reason": v["reason"]} for i, v in enumerate(verdicts)
               if v["verdict"] == "no"]
        return self.result(score, f"{len(verdicts) - len(bad)} of {len(verdicts)} answered "
                                  "turns relevant" if verdicts else "no answered turn",
                           details={"irrelevant": bad, "verdicts": len(verdicts)})


class KnowledgeRetention(_SessionJudgeMetric):
    name = "session.knowledge_retention"
    description = ("Share of a session's answers that keep what the user stated earlier "
                   "(no forgetting or contradiction; DeepEval)")

    async def judge_turns(self, turns: Sequence[RagRecord], session: JudgeSession,
                          usage: Usage, record_id: str | None = None) -> Score:
        facts: list[Mapping[str, Any]] = []
        verdicts: list[tuple[int, dict[str, str]]] = []
        previous: list[dict[str, str]] = []
        for i, t in enumerate(turns):
            if t.query:
                payload = {"previous": previous[-WINDOW:], "message": _cut(t.query)}
                r = await session.step("session_facts", FACTS_VERSION, payload,
                                       P.messages(FACTS_TASK, payload, FACTS_FORMAT), _facts,
                                       json_schema=_FACTS_SCHEMA, max_tokens=600,
                                       record_id=record_id)
                usage.add("session_facts", r)
                if r.data:
                    facts.append(dict(r.data))
            if _answered(t) and facts:
                payload = {"knowledge": facts, "message": _cut(t.answer)}
                r = await session.step("session_retention", RETENTION_VERSION, payload,
                                       P.messages(RETENTION_TASK, payload, RETENTION_FORMAT),
                                       _verdict, json_schema=_VERDICT_SCHEMA, max_tokens=400,
                                       record_id=record_id)
                usage.add("session_retention", r)
                verdicts.append((i, dict(r.data)))
            previous.append({"input": _cut(t.query), "actual_output": _cut(t.answer)})
        score = retention_score([v["verdict"] for _, v in verdicts])
        if score is None:
            return Score.skipped(self.name, "no facts stated by the user to retain",
                                 metric=self.name, metric_version=self.version)
        lost = [{"turn": i + 1, "reason": v["reason"]} for i, v in verdicts
                if v["verdict"] == "yes"]
        return self.result(score, f"{len(verdicts) - len(lost)} of {len(verdicts)} answers "
                                  "keep what the user stated",
                           details={"attritions": lost, "verdicts": len(verdicts),
                                    "facts": facts[-5:]})


#: the session judge metrics by name (``init(session_metrics=[...])``: with or without the
#: ``session.`` of their score names)
SESSION_JUDGE_METRICS: dict[str, type[_SessionJudgeMetric]] = {
    "conversation_relevancy": ConversationRelevancy,
    "knowledge_retention": KnowledgeRetention,
}


def resolve_session_metrics(names: Any) -> tuple[JudgeMetric, ...]:
    """``session_metrics`` as metric objects: names of :data:`SESSION_JUDGE_METRICS` or
    instances of them; a clear error otherwise."""
    if names is None:
        return ()
    if isinstance(names, str):
        names = [names]
    out: list[JudgeMetric] = []
    for n in names:
        if isinstance(n, _SessionJudgeMetric):
            out.append(n)
        elif isinstance(n, str) and n.removeprefix("session.") in SESSION_JUDGE_METRICS:
            out.append(SESSION_JUDGE_METRICS[n.removeprefix("session.")]())
        else:
            raise ValueError(f"session_metrics: unknown session metric {n!r}; known: "
                             f"{sorted(SESSION_JUDGE_METRICS)}")
    if len({m.name for m in out}) != len(out):
        raise ValueError("session_metrics: a metric is named twice")
    return tuple(out)
