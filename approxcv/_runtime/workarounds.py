"""Every use of JAX's and jaxlib's private API in approxcv, and every workaround of a JAX
or jaxlib defect, in one place.

No other module of approxcv imports ``jax._src``, reaches into a private attribute of a JAX
object or calls jaxlib's internals (``tests/test_layout.py`` checks the imports). Each
workaround below opens with a ``# needed by ... -- delete when ...`` line: the JAX version
that needs it and the one at which it can go. All were written for and checked on
jax/jaxlib 0.9.2; ``pyproject.toml`` allows jax/jaxlib >= 0.4.38 but 0.10.* and 0.11.0
(:mod:`approxcv._runtime.version`), and no later release has been checked, so where no
fixed release is known the line says so ("jax>=?"). On a JAX whose internals moved, each
one fails in the way its caller already handles: the program store
(:mod:`approxcv._runtime.program_cache`) then bypasses (a key cannot be made), or a load or
store fails and is counted, and the program is compiled as by ``jax.jit``.

Two version checks stay outside, in modules that run at ``import approxcv`` and so may not
import JAX (this one does): the guard against the jaxlib releases whose LAPACK kernels can
deadlock (:mod:`approxcv._runtime.version`), and which CPUs get the loader's false ERROR
line (:func:`approxcv._runtime.compilation_cache.loader_flags_this_cpu`, the threshold
half of :data:`LOADER_FALSE_ERROR`'s workaround). Each carries the same kind of line.

Nothing here changes a global setting: the one context manager that touches JAX's
configuration (:func:`jax_cache_threshold`) sets a thread-local value for its block only,
and :func:`quiet_loader_warnings` redirects the process's stderr only around approxcv's own
load of a stored program, and writes back every line it does not drop.
"""
from __future__ import annotations

import contextlib
import io
import os
import pickle
import re
import sys
import tempfile
import threading

import jax
import jax.monitoring
import numpy as np
from jax.experimental import serialize_executable

from .version import parse_version

__all__ = ["trace_context", "jax_cache_threshold", "serialize", "deserialize",
           "unloaded_executable", "has_callbacks_or_effects", "prepare_lapack_kernels",
           "quiet_loader_warnings", "counting_jax_cache_hits", "LOADER_WARNING",
           "LOADER_FALSE_ERROR", "STORE_CHECKED_JAX", "store_checked"]


# ------------------------------------------------ where the program store may run at all

# needed by every use of private API below (the store's serialisation and its key): the
# jax/jaxlib releases the suite has passed on with the store on -- widen when another
# release has been checked (on 0.4.38-0.7.x the executable's constructor and fields differ
# and the store stored nothing)
#: ``[first, first unchecked)`` of jax and of jaxlib within which the program store is on
STORE_CHECKED_JAX = ((0, 9, 0), (0, 10, 0))


def store_checked(jax_version: str, jaxlib_version: str) -> tuple[bool, str]:
    """``(on, why)``: whether both versions lie in :data:`STORE_CHECKED_JAX`, and if not,
    a sentence saying so (the program store is then off: programs compile as by
    ``jax.jit``, and JAX's own persistent cache still serves later processes)."""
    first, after = STORE_CHECKED_JAX
    outside = [f"{name} {v}" for name, v in (("jax", jax_version), ("jaxlib", jaxlib_version))
               if not first <= parse_version(v) < after]
    if not outside:
        return True, ""
    span = f"{'.'.join(map(str, first))} <= version < {'.'.join(map(str, after))}"
    return False, (f"approxcv's program store is off: {' and '.join(outside)} lie outside "
                   f"the releases it has been checked on ({span}); programs are compiled "
                   "as by jax.jit, and JAX's own persistent cache still serves later "
                   "processes")


# ----------------------------------------------------------------- JAX's trace context

# needed by jax <= 0.9.2 (private jax._src.config; checked on 0.9.2) -- delete when
# jax>=? (the first JAX with a public trace context; none known as of 0.9.2)
def trace_context() -> str:
    """``repr`` of JAX's trace context (x64, matmul precision, default device, ...: the
    thread-local settings that decide what a trace gives), part of a program's key in the
    store. Private: ``jax._src.config.trace_context`` (JAX 0.4.x - 0.9.2 at least; JAX has
    no public equivalent as of 0.9.2). Can go when JAX exposes it; until then, a JAX without
    it makes every program a bypass (:class:`AttributeError` / :class:`ImportError`, which
    the caller turns into an unkeyable program)."""
    from jax._src import config as jax_config
    return repr(jax_config.trace_context())


