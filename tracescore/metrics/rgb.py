"""RGB benchmark checks (Chen et al. 2024, "Benchmarking LLMs in Retrieval-Augmented Generation").

RGB (github.com/chen700564/RGB, ``evalue.py``) scores answers by string checks, no judge:
``checkanswer`` (is each reference answer contained in the lower-cased prediction),
``"insufficient information" in prediction`` (negative rejection) and
``"factual errors" in prediction`` (counterfactual robustness: error detection; detection plus a
correct answer is error correction). Its prompts ask the model to use exactly those phrases;
production answers are not prompted that way, so we match a family of phrasings instead.
"""

from __future__ import annotations

import re

from ..record import ANSWER, GROUND_TRUTHS, RagRecord
from ..score import Score
from .base import Metric
from .text import answer_tokens, contains_tokens

# "the provided documents", "the context", "the information above", ...
_DOCS = (
    r"(?:the |these |this |those |provided |given |retrieved |available |supplied |above |"
    r"external |reference )*"
    r"(?:documents?|docs|context|passages?|sources?|texts?|information|excerpts?|"
    r"search results|articles?|snippets?)"
)
# "I cannot", "we can't", "I'm unable to", "I am not able to", ...
_CANT = (
    r"(?:i|we) (?:cannot|can't|can not|could not|couldn't)"
    r"|(?:i|we)(?:'m|'re| am| are| was| were)? (?:unable|not able) to"
)
_DONT = r"(?:do not|don't|does not|doesn't|did not|didn't)"

_REFUSAL_PATTERNS = (
    r"\binsufficient (?:information|evidence|context|data|details)\b",
    r"\bnot (?:enough|sufficient) (?:information|evidence|context|data|details)\b",
    r"\b(?:i|we) (?:do not|don't|dont) (?:know|have (?:enough |sufficient |any )?information)\b",
    rf"\b(?:{_CANT}) (?:answer|determine|find|say|tell|confirm|provide|identify|verify|"
    r"locate|help|assist)\b",
    r"\b(?:cannot|can't|can not|unable to|not able to|impossible to) answer\b",
    r"\b(?:cannot|can't|can not) be (?:answered|determined)\b",
    r"\bno (?:relevant |specific |such |further )?(?:information|details|mention)\b"
    r"(?: (?:is|was))? (?:available|provided|given|found|about|on|regarding|in|of)\b",
    rf"\b{_DOCS} {_DONT} (?:contain|mention|provide|include|specify|state|say|give|offer|"
    r"address|cover|discuss|have|indicate|answer)\b",
    rf"\bnot (?:mentioned|specified|provided|stated|given|included|found|available|covered|"
    rf"addressed|answered) (?:in|by) {_DOCS}",
    rf"\b(?:based on|according to|from|given) {_DOCS}[^.!?\n]{{0,60}}?"
    r"\b(?:cannot|can't|can not|unable|not possible|impossible)\b",
    r"信息不足|无法回答|无法确定|不知道|没有(?:提供|提到|相关)",
)

_BAD = r"(?:incorrect|inaccurate|wrong|false|erroneous|mistaken|outdated|misleading)"
_ERROR_PATTERNS = (
    r"\bfactual (?:errors?|inaccurac(?:y|ies)|mistakes?|inconsistenc(?:y|ies))\b",
    rf"\b{_DOCS} (?:is|are|was|were|appears? to be|seems? to be|may be|might be|could be|"
    rf"contains?|includes?|has|have)(?: (?:some|several|an?|certain|factually))? {_BAD}\b",
    rf"\b{_BAD} (?:information|facts?|data|claims?|statements?|details?) "
    rf"(?:in|from|within|provided (?:in|by)) {_DOCS}",
    rf"\b(?:errors?|mistakes?|inaccurac(?:y|ies)) in {_DOCS}",
    rf"\b{_DOCS} (?:contradicts?|contradict each other|are contradictory|is contradictory|"
    r"conflicts? with)\b",
    r"\bcontradicts? (?:known|established|historical|well[- ]known|widely known|common|actual|"
    r"real|verified|documented) (?:facts?|knowledge|records?|information|history)\b",
    r"事实性错误|信息有误|有误|信息错误|不正确",
)
_REFUSAL_RE = re.compile("|".join(_REFUSAL_PATTERNS), re.IGNORECASE)
_ERROR_RE = re.compile("|".join(_ERROR_PATTERNS), re.IGNORECASE)
# Each branch of each pattern above holds one of these words (same flags, so the same case
# folding): a text with none of them cannot match, and finding out costs one scan for a few
# words instead of trying every pattern at every position (26 µs → 6 µs per answer of ~80
# characters, scored for every sampled record). tests/test_metrics_local.py checks each
# branch against them.
_REFUSAL_HINT = re.compile(
    r"n[o']|dont|unable|impossible|insufficient|信息不足|无法|不知道|没有", re.IGNORECASE)
_ERROR_HINT = re.compile(
    r"factual|incorrect|inaccura|wrong|false|erroneous|mistake|outdated|misleading|error"
    r"|contradict|conflict|有误|错误|不正确", re.IGNORECASE)
