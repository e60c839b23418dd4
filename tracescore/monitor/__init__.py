"""Monitoring: statistics, anytime-valid monitors, their state and their notifications.

The read side's last stage (DESIGN.md: "monitor"). Everything here runs off the request path:
in ``tracescore check`` / ``monitor``, in a ``tracescore worker`` or in a scoring app's own
background thread (``init(monitors=...)``).

- :mod:`.stats` — fixed-sample statistics from sufficient statistics (n, Σx, Σx²): intervals,
  Welch / Newcombe / MOVER differences, Holm-adjusted p-values, verdicts.
- :mod:`.confseq` — anytime-valid confidence sequences (Waudby-Smith & Ramdas 2023; Howard
  et al. 2021) and the default alert rule built on them.
- :mod:`.config` — monitor and channel declarations (``tracescore-monitors.toml`` or
  ``init(monitors=...)``), validated on load (:mod:`.terms`: the words they may use;
  :mod:`._checks`: the key-by-key checks).
- :mod:`.evaluate` — evaluates monitors against the query layer: states with hysteresis
  (:mod:`.measure`: one monitor's observations, statistic and verdict).
- :mod:`.sight` — a monitor's minimum detectable effect for the traffic it has, and the
  records a window needs (:mod:`.preview`: it for every monitor, from the last window's rows).
- :mod:`.state` — stored states, their history, the evaluator lease, the notification outbox.
- :mod:`.notify` — webhook / Slack delivery with retry and backoff; OTel log records
  (:mod:`.alerts`: the alert event and what each channel is sent).
- :mod:`.runner` — the background thread that evaluates and notifies on a schedule.
"""
