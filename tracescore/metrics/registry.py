"""Name → metric factory. ``tracescore.init(metrics=[...])`` resolves names here.

Registration runs one way: the registry reads the built-ins from :mod:`.builtin` (which lists
them once) on its first lookup, and users add their own with :func:`register`. Metric modules
never import the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

from .base import Metric

_REGISTRY: dict[str, Callable[[], Metric]] = {}


def register(factory: Callable[[], Metric], name: str | None = None) -> None:
    """Make ``factory`` (usually a :class:`Metric` subclass) available by name.

    A name registered here wins over a built-in of the same name."""
    key = name or getattr(factory, "name", "")
    if not key:
        raise ValueError("a registered metric needs a name")
    _REGISTRY[key] = factory


def available() -> list[str]:
    _load_builtins()
    return sorted(_REGISTRY)


def get(name: str) -> Metric:
    _load_builtins()
    try:
        return _REGISTRY[name]()
    except KeyError:
        raise ValueError(
            f"unknown metric {name!r}; known metrics: {', '.join(sorted(_REGISTRY))}"
        ) from None


def resolve(specs: Iterable[str | Metric]) -> list[Metric]:
    """Turn names and instances into metric instances; clear errors for bad entries."""
    out: list[Metric] = []
    seen: set[str] = set()
    for spec in specs:
        if isinstance(spec, str):
            metric = get(spec)
        elif isinstance(spec, Metric):
            metric = spec
        else:
            raise TypeError(
                f"metrics entries must be metric names or Metric instances, got {spec!r}"
            )
        if not metric.name:
            raise ValueError(f"metric {metric!r} has no name")
        if metric.name in seen:
            raise ValueError(f"metric {metric.name!r} is listed twice")
        seen.add(metric.name)
        out.append(metric)
    return out


_loaded = False


def _load_builtins() -> None:
    global _loaded
    if _loaded:
        return
    _loaded = True
    from .builtin import BUILTIN_METRICS

    for factory in BUILTIN_METRICS:
        _REGISTRY.setdefault(factory.name, factory)
