"""Local metrics (rouge, bleu, token_f1, exact_match, rgb_*) and the text helpers they use.

Expected values are computed by hand in the comments next to them.
"""

from __future__ import annotations

import math
import random
import re
import warnings
from pathlib import Path
from typing import Any

import nltk
import pytest
from rouge_score import rouge_scorer

from tracescore.metrics import registry, rgb, text
from tracescore.metrics.base import Metric
from tracescore.metrics.bleu import Bleu
from tracescore.metrics.local import LOCAL_METRICS
from tracescore.metrics.overlap import ExactMatch, TokenF1
from tracescore.metrics.rgb import (
    RgbAccuracy,
    RgbErrorCorrection,
    RgbErrorDetection,
    RgbRejection,
)
from tracescore.metrics.rouge import Rouge
from tracescore.record import INPUTS, RagRecord
from tracescore.score import Score

DOCS = Path(__file__).resolve().parent.parent / "docs" / "metrics.md"


@pytest.fixture(autouse=True)
def _no_nltk_data(monkeypatch: pytest.MonkeyPatch) -> None:
    # The machine has no nltk data (punkt): any lookup of it must fail the test.
    monkeypatch.setattr(nltk.data, "path", [])


def rec(answer: str, *ground_truths: str) -> RagRecord:
    return RagRecord(
        trace_id="a" * 32, span_id="b" * 16, answer=answer, ground_truths=ground_truths
    )


def one(metric: Metric, record: RagRecord) -> Score:
    out = metric(record)
    assert isinstance(out, Score)
    return out


def by_name(scores: object) -> dict[str, Score]:
    assert isinstance(scores, list)
    return {s.name: s for s in scores}


LONG = " ".join(f"word{i % 397} filler{i % 13}" for i in range(25_000))  # 50k words


# --------------------------------------------------------------------------- text helpers


@pytest.mark.parametrize(
    ("raw", "normalised"),
    [
        ("The Eiffel Tower!", "eiffel tower"),
        ("  an   apple,  a pear ", "apple pear"),
        ("U.S.A.", "usa"),
        ("1,000", "1000"),
        ("«Café» — “crème”", "café crème"),  # Unicode punctuation goes too
        ("theatre another", "theatre another"),  # articles only as whole words
        ("", ""),
    ],
)
def test_normalize_answer(raw: str, normalised: str) -> None:
    assert text.normalize_answer(raw) == normalised


def test_answer_tokens_split_cjk_per_character() -> None:
    assert text.answer_tokens("2008年 在北京！") == ["2008", "年", "在", "北", "京"]


def test_words_matches_rouge_score_tokenizer_on_ascii() -> None:
    from rouge_score import tokenize

    s = "The QUICK brown-fox's jumps_over 3.14 lazy dogs!! (Really?) \n\tDone."
    assert text.words(s) == tokenize.tokenize(s, None)
    stemmer = nltk.stem.porter.PorterStemmer()
    assert text.words(s, stem=True) == tokenize.tokenize(s, stemmer)


def test_words_keep_non_ascii_letters() -> None:
    assert text.words("Ça va très BIEN, 北京") == ["ça", "va", "très", "bien", "北", "京"]


def test_truncate_words() -> None:
    assert text.truncate_words("a b\nc d e", 3) == ("a b\nc", True)
    assert text.truncate_words("a b c", 3) == ("a b c", False)
    assert text.truncate_words("...", 1) == ("...", False)
    with pytest.raises(ValueError):
        text.truncate_words("a", 0)


def test_split_sentences_without_punkt_data() -> None:
    s = "Hello world. Dr. Smith came at 3.30 p.m. yesterday! Did he?\nNo stop here\n\n北京是首都。上海很大！"
    assert text.split_sentences(s) == [
        "Hello world.",
        "Dr. Smith came at 3.30 p.m. yesterday!",
        "Did he?",
        "No stop here",
        "北京是首都。",
        "上海很大！",
    ]
    assert text.split_sentences("") == []
    assert text.split_sentences("no terminal punctuation") == ["no terminal punctuation"]


def test_word_tokenize_without_punkt_data() -> None:
    assert text.word_tokenize("Don't stop. It's 3.5 now!") == [
        "Do", "n't", "stop", ".", "It", "'s", "3.5", "now", "!",
    ]  # fmt: skip


