"""A validator of the JSON Schema subset that tool declarations use. No dependency.

The ``jsonschema`` package is not a dependency of tracescore (nor of anything it installs), so
tool arguments are checked against the keywords tool schemas are made of — those that
Pydantic's ``model_json_schema``, OpenAI function declarations, Anthropic ``input_schema`` and
MCP ``inputSchema`` produce:

``type`` (one or a list; ``integer`` accepts 3.0 as JSON Schema does, never ``true``),
``properties``, ``required``, ``additionalProperties`` (false or a schema), ``items`` (one
schema), ``prefixItems``, ``enum``, ``const``, ``minLength`` / ``maxLength``, ``pattern``
(Python ``re.search``), ``minimum`` / ``maximum`` / ``exclusiveMinimum`` /
``exclusiveMaximum`` (numbers, draft 6+), ``minItems`` / ``maxItems``, ``uniqueItems``,
``anyOf`` / ``oneOf`` / ``allOf`` / ``not``, ``nullable`` (OpenAPI), and local ``$ref``
(``#/$defs/...``, ``#/definitions/...``). Other keywords (``format``, ``if``/``then``,
``dependentRequired``, remote ``$ref`` ...) are not checked: an argument they would reject
passes. Nesting is followed to :data:`MAX_DEPTH` levels.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["MAX_DEPTH", "validate"]

MAX_DEPTH = 32
#: Errors reported per validation (the first ones, in document order).
MAX_ERRORS = 10

_TYPES = {
    "string": lambda v: isinstance(v, str),
    "boolean": lambda v: isinstance(v, bool),
    "null": lambda v: v is None,
    "object": lambda v: isinstance(v, Mapping),
    "array": lambda v: isinstance(v, (list, tuple)),
    "number": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
}


def validate(instance: Any, schema: Any) -> list[str]:
    """The ways ``instance`` breaks ``schema`` (empty: valid), each as ``"<path>: <why>"``."""
    errors: list[str] = []
    _check(instance, schema, schema, "$", errors, 0)
    return errors[:MAX_ERRORS]


def _resolve(ref: str, root: Any) -> Any:
    if not ref.startswith("#/"):
        return None  # a remote reference: not followed
    node = root
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or part not in node:
            return None
        node = node[part]
    return node


def _same(a: Any, b: Any) -> bool:
    # JSON equality: 1 == 1.0, but True is not 1
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return a == b


def _check(v: Any, s: Any, root: Any, path: str, errors: list[str], depth: int) -> None:
    if len(errors) >= MAX_ERRORS or depth > MAX_DEPTH:
        return
    if s is False:
        errors.append(f"{path}: no value is allowed here")
        return
    if not isinstance(s, Mapping):
        return  # true, or not a schema: anything goes
    ref = s.get("$ref")
    if isinstance(ref, str):
        target = _resolve(ref, root)
        if target is not None:
            _check(v, target, root, path, errors, depth + 1)
    if v is None and s.get("nullable") is True:
        return
    t = s.get("type")
    if t is not None:
        names = [t] if isinstance(t, str) else list(t) if isinstance(t, list) else []
        known = [n for n in names if n in _TYPES]
        if known and not any(_TYPES[n](v) for n in known):
            errors.append(f"{path}: expected {' or '.join(known)}, got {_kind(v)}")
            return
    if "enum" in s and isinstance(s["enum"], list) and not any(_same(v, e) for e in s["enum"]):
        errors.append(f"{path}: {_show(v)} is not one of {_show(s['enum'])}")
    if "const" in s and not _same(v, s["const"]):
        errors.append(f"{path}: {_show(v)} is not {_show(s['const'])}")
    if isinstance(v, str):
        _string(v, s, path, errors)
    elif isinstance(v, (int, float)) and not isinstance(v, bool):
        _number(v, s, path, errors)
    elif isinstance(v, Mapping):
        _object(v, s, root, path, errors, depth)
    elif isinstance(v, (list, tuple)):
        _array(v, s, root, path, errors, depth)
    for key in ("allOf", "anyOf", "oneOf"):
        subs = s.get(key)
        if not isinstance(subs, list):
            continue
        results = []
        for sub in subs:
            e: list[str] = []
            _check(v, sub, root, path, e, depth + 1)
            results.append(e)
        passed = sum(1 for e in results if not e)
        if key == "allOf":
            for e in results:
                errors.extend(e)
        elif key == "anyOf" and passed == 0:
            first = results[0][0] if results and results[0] else ""
            errors.append(f"{path}: matches none of anyOf ({first})")
        elif key == "oneOf" and passed != 1:
            errors.append(f"{path}: matches {passed} of oneOf, expected exactly 1")
    if "not" in s:
        e = []
        _check(v, s["not"], root, path, e, depth + 1)
        if not e:
            errors.append(f"{path}: matches a schema it must not match")


def _string(v: str, s: Mapping[str, Any], path: str, errors: list[str]) -> None:
    lo, hi = s.get("minLength"), s.get("maxLength")
    if isinstance(lo, int) and len(v) < lo:
        errors.append(f"{path}: shorter than {lo} characters")
    if isinstance(hi, int) and len(v) > hi:
        errors.append(f"{path}: longer than {hi} characters")
    pattern = s.get("pattern")
    if isinstance(pattern, str):
        try:
            if re.search(pattern, v) is None:
                errors.append(f"{path}: does not match pattern {pattern!r}")
        except re.error:
            pass  # a pattern Python cannot compile: not checked


def _number(v: float, s: Mapping[str, Any], path: str, errors: list[str]) -> None:
    def num(key: str) -> float | None:
        x = s.get(key)
        return x if isinstance(x, (int, float)) and not isinstance(x, bool) else None

    if (m := num("minimum")) is not None and v < m:
        errors.append(f"{path}: {v} is less than the minimum {m}")
    if (m := num("maximum")) is not None and v > m:
        errors.append(f"{path}: {v} is more than the maximum {m}")
    if (m := num("exclusiveMinimum")) is not None and v <= m:
        errors.append(f"{path}: {v} is not more than {m}")
    if (m := num("exclusiveMaximum")) is not None and v >= m:
        errors.append(f"{path}: {v} is not less than {m}")


def _object(v: Mapping[str, Any], s: Mapping[str, Any], root: Any, path: str,
            errors: list[str], depth: int) -> None:
    props = s.get("properties") if isinstance(s.get("properties"), Mapping) else {}
    required = s.get("required")
    if isinstance(required, list):
        for key in required:
            if isinstance(key, str) and key not in v:
                errors.append(f"{path}: missing required argument {key!r}")
    extra = s.get("additionalProperties", True)
    for key, value in v.items():
        if key in props:
            _check(value, props[key], root, f"{path}.{key}", errors, depth + 1)
        elif extra is False:
            errors.append(f"{path}: unexpected argument {key!r}")
        elif isinstance(extra, Mapping):
            _check(value, extra, root, f"{path}.{key}", errors, depth + 1)


def _array(v: Any, s: Mapping[str, Any], root: Any, path: str, errors: list[str],
           depth: int) -> None:
    lo, hi = s.get("minItems"), s.get("maxItems")
    if isinstance(lo, int) and len(v) < lo:
        errors.append(f"{path}: fewer than {lo} items")
    if isinstance(hi, int) and len(v) > hi:
        errors.append(f"{path}: more than {hi} items")
    prefix = s.get("prefixItems") if isinstance(s.get("prefixItems"), list) else []
    for i, item in enumerate(v):
        sub = prefix[i] if i < len(prefix) else s.get("items")
        if isinstance(sub, Mapping):
            _check(item, sub, root, f"{path}[{i}]", errors, depth + 1)
    if s.get("uniqueItems") is True:
        seen = set()
        for item in v:
            key = json.dumps(item, sort_keys=True, default=repr)
            if key in seen:
                errors.append(f"{path}: items are not unique")
                break
            seen.add(key)


def _kind(v: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _TYPES[name](v):
            return name
    return type(v).__name__


def _show(v: Any) -> str:
    text = json.dumps(v, default=repr, ensure_ascii=False)
    return text if len(text) <= 80 else text[:80] + "…"
