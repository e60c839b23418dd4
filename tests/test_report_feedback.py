"""Users' feedback (``ts.add_feedback``) appears in ``tracescore show`` (per record: on its
trace) and in ``tracescore report`` (per feedback name in the window: counts, up/down with the
share's Wilson interval, labels) as text, JSON and HTML — read from a real SQLite database in
a separate process."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from statsmodels.stats.proportion import proportion_confint


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-m", "tracescore.cli", *args],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return proc


def _pipeline(make_ts, db_path: Path) -> tuple[list[str], dict[str, int]]:
    ts, _ = make_ts(metrics=["token_f1"], sample_rate=1.0, segments=["tenant"])
    traces = [ts.log_record(query=f"q{i}", answer="a", contexts=["c"], ground_truths=["a"],
                            metadata={"tenant": "acme" if i < 4 else "zen"}).trace_id
              for i in range(6)]
    # user feedback: 3 up and 2 down (values), a label-only "bad", a neutral label, comments
    ts.add_feedback(traces[0], "up", comment="exactly what I needed")
    ts.add_feedback(traces[1], True)
    ts.add_feedback(traces[2], 0.9)
    ts.add_feedback(traces[3], "down", comment="wrong battery size")
    ts.add_feedback(traces[4], 0.0)
    ts.add_feedback(traces[5], label="bad")
    ts.add_feedback(traces[0], label="meh", name="tone")
    assert ts.flush(30)
    ts.shutdown(10)
    return traces, {"up": 3, "down": 3}


def test_show_lists_the_feedback_on_the_records_trace(make_ts, db_path):
    traces, _ = _pipeline(make_ts, db_path)
    out = cli("show", traces[0], "--db", str(db_path)).stdout
    assert "feedback on the trace (2)" in out
    block = out[out.index("feedback on the trace"):]
    assert "exactly what I needed" in block
    assert "user" in block and "1.00" in block and "tone" in block and "meh" in block
    data = json.loads(cli("show", traces[3], "--db", str(db_path), "--json").stdout)
    rec = data[0] if isinstance(data, list) else data["records"][0]
    assert [(f["name"], f["value"], f["comment"]) for f in rec["feedback"]] == [
        ("user", 0.0, "wrong battery size")]


def test_report_summarises_feedback_in_text_json_and_html(make_ts, db_path, tmp_path):
    _pipeline(make_ts, db_path)
    k, n = 3, 6
    lo, hi = proportion_confint(k, n, alpha=0.05, method="wilson")

    data = json.loads(cli("report", "--db", str(db_path), "--json").stdout)
    user = data["feedback"]["user"]
    assert (user["count"], user["traces"], user["valued"]) == (6, 6, 5)
    assert (user["positive"], user["negative"], user["comments"]) == (3, 3, 2)
    assert user["rate"] == k / n
    assert abs(user["lo"] - lo) < 1e-9 and abs(user["hi"] - hi) < 1e-9
    assert abs(user["mean"] - (1.0 + 1.0 + 0.9 + 0.0 + 0.0) / 5) < 1e-9
    assert user["labels"] == {"bad": 1}
    tone = data["feedback"]["tone"]
    assert (tone["count"], tone["positive"], tone["negative"], tone["rate"]) == (1, 0, 0, None)

    text = cli("report", "--db", str(db_path)).stdout
    assert "User feedback" in text
    row = next(x for x in text.splitlines() if x.startswith("user "))
    assert "3/3" in row and "50%" in row and f"{100 * lo:.1f}–{100 * hi:.1f}%" in row

    page = tmp_path / "r.html"
    cli("report", "--db", str(db_path), "--html", str(page))
    body = page.read_text()
    assert "<h2>User feedback</h2>" in body and 'data-feedback="user"' in body
    assert 'data-feedback="tone"' in body

    # --where keeps the feedback on traces with records in the segment
    scoped = json.loads(cli("report", "--db", str(db_path), "--json",
                            "--where", "metadata.tenant=zen").stdout)
    assert scoped["records"] == 2
    assert scoped["feedback"]["user"]["count"] == 2
    assert (scoped["feedback"]["user"]["negative"], "tone" in scoped["feedback"]) == (2, False)