def test_contains_tokens_whole_tokens_only() -> None:
    assert text.contains_tokens(["in", "2014", "it", "rained"], ["it", "rained"])
    assert not text.contains_tokens(["in", "2014"], ["4"])
    assert not text.contains_tokens(["x"], [])


# --------------------------------------------------------------------------- rouge


def test_rouge_hand_computed() -> None:
    # answer: the cat sat on the mat / reference: the cat was on the mat (6 tokens each)
    # rouge1: overlap the×2 cat on mat = 5 → P = R = F = 5/6
    # rouge2: bigrams overlap {the cat, on the, the mat} = 3 of 5 → 0.6
    # rougeL: LCS "the cat on the mat" = 5 → 5/6
    s = by_name(Rouge()(rec("The cat sat on the mat.", "the cat was on the mat")))
    assert list(s) == ["rouge1", "rouge2", "rouge_l", "rouge_lsum"]
    assert s["rouge1"].value == pytest.approx(5 / 6)
    assert s["rouge2"].value == pytest.approx(0.6)
    assert s["rouge_l"].value == pytest.approx(5 / 6)
    assert s["rouge_lsum"].value == pytest.approx(5 / 6)  # one line: same as rougeL
    assert s["rouge1"].details["precision"] == pytest.approx(5 / 6)
    assert s["rouge1"].details["recall"] == pytest.approx(5 / 6)
    assert s["rouge1"].explanation == "1 reference: F=0.83 (P=0.83 R=0.83)"
    assert s["rouge1"].label == "pass" and s["rouge1"].metric == "rouge"


def test_rouge_best_of_several_references() -> None:
    # ref 1 shares nothing; ref 2 is identical → every type 1.0 from reference #2
    s = by_name(Rouge()(rec("the cat sat", "a dog barked", "The cat sat.")))
    for score in s.values():
        assert score.value == pytest.approx(1.0)
        assert score.details["reference_index"] == 1
        assert score.explanation is not None
        assert score.explanation.startswith("best of 2 references (#2)")


def test_rouge_precision_recall_differ() -> None:
    # answer 2 tokens both in the 4-token reference: P = 1, R = 0.5, F = 2/3
    s = by_name(Rouge(["rouge1"])(rec("cat mat", "the cat the mat")))
    assert s["rouge1"].value == pytest.approx(2 / 3)
    assert s["rouge1"].details["precision"] == pytest.approx(1.0)
    assert s["rouge1"].details["recall"] == pytest.approx(0.5)


def test_rouge_lsum_uses_newlines() -> None:
    # rougeL: LCS of [the cat sat it was happy] and [it was happy the cat sat] is 3 → 0.5.
    # rougeLsum: each reference line is fully covered by an answer line → 1.0.
    s = by_name(Rouge()(rec("the cat sat.\nit was happy.", "it was happy.\nthe cat sat.")))
    assert s["rouge_l"].value == pytest.approx(0.5)
    assert s["rouge_lsum"].value == pytest.approx(1.0)


def test_rouge_split_sentences_option() -> None:
    r = rec("The cat sat. It was happy.", "It was happy. The cat sat.")
    assert by_name(Rouge()(r))["rouge_lsum"].value == pytest.approx(0.5)
    assert by_name(Rouge(split_sentences=True)(r))["rouge_lsum"].value == pytest.approx(1.0)


