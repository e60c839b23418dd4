"""Issue 11 §4: os.fork() after init (gunicorn --preload): the child's writer and scorer
both come back, and its records are scored even when the parent has exited."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from helpers import rows

SCRIPT = textwrap.dedent("""
    import json, os, sys
    import tracescore
    from tracescore.testing import ScriptedMetric

    db = sys.argv[1]
    ts = tracescore.init(db=db, metrics=[ScriptedMetric(lambda r: 1.0, name="m")])
    ts.log_record(query="parent", answer="a")
    assert ts.flush(10)  # both threads run in the parent before the fork
    pid = os.fork()
    if pid == 0:
        for i in range(200):
            ts.log_record(query=f"child {i}", answer="a")
        ok = ts.flush(60)
        print(json.dumps({"ok": ok, "scored": ts.stats()["scored_jobs"],
                          "owner_pid": ts.worker.owner.split("-")[0]}), flush=True)
        os._exit(0 if ok else 3)
    os._exit(0)  # the parent exits at once, leaving the child on its own
""")


def test_forked_child_scores_its_records_after_the_parent_exits(tmp_path: Path) -> None:
    db = tmp_path / "fork.db"
    script = tmp_path / "app.py"
    script.write_text(SCRIPT)
    # stdout is shared: communicate() returns once the child closed it too
    out = subprocess.run([sys.executable, str(script), str(db)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    child = json.loads(out.stdout.strip().splitlines()[-1])
    assert child["ok"] is True and child["scored"] == 201  # 1 inherited from the parent
    assert rows(db, "SELECT count(*) AS n FROM records")[0]["n"] == 201
    assert rows(db, "SELECT count(*) AS n FROM scores WHERE status='ok'")[0]["n"] == 201
    assert rows(db, "SELECT count(*) AS n FROM jobs WHERE status != 'done'")[0]["n"] == 0
