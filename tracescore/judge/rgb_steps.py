"""The judge step RGB's live abilities need beyond the shared steps: one call per record.

RGB (Chen et al. 2024) separates four abilities by how the documents were built: noise
(irrelevant documents), negative rejection (no relevant document), information integration
(the answer is spread over several documents) and counterfactual robustness (documents with
false facts). On live traffic nothing is labelled, so the judge says, per record:

- ``counterfactual`` per context: does the context state something that contradicts the
  reference answers (or, without references, well-established facts) about the question?
  The shared contexts step cannot tell: its ``contradicted`` verdict is *answer* vs context.
- ``supported_by`` per statement: which contexts, each on its own, support the statement.
  The shared statements step judges support against all contexts together, so it cannot say
  whether the answer needs one context or several.

Cached like every step by ``(step, model, prompt version, content hash)``; injection-safe like
:mod:`.prompts` (the judged texts travel as one JSON document, the reply must match a schema
sized to the items).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..record import RagRecord
from . import prompts as P
from .schemas import _array, _obj
from .session import JudgeSession, Usage
from .steps import YES_NO, _verdict

RGB_VERSION = "rgb-v1"
RGB_TASK = (
    "Judge each retrieved context in `contexts` for RGB's counterfactual test, then map the "
    "statements to the contexts. For each context (in order) give `counterfactual`: 'yes' if "
    "the context states something about `question` that contradicts `references` (when "
    "references are given) or, without references, contradicts well-established facts; 'no' "
    "otherwise, also when the context is merely irrelevant or incomplete; and a one-sentence "
    "`reason`. For each statement in `statements` (in order) give `supported_by`: the indexes "
    "(0-based positions in `contexts`) of every context that on its own supports the "
    "statement; an empty list when no single context does."
)
RGB_FORMAT = (
    '{"contexts": [{"index": 0, "counterfactual": "yes|no", "reason": "..."}, ...], '
    '"statements": [{"index": 0, "supported_by": [0, 2]}, ...]} with one entry per context and '
    "one per statement, in order."
)

_YN = {"type": "string", "enum": ["yes", "no"]}


def rgb_schema(n_contexts: int, n_statements: int) -> dict[str, Any]:
    """The exact reply schema: ``n_contexts`` verdicts, ``n_statements`` index lists."""
    ctx = _obj({"index": {"type": "integer"}, "counterfactual": _YN,
                "reason": {"type": "string", "maxLength": 200}})
    idx = {"type": "integer", "minimum": 0, "maximum": max(0, n_contexts - 1)}
    st = _obj({"index": {"type": "integer"},
               "supported_by": {"type": "array", "items": idx, "maxItems": n_contexts}})
    return _obj({"contexts": _array(ctx, n_contexts), "statements": _array(st, n_statements)})


@dataclass(frozen=True)
class RgbVerdicts:
    counterfactual: list[bool]  # per context
    reasons: list[str]  # per context
    supported_by: list[list[int]]  # per statement: sorted context indexes


def _validate(data: Any, n: int, m: int) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ValueError("reply must be a JSON object")
    ctx = data.get("contexts")
    if not isinstance(ctx, list) or len(ctx) != n:
        raise ValueError(f"contexts must be a list of {n} entries")
    flags, reasons = [], []
    for i, row in enumerate(ctx):
        if not isinstance(row, dict):
            raise ValueError(f"contexts[{i}] must be an object")
        flags.append(_verdict(row.get("counterfactual", ""), YES_NO,
                              f"contexts[{i}].counterfactual") == "yes")
        reasons.append(str(row.get("reason", ""))[:500])
    st = data.get("statements", [])
    if not isinstance(st, list) or len(st) != m:
        raise ValueError(f"statements must be a list of {m} entries")
    support: list[list[int]] = []
    for j, row in enumerate(st):
        if not isinstance(row, dict) or not isinstance(row.get("supported_by", []), list):
            raise ValueError(f"statements[{j}].supported_by must be a list")
        idx: set[int] = set()
        for x in row.get("supported_by", []):
            try:
                k = int(str(x).strip())
            except ValueError:
                raise ValueError(f"statements[{j}].supported_by: {x!r} is not an index") \
                    from None
            if not 0 <= k < n:
                raise ValueError(f"statements[{j}].supported_by: {k} is not a context index "
                                 f"(0-{n - 1})")
            idx.add(k)
        support.append(sorted(idx))
    return {"counterfactual": flags, "reasons": reasons, "supported_by": support}


async def rgb_verdicts(session: JudgeSession, record: RagRecord, statements: Sequence[str],
                       usage: Usage) -> RgbVerdicts:
    """One call (or a cache hit): counterfactual flag per context, supporting contexts per
    statement. Runs on the scoring worker's event loop; never blocks it."""
    n, m = len(record.contexts), len(statements)
    if n == 0:
        return RgbVerdicts([], [], [[] for _ in statements])
    payload = {"question": record.query or "", "contexts": [c.text for c in record.contexts],
               "references": list(record.ground_truths), "statements": list(statements)}
    r = await session.step(
        "rgb", RGB_VERSION, payload, P.messages(RGB_TASK, payload, RGB_FORMAT),
        lambda data: _validate(data, n, m), json_schema=rgb_schema(n, m),
        max_tokens=256 + 80 * n + 24 * m, record_id=record.record_id,
    )
    usage.add("rgb", r)
    d = r.data
    return RgbVerdicts([bool(x) for x in d["counterfactual"]], [str(x) for x in d["reasons"]],
                       [[int(k) for k in row] for row in d["supported_by"]])
