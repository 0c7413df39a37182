"""JAX's persistent compilation cache under the user's cache directory.

Besides 64-bit floats this is the one global JAX setting approxcv changes (docs/design.md). A
fresh Python process otherwise recompiles every jitted program — the fit's optimiser loop,
the IJ's derivative sweep, the held-out kernel — which takes seconds, far longer than
running them. With the cache, compiled programs are written to
``<user cache dir>/approxcv/jax`` (``$XDG_CACHE_HOME`` if set, else ``~/.cache`` on
Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows) and a later process loads
them instead of compiling. Programs that take at least ``MIN_COMPILE_SECONDS`` (0.3 s) to
compile are cached — the few that dominate start-up.

* ``APPROXCV_NO_COMPILATION_CACHE=1`` (set before ``import approxcv``) turns it off.
* A cache directory you configured for JAX yourself (``JAX_COMPILATION_CACHE_DIR`` or
  ``jax.config.update("jax_compilation_cache_dir", ...)`` before importing approxcv) is
  used as it is, with your settings.
* The cache only grows; delete the directory to reclaim the space (entries are
  recompiled on demand). An entry left half-written by a killed process is repaired at
  import (:func:`repair`).
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

#: programs that compile faster than this are not cached: on jaxlib 0.9-0.10 every entry
#: loaded from the cache prints one to three log lines on stderr (jax-ml/jax#38445), so
#: caching every small program (0 s) made a warm start print ~80 lines; at 0.3 s a warm
#: fit + IJ of an HMM loads 3 programs (EM, the (F, g, H, J) sweep, the held-out kernel;
#: 9 lines), the ones whose compilation dominates the start-up. (At 0.5 s the EM program,
#: 0.4-0.6 s to compile, was cached in one cold run of two.)
MIN_COMPILE_SECONDS = 0.3

#: environment variable that turns the cache off (any value but "", "0", "false", "no")
DISABLE_ENV = "APPROXCV_NO_COMPILATION_CACHE"


#: size limit of the cache (least recently used entries are evicted beyond it)
MAX_CACHE_BYTES = 2 * 2 ** 30


def user_cache_dir() -> Path:
    """The per-user cache directory: ``$XDG_CACHE_HOME`` when set, else the platform's
    (platformdirs' convention)."""
    if os.environ.get("XDG_CACHE_HOME"):
        return Path(os.environ["XDG_CACHE_HOME"])
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    return Path.home() / ".cache"


def cache_dir() -> Path:
    """Where approxcv keeps compiled programs: ``<user cache dir>/approxcv/jax``."""
    return user_cache_dir() / "approxcv" / "jax"


def disabled() -> bool:
    """Whether :data:`DISABLE_ENV` turns the cache off."""
    return os.environ.get(DISABLE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def enable(config) -> str | None:
    """Point JAX's persistent compilation cache at :func:`cache_dir` (``config`` is
    ``jax.config``); returns the directory in use, or ``None`` when the cache is off
    (:data:`DISABLE_ENV`, or the directory cannot be created). A directory already
    configured for JAX is kept, with its settings."""
    if disabled():
        return None
    if config.jax_compilation_cache_dir:
        return config.jax_compilation_cache_dir
    path = cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError:
        return None
    config.update("jax_compilation_cache_dir", str(path))
    config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    config.update("jax_persistent_cache_min_entry_size_bytes", -1)
    # a size limit turns on JAX's eviction, and with it the file lock around every read and
    # write: without it an entry is written in place, and a process reading it meanwhile
    # (test workers, exact CV in a process pool) loads a partial executable and crashes
    config.update("jax_compilation_cache_max_size", MAX_CACHE_BYTES)
    repair(path)
    return str(path)


def repair(path: Path) -> int:
    """Give every cache entry without its access-time file one (time 0: evicted first);
    returns how many. JAX writes an entry's ``-cache`` file, then its ``-atime`` file; a
    process killed between the two leaves an entry that JAX's eviction cannot read, and
    from then on *every* new entry fails to be written (a ``UserWarning`` per program, and
    no program is cached again). One directory listing at import (~1 ms per 2,000 files)."""
    try:
        names = set(os.listdir(path))
        orphans = [n[:-len("-cache")] for n in names
                   if n.endswith("-cache") and n[:-len("-cache")] + "-atime" not in names]
        for key in orphans:
            (path / f"{key}-atime").write_bytes((0).to_bytes(8, "little"))
    except OSError:
        return 0
    return len(orphans)