# "There are no factual errors", "does not contain any incorrect information", ...
_NEGATION_BEFORE_RE = re.compile(
    r"(?:\b(?:no|not|without|never|nor|free of|free from)\b|n't\b)[^.!?\n]*$", re.IGNORECASE
)


def _clean(text: str) -> str:
    # Curly apostrophes ("don’t") and runs of whitespace would defeat the patterns.
    return " ".join(text.replace("\u2019", "'").replace("\u2018", "'").split())


def _quote(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[: limit - 1] + "…")


def find_refusal(answer: str) -> str | None:
    """The first refusal phrase in ``answer`` ("insufficient information", ...), or None."""
    text = _clean(answer)
    if _REFUSAL_HINT.search(text) is None:
        return None
    m = _REFUSAL_RE.search(text)
    return m.group() if m else None


def find_error_flag(answer: str) -> str | None:
    """The first non-negated "the documents contain errors" phrase in ``answer``, or None."""
    text = _clean(answer)
    if _ERROR_HINT.search(text) is None:
        return None
    for m in _ERROR_RE.finditer(text):
        if not _NEGATION_BEFORE_RE.search(text[max(0, m.start() - 40) : m.start()]):
            return m.group()
    return None


def match_references(
    answer: str, ground_truths: tuple[str, ...], separator: str | None, require_all: bool
) -> tuple[bool, str, dict[str, object]]:
    """RGB ``checkanswer`` over normalised tokens: ``(correct, explanation, details)``.

    Each ground truth is matched when any of its alternatives (split on ``separator``) occurs
    in the answer as a whole-token run after SQuAD normalisation. Correct when any ground truth
    matches, or with ``require_all`` when every one does.
    """
    pred = answer_tokens(answer)
    matched: list[int] = []
    usable = 0
    for i, gt in enumerate(ground_truths):
        alternatives = gt.split(separator) if separator else [gt]
        alt_tokens = [t for t in (answer_tokens(a) for a in alternatives) if t]
        if not alt_tokens:
            continue
        usable += 1
        if any(contains_tokens(pred, t) for t in alt_tokens):
            matched.append(i)
    if usable == 0:
        raise ValueError("no ground truth has any words left after normalisation")
    n = len(ground_truths)
    details: dict[str, object] = {"matched_references": matched, "references": n}
    if require_all:
        correct = len(matched) == usable
        missing = [i + 1 for i in range(n) if i not in matched]
        explanation = f"contains {len(matched)} of {usable} required references" + (
            f" (missing #{', #'.join(map(str, missing))})" if not correct else ""
        )
    else:
        correct = bool(matched)
        explanation = (
            f"contains reference #{matched[0] + 1} of {n}"
            if correct
            else (
                "does not contain the reference" if n == 1 else f"contains none of {n} references"
            )
        )
    return correct, explanation, details


class _Flexible(Metric):
    """Shared options of the metrics that use RGB's flexible answer match."""

    def __init__(
        self,
        *,
        separator: str | None = " | ",
        require_all: bool = False,
        threshold: float | None = None,
    ) -> None:
        if separator == "":
            raise ValueError("separator must be a non-empty string or None")
        self.separator = separator
        self.require_all = require_all
        self.threshold = threshold


class RgbAccuracy(_Flexible):
    """1 if the answer contains a ground truth (RGB's flexible match), else 0.

    RGB's ``checkanswer``: a reference answer counts as found when it occurs in the answer.
    We compare SQuAD-normalised tokens (lower-case, no punctuation or articles) as a whole-token
    run, so "1,000" matches "1000" and "4" does not match inside "2014" (RGB compares raw
    lower-cased substrings).

    Options:
      separator: a ground truth may list alternatives separated by this string (default
        ``" | "``, e.g. ``"Super Bowl LVI | Super Bowl 56"``); None to disable.
      require_all: RGB information-integration questions need every listed answer: set True to
        require every ground truth to be found (each may still list alternatives). Default
        False: any ground truth is an acceptable answer.
      refusal_is_wrong: score 0 when the answer also contains a refusal phrase (RGB labels any
        prediction containing "insufficient information" as not correct). Default False, since
        hedged answers ("the context does not say when, but it was Paris") are common.
      threshold: pass/fail threshold (default 1.0).

    Pure CPU; thread-safe.
    """

    name = "rgb_accuracy"
    value_range = (0.0, 1.0)
    binary = True
    version = "1"
    requires = frozenset({ANSWER, GROUND_TRUTHS})
    kind = "local"
    on_write_chars = 8_000  # scores on write up to this size (docs/metrics.md)
    description = "RGB: 1 if the answer contains a ground-truth answer (normalised, whole words)."

    def __init__(
        self,
        *,
        separator: str | None = " | ",
        require_all: bool = False,
        refusal_is_wrong: bool = False,
        threshold: float | None = 1.0,
    ) -> None:
        super().__init__(separator=separator, require_all=require_all, threshold=threshold)
        self.refusal_is_wrong = refusal_is_wrong

    def __call__(self, record: RagRecord) -> Score:
        if record.answer is None:
            raise ValueError("rgb_accuracy needs an answer")
        correct, explanation, details = match_references(
            record.answer, record.ground_truths, self.separator, self.require_all
        )
        if self.refusal_is_wrong:
            refusal = find_refusal(record.answer)
            details["refusal"] = refusal
            if refusal is not None:
                correct = False
                explanation = f"refuses ({_quote(refusal)}); {explanation}"
        return self.result(float(correct), explanation, details=details)


