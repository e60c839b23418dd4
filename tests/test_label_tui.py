"""``tracescore label`` driven in a real terminal (tmux): an annotator labels two records,
skips one, goes back, quits; the labels are in the database and the judge's verdict never
reached the screen; a record without text says so."""

from __future__ import annotations

import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from helpers import cli_script, rows

import tracescore
from tracescore.score import Score
from tracescore.testing import ScriptedMetric

TMUX = shutil.which("tmux")
pytestmark = pytest.mark.skipif(TMUX is None, reason="tmux is not installed")
DEADLINE_S = 60.0
VERDICT = "JUDGE-VERDICT-XYZZY"


class Grounded(ScriptedMetric):
    """A yes/no judge-like metric that scores any record (text or not) with a verdict."""

    name = "grounded"
    binary = True
    requires = frozenset()

    def __init__(self) -> None:
        super().__init__(lambda r: Score(name="grounded", value=1.0, label="verdict-label",
                                         explanation=f"{VERDICT} for {r.query}"))


def _make_db(db: Path) -> None:
    ts = tracescore.init(db=db, metrics=[Grounded()])
    for word in ("one", "two", "three"):  # logged oldest first: the queue shows newest first
        ts.log_record(query=f"question {word}?", answer=f"answer {word}",
                      contexts=[f"context of {word}", f"more about {word}"])
        assert ts.flush(30)
        time.sleep(0.01)  # distinct created_at
    ts.shutdown()
    hidden = tracescore.init(db=db, metrics=[Grounded()], capture_content=False)
    hidden.log_record(query="secret question", answer="secret answer")
    assert hidden.flush(30)
    hidden.shutdown()
    assert rows(db, "SELECT count(*) AS n FROM scores WHERE name = 'grounded'") == [{"n": 4}]


class Pane:
    """One tmux server of our own (its socket in the test's folder) running one command."""

    def __init__(self, socket: Path, command: str) -> None:
        assert TMUX is not None
        self.base = [TMUX, "-S", str(socket)]
        self.session = f"label-{uuid.uuid4().hex[:8]}"
        subprocess.run([*self.base, "new-session", "-d", "-x", "120", "-y", "40", "-s",
                        self.session, command], check=True)

    def screen(self, history: bool = False) -> str:
        extra = ["-S", "-"] if history else []
        return subprocess.run([*self.base, "capture-pane", "-p", "-J", *extra, "-t",
                               self.session], check=True, capture_output=True,
                              text=True).stdout

    def wait(self, what: str, ok: Callable[[str], bool]) -> str:
        deadline = time.monotonic() + DEADLINE_S
        while True:
            text = self.screen(history=True)
            if ok(text):
                return text
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; screen:\n{text}")
            time.sleep(0.05)

    def send(self, keys: str) -> None:
        subprocess.run([*self.base, "send-keys", "-t", self.session, "-l", keys], check=True)
        subprocess.run([*self.base, "send-keys", "-t", self.session, "Enter"], check=True)

    def close(self) -> None:
        subprocess.run([*self.base, "kill-server"], check=False, capture_output=True)


@pytest.fixture
def pane_factory(tmp_path: Path) -> Iterator[Callable[[str], Pane]]:
    made: list[Pane] = []

    def make(command: str) -> Pane:
        p = Pane(tmp_path / "tmux.sock", command)
        made.append(p)
        return p

    yield make
    for p in made:
        p.close()


