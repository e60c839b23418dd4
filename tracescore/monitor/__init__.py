"""Monitoring: anytime-valid monitors, their state and their notifications.

The read side's last stage (DESIGN.md: "monitor"). Everything here runs off the request path:
in ``tracescore check`` / ``monitor``, in a ``tracescore worker`` or in a scoring app's own
background thread (``init(monitors=...)``).

- :mod:`.confseq` — the default alert rule (``ThresholdMonitor``, ``BaselineMonitor``) over the
  anytime-valid confidence sequences of :mod:`tracescore.stats.confseq` (the statistics
  themselves, fixed-sample and sequential, are the floor :mod:`tracescore.stats`).
- :mod:`.config` — monitor and channel declarations (``tracescore-monitors.toml`` or
  ``init(monitors=...)``), validated on load (:mod:`.terms`: the words they may use;
  :mod:`._checks`: the key-by-key checks).
- :mod:`.evaluate` — evaluates monitors over the read layer (:mod:`tracescore.read`): states
  with hysteresis (:mod:`.measure`: one monitor's observations, statistic and verdict;
  :mod:`.active_monitor` and :mod:`.active_summary`: judge metrics judged within a budget).
- :mod:`.judge_drift`, :mod:`.judge_drift_labels` — the built-in judge-drift monitors (on the
  canary's history, on human labels).
- :mod:`.preview` — every monitor's minimum detectable effect for the traffic it has, from the
  last window's rows (the maths: :mod:`tracescore.stats.sight`).
- :mod:`.state` — stored states, their history, the evaluator lease, the notification outbox.
- :mod:`.notify` — webhook / Slack delivery with retry and backoff; OTel log records
  (:mod:`.alerts`: the alert event and what each channel is sent).
- :mod:`.runner` — the background thread that evaluates and notifies on a schedule.
"""
