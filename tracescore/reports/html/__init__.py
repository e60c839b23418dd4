"""HTML pages — the report, the trend, the comparison — each one self-contained file, drawn
from data only.

Query, then render: the pages take what the query side built — a
:class:`~tracescore.read.model.ReportPage` (:func:`~tracescore.reports.report.build_page`),
a :class:`~tracescore.reports.trend.TrendPage` (:func:`~tracescore.reports.trend.build_trend`),
a :class:`~tracescore.reports.compare.Comparison`
(:func:`~tracescore.reports.compare.build_comparison`) — and never a connection: nothing
here reads the database, so a page is tested from hand-built data and a new front end costs
one file.

Everything is inline: CSS, SVG charts drawn here, and a few lines of JavaScript for "expand
all" on the report. Nothing is fetched from anywhere, so a file can be mailed or archived.
Every piece of user text (queries, answers, contexts, explanations, and the names of metrics,
monitors, releases and segments) goes through :func:`html.escape`.

Pure functions: no I/O, no shared state, safe to call from any thread.

The modules behind these names (private: import from here):

- :mod:`._page` — the page shell and the escaping and number helpers every page uses.
- :mod:`._css` — the one stylesheet, inlined into every page.
- :mod:`._svg` — chart primitives: round scales, ticks, time labels, lines and bands.
- :mod:`._monitors` — monitor state badges and the monitors' table (report and trend).
- :mod:`._report` — the report page: totals, notices, a card per score, ``--by`` groups.
- :mod:`._charts` — a score card's histogram and timeline.
- :mod:`._records` — the report's worst records, each in full.
- :mod:`._cost` — the report's token usage and cost.
- :mod:`._trend` — the trend page and the trend sections the report embeds.
- :mod:`._compare` — the comparison page.
- :mod:`._conversation` — a session as a conversation (``show --session --html``).
"""

from __future__ import annotations

from ._charts import PAD_B as PAD_B
from ._charts import PAD_L as PAD_L
from ._charts import PAD_R as PAD_R
from ._charts import PAD_T as PAD_T
from ._charts import H as H
from ._charts import W as W
from ._compare import METHODS as METHODS
from ._compare import _vclass as _vclass
from ._compare import render_comparison_html
from ._conversation import render_session_html
from ._monitors import STATES as STATES
from ._page import _val as _val
from ._report import CONTEXT_CHARS, render_html
from ._svg import _nice_up as _nice_up
from ._trend import _STRIP_W as _STRIP_W
from ._trend import TH as TH
from ._trend import TPAD_B as TPAD_B
from ._trend import TPAD_L as TPAD_L
from ._trend import TPAD_R as TPAD_R
from ._trend import TPAD_T as TPAD_T
from ._trend import TW as TW
from ._trend import render_trend_html

__all__ = ["CONTEXT_CHARS", "render_comparison_html", "render_html", "render_session_html",
           "render_trend_html"]
