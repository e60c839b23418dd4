"""Text helpers for local metrics: answer normalisation, word and sentence splitting.

Everything here is pure, deterministic, thread-safe and cheap, and needs no downloaded data:
nltk's ``punkt`` model cannot be fetched on an offline machine, so nothing here calls
``nltk.download``, ``nltk.word_tokenize`` or ``nltk.sent_tokenize`` (all three need it).

Scripts written without spaces between words (Chinese, Japanese kana) are split one character
per token, as multilingual SQuAD variants (MLQA) do; otherwise a whole Chinese sentence would
be a single "word" and every overlap metric would be 0 or 1.
"""

from __future__ import annotations

import re
import string
import sys
import unicodedata
from collections.abc import Iterator
from functools import cache, lru_cache
from itertools import islice
from typing import Any

from .._internal import light_import
from .ready import IMPORT_LOCK

__all__ = [
    "answer_tokens",
    "contains_tokens",
    "normalize_answer",
    "split_sentences",
    "truncate_words",
    "word_tokenize",
    "words",
]

# Han ideographs (+ extension A, compatibility) and Japanese kana. Hangul is not here:
# Korean separates words with spaces.
_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_CJK_RE = re.compile(f"([{_CJK}])")
# One CJK character, or a run of letters/digits (Unicode-aware, underscore excluded).
_WORD_RE = re.compile(f"[{_CJK}]|(?:(?![{_CJK}])[^\\W_])+")
_ARTICLES_RE = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def _is_punct(ch: str) -> bool:
    # ASCII string.punctuation (what SQuAD strips; includes symbols such as $ + < = > ^ ` | ~)
    # plus every Unicode punctuation character (“ ” « » 。 、 ¿ ...).
    return ch in string.punctuation or unicodedata.category(ch).startswith("P")


@cache
def _punct_table() -> dict[int, None]:
    # Built on first use (~0.2 s), not at import.
    return dict.fromkeys(i for i in range(sys.maxunicode + 1) if _is_punct(chr(i)))


def normalize_answer(text: str) -> str:
    """SQuAD answer normalisation: lower-case, drop punctuation and articles, collapse spaces.

    Identical to the official SQuAD v1.1 ``normalize_answer`` for ASCII text; punctuation is
    additionally removed for all Unicode punctuation characters. Punctuation is deleted, not
    replaced by a space (``"U.S."`` → ``"us"``, ``"1,000"`` → ``"1000"``), as in SQuAD.
    """
    text = text.lower().translate(_punct_table())
    text = _ARTICLES_RE.sub(" ", text)
    return " ".join(text.split())


def answer_tokens(text: str) -> list[str]:
    """Tokens of :func:`normalize_answer` (whitespace split; CJK characters one token each)."""
    return _CJK_RE.sub(r" \1 ", normalize_answer(text)).split()


def contains_tokens(haystack: list[str], needle: list[str]) -> bool:
    """Whether ``needle`` occurs as a contiguous run of whole tokens in ``haystack``.

    Whole tokens, so ``["4"]`` is not found in ``["2014"]``. An empty needle is never found.
    """
    if not needle:
        return False
    return f" {' '.join(needle)} " in f" {' '.join(haystack)} "


# nltk is imported at the first use, not at import, and without its package __init__ (which
# loads nltk.collocations → nltk.metrics → scipy.stats, and scikit-learn, pandas when
# installed: tens of MB in every app process; _internal/light_import.py).
@cache
def _stemmer() -> Any:
    with IMPORT_LOCK:  # (metrics/ready.py: never two threads importing nltk at once)
        return light_import.module("nltk.stem.porter").PorterStemmer()


@lru_cache(maxsize=65536)
def _stem(token: str) -> str:
    return str(_stemmer().stem(token))