class RgbRejection(Metric):
    """1 if the answer declines to answer for lack of information, else 0 (RGB negative rejection).

    RGB checks for "insufficient information" (the phrase its prompt asks for). We match a
    case-insensitive family of refusals: "insufficient information", "not enough information",
    "I don't know", "I cannot answer/determine ...", "cannot be answered", "no information
    about", "the provided documents do not mention ...", "not mentioned in the context",
    "based on the context, it is not possible ...", and the Chinese forms (信息不足, 无法回答 ...).

    Whether refusing was right depends on the contexts (right when they lack the answer, wrong
    otherwise), so there is no threshold and no pass/fail label; compare it with a context
    metric, or read it as a refusal rate.

    Pure CPU; thread-safe.
    """

    name = "rgb_rejection"
    value_range = (0.0, 1.0)
    binary = True
    higher_is_better = None  # whether refusing/flagging is right depends on the contexts
    version = "1"
    requires = frozenset({ANSWER})
    kind = "local"
    on_write_chars = 4_000  # scores on write up to this size (docs/metrics.md)
    description = "RGB: 1 if the answer refuses for lack of information (phrase match)."

    def __init__(self, *, threshold: float | None = None) -> None:
        self.threshold = threshold

    def __call__(self, record: RagRecord) -> Score:
        if record.answer is None:
            raise ValueError("rgb_rejection needs an answer")
        refusal = find_refusal(record.answer)
        explanation = f"refuses: {_quote(refusal)}" if refusal else "no refusal phrase found"
        return self.result(float(refusal is not None), explanation, details={"phrase": refusal})


class RgbErrorDetection(Metric):
    """1 if the answer says the documents contain factual errors, else 0 (RGB error detection).

    RGB checks for "factual errors" (its prompt asks the model to say "There are factual errors
    in the provided documents"). We match a case-insensitive family: "factual errors /
    inaccuracies", "the documents are incorrect / contain false information", "incorrect
    information in the context", "errors in the documents", "the documents contradict ...",
    "contradicts known facts", and Chinese forms (事实性错误, 有误 ...). A phrase preceded by a
    negation in the same sentence ("there are no factual errors") does not count.

    Flagging errors is right only when the documents are wrong, so there is no threshold.

    Pure CPU; thread-safe.
    """

    name = "rgb_error_detection"
    value_range = (0.0, 1.0)
    binary = True
    higher_is_better = None  # whether refusing/flagging is right depends on the contexts
    version = "1"
    requires = frozenset({ANSWER})
    kind = "local"
    on_write_chars = 4_000  # scores on write up to this size (docs/metrics.md)
    description = "RGB: 1 if the answer flags factual errors in the documents (phrase match)."

    def __init__(self, *, threshold: float | None = None) -> None:
        self.threshold = threshold

    def __call__(self, record: RagRecord) -> Score:
        if record.answer is None:
            raise ValueError("rgb_error_detection needs an answer")
        flag = find_error_flag(record.answer)
        explanation = f"flags errors: {_quote(flag)}" if flag else "no error flag found"
        return self.result(float(flag is not None), explanation, details={"phrase": flag})


class RgbErrorCorrection(_Flexible):
    """1 if the answer flags factual errors AND contains a ground truth, else 0.

    RGB error correction: the detection of ``rgb_error_detection`` plus the flexible match of
    ``rgb_accuracy`` (same ``separator`` and ``require_all`` options). Only meaningful when the
    documents are known to be counterfactual, so there is no threshold by default.

    Pure CPU; thread-safe.
    """

    name = "rgb_error_correction"
    value_range = (0.0, 1.0)
    binary = True
    version = "1"
    requires = frozenset({ANSWER, GROUND_TRUTHS})
    kind = "local"
    on_write_chars = 4_000  # scores on write up to this size (docs/metrics.md)
    description = "RGB: 1 if the answer flags document errors and gives a ground-truth answer."

    def __call__(self, record: RagRecord) -> Score:
        if record.answer is None:
            raise ValueError("rgb_error_correction needs an answer")
        flag = find_error_flag(record.answer)
        correct, match_text, details = match_references(
            record.answer, record.ground_truths, self.separator, self.require_all
        )
        details["phrase"] = flag
        if flag is None:
            explanation = f"does not flag errors; {match_text}"
        else:
            explanation = f"flags errors ({_quote(flag)}); {match_text}"
        return self.result(float(flag is not None and correct), explanation, details=details)
