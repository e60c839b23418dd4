"""The issue's selection defects: estimates that ignore how records were chosen. The truth is
known here (the simulation wrote it); an estimate must cover it or say that it cannot."""

from __future__ import annotations

import json
import random
from typing import Any

from .build import QUALITY, Rec, Spec
from .run import built, cli


def _says(obj: Any, *words: str) -> bool:
    """Whether a key naming one of ``words`` carries a non-empty value anywhere in ``obj``."""
    if isinstance(obj, dict):
        return any((any(w in str(k).lower() for w in words) and v) or _says(v, *words)
                   for k, v in obj.items())
    if isinstance(obj, list):
        return any(_says(v, *words) for v in obj)
    return False


def test_biased_labels_are_flagged():
    """Humans label only the 40 lowest of 300 judge scores, and the judge errs differently
    there: the corrected mean in ``report`` either covers the humans' true mean or warns that
    the labels do not look like a random draw."""
    from tracescore.store import open_store

    rng = random.Random(7)
    judge = [round(rng.random(), 3) for _ in range(300)]
    human = [0.5 * j + 0.4 for j in judge]  # lenient where the judge is harsh
    truth = sum(human) / len(human)
    spec = Spec(tuple(Rec(t=20.0 * i, scores=((QUALITY, j),)) for i, j in enumerate(judge)))
    lowest = sorted(range(300), key=lambda i: judge[i])[:40]
    with built(spec) as (db, _):
        store = open_store(db)
        try:
            for i in lowest:
                store.add_label(f"{i:032x}", QUALITY, human[i], annotator="ann",
                                record_id=f"{i:032x}-{i:016x}")
        finally:
            store.close()
        rep, _ = cli("report", "--db", db, "--worst", 0)
    entry = rep["judge_vs_humans"][QUALITY]
    corrected = entry["corrected"]
    assert corrected is not None, entry
    lo, hi = corrected.get("lo"), corrected.get("hi")
    covers = lo is not None and hi is not None and lo <= truth <= hi
    assert covers or _says(entry, "warn"), json.dumps(entry)[:600]


def test_forced_records_are_not_averaged_as_uniform():
    """300 records sampled at 20 % (60 scored, ~0.8), and 30 forced into scoring by negative
    feedback (~0.2): ``report``'s mean covers the traffic's mean (~0.745, inclusion-weighted)
    or states that it speaks for the scored records only."""
    rng = random.Random(3)
    recs, latent = [], []
    for i in range(300):
        v = round(min(1.0, max(0.0, rng.gauss(0.8, 0.05))), 3)
        latent.append(v)
        u = i / 300
        recs.append(Rec(t=10.0 * i, u=u, scores=((QUALITY, v),) if u < 0.2 else ()))
    for k in range(30):
        v = round(min(1.0, max(0.0, rng.gauss(0.2, 0.05))), 3)
        latent.append(v)
        recs.append(Rec(t=10.0 * k + 5, u=0.9, forced="feedback", scores=((QUALITY, v),)))
    truth = sum(latent) / len(latent)
    with built(Spec(tuple(recs))) as (db, _):
        rep, _ = cli("report", "--db", db, "--worst", 0)
    m = rep["metrics"][QUALITY]
    assert m["count"] == 90
    covers = m["lo"] <= truth <= m["hi"]
    assert covers or _says(m, "population", "weight"), m
