"""``jit``: ``jax.jit`` with approxcv's XLA compile options, resolved at the first call.

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

Outside a traced program, a call goes through approxcv's persistent program cache where it
is on (:mod:`approxcv._runtime.program_cache`): the program for these static arguments and argument
shapes is looked up in the wrapper's table, then on disk, and only then lowered and compiled
— a later process runs it without tracing. What that cache cannot key exactly goes through
``jax.jit`` as before.
"""
from __future__ import annotations

import functools
import inspect

import jax
import numpy as np

from . import program_cache
from .placement import current_platform


#: XLA options that trade run time for compile time (the pair ``JAX_DISABLE_MOST_
#: OPTIMIZATIONS`` sets), for programs on small inputs (module docstring)
FAST_COMPILE_OPTIONS = {"xla_backend_optimization_level": 0,
                        "xla_llvm_disable_expensive_passes": True}


@functools.cache
def compiler_options(platform: str = "cpu", fast: bool = False,
                     marked: bool = False) -> dict | None:
    """XLA options for approxcv's programs on ``platform`` (module docstring); ``fast``:
    with :data:`FAST_COMPILE_OPTIONS` too (the plain options where this XLA does not know
    them); ``marked``: with the program cache's mark (:data:`approxcv._runtime.program_cache.MARK`,
    for programs compiled through that cache)."""
    if platform != "cpu":
        return None
    options = {"xla_cpu_use_fusion_emitters": False}
    if fast:
        options.update(FAST_COMPILE_OPTIONS)
    if marked:
        options.update(program_cache.MARK)
    if program_cache.options_known(options):      # checked by an earlier process
        return options
    try:
        jax.jit(lambda x: x, compiler_options=options).lower(0.0).compile()
    except Exception:  # noqa: BLE001  (an XLA without the option: use its defaults)
        if marked:      # without the mark (a program JAX's cache hands back is not stored)
            return compiler_options(platform, fast)
        return compiler_options(platform) if fast else None
    program_cache.record_options(options)
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
    (:func:`~approxcv._runtime.placement.current_platform`: a program placed on the host's CPU
    beside an accelerator gets the CPU's), with :data:`FAST_COMPILE_OPTIONS` where the
    array arguments hold at most ``fast_compile_elements`` elements (0: never). The
    wrapper keeps ``fun`` as ``__wrapped__``."""
    if fun is None:
        return functools.partial(jit, fast_compile_elements=fast_compile_elements,
                                 **jit_kwargs)
    compiled = {}
    # programs by (options, static arguments, argument shapes), through the persistent
    # program cache (approxcv._runtime.program_cache): (callable, whether it takes the static
    # arguments too, the key of a loaded program not yet run or None; _cached_call)
    programs = program_cache.register_table({})
    # programs compiled by approxcv outside the store, by the same keys (_quiet_call)
    unbypassed = program_cache.register_table({})
    split = _ArgumentSplit(fun, jit_kwargs)

    def jitted_for(key):
        """``(jax.jit of fun, its compile options)`` for ``key``: ``True`` (nested) or
        ``(platform, small, cached)``."""
        if key not in compiled:
            options = None if key is True else compiler_options(*key)
            compiled[key] = (jax.jit(fun, **jit_kwargs) if key is True else
                             jax.jit(fun, compiler_options=options, **jit_kwargs), options)
        return compiled[key]

    @functools.wraps(fun)
    def call(*args, **kwargs):
        # called while another program is traced (a model's jitted kernel inside an
        # objective): a nested jit, which takes no compile options of its own
        leaves = jax.tree_util.tree_leaves((args, kwargs))
        nested = any(isinstance(leaf, jax.core.Tracer) for leaf in leaves)
        small = (not nested and fast_compile_elements > 0
                 and array_elements(leaves) <= fast_compile_elements)
        cached = not nested and program_cache.active()
        key = True if nested else (current_platform(), small, cached)
        jitted, options = jitted_for(key)
        if not cached:
            if nested or key[0] != "cpu" or not program_cache.quiet_jax_cache():
                return jitted(*args, **kwargs)
            # the program store is off, JAX's cache on: compiled by approxcv, so that a
            # load from JAX's cache is silent (program_cache.compile_bypassed)
            return _quiet_call(unbypassed, jitted, split, key, args, kwargs)
        # a call the program cache cannot key runs without the cache's mark: a marked
        # program must never reach JAX's cache (module docstring of program_cache)
        unmarked = functools.partial(jitted_for, (key[0], small, False))
        return _cached_call(programs, jitted, unmarked, split,
                            call.__acv_program__ + (key, options), args, kwargs)
    call.__acv_program__ = (fun, fast_compile_elements, tuple(sorted(jit_kwargs.items())))
    return call


class _ArgumentSplit:
    """Which arguments of ``fun`` are static under ``jax.jit``'s ``static_argnums`` and
    ``static_argnames`` (each resolved to the other through the signature, as ``jax.jit``
    does); ``usable`` is false when a call cannot be split exactly (other ``jax.jit``
    options, a signature that cannot be read)."""

    def __init__(self, fun, jit_kwargs):
        nums = jit_kwargs.get("static_argnums", ())
        names = jit_kwargs.get("static_argnames", ())
        self.nums = set((nums,) if isinstance(nums, int) else nums)
        self.names = set((names,) if isinstance(names, str) else names)
        self.usable = set(jit_kwargs) <= {"static_argnums", "static_argnames"}
        if self.usable and (self.nums or self.names):
            try:
                params = list(inspect.signature(fun).parameters.values())
            except (TypeError, ValueError):
                self.usable = False
                return
            positional = [p.name for p in params
                          if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
            self.usable = all(n >= 0 for n in self.nums)
            self.names |= {positional[n] for n in self.nums if n < len(positional)}
            self.nums |= {positional.index(n) for n in self.names if n in positional}

    def __call__(self, args, kwargs):
        """``(statics, dynamic args, dynamic kwargs)``; statics are ``((position,
        value)...), ((name, value)...)``."""
        positional = tuple((i, a) for i, a in enumerate(args) if i in self.nums)
        named = tuple(sorted((k, v) for k, v in kwargs.items() if k in self.names))
        dyn_args = tuple(a for i, a in enumerate(args) if i not in self.nums)
        dyn_kwargs = {k: v for k, v in kwargs.items() if k not in self.names}
        return (positional, named), dyn_args, dyn_kwargs


def _cached_call(programs, jitted, unmarked, split, program, args, kwargs):
    """Call ``jitted`` through the persistent program cache
    (:mod:`approxcv._runtime.program_cache`), its programs held in ``programs``;
    ``program`` names it (the function, its ``jit`` options and its compile options). A
    call the cache cannot key goes through ``unmarked()[0]``, the same function compiled
    without the cache's mark."""
    if not split.usable:
        return unmarked()[0](*args, **kwargs)
    statics, dyn_args, dyn_kwargs = split(args, kwargs)
    try:
        leaves, treedef = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
        table_key = (program[-2], statics, treedef, program_cache.avals(leaves))
        found = programs.get(table_key)
    except (TypeError, program_cache.Unkeyable):       # an unhashable static value
        return unmarked()[0](*args, **kwargs)
    if found is None:
        # one thread loads or compiles a program; others calling it meanwhile wait for it
        with program_cache.program_lock((id(programs), table_key)):
            found = programs.get(table_key)
            if found is None:
                ready, unchecked = program_cache.compiled_program(
                    jitted, program, statics, treedef, table_key[-1], args, kwargs)
                if ready is None:                        # no key: JAX's jit and its cache
                    ready = program_cache.compile_bypassed(unmarked()[0], args, kwargs)
                full = not isinstance(ready, jax.stages.Compiled)  # a jit takes statics too
                found = programs[table_key] = (ready, full, unchecked)
    ready, full, unchecked = found
    if unchecked is None:
        return ready(*args, **kwargs) if full else ready(*dyn_args, **dyn_kwargs)
    # a loaded program until one call has run it: each call waits for its outputs, and one
    # that fails to run is compiled again (program_cache.checked_run)
    outputs = program_cache.checked_run(ready, unchecked, dyn_args, dyn_kwargs)
    if outputs is not program_cache.NOT_RUN:
        programs[table_key] = (ready, full, None)
        return outputs
    with program_cache.program_lock((id(programs), table_key)):
        if programs.get(table_key) is found:
            programs[table_key] = (program_cache.compile_and_store(jitted, unchecked, args,
                                                                   kwargs), False, None)
        ready, full, _ = programs[table_key]
    return ready(*args, **kwargs) if full else ready(*dyn_args, **dyn_kwargs)


def _quiet_call(programs, jitted, split, key, args, kwargs):
    """Call ``jitted`` compiled for these static arguments and argument shapes by
    :func:`approxcv._runtime.program_cache.compile_bypassed` (through JAX's cache, without the line
    jaxlib 0.9-0.10 logs for each load), held in ``programs``; a call that cannot be split
    or keyed goes to ``jitted`` itself."""
    if not split.usable:
        return jitted(*args, **kwargs)
    statics, dyn_args, dyn_kwargs = split(args, kwargs)
    try:
        leaves, treedef = jax.tree_util.tree_flatten((dyn_args, dyn_kwargs))
        table_key = (key, statics, treedef, program_cache.avals(leaves))
        found = programs.get(table_key)
    except (TypeError, program_cache.Unkeyable):
        return jitted(*args, **kwargs)
    if found is None:
        with program_cache.program_lock((id(programs), table_key)):
            found = programs.get(table_key)
            if found is None:
                found = programs[table_key] = program_cache.compile_bypassed(
                    jitted, args, kwargs)
    return found(*dyn_args, **dyn_kwargs)


__all__ = ["compiler_options", "jit"]
