"""The oracle layer: Hypothesis settings for CI and the helpers every oracle test uses.

The ``oracle`` profile (loaded here, for every run of the suite) is derandomized — the same
examples on every machine, so CI cannot go red on a lucky draw — with no deadline (a loaded
2-core runner) and few examples: each one writes a real SQLite database. Set
``HYPOTHESIS_PROFILE=oracle-deep`` for a longer local hunt with fresh random examples.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, Phase, settings

settings.register_profile(
    "oracle", derandomize=True, deadline=None, max_examples=12, database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture],
    print_blob=True, phases=[Phase.explicit, Phase.reuse, Phase.generate])
settings.register_profile(
    "oracle-deep", deadline=None, max_examples=int(os.environ.get("ORACLE_EXAMPLES", "300")),
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                           HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "oracle"))
