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

A program may also opt in to XLA's fast-compile options for small inputs
(``jit(..., fast_compile_elements=N)``: when its array arguments hold at most ``N`` elements
in all, :data:`FAST_COMPILE_OPTIONS` are added on CPU). On small data a program runs in
milliseconds and compiling it is the whole first call: the lambda tuning of a ridge
regression on 80 x 10 data took 2.0-2.2 s in a fresh process (1.0-1.1 s of it compiling)
and 1.3-1.7 s with these options on its two programs (0.4-0.5 s compiling), its later
calls 0.005-0.009 s either way; on 20,000 x 50 data the same options made every call 1.8x
slower (0.34 -> 0.63 s), which is why the size decides. A shape is always in the same
class, so no shape compiles twice.

The options are looked up when a wrapped function is first called, not when it is
defined, so importing approxcv does not initialise a JAX backend.
"""
from __future__ import annotations

import functools
import os

import jax
import numpy as np

from ._placement import current_platform
from .errors import InvalidArgumentError


#: XLA options that trade run time for compile time (the pair ``JAX_DISABLE_MOST_
#: OPTIMIZATIONS`` sets), for programs on small inputs (module docstring)
FAST_COMPILE_OPTIONS = {"xla_backend_optimization_level": 0,
                        "xla_llvm_disable_expensive_passes": True}


@functools.cache
def compiler_options(platform: str = "cpu", fast: bool = False) -> dict | None:
    """XLA options for approxcv's programs on ``platform`` (module docstring); ``fast``:
    with :data:`FAST_COMPILE_OPTIONS` too (the plain options where this XLA does not know
    them)."""
    if platform != "cpu":
        return None
    options = {"xla_cpu_use_fusion_emitters": False}
    if fast:
        options.update(FAST_COMPILE_OPTIONS)
    try:
        jax.jit(lambda x: x, compiler_options=options).lower(0.0).compile()
    except Exception:  # noqa: BLE001  (an XLA without the option: use its defaults)
        return compiler_options(platform) if fast else None
    return options


def array_elements(tree) -> int:
    """Elements of the array leaves of ``tree`` (NumPy and JAX arrays), in all."""
    return sum(int(np.size(leaf)) for leaf in jax.tree_util.tree_leaves(tree)
               if isinstance(leaf, (np.ndarray, jax.Array)))


def jit(fun=None, *, fast_compile_elements: int = 0, **jit_kwargs):
    """``jax.jit(fun, compiler_options=compiler_options(), **jit_kwargs)``, built at the
    first call; usable as ``@jit``, ``@partial(jit, static_argnums=...)`` or
    ``jit(fun, ...)``. Inside another traced program it is a plain nested ``jax.jit`` (the
    outer program's options apply). The options are those of the platform the call runs on
    (:func:`~approxcv._placement.current_platform`: a program placed on the host's CPU
    beside an accelerator gets the CPU's), with :data:`FAST_COMPILE_OPTIONS` where the
    array arguments hold at most ``fast_compile_elements`` elements (0: never). The
    wrapper keeps ``fun`` as ``__wrapped__``."""
    if fun is None:
        return functools.partial(jit, fast_compile_elements=fast_compile_elements,
                                 **jit_kwargs)
    compiled = {}

    @functools.wraps(fun)
    def call(*args, **kwargs):
        # called while another program is traced (a model's jitted kernel inside an
        # objective): a nested jit, which takes no compile options of its own
        leaves = jax.tree_util.tree_leaves((args, kwargs))
        nested = any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)
        small = (not nested and fast_compile_elements > 0
                 and array_elements(leaves) <= fast_compile_elements)
        key = True if nested else (current_platform(), small)
        if key not in compiled:
            compiled[key] = (jax.jit(fun, **jit_kwargs) if nested else
                             jax.jit(fun, compiler_options=compiler_options(*key),
                                     **jit_kwargs))
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
