"""Judge budgets and adaptive judge selection (issue 33): :mod:`.spec` (the ``judge_budget``
argument), :mod:`.policy` (inclusion probabilities, pacing), :mod:`.proxy` (the cheap proxy),
:mod:`.selector` (the worker's decisions). The estimate that uses them is
:mod:`tracescore.stats.active`; the durable counters :mod:`tracescore.store.judge_budget`."""
