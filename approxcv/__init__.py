"""approxcv: approximate cross-validation for structured and latent-variable models.

Fit a model once; approxcv estimates every cross-validation fold without refitting
(infinitesimal jackknife or one Newton step), reports how far to trust each estimate,
and runs exact CV to check. See ``DESIGN.md`` for the shared weighted-objective idea.
"""
import os


def _single_threaded_eigen() -> None:
    """Run XLA's CPU kernels without the multi-threaded Eigen pool, unless the user chose.

    On this JAX (0.10) the CPU runtime's Eigen thread pool occasionally wedges while a
    large ``vmap``-ed computation (our batched refits) is being materialised: every worker
    waits for work and the caller waits forever (seen in our motion benchmark; the same
    symptom and the same workaround are reported in PyAutoFit issue #1530).
    ``--xla_cpu_multi_thread_eigen=false`` avoids it at a small cost in single-call speed;
    approxcv parallelises across folds and batches itself. The flag is read when JAX first
    creates its CPU backend, so it only takes effect if approxcv is imported before the
    first JAX computation. Set the flag yourself in ``XLA_FLAGS`` (``=true``) to opt out.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_cpu_multi_thread_eigen" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()


_single_threaded_eigen()

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)

from . import datasets, engine, errors, folds, inference, models, tuning  # noqa: E402
from .api import cross_validate  # noqa: E402
from .results import CVResult, compare  # noqa: E402

__version__ = "0.1.0"


def __getattr__(name):
    if name == "plot":  # matplotlib only when asked for
        import importlib
        return importlib.import_module(".plot", __name__)
    raise AttributeError(f"module 'approxcv' has no attribute {name!r}")


__all__ = ["cross_validate", "CVResult", "compare", "folds", "models", "engine", "inference",
           "datasets", "errors", "tuning", "plot", "__version__"]
