"""Session metrics: scores of a whole conversation, computed when it closes from its turns
(the stored records) and the turns' stored scores. Pure functions, no I/O, no judge.

Each is documented in docs/sessions.md with its definition and limits:

- ``session.turns`` — the number of turns (records) in the session.
- ``session.repeated_questions`` — the share of turns after the first whose question repeats
  an earlier turn's: the same text once normalised (Unicode NFKC, case-folded, punctuation
  dropped, spaces collapsed), or the same words (Jaccard similarity of the word sets ≥
  :data:`JACCARD_REPEAT`, questions of 3+ words), or — with an embedder — cosine similarity
  of the embeddings ≥ :data:`COSINE_REPEAT`. Skipped for a one-turn session.
- ``session.unanswered_turns`` — the share of turns with no answer: an error, an empty
  answer, or a stream the client cut off.
- ``session.abandoned`` — 1 when the session's last turn was unanswered (the user left after
  a turn that gave them nothing), else 0.
- ``session.<score>.passing`` — for each turn-level score with a pass rule (a pass/fail label,
  or a declared threshold and direction): the share of the session's scored turns passing.
- ``session.<score>.worst`` — the worst turn's value of each turn-level score with a declared
  direction (the minimum where higher is better), with that turn's record id in ``details``.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .._internal.vectors import cosine_or_zero
from ..record import RagRecord
from ..score import Score

__all__ = ["CHEAP", "COSINE_REPEAT", "JACCARD_REPEAT", "PREFIX", "Declared", "is_unanswered",
           "normalise", "repeated_turns", "session_score_names", "session_scores"]

PREFIX = "session."
#: word-set similarity at or above which two questions are the same question asked again
JACCARD_REPEAT = 0.8
#: embedding cosine similarity at or above which two questions are the same question
COSINE_REPEAT = 0.9
VERSION = "1"

#: (higher_is_better, threshold) of a turn-level score name, from the ``metrics`` table
Declared = Mapping[str, tuple[bool | None, float | None]]

#: The cheap session scores: name → (higher_is_better, description)
CHEAP: dict[str, tuple[bool | None, str]] = {
    "session.turns": (None, "turns (records) in the session"),
    "session.repeated_questions": (False, "share of turns after the first that ask an "
                                          "earlier turn's question again"),
    "session.unanswered_turns": (False, "share of turns with no answer (error, empty, cut off)"),
    "session.abandoned": (False, "1 when the session ended right after an unanswered turn"),
}

def session_score_names(turn_scores: Mapping[str, bool | None]) -> dict[str, bool | None]:
    """Every session score name a session of turns scored with ``turn_scores`` (name →
    higher_is_better) can have, with its direction (a monitor's name is checked against
    them)."""
    out: dict[str, bool | None] = {name: hib for name, (hib, _) in CHEAP.items()}
    for name, hib in turn_scores.items():
        out[f"{PREFIX}{name}.passing"] = True
        if hib is not None:
            out[f"{PREFIX}{name}.worst"] = hib
    return out


_PUNCT = re.compile(r"[^\w\s]", re.UNICODE)
_SPACE = re.compile(r"\s+")


def normalise(text: str | None) -> str:
    """The question as compared: NFKC, case-folded, punctuation dropped, spaces collapsed."""
    if not text:
        return ""
    t = unicodedata.normalize("NFKC", text).casefold()
    return _SPACE.sub(" ", _PUNCT.sub(" ", t)).strip()


def _jaccard(a: str, b: str) -> float:
    wa, wb = set(a.split()), set(b.split())
    if not wa or not wb:
        return 0.0
    return len(wa & wb) / len(wa | wb)


def repeated_turns(questions: Sequence[str | None],
                   vectors: Sequence[Sequence[float]] | None = None
                   ) -> list[tuple[int, int, str]]:
    """(turn, earlier turn it repeats, how) for each turn after the first whose question
    repeats an earlier one (the first earlier match; ``how`` is ``"text"``, ``"words"`` or
    ``"embedding"``). Turns without a question never repeat."""
    norm = [normalise(q) for q in questions]
    out = []
    for i in range(1, len(norm)):
        if not norm[i]:
            continue
        for j in range(i):
            if not norm[j]:
                continue
            how = None
            if norm[i] == norm[j]:
                how = "text"
            elif min(len(norm[i].split()), len(norm[j].split())) >= 3 \
                    and _jaccard(norm[i], norm[j]) >= JACCARD_REPEAT:
                how = "words"
            elif vectors is not None and cosine_or_zero(vectors[i], vectors[j]) >= COSINE_REPEAT:
                how = "embedding"
            if how is not None:
                out.append((i, j, how))
                break
    return out


def is_unanswered(rec: RagRecord) -> str | None:
    """Why a turn gave the user no answer (None: it answered)."""
    if rec.error:
        return "error"
    if not rec.complete:
        return "cut off"
    if not rec.content_captured or rec.compact:
        return None  # (text not kept: nothing to say)
    if rec.answer is None or not rec.answer.strip():
        return "empty answer"
    return None


def session_scores(turns: Sequence[RagRecord], scores: Mapping[str, Sequence[Mapping[str, Any]]],
                   declared: Declared,
                   embed: Callable[[list[str]], Sequence[Sequence[float]]] | None = None
                   ) -> list[Score]:
    """The session's scores from its ``turns`` (time order) and their stored ``scores``
    (record id → score rows: name, value, label, status); ``declared``: what the metrics
    table says of each turn-level score name; ``embed``: an optional embedder of questions
    (texts → vectors) for repeats worded differently."""
    n = len(turns)
    out = [Score("session.turns", float(n), metric="session.turns", metric_version=VERSION,
                 details={"records": [t.record_id for t in turns]})]
    questions = [t.query for t in turns]
    if n < 2:
        out.append(Score.skipped("session.repeated_questions", "one turn: nothing to repeat",
                                 metric="session.repeated_questions", metric_version=VERSION))
    else:
        vectors, note = None, {}
        if embed is not None and all(q for q in questions):
            try:
                vectors = embed([q or "" for q in questions])
            except Exception as exc:  # (the embedder's server down: the text checks stand)
                note = {"embedding_failed": f"{type(exc).__name__}: {exc}"[:300]}
        reps = repeated_turns(questions, vectors)
        out.append(Score("session.repeated_questions", len(reps) / (n - 1),
                         metric="session.repeated_questions", metric_version=VERSION,
                         explanation=f"{len(reps)} of {n - 1} later turns repeat a question",
                         details={"repeats": [{"turn": i + 1, "repeats_turn": j + 1, "how": h}
                                              for i, j, h in reps], **note}))
    why = [is_unanswered(t) for t in turns]
    unanswered = [i for i, w in enumerate(why) if w]
    if n:
        out.append(Score("session.unanswered_turns", len(unanswered) / n,
                         metric="session.unanswered_turns", metric_version=VERSION,
                         details={"turns": [{"turn": i + 1, "why": why[i]}
                                            for i in unanswered]}))
        last = why[-1]
        out.append(Score("session.abandoned", 1.0 if last else 0.0,
                         metric="session.abandoned", metric_version=VERSION,
                         explanation=(f"the last turn ({n}) had no answer: {last}" if last
                                      else "the last turn was answered")))
    out.extend(_aggregates(turns, scores, declared))
    return out


def _passes(value: float, label: str | None, rule: tuple[bool | None, float | None]) -> bool | None:
    if label in ("pass", "fail"):
        return label == "pass"
    hib, threshold = rule
    if hib is None or threshold is None:
        return None
    return value >= threshold if hib else value <= threshold


def _aggregates(turns: Sequence[RagRecord], scores: Mapping[str, Sequence[Mapping[str, Any]]],
                declared: Declared) -> list[Score]:
    """``session.<name>.passing`` and ``session.<name>.worst`` per turn-level score name."""
    per: dict[str, list[tuple[int, str, float, str | None]]] = {}
    errors: dict[str, int] = {}
    for i, t in enumerate(turns):
        for row in scores.get(t.record_id, ()):
            name = row["name"]
            if name.startswith(PREFIX):
                continue
            if row["status"] == "ok" and row["value"] is not None:
                per.setdefault(name, []).append((i, t.record_id, float(row["value"]),
                                                 row["label"]))
            elif row["status"] == "error":
                errors[name] = errors.get(name, 0) + 1
    out: list[Score] = []
    for name in sorted(per):
        vals = per[name]
        rule = declared.get(name, (True, None))
        base = {"scored_turns": len(vals), "error_turns": errors.get(name, 0)}
        verdicts = [(i, p) for i, _, v, lab in vals if (p := _passes(v, lab, rule)) is not None]
        if verdicts:
            ok = sum(1 for _, p in verdicts if p)
            out.append(Score(f"{PREFIX}{name}.passing", ok / len(verdicts),
                             metric=f"{PREFIX}{name}.passing", metric_version=VERSION,
                             explanation=f"{ok} of {len(verdicts)} scored turns pass {name}",
                             details={**base, "failing_turns": [i + 1 for i, p in verdicts
                                                                if not p]}))
        hib = rule[0]
        if hib is not None:
            pick = min if hib else max
            i, rid, v, _ = pick(vals, key=lambda x: x[2])
            out.append(Score(f"{PREFIX}{name}.worst", v, metric=f"{PREFIX}{name}.worst",
                             metric_version=VERSION,
                             explanation=f"turn {i + 1} has the session's worst {name}",
                             details={**base, "turn": i + 1, "record_id": rid}))
    return out
