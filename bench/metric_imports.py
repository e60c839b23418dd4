"""Fresh processes scoring ROUGE and BLEU at concurrency 8, beside a CPU hog (issue 31).

Each process imports nothing of nltk/rouge-score before its first score, then a real pipeline
scores 48 records with ROUGE and BLEU on 8 threads; the error scores per process are printed.
On the tree before issue 31 the first imports raced on a loaded machine and a process could lose
every ROUGE score. ``--hog N`` runs N busy loops meanwhile (stopped at the end).

    python bench/metric_imports.py --processes 5 --hog 1
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

_CHILD = r"""
import json, sys
from tracescore.metrics.bleu import Bleu
from tracescore.metrics.rouge import Rouge
from tracescore.testing import in_memory
assert "nltk" not in sys.modules
ts, _ = in_memory(sys.argv[1], metrics=[Rouge(use_stemmer=True), Bleu()], concurrency=8)
for i in range(48):
    ts.log_record(query=f"q{i}", answer=f"the cat number {i} sat on the warm mat",
                  ground_truths=[f"a cat number {i} sat on the mat"])
ok = ts.flush(timeout=300)
st = ts.stats()
ts.shutdown()
print(json.dumps({"flushed": ok, "scored": st["scored_jobs"], "errors": st["error_scores"]}))
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--processes", type=int, default=5)
    ap.add_argument("--hog", type=int, default=1, help="busy-loop processes beside them")
    args = ap.parse_args()
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
            for _ in range(args.hog)]
    results = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            for i in range(args.processes):
                t0 = time.monotonic()
                out = subprocess.run([sys.executable, "-c", _CHILD, str(Path(tmp) / f"{i}.db")],
                                     capture_output=True, text=True, timeout=600)
                line = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "{}"
                got = json.loads(line) if line.startswith("{") else {"failed": out.stderr[-300:]}
                got["seconds"] = round(time.monotonic() - t0, 1)
                results.append(got)
                print(json.dumps(got), flush=True)
    finally:
        for h in hogs:
            h.kill()
    errors = sum(r.get("errors", 0) for r in results)
    print(json.dumps({"processes": len(results), "error_scores": errors,
                      "processes_with_errors": sum(1 for r in results if r.get("errors"))}))


if __name__ == "__main__":
    main()
