"""The monitors' state, history, lease and outbox: the store's monitor-state role
(:mod:`tracescore.store.monitor_state`, where its SQL lives). The monitor package and its
callers keep this name; every name of that module is this module's.
"""

from __future__ import annotations

import sys

from ..store import monitor_state as _role

# one module under two names: a name set on either is seen through both
sys.modules[__name__] = _role