def test_rouge_matches_rouge_score_default_on_ascii() -> None:
    answer = "The quick brown fox jumped over the lazy dogs, twice!\nThen it slept."
    refs = ("A quick brown dog jumps over lazy foxes.", "the fox slept\nafter jumping")
    for stem in (False, True):
        upstream = rouge_scorer.RougeScorer(
            ["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=stem
        ).score_multi(list(refs), answer)
        ours = by_name(Rouge(use_stemmer=stem)(rec(answer, *refs)))
        for t, n in [("rouge1", "rouge1"), ("rouge2", "rouge2"), ("rougeL", "rouge_l"),
                     ("rougeLsum", "rouge_lsum")]:  # fmt: skip
            assert ours[n].value == pytest.approx(upstream[t].fmeasure)


def test_rouge_stemmer() -> None:
    r = rec("running dogs", "run dog")
    assert by_name(Rouge(["rouge1"])(r))["rouge1"].value == 0.0
    # running → run, dogs → dog (words of 3 letters or fewer are not stemmed)
    assert by_name(Rouge(["rouge1"], use_stemmer=True)(r))["rouge1"].value == pytest.approx(1.0)


def test_rouge_unicode() -> None:
    # per-character tokens: same 8 characters → rouge1 1.0;
    # bigrams overlap {北京, 中国, 国的, 的首, 首都} = 5 of 7 → 5/7
    s = by_name(Rouge(["rouge1", "rouge2"])(rec("北京是中国的首都", "中国的首都是北京")))
    assert s["rouge1"].value == pytest.approx(1.0)
    assert s["rouge2"].value == pytest.approx(5 / 7)
    s = by_name(Rouge(["rouge1"])(rec("Ça va très bien", "ça va TRÈS bien!")))
    assert s["rouge1"].value == pytest.approx(1.0)


def test_rouge_configured_types_and_names() -> None:
    m = Rouge(["rouge_l", "rouge1", "rougeL"])
    assert m.rouge_types == ("rougeL", "rouge1")
    assert m.names() == ("rouge_l", "rouge1")
    assert [s.name for s in by_name(m(rec("a b", "a b"))).values()] == ["rouge_l", "rouge1"]
    assert Rouge("rouge3").names() == ("rouge3",)
    assert Rouge().names() == Rouge.score_names
    for bad in (["rouge0"], ["bleu"], [], ["rougeLSum"]):
        with pytest.raises(ValueError):
            Rouge(bad)
    with pytest.raises(ValueError):
        Rouge(max_words=0)


def test_rouge_answer_without_words_scores_zero() -> None:
    for score in Rouge()(rec("...!?", "Paris")):
        assert score.value == 0.0
        assert score.label == "fail"


def test_rouge_punctuation_ignored() -> None:
    s = by_name(Rouge(["rouge1"])(rec("Paris!!!", "“paris”")))
    assert s["rouge1"].value == pytest.approx(1.0)


def test_rouge_long_text_is_truncated() -> None:
    # (what bounds its cost: the LCS runs on at most max_words words. No wall-clock bound
    # here: on a loaded 2-core machine it took 12 s; the speed goal is in bench/)
    s = by_name(Rouge()(rec(LONG, LONG)))
    for score in s.values():
        assert score.value == pytest.approx(1.0)
        assert score.details["truncated"] is True
        assert score.explanation is not None
        assert "cut at 1000 words" in score.explanation
    short = by_name(Rouge(["rouge1"])(rec("a b", "a b")))["rouge1"]
    assert short.details["truncated"] is False


# --------------------------------------------------------------------------- bleu


def test_bleu_identical_is_one() -> None:
    s = one(Bleu(), rec("the quick brown fox jumps", "the quick brown fox jumps"))
    assert s.value == pytest.approx(1.0)
    assert s.label == "pass"


@pytest.mark.filterwarnings("error")
def test_bleu_unsmoothed_zero_without_warning() -> None:
    # "a b c x e" vs "a b c d e": p1 = 4/5, p2 = 2/4, p3 = 1/3, p4 = 0/2 → BLEU-4 = 0 exactly
    s = one(Bleu(), rec("a b c x e", "a b c d e"))
    assert s.value == 0.0
    assert s.details["precisions"] == pytest.approx([0.8, 0.5, 1 / 3, 0.0])
    assert s.explanation is not None and "no 4-gram matches and no smoothing" in s.explanation


@pytest.mark.filterwarnings("error")
def test_bleu_smoothing_method1() -> None:
    # method1 adds epsilon 0.1 to the zero count: p4 = 0.1/2 → (0.8·0.5·⅓·0.05)^¼, BP = 1
    s = one(Bleu(smoothing="method1"), rec("a b c x e", "a b c d e"))
    assert s.value == pytest.approx((0.8 * 0.5 * (1 / 3) * 0.05) ** 0.25)
    assert s.value == pytest.approx(0.28574404296988)


def test_bleu_weights() -> None:
    # BLEU-2: sqrt(4/5 · 2/4)
    s = one(Bleu(weights=(0.5, 0.5)), rec("a b c x e", "a b c d e"))
    assert s.value == pytest.approx(math.sqrt(0.8 * 0.5))
    assert s.explanation is not None and s.explanation.startswith("BLEU-2 vs 1 reference: 0.63")


def test_bleu_short_answer() -> None:
    # one token: BLEU-4 has no bigrams at all → 0; BLEU-1 is 1.0
    assert one(Bleu(), rec("Paris", "Paris")).value == 0.0
    assert one(Bleu(weights=(1.0,)), rec("Paris", "Paris")).value == pytest.approx(1.0)


def test_bleu_brevity_penalty() -> None:
    # p1 = 1, hyp 2 tokens vs ref 4 → BP = exp(1 - 4/2) = e^-1
    s = one(Bleu(weights=(1.0,)), rec("a b", "a b c d"))
    assert s.value == pytest.approx(math.exp(-1))
    assert s.details["brevity_penalty"] == pytest.approx(math.exp(-1))


def test_bleu_multi_reference() -> None:
    # all ground truths are references of one BLEU; the identical one gives full n-gram matches
    s = one(
        Bleu(), rec("the cat is on the mat", "there is a cat on the mat", "the cat is on the mat")
    )
    assert s.value == pytest.approx(1.0)
    assert s.details["references"] == 2


def test_bleu_case_and_periods() -> None:
    # Valor's tokenizer keeps case and drops periods: "PARIS is big." → [PARIS, is, big]
    assert one(Bleu(weights=(1.0,)), rec("PARIS is big.", "paris is big")).value == pytest.approx(
        2 / 3
    )
    assert (
        one(Bleu(weights=(1.0,), lowercase=True), rec("PARIS is big.", "paris is big")).value == 1.0
    )


def test_bleu_no_tokens() -> None:
    assert one(Bleu(), rec("...", "Paris is nice")).value == 0.0


def test_bleu_bad_options() -> None:
    for weights in ((), (-1.0, 2.0), (0.0, 0.0)):
        with pytest.raises(ValueError):
            Bleu(weights=weights)
    with pytest.raises(ValueError, match="smoothing"):
        Bleu(smoothing="method9")


def test_bleu_long_text() -> None:
    s = one(Bleu(), rec(LONG, LONG))
    assert s.value == pytest.approx(1.0)


# --------------------------------------------------------------------------- token_f1, exact_match


def test_token_f1_hand_computed() -> None:
    # normalised: [cat sat on mat] vs [cat was sitting on mat]: common 3 → P 3/4, R 3/5, F1 2/3
    s = one(TokenF1(), rec("The cat sat on the mat.", "A cat was sitting on a mat"))
    assert s.value == pytest.approx(2 / 3)
    assert s.details["precision"] == pytest.approx(0.75)
    assert s.details["recall"] == pytest.approx(0.6)
    assert s.explanation == "1 reference: F1=0.67 (P=0.75 R=0.60)"
    assert s.label == "pass"


def test_token_f1_best_reference() -> None:
    s = one(TokenF1(), rec("Paris", "London", "paris, france", "Rome"))
    # vs "paris france": P 1, R 1/2 → F1 2/3
    assert s.value == pytest.approx(2 / 3)
    assert s.details["reference_index"] == 1
    assert s.explanation is not None and s.explanation.startswith("best of 3 references (#2)")


def test_token_f1_counts_repeats() -> None:
    # multiset overlap (SQuAD): common 1 → P 1/3, R 1 → F1 0.5
    assert one(TokenF1(), rec("paris paris paris", "Paris")).value == pytest.approx(0.5)


def test_token_f1_empty_after_normalisation() -> None:
    assert one(TokenF1(), rec("The!", "Paris")).value == 0.0
    assert one(TokenF1(), rec("The!", "an")).value == 1.0  # both empty: SQuAD convention


def test_token_f1_unicode_and_punctuation() -> None:
    # [北 京] vs [北 京 市]: P 1, R 2/3 → F1 0.8
    assert one(TokenF1(), rec("北京", "北京市")).value == pytest.approx(0.8)
    assert one(TokenF1(), rec("U.S.A.", "USA")).value == 1.0


def test_token_f1_long_text() -> None:
    assert one(TokenF1(), rec(LONG, LONG)).value == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("answer", "refs", "value", "index"),
    [
        ("The Eiffel Tower!", ("eiffel tower",), 1.0, 0),
        ("Paris, France", ("Paris",), 0.0, None),
        ("paris", ("London", "PARIS."), 1.0, 1),
        ("北 京", ("北京",), 1.0, 0),
        ("...", ("!!",), 1.0, 0),  # both normalise to nothing
    ],
)
def test_exact_match(answer: str, refs: tuple[str, ...], value: float, index: int | None) -> None:
    s = one(ExactMatch(), rec(answer, *refs))
    assert s.value == value
    assert s.details["reference_index"] == index
    assert s.label == ("pass" if value == 1.0 else "fail")


