"""Metric libraries are imported once, under a lock, before concurrent use (issue 31).

nltk and rouge-score are imported at a metric's first call. Scored from several threads at
once, the first imports raced (a thread handed a half-initialised module: ``cannot import name
'RougeScorer'``) and, in 2 of 5 tries on a loaded machine, every ROUGE score of the process
failed. Each test here runs in a fresh interpreter (the imports must not have happened yet), with
an import hook that makes the first import of the libraries slow, or fail once as a race would.
"""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tracescore.metrics.base import Metric
from tracescore.metrics.ready import ensure_ready, is_ready

# A fresh process: an import hook slows (and, with FAIL, breaks once) the first import of
# rouge-score's scorer and nltk's BLEU, then a real pipeline scores 48 records with ROUGE and
# BLEU at concurrency 8 and prints its counters.
_SCRIPT = textwrap.dedent('''
    import importlib.abc, importlib.machinery, json, sys, threading, time

    SLOW = float(sys.argv[2]); FAIL = sys.argv[3] == "fail"
    TARGETS = {"rouge_score.rouge_scorer", "nltk.translate.bleu_score", "nltk.stem.porter"}
    seen = set()
    lock = threading.Lock()

    class Loader(importlib.abc.Loader):
        def __init__(self, inner, name):
            self.inner, self.name = inner, name
        def create_module(self, spec):
            return self.inner.create_module(spec)
        def exec_module(self, module):
            with lock:
                first = self.name not in seen
                fail = FAIL and not seen  # the very first of them fails, once
                seen.add(self.name)
            if first:
                time.sleep(SLOW)  # a loaded machine: other threads get in meanwhile
                if fail:          # what a thread sees of a half-initialised module
                    raise ImportError(f"cannot import name 'X' from partially initialized "
                                      f"module {self.name!r} (simulated)")
            self.inner.exec_module(module)

    class Finder(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path, target=None):
            if name not in TARGETS:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is not None:
                spec.loader = Loader(spec.loader, name)
            return spec

    sys.meta_path.insert(0, Finder())

    from tracescore.metrics.bleu import Bleu
    from tracescore.metrics.rouge import Rouge
    from tracescore.testing import in_memory

    assert "nltk" not in sys.modules and "rouge_score" not in sys.modules
    ts, _ = in_memory(sys.argv[1], metrics=[Rouge(use_stemmer=True), Bleu()], concurrency=8)
    for i in range(48):
        ts.log_record(query=f"q{i}", answer=f"the cat number {i} sat on the warm mat",
                      ground_truths=[f"a cat number {i} sat on the mat"])
    ok = ts.flush(timeout=120)
    st = ts.stats()
    ts.shutdown()
    print(json.dumps({"flushed": ok, "scored": st["scored_jobs"],
                      "errors": st["error_scores"], "failing": st["failing_metrics"]}))
''')


def _run(tmp_path: Path, slow: float, mode: str) -> dict:
    script = tmp_path / "score.py"
    script.write_text(_SCRIPT)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "ts.db"), str(slow), mode],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.mark.slow
@pytest.mark.parametrize("slow,mode", [(0.5, "slow"), (0.3, "fail")])
def test_rouge_and_bleu_score_every_record_in_a_fresh_process(tmp_path: Path, slow: float,
                                                              mode: str) -> None:
    got = _run(tmp_path, slow, mode)
    assert got == {"flushed": True, "scored": 96, "errors": 0, "failing": {}}


class _Flaky(Metric):
    """Its library fails to import on the first ``fails`` attempts."""

    name = "flaky"
    libraries = ("ts_flaky_lib",)

    def __init__(self, fails: int) -> None:
        self.fails = fails
        self.attempts = 0

    def prepare(self) -> None:
        self.attempts += 1
        sys.modules["ts_flaky_lib.half"] = type(sys)("ts_flaky_lib.half")  # left half-done
        if self.attempts <= self.fails:
            raise ImportError("cannot import name 'Thing' (simulated)")

    def __call__(self, record):  # pragma: no cover - not called here
        raise AssertionError


def test_a_failed_prepare_is_retried_and_its_half_imported_modules_forgotten(
        caplog: pytest.LogCaptureFixture) -> None:
    m = _Flaky(fails=1)
    with caplog.at_level(logging.WARNING, logger="tracescore"):
        ensure_ready(m)
    assert is_ready(m) and m.attempts == 2
    assert "attempt 1 of 3; 1 half-imported modules forgotten" in caplog.text
    sys.modules.pop("ts_flaky_lib.half", None)


def test_a_prepare_that_keeps_failing_raises_and_is_not_remembered() -> None:
    m = _Flaky(fails=3)
    with pytest.raises(ImportError):
        ensure_ready(m)
    assert not is_ready(m) and "ts_flaky_lib.half" not in sys.modules
    ensure_ready(m)  # the next record tries again: a failed import is not remembered
    assert is_ready(m) and m.attempts == 4
    sys.modules.pop("ts_flaky_lib.half", None)


class _Broken(Metric):
    name = "broken_lib"
    requires = frozenset({"answer"})

    def __call__(self, record):
        raise ImportError("No module named 'not_installed_anywhere'")


@pytest.mark.allow_internal_errors
def test_a_metric_failing_on_every_record_says_so_once(make_ts, caplog) -> None:
    ts, _ = make_ts(metrics=[_Broken(), "exact_match"])
    with caplog.at_level(logging.ERROR, logger="tracescore"):
        for i in range(12):
            ts.log_record(query=f"q{i}", answer="a", ground_truths=["a"])
        assert ts.flush(timeout=60)
    said = [r for r in caplog.records if "failed on every record so far" in r.getMessage()]
    assert len(said) == 1 and "broken_lib" in said[0].getMessage()
    assert "not_installed_anywhere" in said[0].getMessage()
    failing = ts.stats()["failing_metrics"]
    assert list(failing) == ["broken_lib"] and failing["broken_lib"]["errors"] == 12
