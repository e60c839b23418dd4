"""Judge steps (and their prompts) for the Ragas metrics that the shared steps do not cover.

- ``ragas_questions``: N questions that the answer answers, each with a noncommittal flag
  (``ragas_answer_relevancy``). One call for all N (Ragas makes N sampled calls; at
  temperature 0 the same prompt N times would give one question N times).
- ``ragas_entities``: the named entities of each text (``context_entity_recall``); cached per
  text like ``extract``, so a document retrieved again is never re-read.
- ``ragas_sentences``: one needed-to-answer verdict per context sentence
  (``ragas_context_relevancy``).

Prompts follow :mod:`.prompts`: the judged texts travel only inside the JSON ``DATA`` document,
and each reply must match a schema that fixes the number of items. Like :mod:`.steps`, steps
are cached in ``judge_cache`` by (step, model, prompt version, content hash).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..record import RagRecord
from . import prompts as P
from .schemas import _obj as _schema_obj
from .session import JudgeSession, Usage, content_key
from .steps import YES_NO, _list, _obj, _strings, _verdict

# -- prompts ---------------------------------------------------------------------------------
QUESTIONS_VERSION = "ragas-questions-v1"
QUESTIONS_TASK = (
    "Write `n` different questions that `answer` answers directly, as the user who got this "
    "answer might have asked them (vary the wording; do not copy the answer). For each, give "
    "`noncommittal`: 1 if the answer is noncommittal, i.e. evasive, vague or ambiguous (for "
    "example 'I don't know' or 'I'm not sure'), else 0. A noncommittal answer still gets "
    "questions: the ones it avoids answering."
)
QUESTIONS_FORMAT = (
    '{"questions": [{"question": "...", "noncommittal": 0}, ...]} with exactly `n` entries; '
    "`noncommittal` is 0 or 1."
)

ENTITIES_VERSION = "ragas-entities-v1"
ENTITIES_TASK = (
    "For each text in `texts`, list its entities without repetition: people, places, "
    "organisations, products, works, events, dates, and numbers with their units (e.g. "
    "'750 Wh', '21,196 kilometers'). Different forms or mentions of the same entity are one "
    "entity: write it once, as its fullest mention in the text. A text without entities has "
    "an empty list."
)
ENTITIES_FORMAT = '{"texts": {"<key>": {"entities": ["..."]}, ...}} with exactly the keys of `texts`.'

SENTENCES_VERSION = "ragas-sentences-v1"
SENTENCES_TASK = (
    "The `sentences` come from the contexts retrieved to answer `question`. For each sentence, "
    "in order, answer 'yes' if it contains information that is required to answer "
    "`question`, else 'no'. Judge each sentence as written. If the question cannot be answered "
    "from these sentences at all, every verdict is 'no'."
)
SENTENCES_FORMAT = '{"verdicts": ["yes|no", ...]} with exactly one verdict per sentence, in order.'


# -- schemas (sized to the items) -----------------------------------------------
def questions_schema(n: int) -> dict[str, Any]:
    row = _schema_obj({"question": {"type": "string", "maxLength": 300},
                       "noncommittal": {"type": "integer", "enum": [0, 1]}})
    return _schema_obj({"questions": {"type": "array", "items": row, "minItems": n,
                                      "maxItems": n}})


def entities_schema(keys: list[str]) -> dict[str, Any]:
    ents = {"type": "array", "items": {"type": "string", "maxLength": 120}, "maxItems": 50}
    return _schema_obj({"texts": _schema_obj({k: _schema_obj({"entities": ents})
                                              for k in keys})})


def sentences_schema(n: int) -> dict[str, Any]:
    return _schema_obj({"verdicts": {"type": "array",
                                     "items": {"type": "string", "enum": ["yes", "no"]},
                                     "minItems": n, "maxItems": n}})


# -- ragas_questions ---------------------------------------------------------------------------
@dataclass(frozen=True)
class GeneratedQuestion:
    question: str
    noncommittal: bool


def _flag(v: Any, what: str) -> bool:
    if isinstance(v, bool):
        return v
    if isinstance(v, (int, float)) and v in (0, 1):
        return bool(v)
    s = str(v).strip().lower()
    if s in ("1", "yes", "y", "true"):
        return True
    if s in ("0", "no", "n", "false"):
        return False
    raise ValueError(f"{what} must be 0 or 1, got {v!r}")


async def generate_questions(session: JudgeSession, record: RagRecord, n: int,
                             usage: Usage) -> list[GeneratedQuestion]:
    """``n`` questions generated from the answer, each with the judge's noncommittal flag.
    An empty question is kept (as ``""``): the metric decides what it means."""
    payload = {"answer": record.answer or "", "n": n}

    def validate(data: Any) -> list[dict[str, Any]]:
        rows = _list(_obj(data, "reply").get("questions"), "questions", n)
        out = []
        for i, row in enumerate(rows):
            row = _obj(row, f"questions[{i}]")
            q = row.get("question", "")
            if not isinstance(q, str):
                raise ValueError(f"questions[{i}].question must be a string")
            out.append({"question": q.strip(),
                        "noncommittal": _flag(row.get("noncommittal"),
                                              f"questions[{i}].noncommittal")})
        return out

    r = await session.step("ragas_questions", QUESTIONS_VERSION, payload,
                           P.messages(QUESTIONS_TASK, payload, QUESTIONS_FORMAT), validate,
                           json_schema=questions_schema(n), max_tokens=64 + 80 * n,
                           record_id=record.record_id)
    usage.add("ragas_questions", r)
    return [GeneratedQuestion(str(d["question"]), bool(d["noncommittal"])) for d in r.data]


# -- ragas_entities ----------------------------------------------------------------------------
def _entity_key(session: JudgeSession, text: str) -> str:
    return content_key("entities-text", session.model, ENTITIES_VERSION, {"text": text})


async def entities(session: JudgeSession, texts: Mapping[str, str], usage: Usage, *,
                   record_id: str | None = None) -> dict[str, list[str]]:
    """The entities of each text (keyed as given). Texts already seen are read from the cache;
    the rest go to the judge in one call. Empty texts have no entities and cost nothing."""
    store = session.store()
    found: dict[str, list[str]] = {k: [] for k, t in texts.items() if not t.strip()}
    for k, t in texts.items():
        if k not in found:
            hit = store.judge_cache_get(_entity_key(session, t))
            if hit is not None:
                found[k] = list(hit)
    missing = {k: t for k, t in texts.items() if k not in found}
    if not missing:
        usage.cached_steps += 1
        return found

    def validate(data: Any) -> dict[str, list[str]]:
        got = _obj(_obj(data, "reply").get("texts"), "texts")
        out = {}
        for k in missing:
            ents = _strings(_obj(got.get(k), f"texts.{k}").get("entities", []),
                            f"texts.{k}.entities")
            out[k] = list(dict.fromkeys(ents))
        return out

    payload = {"texts": missing}
    r = await session.step("ragas_entities", ENTITIES_VERSION, payload,
                           P.messages(ENTITIES_TASK, payload, ENTITIES_FORMAT), validate,
                           json_schema=entities_schema(list(missing)),
                           max_tokens=128 + 256 * len(missing), record_id=record_id)
    usage.add("ragas_entities", r)
    for k, ents in r.data.items():
        store.judge_cache_put(_entity_key(session, missing[k]), "entities-text", session.model,
                              ENTITIES_VERSION, ents, 0, 0)
        found[k] = list(ents)
    return found


# -- ragas_sentences ---------------------------------------------------------------------------
async def sentence_verdicts(session: JudgeSession, record: RagRecord, sentences: list[str],
                            usage: Usage) -> list[bool]:
    """Per context sentence: is it needed to answer the query?"""
    n = len(sentences)
    if n == 0:
        return []
    payload = {"question": record.query or "", "sentences": sentences}

    def validate(data: Any) -> list[bool]:
        rows = _list(_obj(data, "reply").get("verdicts"), "verdicts", n)
        return [_verdict(v, YES_NO, f"verdicts[{i}]") == "yes" for i, v in enumerate(rows)]

    r = await session.step("ragas_sentences", SENTENCES_VERSION, payload,
                           P.messages(SENTENCES_TASK, payload, SENTENCES_FORMAT), validate,
                           json_schema=sentences_schema(n), max_tokens=64 + 6 * n,
                           record_id=record.record_id)
    usage.add("ragas_sentences", r)
    return [bool(v) for v in r.data]
