"""Local metrics load nltk's and rouge-score's modules without nltk's package __init__
(tracescore/_internal/light_import.py, issue 33): no scipy, scikit-learn or pandas in the app after
the first local score, the same numbers as with the real packages, and the real packages intact
for an app that imports them afterwards.

Each case runs in a fresh interpreter: in the test process nltk is imported already.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

# Scores of every text helper and metric that uses nltk or rouge-score, on texts with
# stemming, punctuation, abbreviations, non-ASCII and contractions.
_SCORES = r"""
import json, sys
from tracescore.metrics import text
from tracescore.metrics.bleu import Bleu
from tracescore.metrics.rouge import Rouge
from tracescore.record import RagRecord

PAIRS = [
    ("The cats were running quickly to the generously sized houses.",
     "A cat ran quickly towards the big houses."),
    ("Dr. Smith arrived at 3 p.m. yesterday. He didn't stay long; it's over.",
     "Doctor Smith came at 3 pm. He did not stay."),
    ("Café owners' résumés: naïve coöperation, organizational relativity!",
     "The cafe owner's resume shows naive cooperation and organization."),
    ("a b c x e", "a b c d e"),
    ("Paris", "Paris"),
]
out = {"stems": [text.words(a, stem=True) for a, _ in PAIRS],
       "sentences": [text.split_sentences(a) for a, _ in PAIRS], "scores": []}
metrics = [Rouge(use_stemmer=True), Rouge(rouge_types=["rouge1", "rouge2", "rougeLsum"],
           split_sentences=True), Bleu(), Bleu(smoothing="method1"), Bleu(weights=(0.5, 0.5))]
for a, g in PAIRS:
    r = RagRecord(trace_id="a" * 32, span_id="b" * 16, answer=a, ground_truths=(g,))
    for m in metrics:
        s = m(r)
        for x in (s if isinstance(s, list) else [s]):
            out["scores"].append([x.name, x.value, x.label])
heavy = sorted(m for m in ("nltk", "scipy", "scipy.stats", "sklearn", "pandas")
               if m in sys.modules)
"""


def _run(code: str) -> dict:
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True,
                          text=True, timeout=300, cwd=str(Path(__file__).resolve().parent))
    assert proc.returncode == 0, proc.stderr[-3000:]
    result: dict = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def test_light_scores_equal_the_real_packages_and_leave_no_heavy_modules() -> None:
    light = _run(_SCORES + r"""
# the app imports the real packages afterwards: complete, and the same numbers from them
import nltk
from nltk.stem.porter import PorterStemmer
from nltk.translate.bleu_score import sentence_bleu
from rouge_score import rouge_scorer
assert nltk.__file__.endswith("__init__.py") and hasattr(nltk, "corpus"), nltk
assert nltk.stem.porter.PorterStemmer is PorterStemmer
real_stem = PorterStemmer()
same_stems = all(text._stem(w) == real_stem.stem(w) for ws in out["stems"] for w in ws)
from tracescore._internal import light_import
light_bleu = light_import.module("nltk.translate.bleu_score").sentence_bleu
same_bleu = all(light_bleu([g.split()], a.split()) == sentence_bleu([g.split()], a.split())
                for a, g in PAIRS)
upstream = rouge_scorer.RougeScorer(["rouge1", "rougeL"], use_stemmer=True)
light_rouge = light_import.module("rouge_score.rouge_scorer").RougeScorer(
    ["rouge1", "rougeL"], use_stemmer=True)
same_rouge = all(upstream.score(g, a) == light_rouge.score(g, a) for a, g in PAIRS)
out.update(heavy=heavy, same_stems=same_stems, same_bleu=same_bleu, same_rouge=same_rouge)
print(json.dumps(out))
""")
    plain = _run("import nltk, rouge_score.rouge_scorer\n" + _SCORES
                 + "print(json.dumps(out))\n")
    assert light["heavy"] == [], light["heavy"]  # not even nltk stays in sys.modules
    assert light["same_stems"] and light["same_bleu"] and light["same_rouge"]
    assert len(light["scores"]) >= 25
    for key in ("stems", "sentences", "scores"):
        assert light[key] == plain[key], key


def test_an_app_thread_importing_nltk_during_the_light_load_gets_the_real_package() -> None:
    out = _run(r"""
import json, sys, threading
from tracescore._internal import light_import

got = {}
started = threading.Event()
orig = light_import._stand_in

def slow_stand_in(name):
    mod = orig(name)
    if name == "nltk":
        started.set()
        t = threading.Thread(target=app)
        t.start()
        got["thread"] = t
        t.join(0.5)  # the app thread is waiting on the import lock, not done
        got["waited"] = t.is_alive()
    return mod

def app():
    import nltk
    got["real"] = nltk.__file__.endswith("__init__.py") and hasattr(nltk, "corpus")

light_import._stand_in = slow_stand_in
light_import.module("nltk.stem.porter")
got["thread"].join(120)
print(json.dumps({"waited": got["waited"], "real": got.get("real")}))
""")
    assert out == {"waited": True, "real": True}


def test_read_statistics_need_neither_scipy_nor_numpy() -> None:
    # the read commands' t and normal quantiles are computed in pure Python
    # (stats/student_t.py), to scipy's values
    out = _run(r"""
import json, math, sys
from tracescore import stats
q = [stats.t_quantile(0.975, df) for df in (1, 4, 29, 1000.5)]
z = stats.z_quantile(0.975)
gone = not {"scipy", "scipy.special", "numpy"} & set(sys.modules)
import scipy.special, scipy.stats
ref = [float(scipy.stats.t.ppf(0.975, df)) for df in (1, 4, 29, 1000.5)]
same = all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(q, ref)) \
    and math.isclose(z, float(scipy.stats.norm.ppf(0.975)), rel_tol=1e-14)
print(json.dumps({"gone": gone, "same": same, "later": stats.t_quantile(0.975, 4) == q[1]}))
""")
    assert out == {"gone": True, "same": True, "later": True}


def test_a_leaf_that_fails_does_not_keep_the_others_and_is_tried_again() -> None:
    out = _run(r"""
import json, sys
sys.modules["rouge_score"] = None  # rouge-score "not installed"
from tracescore._internal import light_import
bleu = light_import.module("nltk.translate.bleu_score")
try:
    light_import.module("rouge_score.rouge_scorer")
    first = "loaded"
except ImportError:
    first = "ImportError"
del sys.modules["rouge_score"]  # installed now
second = light_import.module("rouge_score.rouge_scorer").RougeScorer.__name__
print(json.dumps({"bleu": bleu.sentence_bleu.__name__, "first": first, "second": second,
                  "nltk": "nltk" in sys.modules}))
""")
    assert out == {"bleu": "sentence_bleu", "first": "ImportError", "second": "RougeScorer",
                   "nltk": False}