# ----------------------------------------------------- JAX's persistent cache, per thread

# needed by jax <= 0.9.2 (private jax._src.config; checked on 0.9.2) -- delete when
# jax>=? (the first JAX with a public per-thread or per-call cache switch; none known)
def jax_cache_threshold(seconds: float):
    """A block in which JAX's persistent cache stores only programs that took at least
    ``seconds`` to compile, in this thread only (``float("inf")``: none). The public
    ``jax.config.update("jax_persistent_cache_min_compile_time_secs", ...)`` is global: it
    would change the threshold for the user's programs too. Private: the thread-local
    ``State`` object ``jax._src.config.persistent_cache_min_compile_time_secs`` (a context
    manager since JAX 0.4.2x; still so in 0.9.2). Can go when JAX has a public per-call way
    to keep a program out of its cache. Where it is missing: no effect (a null context)."""
    try:
        from jax._src import config as jax_config
        return jax_config.persistent_cache_min_compile_time_secs(float(seconds))
    except (ImportError, AttributeError, TypeError):
        return contextlib.nullcontext()


# --------------------------------------------------------- serializing a compiled program

# needed by jax <= 0.9.2 (private attribute; checked on 0.9.2) -- delete with
# serialize() below, when jax>=? (see _Pickler)
def unloaded_executable(compiled):
    """The executable of a ``jax.stages.Compiled`` before it was loaded (what is
    serialized), or ``None``. Private attribute, as
    ``jax.experimental.serialize_executable.serialize`` itself reads it (JAX 0.4.x -
    0.9.2); goes with :func:`serialize`."""
    return getattr(getattr(compiled, "_executable", None), "_unloaded_executable", None)


# needed by jax <= 0.9.2 (private executable attributes; checked on 0.9.2) -- delete with
# unloaded_executable()
def has_callbacks_or_effects(unloaded) -> bool:
    """Whether the unloaded executable (:func:`unloaded_executable`) has host callbacks or
    side effects (attributes of JAX's private executable class, JAX 0.9.2)."""
    return bool(getattr(unloaded, "host_callbacks", None)
                or getattr(unloaded, "ordered_effects", None)
                or getattr(unloaded, "unordered_effects", None))


# needed by jaxlib 0.9.2 ("LessThan is not serializable"; checked on 0.9.2) -- delete when
# jax>=? (the first whose serialize_executable.serialize writes every program; none known)
class _Pickler(serialize_executable._JaxPjrtPickler):
    """``jax.experimental.serialize_executable``'s (private) pickler, writing the executable
    as JAX's own cache does (``LoadedExecutable.serialize``): the client's serializer that
    ``serialize_executable.serialize`` uses refuses some CPU programs in jaxlib 0.9.2
    (``LessThan is not serializable``: a sort's comparator). Can go when
    ``serialize_executable.serialize`` writes every program JAX's cache can."""

    def persistent_id(self, obj):
        from jax._src.lib import xla_client
        if isinstance(obj, xla_client.LoadedExecutable) and hasattr(obj, "serialize"):
            return ("exec", obj.serialize())
        return super().persistent_id(obj)


# needed by jax/jaxlib 0.9.2 (deserialize_and_load takes no compile options; checked on
# 0.9.2) -- delete when jax>=? (the first whose deserialize_and_load takes them; none known)
class _Unpickler(serialize_executable._JaxPjrtUnpickler):
    """``jax.experimental.serialize_executable``'s (private) unpickler, loading the
    executable with the XLA options it was compiled with: without them jaxlib 0.9.2's CPU
    runtime looks its kernels up under other names (``Function ..._fusion not found``, or
    a crash) when the options change code generation (approxcv's classic emitters,
    ``approxcv._runtime.compile.compiler_options``).
    ``serialize_executable.deserialize_and_load`` takes no compile options (JAX 0.9.2); can
    go when it does."""

    def __init__(self, file, backend, options):
        super().__init__(file, backend)
        self.options = options

    def persistent_load(self, pid):
        if pid[0] == "exec":
            from jax._src import compiler
            compile_options = compiler.get_compile_options(
                num_replicas=1, num_partitions=1,
                env_options_overrides=self.options, backend=self.backend)
            return self.backend.deserialize_executable(
                pid[1], executable_devices=self.execution_devices,
                compile_options=compile_options)
        return super().persistent_load(pid)


