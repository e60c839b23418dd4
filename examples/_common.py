"""What both offline example apps share: the bundled data, light text helpers, and the
"extractive model" (answer = the context sentence that best overlaps the question).

Framework-free, so the LangChain and LlamaIndex examples each need only their own framework.
"""

from __future__ import annotations

import json
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

DATA_DIR = Path(__file__).parent / "data"
MODEL_NAME = "extractive-demo"
REFUSAL = "I don't have sufficient information to answer that."


@lru_cache(maxsize=4)
def read_json(name: str) -> tuple[dict[str, Any], ...]:
    with (DATA_DIR / name).open(encoding="utf-8") as f:
        return tuple(json.load(f))


def load_questions() -> list[dict[str, Any]]:
    """Evaluation questions: dicts with "id", "question", "reference" and
    "doc_id" (the id of the corpus document that answers it, or None for the
    questions the corpus cannot answer, whose reference is the refusal
    `REFUSAL`: refusing is the right answer there)."""
    return [dict(row) for row in read_json("questions.json")]


_STOPWORDS_TEXT = """
    a about above after again all also am an and any are as at be because been
    before being below between both but by can could did do does doing down
    during each few for from further had has have having he her here hers him his
    how i if in into is it its itself just me more most my no nor not now of off
    on once only or other our ours out over own same she should so some such than
    that the their theirs them then there these they this those through to too
    under until up very was we were what when where which while who whom why will
    with would you your yours many much get got
"""
STOPWORDS = frozenset(_STOPWORDS_TEXT.split())

_WORD_RE = re.compile(r"[a-z0-9]+(?:[.,:][0-9]+)*")
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+")


def _normalize(word: str) -> str:
    """A very light plural stemmer: batteries -> battery, riders -> rider."""
    if len(word) > 4 and word.endswith("ies"):
        return word[:-3] + "y"
    if len(word) > 3 and word.endswith("s") and not word.endswith(("ss", "us", "is")):
        return word[:-1]
    return word


def tokenize(text: str) -> list[str]:
    """Lower-cased, stopword-free, lightly stemmed word tokens (numbers such as
    "1,000", "3.5" or "8:00" are kept whole)."""
    return [_normalize(w) for w in _WORD_RE.findall(text.lower()) if w not in STOPWORDS]


def content_terms(text: str) -> set[str]:
    """The set of content words of ``text`` (what the model and the tests compare)."""
    return set(tokenize(text))


def split_sentences(text: str) -> list[str]:
    return [s.strip() for s in _SENTENCE_RE.split(text) if s and s.strip()]


def extractive_answer(context: str, question: str, min_overlap: int) -> str:
    """The context sentence sharing the most content words with the question (ties: the
    denser sentence, then the earlier one), or :data:`REFUSAL` when the overlap is weak."""
    q_terms = content_terms(question)
    if not q_terms or not context:
        return REFUSAL
    best: tuple[int, float] = (0, 0.0)
    best_sentence = ""
    for sentence in split_sentences(context):
        s_terms = content_terms(sentence)
        overlap = len(q_terms & s_terms)
        key = (overlap, overlap / (len(s_terms) or 1))
        if key > best:
            best, best_sentence = key, sentence
    if best[0] < min(min_overlap, len(q_terms)):
        return REFUSAL
    return best_sentence
