"""approxcv: approximate cross-validation for structured and latent-variable models.

Fit a model once; approxcv estimates every cross-validation fold without refitting
(infinitesimal jackknife or one Newton step), reports how far to trust each estimate,
and runs exact CV to check. See ``docs/design.md`` for the shared weighted-objective idea.

The names below are imported when first used (PEP 562), so ``import approxcv`` and the
``approxcv`` command's ``--help`` do not import JAX. The global JAX settings approxcv
changes (64-bit floats, a persistent compilation cache under the user's cache directory;
``APPROXCV_NO_COMPILATION_CACHE=1`` turns the cache off) are made when JAX is imported,
before any array exists (``approxcv/_runtime/setup.py``).
"""
import importlib

from ._version import __version__
from . import _runtime

_runtime.install()

#: subpackages and modules reached as attributes, ``acv.models``
_MODULES = ("cli", "composite", "datasets", "engine", "errors", "folds", "inference",
            "models", "optim", "plot", "report", "results", "selection")
#: names reached as attributes, ``acv.cross_validate``: the module that defines them
_NAMES = {"cross_validate": "api", "register_method": "engine.registry",
          "Problem": "problem", "make_problem": "problem",
          "CVResult": "results", "compare": "results", "accuracy": "results",
          "load_result": "results", "load_results": "results",
          "Selection": "selection", "select": "selection"}


def __getattr__(name):
    if name in _MODULES:
        return importlib.import_module("." + name, __name__)
    if name in _NAMES:
        value = getattr(importlib.import_module("." + _NAMES[name], __name__), name)
        globals()[name] = value
        return value
    if name == "compilation_cache_dir":     # the cache directory in use, None when off
        return _runtime.configure()
    raise AttributeError(f"module 'approxcv' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


__all__ = ["cross_validate", "CVResult", "compare", "accuracy", "load_result",
           "load_results", "folds", "models", "engine", "inference", "composite", "datasets",
           "errors", "optim", "plot", "results", "selection", "report",
           "register_method", "Problem", "make_problem", "select", "Selection", "__version__"]
