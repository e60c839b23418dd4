"""The judge's past verdicts on *similar* records, as features of the judge budget's proxy
(issue 33 item 2): for a record, the similarity-weighted mean judge score of the :data:`K`
judged records whose embedding is closest to its own.

Two views of a record, each one feature (the fit of :mod:`.combine` learns which one, if
any, tracks the judge of a metric; both come from the vectors :func:`.features.embed_record`
already has, so they cost no embedding call):

- ``nn_question_answer``: the unit sum of the question's and the answer's unit vectors
  (records on the same topic, answered alike);
- ``nn_answer_contexts``: the unit sum of the answer's and its contexts' mean unit vector
  (answers grounded in similar text).

Pure computation (numpy, lazily imported): a dot product of the record's vector with the
≤ 500 vectors of the fit's judged records, then the top :data:`K` (microseconds).

Validity: the neighbours are the judged records the last fit read, all judged before the
decision the feature serves; a record is never its own neighbour (by record id at decision
time). A training row of the fit gets the feature its own decision could have had: from the
records judged before it (:func:`ordered_means`), never from its own verdict.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

__all__ = ["K", "KEYS", "MIN_PRIOR", "Index", "means", "ordered_means", "unit_vector"]

#: neighbours per record
K = 10
#: earlier judged records a training record needs for its neighbour features
MIN_PRIOR = 5
#: the neighbour features, one per view of a record (module docstring)
KEYS = ("nn_answer_contexts", "nn_question_answer")


def unit_vector(*vectors: Sequence[float]) -> Any:
    """The unit vector along the sum of the unit vectors of ``vectors`` (None when they are
    empty, of different lengths, zero or not finite)."""
    import numpy as np

    parts = [np.asarray(v, dtype=float) for v in vectors if v is not None and len(v)]
    if not parts or len({p.shape for p in parts}) != 1:
        return None
    total = np.zeros_like(parts[0])
    for p in parts:
        n = float(np.linalg.norm(p))
        if not math.isfinite(n) or n == 0.0:
            return None
        total += p / n
    n = float(np.linalg.norm(total))
    return total / n if math.isfinite(n) and n > 0.0 else None


def _weighted_top(sims: Any, y: Any, k: int) -> Any:
    """Per row of ``sims`` (−inf: not a neighbour), the mean of ``y`` over its ``k`` largest,
    weighted by max(similarity, 0) (plain mean when they are all ≤ 0; NaN with none)."""
    import numpy as np

    n = sims.shape[1]
    k = min(k, n)
    if k <= 0:
        return np.full(sims.shape[0], np.nan)
    top = np.argpartition(-sims, k - 1, axis=1)[:, :k]
    s = np.take_along_axis(sims, top, axis=1)
    ok = np.isfinite(s)
    w = np.where(ok, np.clip(s, 0.0, None), 0.0)
    plain = ok.astype(float)
    w = np.where(w.sum(axis=1, keepdims=True) > 0, w, plain)
    tot = w.sum(axis=1)
    out = (w * y[top]).sum(axis=1) / np.where(tot > 0, tot, 1.0)
    return np.where(tot > 0, out, np.nan)


def ordered_means(vectors: Any, y: Any, k: int = K, min_prior: int = MIN_PRIOR) -> Any:
    """For each row of ``vectors`` (unit rows, n × d, oldest judged first), the weighted mean
    judge score ``y`` of its ``k`` nearest *earlier* rows (NaN with fewer than ``min_prior``
    earlier rows): what a record's decision would have seen. Its own verdict never enters
    its feature, and neither does the choice of which of the others do (leaving the record
    out of all the others would: in a small group its own class is then under-represented
    among its neighbours, a feature anti-correlated with its verdict that fits noise)."""
    import numpy as np

    V = np.asarray(vectors, dtype=float)
    n = V.shape[0]
    sims = V @ V.T
    sims[np.triu_indices(n)] = -np.inf
    out = _weighted_top(sims, np.asarray(y, dtype=float), k)
    out[:min(n, max(1, min_prior))] = np.nan
    return out


def means(vectors: Any, y: Any, queries: Any, k: int = K, exclude: Any = None) -> Any:
    """For each row of ``queries`` (m × d), the weighted mean ``y`` of its ``k`` nearest rows
    of ``vectors``; ``exclude`` (m × n booleans, optional): pairs that are not neighbours."""
    import numpy as np

    sims = np.asarray(queries, dtype=float) @ np.asarray(vectors, dtype=float).T
    if exclude is not None:
        sims = np.where(exclude, -np.inf, sims)
    return _weighted_top(sims, np.asarray(y, dtype=float), k)


@dataclass
class Index:
    """The judged records of one fit, per neighbour feature: their ids, unit vectors and
    judge scores on [0, 1]."""

    ids: dict[str, list[str]] = field(default_factory=dict)
    vectors: dict[str, Any] = field(default_factory=dict)
    scores: dict[str, Any] = field(default_factory=dict)
    pos: dict[str, dict[str, int]] = field(default_factory=dict)

    @classmethod
    def build(cls, rows: Sequence[tuple[str, Mapping[str, Any], float]]) -> Index:
        """From (record id, its vectors by feature name, judge score on [0, 1]), oldest
        judged first."""
        import numpy as np

        out = cls()
        for key in KEYS:
            have = [(rid, v[key], y) for rid, v, y in rows if v.get(key) is not None]
            if len(have) < 2:
                continue
            out.ids[key] = [rid for rid, _, _ in have]
            out.pos[key] = {rid: i for i, rid in enumerate(out.ids[key])}
            out.vectors[key] = np.array([v for _, v, _ in have], dtype=np.float32)
            out.scores[key] = np.array([y for _, _, y in have], dtype=float)
        return out

    def training(self) -> dict[str, dict[str, float]]:
        """Each indexed record's neighbour features among the records judged before it
        (:func:`ordered_means`)."""
        out: dict[str, dict[str, float]] = {}
        for key, ids in self.ids.items():
            vals = ordered_means(self.vectors[key], self.scores[key])
            for rid, v in zip(ids, vals):
                if math.isfinite(float(v)):
                    out.setdefault(rid, {})[key] = float(v)
        return out

    def features(self, record_id: str, vectors: Mapping[str, Any]) -> dict[str, float]:
        """A record's neighbour features among the indexed records (never itself)."""
        import numpy as np

        out: dict[str, float] = {}
        for key, V in self.vectors.items():
            q = vectors.get(key)
            if q is None or len(q) != V.shape[1]:
                continue
            sims = V @ np.asarray(q, dtype=float)
            at = self.pos[key].get(record_id)
            if at is not None:
                sims[at] = -np.inf
            v = float(_weighted_top(sims[None, :], self.scores[key], K)[0])
            if math.isfinite(v):
                out[key] = v
        return out