class ConstantArguments(Exception):
    """A program with constant arguments, which cannot be serialized (as
    ``serialize_executable.serialize`` refuses them)."""


# needed by jax/jaxlib 0.9.2 (private attributes, _Pickler) -- delete with _Pickler
def serialize(compiled) -> tuple:
    """``(payload, in_tree, out_tree)`` of a ``jax.stages.Compiled``:
    ``serialize_executable.serialize`` with :class:`_Pickler` (private attributes read as
    that function reads them, JAX 0.9.2). :class:`ConstantArguments` for a program with
    constant arguments."""
    args_info_flat, in_tree = jax.tree_util.tree_flatten(compiled.args_info)
    if compiled._params.const_args:
        raise ConstantArguments("a program with constant arguments")
    with io.BytesIO() as file:
        _Pickler(file).dump((unloaded_executable(compiled), args_info_flat,
                             compiled._no_kwargs))
        return file.getvalue(), in_tree, compiled.out_tree


# needed by jax/jaxlib 0.9.2 (_Unpickler, prepare_lapack_kernels) -- delete with them
def deserialize(payload: bytes, in_tree, out_tree, options: dict | None):
    """The ``jax.stages.Compiled`` of a :func:`serialize` payload, loaded on the first
    device with the XLA ``options`` it was compiled with:
    ``serialize_executable.deserialize_and_load`` with :class:`_Unpickler`, after
    :func:`prepare_lapack_kernels`. The caller holds its lock and quiets the loader
    (:func:`quiet_loader_warnings`)."""
    prepare_lapack_kernels()
    backend = jax.devices()[0].client
    unloaded, args_info_flat, no_kwargs = _Unpickler(io.BytesIO(payload), backend,
                                                     options).load()
    executable = unloaded.load()
    return jax.stages.Compiled(executable, [], in_tree.unflatten(args_info_flat),
                               out_tree, no_kwargs=no_kwargs)


_LAPACK_READY = []


# needed by jaxlib 0.9.2 (a loaded program's LAPACK call crashes; checked on 0.9.2) --
# delete when jaxlib>=? (the first whose loaded executables set up their kernels; none known)
def prepare_lapack_kernels() -> None:
    """Set up jaxlib's LAPACK kernels, which JAX otherwise does when it first lowers a
    linear-algebra operation: in jaxlib 0.9.2 a loaded program that calls one before that
    crashes the process (the kernel's pointer is still null). Private: ``jaxlib.lapack``.
    Can go when loading an executable sets up the kernels it calls."""
    if _LAPACK_READY:
        return
    import jaxlib.lapack
    jaxlib.lapack.prepare_lapack_call("trsm_ffi", np.dtype(np.float64))
    _LAPACK_READY.append(True)


# ------------------------------------------------------------ the loader's WARNING lines

# needed by jaxlib 0.9.x (jax-ml/jax#38445; 0.10.* is excluded by pyproject, 0.9.2 checked)
# -- delete when jaxlib>=? (the first that no longer logs it; none checked above 0.9.2)
#: the line jaxlib 0.9-0.10 logs from C++ on *every* load of a serialized CPU executable
#: (jax-ml/jax#38445: PjRt-IFRT answers "unimplemented" to the version check and the loader
#: goes on); dropped around approxcv's own loads (:func:`quiet_loader_warnings`)
LOADER_WARNING = re.compile(r"^W\d{4} .*pjrt_executable\.cc:\d+\] Assume version "
                            r"compatibility\. PjRt-IFRT does not track XLA executable")

# needed by jaxlib 0.9.1-0.10.1 on AVX-512 CPUs (jax-ml/jax#38445) -- delete when jaxlib>=0.11
# is pyproject's floor (assumed fixed there, not checked: compilation_cache.LOADER_FIXED_IN)
#: the ERROR line jaxlib 0.9-0.10's CPU AOT loader logs on every load on a CPU with
#: AVX-512 (jax-ml/jax#38445): XLA adds LLVM *tuning* preferences (``prefer-...``,
#: ``fast-...``) to the target features, and the loader takes them for instruction sets
#: the host lacks. Only lines naming such a tuning feature match: a real mismatch (an
#: instruction set such as ``+avx512f`` missing on the host) is written back, visible.
#: Dropped around approxcv's own loads; can go with the jaxlib that skips tuning features
#: (:data:`approxcv._runtime.compilation_cache.LOADER_FIXED_IN`)
LOADER_FALSE_ERROR = re.compile(r"^E\d{4} .*cpu_aot_loader\.cc:\d+\] Loading XLA:CPU AOT "
                                r"result\. Target machine feature \+(prefer|fast)-[\w-]+ is "
                                r"not\s+supported on the host machine")