def _last_block(text: str) -> str:
    """The screen from the last record header on (the record being shown now)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith("── ")]
    return "\n".join(lines[starts[-1]:]) if starts else ""


def _showing(n: int, of: int, needle: str) -> Callable[[str], bool]:
    def ok(text: str) -> bool:
        block = _last_block(text)
        return (block.startswith(f"── {n}/{of} ──") and needle in block
                and block.rstrip().endswith(":"))  # the prompt is waiting
    return ok


def test_label_queue_in_a_real_terminal(tmp_path: Path,
                                        pane_factory: Callable[[str], Pane]) -> None:
    db = tmp_path / "ts.db"
    _make_db(db)
    cmd = shlex.join([*cli_script(), "label", "--db", str(db), "--metric", "grounded",
                      "--annotator", "ann"])
    pane = pane_factory(f"{cmd}; echo \"[exit $?]\"; sleep 600")

    # newest first: the record captured without text says so, and takes no label
    pane.wait("the text-less record", _showing(1, 4, "no text to label (capture_content=False)"))
    pane.send("y")
    pane.wait("the refusal", lambda t: "nothing to label here" in t)
    pane.send("s")
    screen = pane.wait("record three", _showing(2, 4, "question three?"))
    block = _last_block(screen)
    assert "answer three" in block and "[1] context of three" in block
    assert "[2] more about three" in block
    pane.send("maybe")
    pane.wait("the bad answer", lambda t: "not a label: maybe" in t)
    pane.send("y")
    pane.wait("record two", _showing(3, 4, "question two?"))
    pane.send("s")  # skip
    pane.wait("record one", _showing(4, 4, "question one?"))
    pane.send("b")  # back to the skipped one
    pane.wait("record two again", _showing(3, 4, "question two?"))
    pane.send("n")
    pane.wait("record one again", lambda t: _showing(4, 4, "question one?")(t)
              and _last_block(t).count("question one?") == 1 and "saved: grounded = no" in t)
    pane.send("q")
    final = pane.wait("the end", lambda t: "[exit 0]" in t)

    assert "2 labels saved by ann." in final
    got = {r["query"]: (r["value"], r["annotator"], r["source"]) for r in rows(
        db, "SELECT r.query, l.value, l.annotator, l.source FROM labels l"
            " JOIN records r ON r.trace_id = l.trace_id")}
    assert got == {"question three?": (1.0, "ann", "manual"),
                   "question two?": (0.0, "ann", "manual")}
    # the judge's verdict (value label, explanation) never reached the screen
    assert VERDICT not in final and "verdict-label" not in final
    assert "secret" not in final


def test_the_queue_resumes_where_the_annotator_left(tmp_path: Path,
                                                   pane_factory: Callable[[str], Pane]) -> None:
    """Labelled records leave the annotator's queue; another annotator still sees them."""
    db = tmp_path / "ts.db"
    _make_db(db)
    [three] = [r["trace_id"] for r in rows(db, "SELECT trace_id FROM records WHERE query ="
                                               " 'question three?'")]
    tracescore.add_label(three, "grounded", True, "ann", db=db)
    base = [*cli_script(), "label", "--db", str(db), "--metric", "grounded"]
    pane = pane_factory(shlex.join([*base, "--annotator", "ann"]) + "; echo \"[exit $?]\"; "
                        + shlex.join([*base, "--annotator", "bob"]) + "; sleep 600")
    pane.wait("ann's queue", _showing(1, 3, "no text to label"))
    pane.send("s")
    pane.wait("ann's next", _showing(2, 3, "question two?"))
    pane.send("q")
    pane.wait("bob's queue", lambda t: "[exit 0]" in t and _showing(1, 4, "no text")(t))
    pane.send("q")


def test_a_huge_context_is_clipped_and_the_query_stays_on_screen(
        tmp_path: Path, pane_factory: Callable[[str], Pane]) -> None:
    """A 500,000-character context is shown clipped (saying how much more there is), so the
    query is still on the visible screen when the prompt waits."""
    db = tmp_path / "ts.db"
    ts = tracescore.init(db=db, metrics=[Grounded()])
    ts.log_record(query="the huge one?", answer="short answer",
                  contexts=["word " * 100_000, "small context"])
    assert ts.flush(30)
    ts.shutdown()
    cmd = shlex.join([*cli_script(), "label", "--db", str(db), "--metric", "grounded"])
    pane = pane_factory(f"{cmd}; echo \"[exit $?]\"; sleep 600")
    pane.wait("the record", _showing(1, 1, "small context"))
    visible = pane.screen()  # the screen itself, not the scroll-back
    assert "the huge one?" in visible and "short answer" in visible
    assert "(498,000 more characters)" in visible
    pane.send("q")
    pane.wait("the end", lambda t: "[exit 0]" in t)
