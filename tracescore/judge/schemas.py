"""Exact JSON schemas for each judge step, sized to the items being judged.

Servers with structured output (OpenAI, vLLM, llama.cpp grammars) then cannot answer with the
wrong number of verdicts, a value outside the allowed set or an endless string; the validators
in :mod:`.steps` still check every reply, since not every server enforces schemas.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_YN = {"type": "string", "enum": ["yes", "no"]}
_YNI = {"type": "string", "enum": ["yes", "no", "idk"]}
_REASON = {"type": "string", "maxLength": 200}


def _obj(props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(props),
            "additionalProperties": False}


def _array(items: Any, n: int) -> dict[str, Any]:
    return {"type": "array", "items": items, "minItems": n, "maxItems": n}


def extract(keys: Sequence[str], opinions_for: Sequence[str]) -> dict[str, Any]:
    sentences = {"type": "array", "items": {"type": "string", "maxLength": 300}, "maxItems": 20}
    texts = {
        k: _obj({"statements": sentences, **({"opinions": sentences} if k in opinions_for else {})})
        for k in keys
    }
    return _obj({"texts": _obj(texts)})


def contexts(n: int, m: int) -> dict[str, Any]:
    row = _obj({"index": {"type": "integer"}, "relevant": _YN, "useful": _array(_YN, m),
                "contradicted": _YN, "reason": _REASON})
    return _obj({"contexts": _array(row, n)})


def statements(n: int, ref_lengths: Sequence[int]) -> dict[str, Any]:
    row = _obj({"index": {"type": "integer"}, "relevant": _YNI, "supported": _YNI,
                "in_reference": _array(_YN, len(ref_lengths))})
    ref_row = _obj({"index": {"type": "integer"}, "attributable": _YN, "covered": _YN})
    refs = {"type": "array", "prefixItems": [_array(ref_row, k) for k in ref_lengths],
            "minItems": len(ref_lengths), "maxItems": len(ref_lengths), "items": False}
    return _obj({"answer_statements": _array(row, n), "reference_verdicts": refs})


def opinions(n: int) -> dict[str, Any]:
    row = _obj({"index": {"type": "integer"}, "biased": _YN, "toxic": _YN, "reason": _REASON})
    return _obj({"opinions": _array(row, n)})


def rating() -> dict[str, Any]:
    return _obj({"score": {"type": "integer", "minimum": 1, "maximum": 5},
                 "reason": {"type": "string", "maxLength": 400}})


def binary(checks: Sequence[str]) -> dict[str, Any]:
    entry = _obj({"value": {"type": "string", "enum": ["Y", "N"]},
                  "reasoning": {"type": "string", "maxLength": 400}})
    return _obj({c: entry for c in checks})


def geval_steps() -> dict[str, Any]:
    return _obj({"steps": {"type": "array", "items": {"type": "string", "maxLength": 300},
                           "minItems": 1, "maxItems": 8}})
