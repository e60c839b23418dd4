"""nltk's and rouge-score's modules without nltk's package ``__init__`` (issue 33).

``import nltk`` runs ``nltk/__init__.py``, which imports nearly all of nltk: ``nltk.collocations``
→ ``nltk.metrics`` → ``scipy.stats``, and scikit-learn and pandas when they are installed —
~80 MB in an app process whose only use of nltk is the Porter stemmer, BLEU and two tokenizers
of the local metrics. Those few modules need none of it.

:func:`module` loads the modules the local metrics use (their own, unchanged source: the results
are nltk's and rouge-score's, bit for bit) under stand-in parent packages that only carry a
``__path__``, then takes every module it loaded back out of ``sys.modules``: the metrics keep
their references, and an app that imports nltk or rouge-score later gets the real, complete
packages, as if tracescore had never touched them.

While the stand-ins are in ``sys.modules`` (the first local score of a process, a few tens of
ms) the import system's own lock for ``nltk`` is held and the stand-in is marked as
initialising, so an app thread that imports nltk at that moment waits, then imports the real
package. When nltk was imported before (by the app), the plain imports are used.

Call under :data:`~tracescore.metrics.ready.IMPORT_LOCK` (every caller in tracescore does).
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import types
from typing import Any

from .ready import IMPORT_LOCK

#: The modules the local metrics use, loaded together the first time one is asked for.
LEAVES = ("nltk.stem.porter", "nltk.translate.bleu_score", "nltk.tokenize.punkt",
          "nltk.tokenize.destructive", "rouge_score.rouge_scorer")
#: Packages whose ``__init__`` is replaced by a stand-in while the leaves load.
_STAND_INS = ("nltk", "nltk.stem", "nltk.translate", "nltk.tokenize")
#: Top-level packages whose modules are taken back out of ``sys.modules`` after loading.
_TAKEN_BACK = ("nltk", "rouge_score")

_loaded: dict[str, types.ModuleType] = {}


def module(name: str) -> Any:
    """The module ``name`` (one of :data:`LEAVES`), loaded without nltk's ``__init__`` when
    nltk is not imported yet. Raises what the import raises (ImportError: not installed)."""
    with IMPORT_LOCK:
        mod = _loaded.get(name)
        if mod is not None:
            return mod
        if name not in LEAVES or "nltk" in sys.modules or not _light_possible():
            return importlib.import_module(name)
        _loaded.update(_load_light())
        return _loaded[name]


def _light_possible() -> bool:
    spec = importlib.util.find_spec("nltk")
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
    # an app thread importing nltk meanwhile waits on the import lock held below (see
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


def _load_light() -> dict[str, types.ModuleType]:
    before = set(sys.modules)
    out: dict[str, types.ModuleType] = {}
    with _import_lock("nltk"):
        try:
            for name in _STAND_INS:
                sys.modules[name] = _stand_in(name)
            for name in LEAVES:
                out[name] = importlib.import_module(name)
        finally:
            for name in list(sys.modules):
                if name.split(".")[0] in _TAKEN_BACK and name not in before:
                    del sys.modules[name]
    return out
