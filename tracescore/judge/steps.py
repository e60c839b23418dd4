"""Shared judge steps: each metric asks for steps, never calls the judge itself.

One record's full RAG set (faithfulness, answer relevance, answer correctness, context
precision, context recall, context relevance, hallucination) needs three steps, in two calls:

1. ``extract``: statements (and opinions) of the answer and of every reference, in one call;
   cached per text, so a text is never extracted twice.
2. ``contexts``: one verdict row per context: relevant to the question, useful for each
   reference, contradicted by the answer.
3. ``statements``: per answer statement: relevant, supported by the contexts, supported by each
   reference; per reference statement: attributable to the contexts, covered by the answer.

Steps 1 and 2 need no statement list: when a record needs both and neither is cached, they
share one call (:mod:`.pairing`), each part checked and cached as its own step.

Each step asks every question its inputs allow, whichever metrics are configured, so its cache
key is stable: adding a metric later reuses the cached verdicts (a few more output tokens per
call buy that). Verdicts are validated strictly (one entry per item, allowed values only).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..record import RagRecord
from . import pairing
from . import prompts as P
from . import schemas as SC
from .base import JudgeReply
from .session import JudgeSession, Usage, content_key

YES_NO = ("yes", "no")
YES_NO_IDK = ("yes", "no", "idk")


def _obj(data: Any, what: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError(f"{what} must be a JSON object")
    return data


def _list(data: Any, what: str, n: int | None = None) -> list[Any]:
    if not isinstance(data, list):
        raise ValueError(f"{what} must be a list")
    if n is not None and len(data) != n:
        raise ValueError(f"{what} must have {n} entries, got {len(data)}")
    return data


def _verdict(v: Any, allowed: Sequence[str], what: str) -> str:
    s = str(v).strip().lower()
    if s in ("y", "true"):
        s = "yes"
    elif s in ("n", "false"):
        s = "no"
    if s not in allowed:
        raise ValueError(f"{what} must be one of {'/'.join(allowed)}, got {v!r}")
    return s


def _strings(data: Any, what: str) -> list[str]:
    items = _list(data, what)
    out = [str(x).strip() for x in items if isinstance(x, (str, int, float)) and str(x).strip()]
    return out


# -- 1. extraction -------------------------------------------------------------------------------
@dataclass(frozen=True)
class Extraction:
    answer_statements: list[str]
    answer_opinions: list[str]
    reference_statements: list[list[str]]


def _text_key(session: JudgeSession, text: str, opinions: bool) -> str:
    return content_key("extract-text", session.model, P.EXTRACT_VERSION,
                       {"text": text, "opinions": opinions})


async def extract(session: JudgeSession, record: RagRecord, usage: Usage) -> Extraction:
    # A record's metrics all extract the same texts. Serialised, a job that starts while
    # another's call is in flight finds every text cached afterwards; unserialised, it would
    # ask again for the texts not cached yet (another payload, so another call).
    if session.caching_only():  # (reads only: waiting for another job's call is no use)
        return await _extract(session, record, usage)
    async with session.lock(f"extract\x00{record.record_id}"):
        return await _extract(session, record, usage)


async def _extract(session: JudgeSession, record: RagRecord, usage: Usage) -> Extraction:
    texts: dict[str, str] = {}
    if record.answer:
        texts["answer"] = record.answer
    for i, gt in enumerate(record.ground_truths):
        texts[f"reference_{i}"] = gt
    store = session.store()
    found: dict[str, Any] = {}
    for k, t in texts.items():
        hit = store.judge_cache_get(_text_key(session, t, k == "answer"))
        if hit is not None:
            found[k] = hit
    missing = {k: t for k, t in texts.items() if k not in found}
    if missing:
        opinions_for = [k for k in missing if k == "answer"]

        def validate(data: Any) -> dict[str, Any]:
            got = _obj(_obj(data, "reply").get("texts"), "texts")
            out = {}
            for k in missing:
                entry = _obj(got.get(k), f"texts.{k}")
                out[k] = {
                    "statements": _strings(entry.get("statements", []), f"texts.{k}.statements"),
                    "opinions": _strings(entry.get("opinions", []), f"texts.{k}.opinions")
                    if k in opinions_for else [],
                }
            return out

        payload = {"texts": missing, "opinions_for": opinions_for}
        key = content_key("extract", session.model, P.EXTRACT_VERSION, payload)

        def remember(data: dict[str, Any], *, step_key: bool = True) -> None:
            for k, v in data.items():
                store.judge_cache_put(_text_key(session, missing[k], k == "answer"),
                                      "extract-text", session.model, P.EXTRACT_VERSION, v, 0, 0)
            if step_key:  # (the single step's own entry is written by session.step)
                store.judge_cache_put(key, "extract", session.model, P.EXTRACT_VERSION, data,
                                      0, 0)

        schema = SC.extract(list(missing), opinions_for)
        out = await pairing.ask(session, record.record_id, pairing.Part(
            "extract", P.EXTRACT_VERSION, payload, P.EXTRACT_TASK, P.EXTRACT_FORMAT, schema,
            validate, 2048, key, remember))
        pairing.account(usage, "extract", out)
        if out.data is not None:
            data = out.data
        else:
            r = await session.step(
                "extract", P.EXTRACT_VERSION, payload,
                P.messages(P.EXTRACT_TASK, payload, P.EXTRACT_FORMAT), validate,
                json_schema=schema, max_tokens=2048, record_id=record.record_id,
            )
            usage.add("extract", r)
            data = r.data
            remember(data, step_key=False)
        found.update(data)
    else:
        usage.cached_steps += 1
    ans = found.get("answer", {"statements": [], "opinions": []})
    return Extraction(
        answer_statements=list(ans["statements"]),
        answer_opinions=list(ans.get("opinions", [])),
        reference_statements=[list(found[f"reference_{i}"]["statements"])
                              for i in range(len(record.ground_truths))],
    )


_EXTRACT_SCHEMA = {"type": "object", "properties": {"texts": {"type": "object"}},
                   "required": ["texts"]}


# -- 2. per-context verdicts ---------------------------------------------------------------------
@dataclass(frozen=True)
class ContextVerdict:
    relevant: bool
    useful: list[bool]  # one per reference
    contradicted: bool
    reason: str


async def context_verdicts(session: JudgeSession, record: RagRecord,
                           usage: Usage) -> list[ContextVerdict]:
    n, m = len(record.contexts), len(record.ground_truths)
    if n == 0:
        return []
    payload = {"question": record.query or "", "contexts": [c.text for c in record.contexts],
               "answer": record.answer or "", "references": list(record.ground_truths)}

    def validate(data: Any) -> list[dict[str, Any]]:
        rows = _list(_obj(data, "reply").get("contexts"), "contexts", n)
        out = []
        for i, row in enumerate(rows):
            row = _obj(row, f"contexts[{i}]")
            useful = _list(row.get("useful", []), f"contexts[{i}].useful", m)
            out.append({
                "relevant": _verdict(row.get("relevant"), YES_NO, f"contexts[{i}].relevant"),
                "useful": [_verdict(u, YES_NO, f"contexts[{i}].useful") for u in useful],
                "contradicted": _verdict(row.get("contradicted", "no"), YES_NO,
                                         f"contexts[{i}].contradicted"),
                "reason": str(row.get("reason", ""))[:500],
            })
        return out

    key = content_key("contexts", session.model, P.CONTEXTS_VERSION, payload)
    schema, max_tokens = SC.contexts(n, m), 256 + 96 * n

    def remember(data: list[dict[str, Any]]) -> None:
        session.store().judge_cache_put(key, "contexts", session.model, P.CONTEXTS_VERSION,
                                        data, 0, 0)

    out = await pairing.ask(session, record.record_id, pairing.Part(
        "contexts", P.CONTEXTS_VERSION, payload, P.CONTEXTS_TASK, P.CONTEXTS_FORMAT, schema,
        validate, max_tokens, key, remember))
    pairing.account(usage, "contexts", out)
    if out.data is not None:
        data = out.data
    else:
        r = await session.step("contexts", P.CONTEXTS_VERSION, payload,
                               P.messages(P.CONTEXTS_TASK, payload, P.CONTEXTS_FORMAT),
                               validate, json_schema=schema, max_tokens=max_tokens,
                               record_id=record.record_id)
        usage.add("contexts", r)
        data = r.data
    return [ContextVerdict(d["relevant"] == "yes", [u == "yes" for u in d["useful"]],
                           d["contradicted"] == "yes", d["reason"]) for d in data]


_CONTEXTS_SCHEMA = {"type": "object", "properties": {"contexts": {"type": "array"}},
                    "required": ["contexts"]}


# -- 3. statement verdicts -----------------------------------------------------------------------
@dataclass(frozen=True)
class StatementVerdicts:
    relevant: list[str]  # yes/no/idk per answer statement
    supported: list[str]  # yes/no/idk per answer statement
    in_reference: list[list[bool]]  # [answer statement][reference]
    attributable: list[list[bool]]  # [reference][reference statement]
    covered: list[list[bool]]  # [reference][reference statement]


async def statement_verdicts(session: JudgeSession, record: RagRecord, ex: Extraction,
                             usage: Usage) -> StatementVerdicts:
    n = len(ex.answer_statements)
    refs = ex.reference_statements
    if n == 0 and not any(refs):
        return StatementVerdicts([], [], [], [[] for _ in refs], [[] for _ in refs])
    payload = {"question": record.query or "", "contexts": [c.text for c in record.contexts],
               "answer_statements": ex.answer_statements, "reference_statements": refs}

    def validate(data: Any) -> dict[str, Any]:
        d = _obj(data, "reply")
        rows = _list(d.get("answer_statements", []), "answer_statements", n)
        ans = []
        for i, row in enumerate(rows):
            row = _obj(row, f"answer_statements[{i}]")
            inref = _list(row.get("in_reference", []), f"answer_statements[{i}].in_reference",
                          len(refs))
            ans.append({
                "relevant": _verdict(row.get("relevant"), YES_NO_IDK, "relevant"),
                "supported": _verdict(row.get("supported"), YES_NO_IDK, "supported")
                if record.contexts else "idk",
                "in_reference": [_verdict(v, YES_NO, "in_reference") == "yes" for v in inref],
            })
        rv = _list(d.get("reference_verdicts", []), "reference_verdicts", len(refs))
        ref_out = []
        for j, rows_j in enumerate(rv):
            rows_j = _list(rows_j, f"reference_verdicts[{j}]", len(refs[j]))
            ref_out.append([
                {"attributable": _verdict(_obj(x, "verdict").get("attributable"), YES_NO,
                                          "attributable") == "yes",
                 "covered": _verdict(_obj(x, "verdict").get("covered"), YES_NO,
                                     "covered") == "yes"}
                for x in rows_j
            ])
        return {"answer": ans, "references": ref_out}

    r = await session.step("statements", P.STATEMENTS_VERSION, payload,
                           P.messages(P.STATEMENTS_TASK, payload, P.STATEMENTS_FORMAT), validate,
                           json_schema=SC.statements(n, [len(r) for r in refs]),
                           max_tokens=256 + 64 * (n + sum(map(len, refs))),
                           record_id=record.record_id)
    usage.add("statements", r)
    a, rf = r.data["answer"], r.data["references"]
    return StatementVerdicts(
        relevant=[x["relevant"] for x in a], supported=[x["supported"] for x in a],
        in_reference=[x["in_reference"] for x in a],
        attributable=[[x["attributable"] for x in rows] for rows in rf],
        covered=[[x["covered"] for x in rows] for rows in rf],
    )


_STATEMENTS_SCHEMA = {"type": "object",
                      "properties": {"answer_statements": {"type": "array"},
                                     "reference_verdicts": {"type": "array"}},
                      "required": ["answer_statements", "reference_verdicts"]}


# -- opinions --------------------------------------------------------------------------------------
async def opinion_verdicts(session: JudgeSession, record: RagRecord, opinions: list[str],
                           usage: Usage) -> list[tuple[bool, bool, str]]:
    if not opinions:
        return []
    n = len(opinions)
    payload = {"opinions": opinions}

    def validate(data: Any) -> list[tuple[bool, bool, str]]:
        rows = _list(_obj(data, "reply").get("opinions"), "opinions", n)
        return [(_verdict(_obj(x, "o").get("biased"), YES_NO, "biased") == "yes",
                 _verdict(_obj(x, "o").get("toxic"), YES_NO, "toxic") == "yes",
                 str(_obj(x, "o").get("reason", ""))[:500]) for x in rows]

    r = await session.step("opinions", P.OPINIONS_VERSION, payload,
                           P.messages(P.OPINIONS_TASK, payload, P.OPINIONS_FORMAT), validate,
                           json_schema=SC.opinions(n), max_tokens=128 + 96 * n, record_id=record.record_id)
    usage.add("opinions", r)
    return [(bool(x[0]), bool(x[1]), str(x[2])) for x in r.data]


# -- 1-5 ratings ---------------------------------------------------------------------------------
def _rating(data: Any) -> dict[str, Any]:
    d = _obj(data, "reply")
    try:
        score = int(float(d.get("score")))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        raise ValueError(f"score must be an integer 1-5, got {d.get('score')!r}") from None
    if not 1 <= score <= 5:
        raise ValueError(f"score must be 1-5, got {score}")
    return {"score": score, "reason": str(d.get("reason", ""))[:1000]}


async def rating(session: JudgeSession, record: RagRecord, kind: str,
                 usage: Usage) -> dict[str, Any]:
    if kind == "summary_coherence":
        payload: dict[str, Any] = {"source": "\n\n".join(c.text for c in record.contexts),
                                   "summary": record.answer or ""}
        task = P.SUMMARY_COHERENCE_TASK
    else:
        payload = {"text": record.answer or ""}
        task = P.TEXT_COHERENCE_TASK
    r = await session.step(kind, P.COHERENCE_VERSION, payload,
                           P.messages(task, payload, P.RATING_FORMAT), _rating,
                           json_schema=SC.rating(), max_tokens=300, record_id=record.record_id)
    usage.add(kind, r)
    return dict(r.data)


# -- saga's binary judges -----------------------------------------------------------------------
BINARY_CHECKS = {
    "correctness": ("query", "answer", "ground_truths"),
    "faithfulness": ("answer", "contexts"),
    "relevance": ("query", "answer"),
    "negative_rejection": ("query", "answer", "contexts"),
}


async def binary_checks(session: JudgeSession, record: RagRecord,
                        usage: Usage) -> dict[str, dict[str, str]]:
    checks = [c for c, needs in BINARY_CHECKS.items() if not record.missing(frozenset(needs))]
    payload = {"checks": checks, "question": record.query or "", "answer": record.answer or "",
               "reference": " / ".join(record.ground_truths),
               "contexts": [c.text for c in record.contexts]}

    def validate(data: Any) -> dict[str, dict[str, str]]:
        d = _obj(data, "reply")
        out = {}
        for c in checks:
            e = _obj(d.get(c), c)
            v = e.get("value")
            if v not in ("Y", "N"):  # exactly: "Yes? No. It is not relevant" is not a Y
                raise ValueError(f"{c}.value must be exactly Y or N, got {v!r:.60}")
            out[c] = {"value": v, "reasoning": str(e.get("reasoning", ""))[:1000]}
        return out

    r = await session.step("binary", P.BINARY_VERSION, payload,
                           P.messages(P.BINARY_TASK, payload, P.BINARY_FORMAT), validate,
                           json_schema=SC.binary(checks), max_tokens=600, record_id=record.record_id)
    usage.add("binary", r)
    return dict(r.data)


# -- G-Eval ---------------------------------------------------------------------------------------
async def geval_steps(session: JudgeSession, name: str, criteria: str,
                      usage: Usage) -> list[str]:
    payload = {"name": name, "criteria": criteria}

    def validate(data: Any) -> list[str]:
        steps = _strings(_obj(data, "reply").get("steps"), "steps")
        if not steps:
            raise ValueError("steps must not be empty")
        return steps

    r = await session.step("geval_steps", P.GEVAL_STEPS_VERSION, payload,
                           P.messages(P.GEVAL_STEPS_TASK, payload, P.GEVAL_STEPS_FORMAT),
                           validate, json_schema=SC.geval_steps(), max_tokens=600)
    usage.add("geval_steps", r)
    return list(r.data)


_GEVAL_SCHEMA = {"type": "object",
                 "properties": {"score": {"type": "integer", "minimum": 1, "maximum": 5},
                                "reason": {"type": "string"}},
                 "required": ["score"], "additionalProperties": False}


#: A G-Eval reply's rating: the token 1-5 the reply starts with (G-Eval reads the first
#: token's probabilities), not the start of a longer number ("12", "1.5").
_LEAD_RATING = re.compile(r"\s*([1-5])(?![0-9]|[.,][0-9])")
#: What after a leading digit says it was not the rating: a numbered list going on (a second
#: "2." line: the digit was step 1), or another verdict ("score: 4", "rating 2").
_NOT_A_RATING = re.compile(r"(?im)^\s*[0-9]+\s*[.)]\s+\S"
                           r"|\b(?:score|rating|rated|grade)\b\W{0,12}[0-9]")


def geval_parse(reply: JudgeReply) -> dict[str, Any]:
    """The reply's 1-5 rating: the rating token it starts with (``"4"``, ``"1.good"``,
    ``"3 - clear"``: G-Eval's reply is a rating token, and whatever the model writes after it
    is not read), or the JSON ``{"score": <1-5>}`` (a ``reason`` may follow). Never a digit
    found later in prose, which may be a step number or a quotation; a leading digit that
    begins a numbered list ("1. ...\n2. ...") or is followed by another verdict ("score: 4")
    is no rating either. With log-probabilities, the documented G-Eval path: the score is
    weighted by the probabilities of 1-5 at the rating token itself."""
    from .schemas import check, parse_json

    text = reply.text
    lead = _LEAD_RATING.match(text)
    if lead is not None and not text.lstrip().startswith("{") \
            and not _NOT_A_RATING.search(text, lead.end()):
        parsed, at = int(lead.group(1)), lead.start(1)
    else:
        data = parse_json(text.strip())
        check(data, _GEVAL_SCHEMA)
        parsed = int(data["score"])
        m = re.search(r'"score"\s*:\s*([1-5])\b', reply.text)
        at = m.start(1) if m else -1
    return {"score": parsed, "weighted": _weighted(reply, at, parsed)}


def _weighted(reply: JudgeReply, at: int, parsed: int) -> float | None:
    """Probability-weighted 1-5 at the token that covers character ``at`` of the reply.

    Tokens and text are matched on their non-space characters (servers differ in how they
    report spacing); tokens that do not spell the reply give no weighting."""
    def solid(t: str) -> str:
        return "".join(t.split())

    if at < 0 or not reply.logprobs or \
            solid("".join(t.token for t in reply.logprobs)) != solid(reply.text):
        return None
    target = len(solid(reply.text[:at]))
    pos = 0
    for tok in reply.logprobs:
        n = len(solid(tok.token))
        if pos <= target < pos + n:
            if tok.token.strip() != str(parsed):
                return None
            probs: dict[str, float] = {}
            for k, v in (tok.top or {tok.token: tok.logprob}).items():
                if k.strip() in ("1", "2", "3", "4", "5"):  # "4" and " 4" are one score
                    probs[k.strip()] = probs.get(k.strip(), 0.0) + math.exp(v)
            total = sum(probs.values())
            return sum(int(k) * p for k, p in probs.items()) / total if total > 0 else None
        pos += n
    return None


async def geval_score(session: JudgeSession, record: RagRecord, name: str, criteria: str,
                      steps: list[str], usage: Usage) -> dict[str, Any]:
    payload = {"criteria": criteria, "steps": steps, "question": record.query or "",
               "answer": record.answer or "", "contexts": [c.text for c in record.contexts]}
    r = await session.step("geval", P.GEVAL_VERSION, {**payload, "name": name},
                           P.messages(P.GEVAL_TASK, payload, P.GEVAL_FORMAT), lambda d: d,
                           max_tokens=20, logprobs=5, parse=geval_parse,
                           record_id=record.record_id)
    usage.add("geval", r)
    return dict(r.data)
