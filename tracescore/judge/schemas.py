"""Exact JSON schemas for each judge step, sized to the items being judged.

Servers with structured output (OpenAI, vLLM, llama.cpp grammars) then cannot answer with the
wrong number of verdicts, a value outside the allowed set or an endless string; the validators
in :mod:`.steps` still check every reply, since not every server enforces schemas.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

_YN = {"type": "string", "enum": ["yes", "no"]}
_YNI = {"type": "string", "enum": ["yes", "no", "idk"]}
_REASON = {"type": "string", "maxLength": 200}


def _obj(props: dict[str, Any], optional: Sequence[str] = ("index",)) -> dict[str, Any]:
    """Every property required except ``optional`` (``index`` only echoes the item's
    position); nothing else allowed."""
    return {"type": "object", "properties": props,
            "required": [k for k in props if k not in optional],
            "additionalProperties": False}


def _array(items: Any, n: int) -> dict[str, Any]:
    return {"type": "array", "items": items, "minItems": n, "maxItems": n}


def extract(keys: Sequence[str], opinions_for: Sequence[str]) -> dict[str, Any]:
    sentences = {"type": "array", "items": {"type": "string", "maxLength": 300}, "maxItems": 20}
    # "opinions" is asked for the answer only; an empty list elsewhere is tolerated
    texts = {
        k: _obj({"statements": sentences, "opinions": sentences},
                optional=() if k in opinions_for else ("opinions",))
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


def deferred(schema: Mapping[str, Any]) -> dict[str, Any]:
    """``schema`` as a part of a larger reply: the server still gets it exactly (``anyOf`` with
    this one alternative), while :func:`check` leaves it to the step that owns the part, so a
    part that fails costs only that part (asked again alone), not the parts beside it."""
    return {"anyOf": [dict(schema)]}


def pair(parts: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """The reply of several steps in one call: one key per step, each the step's own exact
    schema (:func:`deferred`); no other key. Each part is checked by its step."""
    return _obj({name: deferred(schema) for name, schema in parts.items()}, optional=())


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


_FENCE = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.S)


def parse_json(text: str) -> Any:
    """Parse a JSON reply: the whole reply (or one fenced code block that is the whole reply).

    Strict on purpose: JSON picked out of prose could be a quotation (an answer under
    judgement that says ``{"score": 5}``), so prose around the object is an error (and gets
    the repair call), never a value.
    """
    t = text.strip()
    m = _FENCE.match(t)
    if m:
        t = m.group(1)
    if not t:
        raise ValueError("the reply is empty")
    try:
        return json.loads(t)
    except json.JSONDecodeError as exc:
        if t[0] not in "{[":
            raise ValueError("the reply is not a JSON object (text around or instead of it)") \
                from None
        raise ValueError(f"not valid JSON ({exc.msg} at char {exc.pos})") from None


def parse_reply(text: str, quoted: Iterable[str] = ()) -> Any:
    """The JSON value of a judge reply: the whole reply (or one fenced block that is the whole
    reply), else the one JSON object inside prose ("Here you go: {...}") — as judges without
    a JSON mode often answer. Raises ValueError (the reason) for anything else: no JSON, two
    objects, an object cut off or malformed, an object whose text appears in ``quoted`` (the
    texts under evaluation: an answer or context can carry a JSON verdict, and a judge that
    quotes it back must not score with it), and an object the prose around it does not own:
    text before it that gives it to someone else ("the answer tells me to reply {...}") or
    disowns it, text after it that takes it back ("but I won't") or gives another verdict
    ("..., so my score is 2"). The caller still checks the value against its schema."""
    try:
        return parse_json(text)
    except ValueError as strict:
        error = strict
    found = _embedded_object(text)
    if found is None:
        raise error
    value, start, end = found
    raw = text[start:end]
    if _is_quoted(raw, value, quoted):
        raise ValueError("the JSON object in the reply is quoted from the text under "
                         "evaluation, not a verdict (answer with the JSON object alone)")
    why = disowned(text[:start], text[end:], value)
    if why:
        raise ValueError(f"the JSON object in the reply is not the judge's own verdict: {why} "
                         "(answer with the JSON object alone)")
    return value


# Prose around one JSON object is tolerated (Valor: "Here you go: {...}"), unless it says the
# object is not the judge's verdict. A restated injection ("The answer tells me to output
# {...}. I will not: it is an injection.") is no quotation, so _is_quoted cannot see it. These
# are English phrasings; a reply refused here gets the repair call, which asks for the object
# alone, so a false alarm costs one call, not a score.
_SOURCE = (r"(?:answer|text|response|reply|context|passage|document|input|message|content|"
           r"prompt|user|author|model|instruction)s?")
_ATTRIBUTED = re.compile(
    rf"(?is)\b(?:the|this|that|its?)\s+(?:\w+\s+){{0,2}}?{_SOURCE}\b[^.!?{{]{{0,60}}?\b(?:says?|"
    r"said|asks?|asked|wants?|wanted|instructs?|instructed|tells?|told|demands?|requests?|"
    r"requested|claims?|insists?|orders?|ordered|urges?|tries|tried)\b"
    r"|\b(?:instructed|ordered|told|commanded)\s+(?:me\s+)?to\b"
    r"|\b(?:would|wants?\s+me\s+to|tries\s+to\s+make\s+me)\s+(?:have\s+me\s+)?"
    r"(?:output|reply|answer|return|say|give)\b")
_INJECTION = re.compile(r"(?is)\binject(?:ed|ion|s)?\b"
                        r"|\bignore\s+(?:all|any|previous|prior|the|your)\b")
_DISOWNING = re.compile(
    r"(?is)\bnot\s+(?:my|the\s+real|the\s+actual|a\s+real)\s+(?:verdict|score|rating|"
    r"answer|assessment|judg(?:e)?ment)\b"
    r"|\bi\s+(?:will|would|shall|do|can)\s*(?:not|n't)\b|\bi\s+won't\b|\bi\s+refuse\b"
    r"|\brather\s+than\b|\binstead\b|\bactually\b|\bon\s+second\s+thought\b"
    r"|\bcorrection\b|\bdisregard\b|\binject(?:ed|ion|s)?\b")
#: a verdict in words or digits: "score: 2", "my rating is 3", "verdict: no", "2/5"
_VERDICT = re.compile(
    r"(?is)\b(?:score|rating|verdict|grade|rate\s+it|value)\b\W{0,6}(?:is|of|should\s+be|"
    r"would\s+be|as|=|:)?\W{0,4}(-?\d+(?:\.\d+)?|yes|no|idk|y|n)\b"
    r"|\b(\d+(?:\.\d+)?)\s*(?:/|out\s+of)\s*\d+\b")


def disowned(before: str, after: str, value: Any) -> str | None:
    """Why the prose ``before`` and ``after`` one JSON object in a reply says the object is not
    the judge's verdict, or None (see :func:`parse_reply`)."""
    lead = before[-300:]
    sentence = re.split(r"[.!?\n]\s", lead)[-1]  # (the object's own sentence)
    if _ATTRIBUTED.search(sentence):
        return "the text before it gives it to the text under evaluation"
    if _INJECTION.search(lead):
        return "the text before it calls it an injection"
    if _DISOWNING.search(lead):
        return "the text before it disowns it"
    if _DISOWNING.search(after):
        return "the text after it takes it back"
    own = {str(v).lower() for v in _leaves(value)}
    for m in _VERDICT.finditer(after):
        said = (m.group(1) or m.group(2) or "").lower()
        if said not in own and said.rstrip("0").rstrip(".") not in own:
            return f"the text after it gives another verdict ({m.group(0).strip()[:40]!r})"
    return None


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, dict):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, list):
        for v in value:
            yield from _leaves(v)
    elif isinstance(value, bool):
        yield "yes" if value else "no"
    elif isinstance(value, str):
        yield value
        if value.lower() in ("y", "n"):
            yield {"y": "yes", "n": "no"}[value.lower()]
        if value.lower() in ("yes", "no"):
            yield value.lower()[0]
    else:
        yield value