def test_exact_match_explanations() -> None:
    assert one(ExactMatch(), rec("x", "y", "z")).explanation == (
        "normalised answer differs from any of 2 references"
    )
    assert one(ExactMatch(), rec("z", "y", "z")).explanation == (
        "normalised answer equals reference #2 of 2"
    )


# --------------------------------------------------------------------------- rgb


@pytest.mark.parametrize(
    ("answer", "refs", "value"),
    [
        ("The Rams won Super Bowl LVI.", ("Super Bowl 56 | Super Bowl LVI",), 1.0),
        ("The Rams won Super Bowl 56.", ("Super Bowl LVI",), 0.0),
        ("It happened in 2014.", ("4",), 0.0),  # whole tokens: RGB's substring check says 1
        ("About 1000 people came.", ("1,000",), 1.0),
        ("The capital is PARIS.", ("Berlin", "paris"), 1.0),
        ("2008年奥运会在北京举办。", ("北京",), 1.0),
        ("The answer is The Beatles", ("beatles",), 1.0),
    ],
)
def test_rgb_accuracy(answer: str, refs: tuple[str, ...], value: float) -> None:
    s = one(RgbAccuracy(), rec(answer, *refs))
    assert s.value == value
    assert s.label == ("pass" if value else "fail")


def test_rgb_accuracy_explanation_names_reference() -> None:
    s = one(RgbAccuracy(), rec("It is Paris.", "Berlin", "Paris"))
    assert s.explanation == "contains reference #2 of 2"
    assert s.details["matched_references"] == [1]
    assert one(RgbAccuracy(), rec("Rome", "Berlin", "Paris")).explanation == (
        "contains none of 2 references"
    )


