"""``jit``: ``jax.jit`` with approxcv's XLA compile options, resolved at the first call;
``host_workers``: how many compiled programs approxcv runs at once in threads.

On CPU every approxcv program is compiled with XLA's classic elemental emitters
(``xla_cpu_use_fusion_emitters=False``). approxcv's programs are loop-heavy — scans over
time inside optimiser loops, per-fold Hessians, chord steps — and compiling them, not
running them, dominates a first call on small data: with the classic emitters they compile
in about 60-80 % of the time of XLA's default fusion emitters (measured: the NS program of
a CRF 15.3 -> 10.6 s, 20 % of the CPU time of the engine's matrix-free tests), with the
same run time. A per-program option, not a global setting: other JAX code in the user's
process is unaffected. ``None`` (XLA's defaults) on other backends or when this XLA does
not know the option.

The options are looked up when a wrapped function is first called, not when it is
defined, so importing approxcv does not initialise a JAX backend.
"""
from __future__ import annotations

import functools
import os

import jax
from ._placement import current_platform
from .errors import InvalidArgumentError


@functools.cache
def compiler_options(platform: str = "cpu") -> dict | None:
    """XLA options for approxcv's programs on ``platform`` (module docstring)."""
    if platform != "cpu":
        return None
    options = {"xla_cpu_use_fusion_emitters": False}
    try:
        jax.jit(lambda x: x, compiler_options=options).lower(0.0).compile()
    except Exception:  # noqa: BLE001  (an XLA without the option: use its defaults)
        return None
    return options


def jit(fun=None, **jit_kwargs):
    """``jax.jit(fun, compiler_options=compiler_options(), **jit_kwargs)``, built at the
    first call; usable as ``@jit``, ``@partial(jit, static_argnums=...)`` or
    ``jit(fun, ...)``. Inside another traced program it is a plain nested ``jax.jit`` (the
    outer program's options apply). The options are those of the platform the call runs on
    (:func:`~approxcv._placement.current_platform`: a program placed on the host's CPU
    beside an accelerator gets the CPU's). The wrapper keeps ``fun`` as ``__wrapped__``."""
    if fun is None:
        return functools.partial(jit, **jit_kwargs)
    compiled = {}

    @functools.wraps(fun)
    def call(*args, **kwargs):
        # called while another program is traced (a model's jitted kernel inside an
        # objective): a nested jit, which takes no compile options of its own
        nested = any(isinstance(leaf, jax.core.Tracer)
                     for leaf in jax.tree_util.tree_leaves((args, kwargs)))
        key = True if nested else current_platform()
        if key not in compiled:
            compiled[key] = (jax.jit(fun, **jit_kwargs) if nested else
                             jax.jit(fun, compiler_options=compiler_options(key), **jit_kwargs))
        return compiled[key](*args, **kwargs)
    return call


def host_workers() -> int:
    """Compiled programs approxcv runs at once in threads (chunks of folds,
    :func:`approxcv.engine.batching.in_chunks`; parts of a long Hessian sweep,
    :func:`approxcv.optim.newton.parallel_value_and_derivatives`): on CPU the cores this
    process may use (at most :data:`MAX_HOST_WORKERS`), as each such program — a recursion
    over time — runs on one core; elsewhere 1 (one accelerator runs one program at a
    time; the platform is the placement's, :func:`~approxcv._placement.current_platform`).
    The environment variable ``APPROXCV_THREADS`` sets it on CPU, above the cap too
    (``1``: one program at a time, e.g. on a machine shared with other jobs)."""
    if current_platform() != "cpu":
        return 1
    if os.environ.get("APPROXCV_THREADS"):          # the user's limit (1: one at a time)
        try:
            threads = int(os.environ["APPROXCV_THREADS"])
            if threads < 1:
                raise ValueError
            return threads
        except ValueError:
            raise InvalidArgumentError(
                "APPROXCV_THREADS must be a positive integer, got "
                f"{os.environ['APPROXCV_THREADS']!r}") from None
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:                      # not on Linux
        cores = os.cpu_count() or 1
    return int(max(1, min(cores, MAX_HOST_WORKERS)))


#: the most compiled programs run at once on CPU by default (:func:`host_workers`): each
#: holds its own batch, so memory grows with them, and a container's CPU quota may be
#: below the cores it can see; ``APPROXCV_THREADS`` may ask for more
MAX_HOST_WORKERS = 4


__all__ = ["compiler_options", "jit", "host_workers", "MAX_HOST_WORKERS"]
