"""JAX's persistent compilation cache under the user's cache directory.

Besides 64-bit floats this is the one global JAX setting approxcv changes (docs/design.md). A
fresh Python process otherwise recompiles every jitted program — the fit's optimiser loop,
the IJ's derivative sweep, the held-out kernel — which takes seconds, far longer than
running them. With the cache, compiled programs are written to
``<user cache dir>/approxcv/jax`` (``$XDG_CACHE_HOME`` if set, else ``~/.cache`` on
Linux, ``~/Library/Caches`` on macOS, ``%LOCALAPPDATA%`` on Windows), in one subdirectory per
kind of CPU (:func:`cpu_tag`), and a later process loads them instead of compiling. Programs
that take at least ``MIN_COMPILE_SECONDS`` (0.1 s) to compile are cached — the few that
dominate start-up.

Only the cache's own settings are changed (``jax_compilation_cache_dir``, its thresholds and
size limit): no environment variable (``XLA_FLAGS``, ``TF_CPP_MIN_LOG_LEVEL``), no log
level, no other flag: the user's own programs compile with their flags and log at their
level (those that take ``MIN_COMPILE_SECONDS`` to compile share the cache, except on the
CPUs of the next paragraph).

A silent terminal (jax-ml/jax#38445). Loading a cached program, jaxlib 0.9-0.10 logs from C++
to stderr, and nothing in the configuration avoids the cause:

* ``W ... pjrt_executable.cc] Assume version compatibility. PjRt-IFRT does not track XLA
  executable versions.``: a WARNING on *every* load (PjRt-IFRT answers "unimplemented" to
  the version check, and the loader goes on). approxcv drops this one line around its own
  loads only (``approxcv._runtime.workarounds.quiet_loader_warnings``: stderr is caught for
  the load and every other line written back); the user's ``TF_CPP_MIN_LOG_LEVEL`` is
  left as it is, so a program of the user's that JAX's own cache loads logs it as JAX
  does (``TF_CPP_MIN_LOG_LEVEL=2``, set by the user, hides it).
* ``E ... cpu_aot_loader.cc] Target machine feature +prefer-no-gather is not supported on
  the host machine ... could lead to execution errors such as SIGILL``: an ERROR on every
  load on a CPU with AVX-512, on the machine that compiled the program too: XLA adds the
  LLVM *tuning* preferences ``+prefer-no-gather,+prefer-no-scatter`` to the features of
  every AVX-512 target, and the loader of jaxlib <= 0.10 takes them for instruction sets
  the host lacks (later XLA skips ``prefer-``/``fast-`` features). The program is loaded
  and runs correctly. approxcv drops exactly these lines — those naming a ``prefer-`` or
  ``fast-`` tuning feature — around its own loads (the same block as the WARNING's,
  ``approxcv._runtime.workarounds.LOADER_FALSE_ERROR``); a line naming a real instruction set
  the host lacks is written back, visible. On such a machine with such a jaxlib
  (:func:`loader_flags_this_cpu`) JAX's cache stores nothing compiled outside approxcv
  (its threshold is infinite but in approxcv's own compiles), so no program of the
  user's is loaded with the false ERROR. (An instruction-set cap per program,
  ``compiler_options={"xla_cpu_max_isa": "AVX2"}``, does not help: the loaded program
  still records the host's AVX-512 target with its tuning features, measured with jaxlib
  0.9.2 on an AMD EPYC; only the process-wide ``XLA_FLAGS=--xla_cpu_max_isa=AVX2`` does,
  which is not approxcv's to set.) Real mismatches — a cache directory shared by machines
  with different CPUs (a home directory on NFS) — cannot arise: each kind of CPU has its
  own subdirectory, and JAX's cache key includes ``XLA_FLAGS`` and the compile options.

* ``APPROXCV_NO_COMPILATION_CACHE=1`` (set before ``import approxcv``) turns it off.
* ``APPROXCV_COMPILATION_CACHE_DIR`` (set before ``import approxcv``) puts it elsewhere
  (still one subdirectory per kind of CPU; a leading ``~`` is expanded, as in
  ``$XDG_CACHE_HOME``).
* A directory that cannot be created or written, or whose lock file is broken
  (:func:`unusable`), turns the cache off for the process with one
  :class:`~approxcv.errors.CompilationCacheWarning` (:data:`off_reason` says why), rather
  than a warning from JAX for every program read and written.
* A cache directory you configured for JAX yourself (``JAX_COMPILATION_CACHE_DIR`` or
  ``jax.config.update("jax_compilation_cache_dir", ...)`` before importing approxcv) is
  used as it is, with your settings.
* The cache only grows; delete the directory to reclaim the space (entries are
  recompiled on demand). An entry left half-written by a killed process is repaired at
  import (:func:`repair`).
"""
from __future__ import annotations

