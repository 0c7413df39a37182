"""A guard against the jaxlib releases whose CPU LAPACK kernels can deadlock.

jaxlib 0.10.0 - 0.11.0 run the batch of a batched LAPACK call (``cholesky``, triangular
solves, ... under ``vmap``) as chunks on XLA's CPU thread pool and block until they finish
(``jax::ParallelBatchMap``). When the XLA runtime runs as many independent batched LAPACK
calls at once as the pool has threads, every thread waits for chunks that no free thread
can run, and the call never returns. We caught it with ``gdb`` in approxcv's batched exact
refits on a 2-core machine (both pool threads in ``lapack_dtrsm_ffi`` ->
``ParallelBatchMap`` -> ``BlockingCounter::Wait``). jaxlib 0.9.x does not have this path
and 0.11.1 compiles it out, so ``pyproject.toml`` excludes 0.10.* and 0.11.0, and importing
approxcv with such a jaxlib warns.
"""
from __future__ import annotations

import re
import warnings

# needed by jaxlib 0.10.0-0.11.0 (excluded by pyproject; a guard for installs that ignore it)
# -- delete when jaxlib>=0.11.1 is pyproject's floor
DEADLOCK_PRONE = ((0, 10, 0), (0, 11, 1))   # [first, first fixed)


def parse_version(version: str) -> tuple[int, int, int]:
    """``"0.10.2"`` -> ``(0, 10, 2)``; suffixes (``.dev``, ``rc1``, ``+local``) are dropped."""
    parts = [int(p) for p in re.findall(r"\d+", version.split("+")[0])[:3]]
    return tuple(parts + [0] * (3 - len(parts)))


def deadlock_prone(version: str) -> bool:
    """True for the jaxlib versions whose batched CPU LAPACK kernels can deadlock."""
    first, fixed = DEADLOCK_PRONE
    return first <= parse_version(version) < fixed


def warn_if_deadlock_prone(version: str) -> None:
    """Warn (``RuntimeWarning``) when ``version`` of jaxlib is in :data:`DEADLOCK_PRONE`."""
    if deadlock_prone(version):
        warnings.warn(
            f"jaxlib {version} can deadlock on CPU in batched LAPACK calls (cholesky or "
            "triangular solves under vmap), which approxcv's batched refits use: a call may "
            "never return. Install jax/jaxlib < 0.10 or >= 0.11.1 "
            "(pip install \"jax<0.10\" \"jaxlib<0.10\").", RuntimeWarning, stacklevel=3)
