"""mypy over the core (tracescore/) against a baseline that only shrinks (issue 35).

The settings are [tool.mypy] in pyproject.toml. ``.ci/mypy-baseline.json`` holds the number of
errors each file had when the baseline was taken. This check fails when a file has more errors
than its baseline, or a file without a baseline entry has any; when counts fall, it passes and
says how to shrink the baseline (``python .ci/typecheck.py --update``, which refuses to raise a
count). Exit codes: 0 ok, 1 more errors than the baseline, 2 mypy itself failed.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BASELINE = ROOT / ".ci" / "mypy-baseline.json"
#: "tracescore/x.py:12: error: ... [code]" (with or without a column)
ERROR = re.compile(r"^(?P<path>[^:\n]+\.pyi?):\d+(?::\d+)?: error: ")


def run_mypy() -> tuple[Counter[str], str]:
    """Per-file error counts and mypy's whole output."""
    done = subprocess.run([sys.executable, "-m", "mypy", "--no-error-summary",
                           "--no-pretty", "--show-error-codes"],
                          cwd=ROOT, capture_output=True, text=True)
    out = done.stdout + done.stderr
    # 0: no errors, 1: type errors; anything else (2: bad config, a crash) is mypy failing
    if done.returncode not in (0, 1):
        print(out, file=sys.stderr)
        raise SystemExit(f"typecheck: mypy failed (exit {done.returncode})")
    counts: Counter[str] = Counter()
    for line in out.splitlines():
        m = ERROR.match(line)
        if m:
            counts[m["path"].replace("\\", "/")] += 1
    if done.returncode == 1 and not counts:
        print(out, file=sys.stderr)
        raise SystemExit("typecheck: mypy reported errors this script cannot read")
    return counts, out


def compare(base: dict[str, int], now: Counter[str]) -> tuple[list[str], list[str]]:
    """(what grew, what fell), one line each."""
    grew, fell = [], []
    for path in sorted(set(base) | set(now)):
        was, got = base.get(path, 0), now.get(path, 0)
        if got > was:
            grew.append(f"{path}: {got} errors (baseline {was})")
        elif got < was:
            fell.append(f"{path}: {got} errors (baseline {was})")
    return grew, fell


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--update", action="store_true",
                    help="write the current counts as the baseline (only if none grew, or there is "
                         "no baseline yet)")
    args = ap.parse_args(argv)
    base: dict[str, int] = (json.loads(BASELINE.read_text())["errors"]
                            if BASELINE.exists() else {})
    now, out = run_mypy()
    grew, fell = compare(base, now)
    total, was = sum(now.values()), sum(base.values())
    if grew and not (args.update and not BASELINE.exists()):  # (the first baseline)
        print(out)
        print("typecheck: more mypy errors than the baseline (.ci/mypy-baseline.json):")
        for line in grew:
            print("  " + line)
        print("Fix the new errors (the lines above name them); the baseline only shrinks.")
        return 1
    if args.update:
        BASELINE.write_text(json.dumps(
            {"_": "mypy errors per file over tracescore/ (issue 35): a baseline that only "
                  "shrinks; .ci/typecheck.py checks it, --update writes it",
             "errors": dict(sorted(now.items()))}, indent=1) + "\n")
        print(f"typecheck: baseline written: {total} errors in {len(now)} files (was {was})")
        return 0
    print(f"typecheck: {total} mypy errors in {len(now)} files, baseline {was}: ok")
    if fell:
        print("Fewer errors than the baseline in:")
        for line in fell:
            print("  " + line)
        print("Shrink the baseline to lock that in: python .ci/typecheck.py --update")
    return 0


if __name__ == "__main__":
    sys.exit(main())