import hashlib
import os
import platform
import sys
import tempfile
import warnings
from pathlib import Path

from ..errors import CompilationCacheWarning

#: programs that compile faster than this are not cached. Loading an entry costs a file
#: read and jaxlib 0.9-0.10 logs a WARNING per load (the module docstring),
#: so tiny programs are left to compile. The README example (2,000 steps, 200 folds) in a
#: second process, on an AMD EPYC with AVX-512: 2.5-2.6 s at 0.3 s (4 entries; the
#: held-out kernel, 0.29 s to compile, was left out), 2.2-2.3 s at 0.1 s (5 entries),
#: 2.1-2.2 s at 0.03 s (7 entries); the first process 4.3-4.4 s at each
MIN_COMPILE_SECONDS = 0.1

#: environment variable that turns the cache off (any value but "", "0", "false", "no")
DISABLE_ENV = "APPROXCV_NO_COMPILATION_CACHE"

#: environment variable naming the cache's base directory (default: ``<user cache
#: dir>/approxcv/jax``)
DIR_ENV = "APPROXCV_COMPILATION_CACHE_DIR"

#: the first jaxlib whose CPU AOT loader is *assumed* to skip LLVM tuning features
#: (``prefer-``, ``fast-``); 0.9.1, 0.9.2 and 0.10.1 are reported affected (jax-ml/jax#38445).
#: If a later jaxlib still prints the loader's ERROR line, raise this.
LOADER_FIXED_IN = (0, 11)

#: why the cache is off in this process (``None`` while it is on or was never asked for)
off_reason: str | None = None

#: JAX's cache threshold for approxcv's own compiles where the global one is infinite (an
#: AVX-512 CPU whose loader logs false errors: :func:`enable`);
#: ``None`` elsewhere
own_threshold: float | None = None

#: size limit of the cache (least recently used entries are evicted beyond it)
MAX_CACHE_BYTES = 2 * 2 ** 30


def expanded(path) -> Path:
    """``path`` with a leading ``~`` or ``~user`` expanded (a directory named from the
    environment, where no shell expanded it: never a literal ``~`` folder)."""
    return Path(os.path.expanduser(os.fspath(path)))


def user_cache_dir() -> Path:
    """The per-user cache directory: ``$XDG_CACHE_HOME`` when set, else the platform's
    (platformdirs' convention); ``~`` expanded."""
    if os.environ.get("XDG_CACHE_HOME"):
        return expanded(os.environ["XDG_CACHE_HOME"])
    if sys.platform == "win32":
        return expanded(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local")
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches"
    return Path.home() / ".cache"


def cpu_flags() -> frozenset[str]:
    """The host CPU's feature flags as the kernel reports them (``/proc/cpuinfo`` on
    Linux; empty elsewhere)."""
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    return frozenset(line.partition(":")[2].split())
    except OSError:
        pass
    return frozenset()


def cpu_tag() -> str:
    """A name for this kind of CPU: the architecture and a hash of its model and feature
    flags (``x86_64-1a2b3c4d``). Programs compiled for one CPU are kept apart from those of
    another, so a cache directory shared between machines never hands a program to a CPU
    that lacks its instructions."""
    model = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="ascii", errors="replace") as f:
            model = next((line.partition(":")[2].strip() for line in f
                          if line.startswith("model name")), model)
    except OSError:
        pass
    key = "|".join([platform.machine(), model, *sorted(cpu_flags())])
    return f"{platform.machine() or 'cpu'}-{hashlib.sha256(key.encode()).hexdigest()[:8]}"


