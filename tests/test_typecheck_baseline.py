"""The type-check baseline (.ci/typecheck.py, issue 35): mypy's per-file error counts may only
shrink. The script's reading of mypy's lines and its verdicts; CI runs the script itself."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def tc() -> Any:
    spec = importlib.util.spec_from_file_location("typecheck", ROOT / ".ci" / "typecheck.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_mypy_error_lines_are_counted_per_file_and_notes_are_not(tc: Any) -> None:
    out = ("tracescore/a.py:3: error: Incompatible types  [assignment]\n"
           "tracescore/a.py:9:5: error: Missing return  [return]\n"
           "tracescore/a.py:9: note: See https://mypy.readthedocs.io\n"
           "tracescore/sub/b.py:1: error: Name \"x\" is not defined  [name-defined]\n"
           "Found 3 errors in 2 files\n")
    counts = Counter(m["path"] for line in out.splitlines() if (m := tc.ERROR.match(line)))
    assert counts == {"tracescore/a.py": 2, "tracescore/sub/b.py": 1}


def test_a_count_may_fall_but_never_grow_and_new_files_start_at_zero(tc: Any) -> None:
    base = {"tracescore/a.py": 3, "tracescore/b.py": 1, "tracescore/gone.py": 2}
    grew, fell = tc.compare(base, Counter({"tracescore/a.py": 3, "tracescore/b.py": 2,
                                           "tracescore/new.py": 1}))
    assert grew == ["tracescore/b.py: 2 errors (baseline 1)",
                    "tracescore/new.py: 1 errors (baseline 0)"]
    assert fell == ["tracescore/gone.py: 0 errors (baseline 2)"]
    assert tc.compare(base, Counter(base)) == ([], [])


def test_the_committed_baseline_names_only_core_files(tc: Any) -> None:
    data = json.loads(tc.BASELINE.read_text())
    assert data["errors"], "an empty baseline: regenerate it with .ci/typecheck.py --update"
    for path, n in data["errors"].items():
        assert path.startswith("tracescore/") and path.endswith(".py"), path
        assert isinstance(n, int) and n > 0
