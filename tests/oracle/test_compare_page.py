"""The comparison page (``compare --html``): every row's figures are those of the comparison
the oracle checks (``compare --json``), and labels bring the judge-vs-humans section."""

from __future__ import annotations

from html.parser import HTMLParser
from typing import Any

from hypothesis import assume, given

from .build import BASE, QUALITY, Rec, Spec
from .run import built, cli, frozen_now
from .strategies import specs


class _Rows(HTMLParser):
    """``<tr data-row>`` rows: their attributes and the ``data-*`` cells inside."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, dict[str, Any]] = {}
        self._row: dict[str, Any] | None = None
        self._cell: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag == "tr" and "data-row" in a:
            self._row = self.rows.setdefault(str(a["data-row"]), {"verdict": a["data-verdict"]})
        elif self._row is not None:
            if "data-n" in a:
                self._cell = f"n_{a['data-n']}"
            if "data-est" in a and "data-value" in a:
                self._row[f"value_{a['data-est']}"] = a["data-value"]
            if "data-lo" in a:
                self._row["diff"] = (a.get("data-est"), a["data-lo"], a["data-hi"])

    def handle_data(self, data: str) -> None:
        if self._cell and self._row is not None and data.strip():
            self._row[self._cell] = int(data.strip().replace(",", ""))
            self._cell = None

    def handle_endtag(self, tag: str) -> None:
        if tag == "tr":
            self._row = None


def _attr(v: float | None) -> str:
    return "" if v is None else repr(v)


def _page(db: str) -> str:
    from click.testing import CliRunner

    from tracescore.cli import main

    with frozen_now(BASE + 10 * 3600):
        res = CliRunner().invoke(main, ["compare", "--db", db, "--html", "-"])
    assert res.exit_code == 0, res.output
    return res.stdout


@given(spec=specs(min_records=4, max_records=60, multi=True))
def test_compare_page_shows_the_comparisons_figures(spec):
    """Per row: the verdict, each side's n and value, the difference and its interval."""
    with built(spec) as (db, _):
        c, code = cli("compare", "--db", db, ok=(0, 2))
        assume(code == 0)  # one release drawn: a clear error, checked elsewhere
        page = _page(db)
    parsed = _Rows()
    parsed.feed(page)
    for key, r in c["scores"].items():
        label = r["name"] if r["kind"] in ("mean", "rate") else r["kind"]
        got = parsed.rows[label]
        assert got["verdict"] == r["verdict"], key
        assert (got["n_current"], got["n_baseline"]) == (r["current"]["n"],
                                                         r["baseline"]["n"]), key
        assert got["value_current"] == _attr(r["current"]["value"]), key
        assert got["value_baseline"] == _attr(r["baseline"]["value"]), key
        d = r["difference"]
        if "diff" in got:
            assert got["diff"] == (_attr(d["estimate"]), _attr(d["lo"]), _attr(d["hi"])), key


def test_compare_page_shows_judge_vs_humans_when_labelled():
    """Labels on both releases: the page carries the corrected estimates beside the judge's
    (the ``corrected`` part of ``compare --json``)."""
    from tracescore.store import open_store

    recs = tuple(Rec(t=30.0 * i, release=f"v{1 + i // 60}",
                     scores=((QUALITY, 0.3 + 0.5 * ((i * 7) % 10) / 10),)) for i in range(120))
    with built(Spec(recs)) as (db, _):
        store = open_store(db)
        try:
            for i in range(0, 120, 3):
                store.add_label(f"{i:032x}", QUALITY, 0.5, annotator="ann",
                                record_id=f"{i:032x}-{i:016x}")
        finally:
            store.close()
        c, _ = cli("compare", "--db", db)
        page = _page(db)
    assert c["corrected"], c["corrected"]
    low = page.lower()
    assert "human" in low and "corrected" in low