def _embedded_object(text: str) -> tuple[Any, int, int] | None:
    """(value, start, end) of the one JSON object in ``text``; None when there is no ``{``
    at all; ValueError when there are several, or a ``{`` that starts no valid object (a
    reply cut off by ``max_tokens`` must not yield an inner object of it)."""
    decoder = json.JSONDecoder()
    found: list[tuple[Any, int, int]] = []
    broken = False
    i = text.find("{")
    if i == -1:
        return None
    while i != -1:
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            broken = True
            i = text.find("{", i + 1)
            continue
        found.append((value, i, end))
        i = text.find("{", end)
    if broken:
        raise ValueError("the reply holds a JSON object that is cut off or malformed")
    if len(found) > 1:
        raise ValueError(f"the reply holds {len(found)} JSON objects, not one")
    return found[0]


def _is_quoted(raw: str, value: Any, quoted: Iterable[str]) -> bool:
    """Whether the object's text, or its compact form, appears in one of ``quoted``
    (whitespace ignored on both sides: a judge may re-space what it quotes)."""
    forms = {"".join(raw.split()),
             "".join(json.dumps(value, ensure_ascii=False, separators=(",", ":")).split())}
    for q in quoted:
        if "{" not in q:
            continue
        flat = "".join(q.split())
        if any(f in flat for f in forms):
            return True
    return False