def test_rgb_accuracy_separator_option() -> None:
    r = rec("It was a dog.", "cat | dog")
    assert one(RgbAccuracy(), r).value == 1.0
    assert one(RgbAccuracy(separator=None), r).value == 0.0  # needle is "cat dog"
    with pytest.raises(ValueError):
        RgbAccuracy(separator="")


def test_rgb_accuracy_require_all() -> None:
    r = rec("Only Paris.", "Paris", "Berlin | Bonn")
    assert one(RgbAccuracy(), r).value == 1.0
    s = one(RgbAccuracy(require_all=True), r)
    assert s.value == 0.0
    assert s.explanation == "contains 1 of 2 required references (missing #2)"
    assert (
        one(RgbAccuracy(require_all=True), rec("Paris and Bonn", "Paris", "Berlin | Bonn")).value
        == 1.0
    )


def test_rgb_accuracy_refusal_option() -> None:
    r = rec("Insufficient information, but probably Paris.", "Paris")
    assert one(RgbAccuracy(), r).value == 1.0
    s = one(RgbAccuracy(refusal_is_wrong=True), r)
    assert s.value == 0.0
    assert s.explanation is not None and s.explanation.startswith(
        "refuses ('Insufficient information')"
    )


def test_rgb_accuracy_reference_without_words_raises() -> None:
    with pytest.raises(ValueError, match="normalisation"):
        RgbAccuracy()(rec("anything", "the", "!!"))
    # an unusable reference next to a usable one is ignored
    assert one(RgbAccuracy(), rec("Paris", "the", "Paris")).value == 1.0


REFUSALS = [
    "I can not answer the question because of the insufficient information in documents.",
    "I don't know.",
    "I’m unable to determine that from the context.",
    "I am not able to confirm this.",
    "The provided documents do not mention his birthday.",
    "The context doesn't specify the year.",
    "There is no information about the release date.",
    "This is not mentioned in the provided context.",
    "Based on the given documents, it is not possible to say.",
    "Not enough information to answer.",
    "This question cannot be answered from the passages.",
    "信息不足，无法回答。",
]
NOT_REFUSALS = [
    "Paris is the capital of France.",
    "The study found no evidence of harm.",
    "I know the answer: it is 42.",
    "Documents are important for compliance.",
    "The results do not indicate cancer.",
    "You cannot answer emails after 6 pm? Yes you can.",  # "cannot answer" + emails: see below
]