_QUIET = {"depth": 0, "saved": None, "file": None}
_QUIET_LOCK = threading.Lock()


# needed by jaxlib 0.9.x (LOADER_WARNING, LOADER_FALSE_ERROR) -- delete with the later of them
@contextlib.contextmanager
def quiet_loader_warnings():
    """A block (approxcv's load of a stored program) in which the C++ lines XLA writes to
    the process's stderr (file descriptor 2) are caught; at its end every caught line but
    :data:`LOADER_WARNING` and :data:`LOADER_FALSE_ERROR` is written back to stderr.
    Needed for jaxlib 0.9-0.10 (the WARNING on every load, and on AVX-512 CPUs the false
    ERROR, jax-ml/jax#38445); the user's ``TF_CPP_MIN_LOG_LEVEL`` is left as
    it is, so their own programs' warnings stay visible. Can go when the oldest jaxlib
    approxcv supports no longer logs it (0.9.2 does; later releases not checked here).
    Blocks in several threads share one redirection (the first opens it, the last closes
    it), so stderr is always restored. Anything that fails leaves stderr as it was."""
    opened = _open_quiet()
    try:
        yield
    finally:
        if opened:
            _close_quiet()


def _open_quiet() -> bool:
    """Redirect file descriptor 2 to a temporary file (the first block) or count one more
    block; ``False`` (nothing redirected) where that fails."""
    with _QUIET_LOCK:
        if _QUIET["depth"] == 0:
            try:
                sys.stderr.flush()
            except (AttributeError, OSError, ValueError):
                pass
            try:
                caught = tempfile.TemporaryFile()
            except OSError:
                return False
            try:
                saved = os.dup(2)
            except OSError:
                caught.close()
                return False
            try:
                os.dup2(caught.fileno(), 2)
            except OSError:
                os.close(saved)
                caught.close()
                return False
            _QUIET.update(saved=saved, file=caught)
        _QUIET["depth"] += 1
        return True


def _close_quiet() -> None:
    """End one block; the last restores file descriptor 2 and writes back what it caught
    but :data:`LOADER_WARNING` and :data:`LOADER_FALSE_ERROR`."""
    with _QUIET_LOCK:
        _QUIET["depth"] -= 1
        if _QUIET["depth"] > 0:
            return
        saved, caught = _QUIET["saved"], _QUIET["file"]
        _QUIET.update(saved=None, file=None)
        os.dup2(saved, 2)
        os.close(saved)
        caught.seek(0)
        kept = [line for line in caught.read().splitlines(keepends=True)
                if not _dropped(line.decode(errors="replace").strip())]
        caught.close()
    if kept:
        try:
            os.write(2, b"".join(kept))
        except OSError:
            pass


def _dropped(line: str) -> bool:
    """Whether a caught stderr line is one of the loader's false lines (not written back)."""
    return bool(LOADER_WARNING.search(line) or LOADER_FALSE_ERROR.search(line))


# ------------------------------------------------------------- JAX's cache hits, counted

# needed by jax < 0.5 (no jax.monitoring.unregister_event_listener; pyproject allows
# 0.4.38) -- delete the fallback branch when jax>=0.5 is pyproject's floor
@contextlib.contextmanager
def counting_jax_cache_hits():
    """A block that counts the programs JAX's persistent cache hands back in this thread
    (``hits[0]``): a JAX monitoring listener registered for the block only (public
    ``jax.monitoring``), so that approxcv leaves no listener in the user's process. On a
    JAX without ``unregister_event_listener`` nothing is counted (no listener is left
    behind; the store's threshold keeps its programs out of JAX's cache)."""
    hits, me = [0], threading.get_ident()
    unregister = getattr(jax.monitoring, "unregister_event_listener", None)
    if unregister is None:
        yield hits
        return

    def count(event: str, **kwargs) -> None:
        if event == "/jax/compilation_cache/cache_hits" and threading.get_ident() == me:
            hits[0] += 1
    jax.monitoring.register_event_listener(count)
    try:
        yield hits
    finally:
        unregister(count)
