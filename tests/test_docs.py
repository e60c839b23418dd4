"""Docs stay honest: README commands, CI, and every public entry point documented."""

from __future__ import annotations

import re
from pathlib import Path

import tracescore

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def test_ci_runs_the_readme_test_command():
    block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert block, "README has a bash set-up block"
    lines = [ln.split("#")[0].strip() for ln in block.group(1).splitlines() if ln.strip()]
    assert len(lines) == 2, "two set-up commands: install+demo, tests"
    install, test = lines
    assert "pip install" in install and "tracescore demo" in install
    ci = (ROOT / ".ci" / "run").read_text()
    assert test in ci.splitlines(), f"CI must run the README test command {test!r}"
    assert "pip install" in ci and "'.[dev]'" in ci and "venv" in ci


def test_readme_documents_the_public_api():
    for name in ("tracescore.init", "langchain_handler", "instrument_langchain",
                 "add_ground_truth", "flush", "shutdown", "log_record"):
        assert name in README, name
    import inspect

    from tracescore.client import Tracescore

    params = inspect.signature(Tracescore.__init__).parameters
    for p in ("db", "metrics", "sample_rate", "sample_rates", "hold_seconds",
              "capture_content", "redact", "max_queue", "span_exporter"):
        assert p in params
        assert f"`{p}`" in README, f"init argument {p} is not in the README table"


def test_every_metric_is_in_the_readme_table():
    from tracescore.metrics.judged import JUDGE_METRICS
    from tracescore.metrics.local import LOCAL_METRICS
    from tracescore.metrics.ragas import RAGAS_METRICS
    from tracescore.metrics.saga_extra import GPTScore, SelfCheckGPT

    names = [m.name for m in (*LOCAL_METRICS, *JUDGE_METRICS, *RAGAS_METRICS, GPTScore,
                              SelfCheckGPT)]
    assert set(names) <= set(tracescore.available_metrics())
    for name in names:
        assert f"`{name}`" in README, f"metric {name} missing from the README metrics table"


def test_every_package_of_the_tree_is_installed():
    """pyproject lists its packages one by one: a new subpackage left out works in an editable
    install and is missing from a real one (``pip install tracescore``)."""
    import sys

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - Python 3.10
        import tomli as tomllib

    listed = set(tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
                 ["packages"])
    found = {".".join(p.parent.relative_to(ROOT).parts)
             for p in (ROOT / "tracescore").rglob("__init__.py")}
    found |= {"tracescore." + ".".join(p.parent.relative_to(ROOT).parts)
              for p in (ROOT / "integrations").rglob("__init__.py")}
    assert found - listed == set(), "add these to [tool.setuptools] packages in pyproject.toml"