@pytest.mark.parametrize("answer", REFUSALS)
def test_rgb_rejection_detects_refusals(answer: str) -> None:
    s = one(RgbRejection(), rec(answer))
    assert s.value == 1.0
    assert s.label is None  # no threshold: a refusal is right or wrong depending on contexts
    assert s.explanation is not None and s.explanation.startswith("refuses: ")


@pytest.mark.parametrize("answer", NOT_REFUSALS[:-1])
def test_rgb_rejection_ignores_answers(answer: str) -> None:
    s = one(RgbRejection(), rec(answer))
    assert s.value == 0.0
    assert s.explanation == "no refusal phrase found"


def test_rgb_rejection_known_false_positive() -> None:
    # Phrase matching is crude (as RGB's is): "cannot answer" counts wherever it appears.
    assert one(RgbRejection(), rec(NOT_REFUSALS[-1])).value == 1.0


ERROR_FLAGS = [
    "There are factual errors in the provided documents. The answer is Paris.",
    "The documents contain incorrect information; the Olympics were in Beijing.",
    "The provided information is wrong: it was 2008.",
    "Note that the context contradicts known facts.",
    "There is an error in the document: Beijing hosted it.",
    "文档信息有误，2008年的奥运会在北京举办。",
]
NO_ERROR_FLAGS = [
    "There are no factual errors in the documents.",
    "The documents do not contain any incorrect information.",
    "Paris is the capital of France.",
    "He made an error in judgement.",
]


@pytest.mark.parametrize("answer", ERROR_FLAGS)
def test_rgb_error_detection_flags(answer: str) -> None:
    s = one(RgbErrorDetection(), rec(answer))
    assert s.value == 1.0
    assert s.label is None
    assert s.explanation is not None and s.explanation.startswith("flags errors: ")


@pytest.mark.parametrize("answer", NO_ERROR_FLAGS)
def test_rgb_error_detection_ignores(answer: str) -> None:
    assert one(RgbErrorDetection(), rec(answer)).value == 0.0


@pytest.mark.parametrize(
    ("answer", "value", "start"),
    [
        ("There are factual errors in the documents. It was Beijing.", 1.0, "flags errors"),
        ("There are factual errors in the documents. It was London.", 0.0, "flags errors"),
        ("It was Beijing.", 0.0, "does not flag errors; contains reference #1"),
    ],
)
def test_rgb_error_correction(answer: str, value: float, start: str) -> None:
    s = one(RgbErrorCorrection(), rec(answer, "Beijing"))
    assert s.value == value
    assert s.explanation is not None and s.explanation.startswith(start)


# The phrase checks first look for a hint word (rgb._REFUSAL_HINT, rgb._ERROR_HINT) and try
# the patterns only when one is there. That is right only if every branch of every pattern
# holds a hint word: strings drawn from each pattern's own syntax tree (every alternative
# taken, random case) must all carry one, and the checks must agree with the bare patterns.
def _draw(items: Any, rng: random.Random) -> str:
    out: list[str] = []
    for op, av in items:
        name = str(op)
        if name == "LITERAL":
            out.append(chr(av))
        elif name == "IN":
            lits = [chr(a) for o, a in av if str(o) == "LITERAL"]
            out.append(" " if any(str(o) == "NEGATE" for o, _ in av) or not lits
                       else rng.choice(lits))
        elif name == "BRANCH":
            out.append(_draw(rng.choice(av[1]), rng))
        elif name == "SUBPATTERN":
            out.append(_draw(av[-1], rng))
        elif name in ("MAX_REPEAT", "MIN_REPEAT"):
            lo, hi, sub = av
            out.extend(_draw(sub, rng) for _ in range(rng.randint(lo, min(hi, lo + 2))))
        elif name != "AT":  # (word boundaries: the words drawn are whole)
            raise AssertionError(f"no sampler for {name}")
    return "".join(out)


@pytest.mark.parametrize("which", ["refusal", "error"])
def test_rgb_phrase_hints_hold_in_every_branch(which: str) -> None:
    patterns, hint, find = {
        "refusal": (rgb._REFUSAL_PATTERNS, rgb._REFUSAL_HINT, rgb.find_refusal),
        "error": (rgb._ERROR_PATTERNS, rgb._ERROR_HINT, rgb.find_error_flag)}[which]
    rng = random.Random(11)
    for pattern in patterns:
        tree = re._parser.parse(pattern, re.IGNORECASE)  # type: ignore[attr-defined]
        matched = 0
        for _ in range(3000):
            text = "".join(c.upper() if rng.random() < 0.3 else c
                           for c in _draw(tree, rng))
            if re.search(pattern, text, re.IGNORECASE) is None:
                continue  # (a draw the sampler got wrong: not a text of the pattern)
            matched += 1
            assert hint.search(text), (pattern, text)
            assert find(f"So: {text}.") is not None, (pattern, text)
        assert matched > 1500, pattern