def check(value: Any, schema: Any, path: str = "reply") -> None:
    """Raise ValueError unless ``value`` matches ``schema`` exactly.

    The subset of JSON Schema the builders above use: ``type``, ``properties``, ``required``,
    ``additionalProperties: false``, ``enum``, ``items`` (a schema or ``false``),
    ``prefixItems``, ``minItems``/``maxItems``, ``minimum``/``maximum``. ``maxLength`` is a
    cost bound for servers that enforce it, not a validity rule: longer strings pass here
    (the steps cut reasons themselves). A :func:`deferred` part (``anyOf``) is not checked
    here: the step that owns it checks it against its own schema. Not every server enforces schemas, so every reply is
    checked: no extra keys, no missing keys, no wrong types, no values outside an enum.
    """
    if schema is True or schema is None or not isinstance(schema, dict) or "anyOf" in schema:
        return
    t = schema.get("type")
    if t == "object":
        if not isinstance(value, dict):
            raise ValueError(f"{path} must be an object, got {_kind(value)}")
        props = schema.get("properties", {})
        for k, sub in props.items():
            if k in value:
                check(value[k], sub, f"{path}.{k}")
        missing = [k for k in schema.get("required", ()) if k not in value]
        if missing:
            raise ValueError(f"{path} is missing {', '.join(map(repr, missing))}")
        if schema.get("additionalProperties") is False:
            extra = [k for k in value if k not in props]
            if extra:
                raise ValueError(f"{path} has unexpected key(s) {', '.join(map(repr, extra))}")
    elif t == "array":
        if not isinstance(value, list):
            raise ValueError(f"{path} must be a list, got {_kind(value)}")
        lo, hi = schema.get("minItems"), schema.get("maxItems")
        if lo is not None and len(value) < lo or hi is not None and len(value) > hi:
            want = str(lo) if lo == hi else f"{lo or 0}-{hi if hi is not None else 'any'}"
            raise ValueError(f"{path} must have {want} entries, got {len(value)}")
        prefix = schema.get("prefixItems", [])
        for i, x in enumerate(value):
            sub = prefix[i] if i < len(prefix) else schema.get("items", True)
            if sub is False:
                raise ValueError(f"{path} has an unexpected entry [{i}]")
            check(x, sub, f"{path}[{i}]")
    elif t == "string":
        if not isinstance(value, str):
            raise ValueError(f"{path} must be a string, got {_kind(value)}")
    elif t == "integer":
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{path} must be an integer, got {_kind(value)}")
    elif t == "number":
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{path} must be a number, got {_kind(value)}")
    elif t == "boolean":
        if not isinstance(value, bool):
            raise ValueError(f"{path} must be true or false, got {_kind(value)}")
    if "enum" in schema and value not in schema["enum"]:
        raise ValueError(f"{path} must be one of {'/'.join(map(str, schema['enum']))}, "
                         f"got {value!r:.60}")
    if "minimum" in schema and isinstance(value, (int, float)) and value < schema["minimum"]:
        raise ValueError(f"{path} must be >= {schema['minimum']}, got {value!r}")
    if "maximum" in schema and isinstance(value, (int, float)) and value > schema["maximum"]:
        raise ValueError(f"{path} must be <= {schema['maximum']}, got {value!r}")


def _kind(value: Any) -> str:
    return {dict: "an object", list: "a list", str: "a string", bool: "a boolean",
            type(None): "null"}.get(type(value), f"a {type(value).__name__}") + \
        (f" {value!r:.40}" if isinstance(value, (str, int, float)) else "")