def words(text: str, *, stem: bool = False) -> list[str]:
    """Lower-cased letter/digit runs; every other character separates words.

    For ASCII text this is exactly the ``rouge-score`` default tokenizer (which replaces
    ``[^a-z0-9]+`` by spaces), so scores match rouge-score/Valor there; unlike it, letters outside
    ASCII are kept (``"café"`` stays one word, Chinese is split per character) instead of being
    dropped. With ``stem=True`` words longer than 3 characters are Porter-stemmed, as rouge-score
    does.
    """
    tokens = [m.group().lower() for m in _WORD_RE.finditer(text)]
    if stem:
        tokens = [_stem(t) if len(t) > 3 else t for t in tokens]
    return tokens


def truncate_words(text: str, max_words: int) -> tuple[str, bool]:
    """Cut ``text`` right after its ``max_words``-th word (as :func:`words` counts them).

    Returns ``(text, truncated)``. Line breaks before the cut are kept.
    """
    if max_words <= 0:
        raise ValueError(f"max_words must be positive, got {max_words}")
    # Word number max_words + 1, if any: cut where it starts.
    extra = next(islice(_WORD_RE.finditer(text), max_words, None), None)
    if extra is None:
        return text, False
    return text[: extra.start()].rstrip(), True


# Untrained Punkt (default parameters) splits after ., ? and ! followed by whitespace, but
# knows no abbreviations; these common ones would otherwise end a sentence ("Dr. Smith").
# Words that often do end sentences ("etc.", "no.", "U.S.") are deliberately left out.
_ABBREVIATIONS = frozenset(
    {
        "mr", "mrs", "ms", "dr", "prof", "sr", "jr", "st", "mt", "vs", "e.g", "i.e",
        "cf", "al", "fig", "approx", "dept", "est", "gen", "gov", "lt", "col", "sgt",
        "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov", "dec",
    }
)  # fmt: skip
# Full-width terminators; CJK text has no space after them, which Punkt requires.
_CJK_SENT_END_RE = re.compile(r"(?<=[。！？；])\s*")


@cache
def _punkt_tokenizer() -> Any:
    with IMPORT_LOCK:
        punkt = light_import.module("nltk.tokenize.punkt")
        PunktParameters, PunktSentenceTokenizer = (punkt.PunktParameters,
                                                   punkt.PunktSentenceTokenizer)

    params = PunktParameters()
    params.abbrev_types = set(_ABBREVIATIONS)
    return PunktSentenceTokenizer(params)


@cache
def _nltk_words() -> Any:
    with IMPORT_LOCK:
        return light_import.module("nltk.tokenize.destructive").NLTKWordTokenizer()


def _punkt(line: str) -> list[str]:
    # Untrained Punkt has no orthographic statistics, so it splits after any period; a
    # "sentence" starting in lower case almost always follows an abbreviation
    # ("3 p.m. yesterday", "e.g. this"), so glue it back.
    out: list[str] = []
    for sent in _punkt_tokenizer().tokenize(line):
        if out and out[-1].endswith(".") and sent[:1].islower():
            out[-1] = f"{out[-1]} {sent}"
        else:
            out.append(sent)
    return out


def _sentences(text: str) -> Iterator[str]:
    for line in text.splitlines():
        for sent in _punkt(line):
            for part in _CJK_SENT_END_RE.split(sent):
                part = part.strip()
                if part:
                    yield part


def split_sentences(text: str) -> list[str]:
    """Split ``text`` into sentences without any downloaded model.

    Line breaks always end a sentence. Within a line an untrained Punkt tokenizer splits after
    ``.``, ``?`` and ``!`` (except after a short list of common abbreviations, and never before
    a lower-case word); ``。！？；`` end a sentence too. Empty sentences are dropped.
    """
    return list(_sentences(text))


def word_tokenize(text: str) -> list[str]:
    """Penn-Treebank-style tokens (``"don't"`` → ``["do", "n't"]``), like ``nltk.word_tokenize``.

    ``nltk.word_tokenize`` needs the punkt model to split sentences first; this uses
    :func:`split_sentences` instead, then nltk's ``NLTKWordTokenizer`` on each sentence.
    """
    tokenize = _nltk_words().tokenize
    return [tok for sent in _sentences(text) for tok in tokenize(sent)]