def test_rgb_phrase_checks_agree_with_the_bare_patterns() -> None:
    rng = random.Random(5)
    words = ("i we the documents context no not can't cannot unable to answer know don't "
             "information is are wrong false incorrect errors factual in contradicts known "
             "facts based on it was paris . , 信息 不足 有误 无法 回答 possible").split()
    for _ in range(20_000):
        text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 12)))
        bare = rgb._REFUSAL_RE.search(rgb._clean(text))
        assert rgb.find_refusal(text) == (bare.group() if bare else None), text
        flags = [m.group() for m in rgb._ERROR_RE.finditer(rgb._clean(text))]
        flag = rgb.find_error_flag(text)
        assert flag is None or flag in flags, text
        if not flags:
            assert flag is None, text


def test_rgb_long_text() -> None:
    long_answer = LONG + " insufficient information. factual errors in the documents. Paris"
    assert one(RgbRejection(), rec(long_answer)).value == 1.0
    assert one(RgbErrorDetection(), rec(long_answer)).value == 1.0
    assert one(RgbAccuracy(), rec(long_answer, "Paris")).value == 1.0


# --------------------------------------------------------------------------- all local metrics


def test_registry_has_every_local_metric() -> None:
    names = [cls.name for cls in LOCAL_METRICS]
    assert names == [
        "rouge", "bleu", "token_f1", "exact_match",
        "rgb_accuracy", "rgb_rejection", "rgb_error_detection", "rgb_error_correction",
    ]  # fmt: skip
    assert set(names) <= set(registry.available())
    for cls in LOCAL_METRICS:
        m = registry.get(cls.name)
        assert type(m) is cls
        assert re.fullmatch(r"[a-z][a-z0-9_]*", m.name)
        assert m.kind == "local" and m.version == "1"
        assert m.requires and m.requires <= INPUTS
        assert m.description and "\n" not in m.description
        assert cls.__doc__
        for score_name in m.names():
            assert re.fullmatch(r"[a-z][a-z0-9_]*", score_name)


@pytest.mark.parametrize("cls", LOCAL_METRICS, ids=lambda c: c.name)
def test_metric_output_contract(cls: type[Metric]) -> None:
    metric = cls()
    record = rec("The capital of France is Paris.", "Paris", "paris, france")
    out = metric(record)
    scores = out if isinstance(out, list) else [out]
    assert [s.name for s in scores] == list(metric.names())
    for s in scores:
        assert isinstance(s, Score)
        assert s.status == "ok" and s.metric == metric.name and s.metric_version == "1"
        assert s.value is not None and 0.0 <= s.value <= 1.0
        assert s.explanation
    assert metric(record) == out  # deterministic


@pytest.mark.parametrize("cls", LOCAL_METRICS, ids=lambda c: c.name)
def test_threshold_option(cls: type[Metric]) -> None:
    metric = cls(threshold=0.0)  # type: ignore[call-arg]
    out = metric(rec("Paris", "Paris"))
    for s in out if isinstance(out, list) else [out]:
        assert s.label == "pass"


def test_docs_have_a_section_per_local_metric() -> None:
    doc = DOCS.read_text(encoding="utf-8")
    headings = set(re.findall(r"^## (\S+)\s*$", doc, flags=re.MULTILINE))
    for cls in LOCAL_METRICS:
        assert cls.name in headings, f"docs/metrics.md lacks '## {cls.name}'"
        section = doc.split(f"## {cls.name}\n", 1)[1].split("\n## ", 1)[0]
        for score_name in cls().names():
            assert f"`{score_name}`" in section
        for word in ("Suite", "Inputs", "Formula", "Edge cases", "Threshold", "Judge calls"):
            assert f"**{word}" in section, f"'## {cls.name}' lacks **{word}**"


def test_no_warnings_from_any_local_metric() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for cls in LOCAL_METRICS:
            cls()(rec("Paris", "Paris is nice"))