def cache_dir() -> Path:
    """Where approxcv keeps compiled programs: ``$APPROXCV_COMPILATION_CACHE_DIR`` (``~``
    expanded) or ``<user cache dir>/approxcv/jax``, then one subdirectory per kind of CPU
    (:func:`cpu_tag`)."""
    base = os.environ.get(DIR_ENV) or user_cache_dir() / "approxcv" / "jax"
    return expanded(base) / cpu_tag()


#: the lock file JAX's cache takes around every read and write (its size limit is set)
LOCK_FILE = ".lockfile"


def unusable(path: Path) -> str | None:
    """Why JAX's cache cannot work in ``path``, or ``None`` (``path`` is then created): it
    cannot be created, a file cannot be written in it (a read-only directory), or its lock
    file cannot be opened for writing (a directory or a read-only file in its place). JAX
    would warn for every program it reads and writes there (the lock is taken for both)."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        return f"cannot create {path}: {err}"
    try:
        fd, probe = tempfile.mkstemp(dir=path, prefix=".probe-")
        os.close(fd)
        os.remove(probe)
    except OSError as err:
        return f"cannot write in {path}: {err}"
    try:
        os.close(os.open(path / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644))
    except OSError as err:
        return f"cannot open its lock file {path / LOCK_FILE}: {err}"
    return None


# needed by jaxlib 0.9.1-0.10.1 on AVX-512 CPUs (jax-ml/jax#38445; with the false ERROR line
# in workarounds.LOADER_FALSE_ERROR) -- delete when jaxlib>=0.11 is pyproject's floor
def loader_flags_this_cpu(jaxlib_version: str) -> bool:
    """Whether loading a cached program prints the CPU AOT loader's false ERROR line here:
    an x86 CPU with AVX-512 and a jaxlib before :data:`LOADER_FIXED_IN` (module
    docstring)."""
    try:
        version = tuple(int(p) for p in jaxlib_version.split(".")[:2])
    except ValueError:
        return False
    return version < LOADER_FIXED_IN and "avx512f" in cpu_flags()


def switched_off(variable: str) -> bool:
    """Whether the environment variable ``variable`` says off: set to anything but "",
    "0", "false" or "no"."""
    return os.environ.get(variable, "").strip().lower() not in ("", "0", "false", "no")


def disabled() -> bool:
    """Whether :data:`DISABLE_ENV` turns the cache off."""
    return switched_off(DISABLE_ENV)


def enable(config, jaxlib_version: str = "0") -> str | None:
    """Point JAX's persistent compilation cache at :func:`cache_dir` (``config`` is
    ``jax.config``); returns the directory in use, or ``None`` when the cache is off
    (:data:`DISABLE_ENV`, or the directory is :func:`unusable`, said
    once by a :class:`~approxcv.errors.CompilationCacheWarning`; :data:`off_reason` says
    which). A directory already configured for JAX is kept, with its settings. Only the
    cache's own settings are changed: no environment variable, log level or other flag
    (module docstring)."""
    global off_reason, own_threshold
    if disabled():
        off_reason = f"{DISABLE_ENV} is set"
        return None
    if config.jax_compilation_cache_dir:
        return config.jax_compilation_cache_dir
    path = cache_dir()
    why = unusable(path)
    if why is not None:
        off_reason = why
        warnings.warn(f"approxcv's compilation cache is off in this process: {why}. "
                      f"Programs are compiled anew in every process; set {DIR_ENV} to a "
                      f"writable directory, or {DISABLE_ENV}=1 to do without the cache and "
                      f"this warning", CompilationCacheWarning, stacklevel=2)
        return None
    affected = loader_flags_this_cpu(jaxlib_version)
    config.update("jax_compilation_cache_dir", str(path))
    # where the loader prints false errors for every program it loads, JAX's cache writes
    # nothing outside approxcv's compiles (approxcv._runtime.compile raises the threshold for its
    # own, in their thread; their loads drop the false lines): no program of the user's is
    # loaded from approxcv's cache with the loader's false ERROR
    config.update("jax_persistent_cache_min_compile_time_secs",
                  float("inf") if affected else MIN_COMPILE_SECONDS)
    own_threshold = MIN_COMPILE_SECONDS if affected else None
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
