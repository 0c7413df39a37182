"""approxcv: approximate cross-validation for structured and latent-variable models.

Fit a model once; approxcv estimates every cross-validation fold without refitting
(infinitesimal jackknife or one Newton step), reports how far to trust each estimate,
and runs exact CV to check. See ``docs/design.md`` for the shared weighted-objective idea.
"""
import jax
import jaxlib

from ._version import __version__

from . import _compilation_cache
from ._jax_version import warn_if_deadlock_prone

warn_if_deadlock_prone(jaxlib.__version__)
# the global JAX settings approxcv changes: 64-bit floats, and a persistent compilation
# cache under the user's cache directory (APPROXCV_NO_COMPILATION_CACHE=1 turns it off)
jax.config.update("jax_enable_x64", True)
compilation_cache_dir = _compilation_cache.enable(jax.config, jaxlib.__version__)

from . import datasets, engine, errors, folds, inference, models, optim, tuning  # noqa: E402
from . import composite  # noqa: E402
from .api import cross_validate  # noqa: E402
from .engine.registry import register_method  # noqa: E402
from .problem import Problem, make_problem  # noqa: E402
from .results import CVResult, accuracy, compare  # noqa: E402
from .results_io import load_result, load_results  # noqa: E402
from .selection import Selection, select  # noqa: E402


def __getattr__(name):
    if name in ("plot", "bayes"):  # matplotlib / the GP code only when asked for
        import importlib
        return importlib.import_module("." + name, __name__)
    raise AttributeError(f"module 'approxcv' has no attribute {name!r}")


__all__ = ["cross_validate", "CVResult", "compare", "accuracy", "load_result",
           "load_results", "folds", "models", "engine",
           "inference", "composite", "datasets", "errors", "tuning", "optim", "plot", "bayes",
           "register_method", "Problem", "make_problem", "select", "Selection", "__version__"]
