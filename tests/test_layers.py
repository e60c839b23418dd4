"""The layers contract: the import-linter contract in pyproject.toml holds, and what it cannot
see — the core reaching the adapters under their shipped name ``tracescore.integrations``
(a package-dir mapping the import graph does not follow) — is checked here, from the source.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: The front doors: ``ts.langchain_handler()``, ``ts.instrument_llama_index()`` and the like.
# (the client's framework entry points live in _client/frameworks.py since issue 35)
FRONT_DOORS = {"tracescore/client.py", "tracescore/_client/frameworks.py"}


def _module_of(path: Path, base: Path) -> str:
    parts = list(path.relative_to(base).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imported(path: Path, base: Path) -> list[tuple[int, str]]:
    """Every module ``path`` imports (inside functions and ``TYPE_CHECKING`` blocks too), as
    absolute names, with the line."""
    module = _module_of(path, base)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")
                up = up[:len(up) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            out += [(node.lineno, base)] + [(node.lineno, f"{base}.{a.name}") for a in node.names]
    return out


def _adapter_imports(base: Path) -> list[str]:
    """Imports of the adapters by the modules of ``base``/tracescore, front doors aside."""
    found = []
    for path in sorted((base / "tracescore").rglob("*.py")):
        rel = path.relative_to(base).as_posix()
        if rel in FRONT_DOORS:
            continue
        for line, name in _imported(path, base):
            if name == "integrations" or name.startswith(("integrations.",
                                                          "tracescore.integrations")):
                found.append(f"{rel}:{line} imports {name}")
    return found


def test_the_core_reaches_the_adapters_only_through_the_client_front_doors():
    assert _adapter_imports(ROOT) == []


def test_the_check_sees_adapter_imports_inside_functions(tmp_path: Path):
    # The same walk over a small tree: a lazy relative import of an adapter helper (what
    # export.py did before issue 35), an absolute one, and the front door, which may.
    pkg = tmp_path / "tracescore"
    (pkg / "reports").mkdir(parents=True)
    (pkg / "export.py").write_text(
        "def f():\n    from .integrations._text import clip\n    return clip\n")
    (pkg / "reports" / "show.py").write_text("import integrations._spans\n")
    (pkg / "client.py").write_text("def h():\n    from .integrations.langchain import X\n")
    assert _adapter_imports(tmp_path) == [
        "tracescore/export.py:2 imports tracescore.integrations._text",
        "tracescore/export.py:2 imports tracescore.integrations._text.clip",
        "tracescore/reports/show.py:1 imports integrations._spans",
    ]


def test_the_import_linter_contract_is_kept():
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("import-linter is not installed (pip install -e '.[dev]')")
    done = subprocess.run([exe, "--no-cache"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout


#: Where SQL may be written: the store and the read layer (issue 35).
SQL_HOMES = ("tracescore/store/", "tracescore/read/")
#: The modules that still write SQL outside them, each with why: a baseline that only
#: shrinks. None runs any: monitor state's SQL and the embedding cache's table moved into the
#: store with its split by role; telemetry's, labels', the session closer's and the intake's
#: statements into the store after them (store/intake_spool.py, store/intake_sql.py). What is
#: left is the Datasette UI's canned queries (SQL text shown to the user, not run by
#: tracescore).
SQL_BASELINE = {
    "tracescore/reports/ui.py",  # canned queries for Datasette: SQL the user reads and runs
}


def _sql_modules(base: Path) -> set[str]:
    """The modules of ``base``/tracescore with a string constant holding SQL (a SELECT, an
    INSERT, UPDATE or DELETE, a PRAGMA)."""
    found = set()
    for path in sorted((base / "tracescore").rglob("*.py")):
        rel = path.relative_to(base).as_posix()
        if rel.startswith(SQL_HOMES):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                    and _is_query(node.value):
                found.add(rel)
                break
    return found


#: a statement that writes (or sets) something, its keywords in capitals as tracescore writes
#: SQL (prose that mentions inserting, updating or deleting does not match)
_WRITES = re.compile(r"\bINSERT INTO \w|\bUPDATE \w+ SET \w|\bDELETE FROM \w|\bPRAGMA \w")


def _is_query(text: str) -> bool:
    """A string holding a SELECT that reads a table or a statement that writes (prose that
    mentions selecting or updating does not)."""
    up = text.upper()
    return ("SELECT " in up and " FROM " in up) or _WRITES.search(text) is not None


def test_sql_lives_in_the_store_and_the_read_layer():
    assert _sql_modules(ROOT) - SQL_BASELINE == set()
    # and the baseline only shrinks: a module that no longer writes SQL leaves it
    assert SQL_BASELINE - _sql_modules(ROOT) == set()


def test_the_sql_check_sees_a_query_outside_its_homes(tmp_path: Path):
    pkg = tmp_path / "tracescore"
    (pkg / "read").mkdir(parents=True)
    (pkg / "reports").mkdir()
    (pkg / "read" / "q.py").write_text('Q = "SELECT 1 FROM records"\n')
    (pkg / "reports" / "page.py").write_text(
        '"""Renders what the read layer SELECTs."""\n'
        'def f(conn):\n    return conn.execute("SELECT count(*) FROM scores")\n')
    (pkg / "reports" / "text.py").write_text('"""Select nothing; render."""\n')
    assert _sql_modules(tmp_path) == {"tracescore/reports/page.py"}


def test_the_sql_check_sees_writes_outside_its_homes(tmp_path: Path):
    # Statements that write (what the intake's spool, assembler and forwarder ran before they
    # moved into the store) are SQL too; prose about updates and a FOR UPDATE lock are not.
    pkg = tmp_path / "tracescore"
    (pkg / "store").mkdir(parents=True)
    (pkg / "intake").mkdir()
    (pkg / "store" / "q.py").write_text('Q = "DELETE FROM intake_spans WHERE trace_id = ?"\n')
    for name, text in [
        ("spool", "INSERT INTO intake_spans(trace_id) VALUES (?)"),
        ("marks", "UPDATE intake_traces SET state = 'done' WHERE trace_id = ?"),
        ("prune", "DELETE FROM intake_traces WHERE trace_id IN (?)"),
        ("wal", "PRAGMA wal_autocheckpoint=0"),
    ]:
        (pkg / "intake" / f"{name}.py").write_text(f"def f(conn):\n    conn.execute({text!r})\n")
    (pkg / "intake" / "prose.py").write_text(
        '"""Claims take FOR UPDATE SKIP LOCKED; an update of the trace; insert into the queue,\n'
        'delete from memory."""\n')
    assert _sql_modules(tmp_path) == {f"tracescore/intake/{n}.py"
                                      for n in ("spool", "marks", "prune", "wal")}
