"""A library's leaf modules without its heavy package ``__init__`` (issue 33).

``import nltk`` runs ``nltk/__init__.py``, which imports nearly all of nltk: ``nltk.collocations``
→ ``nltk.metrics`` → ``scipy.stats``, and scikit-learn and pandas when they are installed —
~80 MB in an app process whose only use of nltk is the Porter stemmer, BLEU and two tokenizers
of the local metrics. ``import scipy.special`` costs ~0.3 s of CPU (its array-API dispatch
layer) where a read command needs four ufuncs (t and normal quantiles and CDFs) from
``scipy.special._ufuncs``.

:func:`module` loads the leaf modules of a group (their own, unchanged code: the results are the
library's, bit for bit) under stand-in parent packages that only carry a ``__path__``, then
takes every module of the group it loaded back out of ``sys.modules``: the callers keep their
references, and an app that imports nltk, rouge-score or scipy later gets the real, complete
packages, as if tracescore had never touched them (a compiled extension module is the same
object again: Python keeps one per process).

While the stand-ins are in ``sys.modules`` (a few tens of ms, once per process and group) the
import system's own lock for the group's root package is held and the stand-in is marked as
initialising, so an app thread that imports the package at that moment waits, then imports the
real one. When the package was imported before (by the app), plain imports are used.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
import types
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class _Group:
    root: str
    #: the leaf modules, loaded together the first time one is asked for
    leaves: tuple[str, ...]
    #: packages whose ``__init__`` is replaced by a stand-in while the leaves load
    stand_ins: tuple[str, ...]
    #: top-level packages whose new modules are taken back out of ``sys.modules`` afterwards
    taken_back: tuple[str, ...]


GROUPS = (
    _Group("nltk", ("nltk.stem.porter", "nltk.translate.bleu_score", "nltk.tokenize.punkt",
                    "nltk.tokenize.destructive", "rouge_score.rouge_scorer"),
           ("nltk", "nltk.stem", "nltk.translate", "nltk.tokenize"), ("nltk", "rouge_score")),
    _Group("scipy", ("scipy.special._ufuncs",), ("scipy", "scipy.special"), ("scipy",)),
)
_BY_LEAF = {leaf: g for g in GROUPS for leaf in g.leaves}

_lock = threading.RLock()
_loaded: dict[str, types.ModuleType] = {}


def module(name: str) -> Any:
    """The module ``name`` (a leaf of :data:`GROUPS`), loaded without its package's
    ``__init__`` when that package is not imported yet. Any thread; blocks while another
    thread loads. Raises what the import raises (ImportError: not installed)."""
    with _lock:
        mod = _loaded.get(name)
        if mod is not None:
            return mod
        group = _BY_LEAF.get(name)
        if group is None or group.root in sys.modules or not _light_possible(group.root):
            return importlib.import_module(name)
        loaded, failed = _load_light(group)
        _loaded.update(loaded)  # (a failed leaf is not remembered: the next call tries again)
        if name in failed:
            raise failed[name]
        return _loaded[name]


def _light_possible(root: str) -> bool:
    try:
        spec = importlib.util.find_spec(root)
    except (ImportError, ValueError):
        return False
    return spec is not None and bool(spec.submodule_search_locations)


def _stand_in(name: str) -> types.ModuleType:
    parent_spec = importlib.util.find_spec(name.split(".")[0])
    assert parent_spec is not None and parent_spec.submodule_search_locations is not None
    root = list(parent_spec.submodule_search_locations)[0]
    path = os.path.join(root, *name.split(".")[1:])
    spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
    spec.submodule_search_locations = [path]
    mod = types.ModuleType(name, "tracescore's stand-in for the package __init__")
    mod.__spec__ = spec
    mod.__path__ = [path]
    mod.__package__ = name
    # an app thread importing the package meanwhile waits on the import lock held below (see
    # importlib._bootstrap._find_and_load: a module still initialising means "take its lock")
    spec._initializing = True  # type: ignore[attr-defined]
    return mod


@contextlib.contextmanager
def _import_lock(name: str) -> Any:
    try:  # the import system's per-module lock (private API: without it, no lock)
        from importlib._bootstrap import _ModuleLockManager  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - another Python
        yield
        return
    with _ModuleLockManager(name):
        yield


def _load_light(group: _Group
                ) -> tuple[dict[str, types.ModuleType], dict[str, Exception]]:
    """(the leaves loaded, the leaves that failed with their exception): one leaf that fails
    (rouge-score missing) does not keep the others (nltk's BLEU) from loading."""
    before = set(sys.modules)
    out: dict[str, types.ModuleType] = {}
    failed: dict[str, Exception] = {}
    with _import_lock(group.root):
        try:
            for name in group.stand_ins:
                sys.modules[name] = _stand_in(name)
            for name in group.leaves:
                try:
                    out[name] = importlib.import_module(name)
                except Exception as exc:
                    failed[name] = exc
        finally:
            for name in list(sys.modules):
                if name.split(".")[0] in group.taken_back and name not in before:
                    del sys.modules[name]
    return out, failed
