"""A persistent cache of approxcv's compiled programs, keyed *before* tracing.

JAX's persistent compilation cache (:mod:`approxcv._runtime.compilation_cache`) is keyed by the
lowered program, so a later process still traces and lowers every program before it can
load one: in the README example (PoissonHMM(2) on 2,000 steps, IJ on 200 folds) a second
process spent 0.64 s tracing and 0.37 s lowering, of its 2.1 s, to load programs it already
had. This cache keys a program by what determines it — the function and the values it
closes over, the static arguments, the shapes and dtypes of the others, the compile
options, and the environment (below) — and stores the compiled executable
(``jax.experimental.serialize_executable``) under that key, so a later process calls it
without tracing, lowering or compiling (a load takes milliseconds).

A key is only made from what can be named exactly; anything else is a bypass (the program
goes through ``jax.jit`` as before, with JAX's own cache, compiled without :data:`MARK`),
never a guess:

* **functions and classes** of approxcv itself (the key holds the digest of every source
  file of the installed package, :func:`source_digest`) or of the libraries approxcv runs
  on (:data:`TRUSTED_ROOTS`; their versions are in the key), by module and qualified name,
  with the values their closures and defaults hold, recursively. A function of any other
  module — a user's, a test's, ``__main__`` — is a bypass: its body is not in the key;
* **values**: ``None``, numbers, strings, tuples, lists, dicts, sets, NumPy and JAX arrays of
  at most :data:`MAX_ARRAY_ELEMENTS` elements (by their bytes), dtypes, pytree definitions,
  ``functools.partial`` objects, and objects of approxcv's own classes (by their attributes);
* **the environment** (:func:`environment`): the versions of Python, JAX, jaxlib and the
  trusted libraries, ``XLA_FLAGS``, every JAX configuration value but the cache's own, JAX's
  trace context (x64, matmul precision, ...), and approxcv's module-level settings: every
  number, string or tuple bound at module or class level in approxcv's modules, so a
  changed setting is a different key (:func:`namespace_digest`). A function or mock of
  another module bound there (a test's monkeypatch) turns the cache off for that call.

It is on only where it is safe and useful: approxcv's compilation cache is on in its own
directory (so that on a CPU whose loader logs false errors JAX's cache holds approxcv's
programs only, :data:`approxcv._runtime.compilation_cache.own_threshold`), JAX runs on
one CPU device, ``jax_disable_jit`` is off, ``APPROXCV_NO_PROGRAM_CACHE`` is unset, and the
installed jax and jaxlib lie in the releases it has been checked on
(:data:`~approxcv._runtime.workarounds.STORE_CHECKED_JAX`; outside them it is off, said once
in a ``RuntimeWarning`` and ``stats["off"]``).
Programs whose trace, lower and compile took at least :data:`MIN_SECONDS` are stored, one
file each under ``<compilation cache>/programs`` (written atomically); the directory is kept
under :data:`MAX_BYTES` by removing the least recently written entries. :data:`stats`
counts loads, stores, compiles, bypasses and rejected entries (with reasons) in this
process.

An entry is verified before any of it reaches XLA: it starts with a header naming its
format (:data:`ENTRY_FORMAT`), the key it was stored under and the sha256 of the bytes
after the header (:func:`entry_bytes`, :func:`verified_payload`). An entry damaged on disk
(XLA's deserializer does not check its input: 64 flipped bytes printed protobuf's "invalid
UTF-8" errors, or killed the process with SIGILL when the program ran), one stored under
another key (a swapped or copied file), one of an earlier format, or one XLA cannot load or
run is *rejected*: removed, counted in :data:`stats` (``rejected``, and its reason), and the
program is compiled again and stored anew, without a line on stderr.

A loaded program's calls are waited for until one has run it, and one that fails to run
(any exception: XLA's runtime error, or JAX's ``TypeError`` for arguments the executable
was not compiled for) is rejected likewise. The line jaxlib 0.9-0.10 logs for every load is
dropped around the load (:func:`approxcv._runtime.workarounds.quiet_loader_warnings`); the
private JAX API the store needs lives in :mod:`approxcv._runtime.workarounds`. jaxlib 0.9.2
can write a CPU executable without all its kernels (``Function select_select_fusion not
found`` when run: seen once in a test run that shared the directory between two
processes, not reproduced). The known cause is an
executable that JAX's own cache handed back; programs compiled here are therefore kept out
of JAX's cache (:func:`_outside_jax_cache`, and :data:`MARK`, which a bypassed call does
not carry), and one JAX's cache returned during a compile is not stored. As a precaution,
XLA deserializes or compiles for this cache one program at a time per process (the failure
was seen where two threads loaded at once).
"""
from __future__ import annotations

import collections
import contextlib
import enum
import functools
import hashlib
import io
import os
import pickle
import re
import sys
import tempfile
import threading
import time
import types
import warnings
from importlib import metadata
from pathlib import Path

import jax
import numpy as np

from . import compilation_cache, setup, workarounds

__all__ = ["use_directory", "directory", "active", "paused", "fingerprint", "Unkeyable",
           "program_key", "environment", "namespace_digest", "source_digest", "stats", "clear", "MIN_SECONDS",
           "MAX_BYTES", "MAX_ARRAY_ELEMENTS", "TRUSTED_ROOTS", "DISABLE_ENV", "MARK",
           "ENTRY_FORMAT", "RejectedEntry", "entry_bytes", "verified_payload", "reject"]

#: environment variable that turns this cache off (any value but "", "0", "false", "no")
DISABLE_ENV = "APPROXCV_NO_PROGRAM_CACHE"
#: programs whose trace + lower + compile took less are not stored (a load costs a file
#: read and a few milliseconds)
MIN_SECONDS = 0.01
#: size limit of the directory (least recently written entries removed beyond it)
MAX_BYTES = 2 ** 30
#: arrays held by value in a key (closures, static arguments) have at most this many
#: elements; a larger one is a bypass
MAX_ARRAY_ELEMENTS = 4096
#: top-level packages whose functions and classes a key may name (their versions are in
#: the key); approxcv's own are covered by :func:`source_digest`
TRUSTED_ROOTS = frozenset({
    "approxcv", "jax", "jaxlib", "numpy", "scipy", "optax", "optimistix", "lineax",
    "equinox", "builtins", "math", "operator", "functools", "itertools", "collections",
    "typing"})
#: an XLA option added to the programs compiled through this cache: it has no effect on
#: CPU code (a GPU option) but is part of JAX's cache key, so those programs never match
#: entries of JAX's cache written outside it (which would load but not serialize whole)
MARK = {"xla_gpu_enable_cublaslt": True}
#: what a key's format is; raise it when the key changes meaning
SCHEMA = "approxcv-program-1"
#: the first line of a stored entry (:func:`entry_bytes`); raise it when the entry's layout
#: changes (entries of another format are rejected and replaced)
ENTRY_FORMAT = b"approxcv-program-entry-2"

#: counters of this process: ``loaded``, ``stored``, ``compiled``, ``bypassed``,
#: ``rejected`` (stored entries refused: damaged, of another key or format, or failing to
#: load or run; each compiled again) and ``reasons`` (a Counter of why calls bypassed the
#: cache and why entries were rejected)
stats = {"loaded": 0, "stored": 0, "compiled": 0, "bypassed": 0, "rejected": 0,
         "reasons": collections.Counter()}

#: dir: a directory set by use_directory; default: the directory() resolved (False: off);
#: usable: the platform allows it; paused: paused(); bytes: the directory's size as known
_STATE = {"dir": None, "default": None, "usable": None, "paused": False, "bytes": None}
_LOCK = threading.Lock()
#: held while XLA serializes, deserializes or compiles an executable for this cache: one at
#: a time per process (a precaution: the one failure of a loaded program seen, jaxlib
#: 0.9.2's ``Function ... not found``, was in a process whose threads loaded at once)
_XLA_LOCK = threading.Lock()


class Unkeyable(Exception):
    """A value that no key can name exactly (module docstring): the call bypasses the
    cache."""


def use_directory(directory) -> None:
    """Keep programs under ``directory`` from now on (``~`` expanded; ``None``: back to the
    default, :func:`directory`)."""
    _STATE["dir"] = None if directory is None else compilation_cache.expanded(directory)
    _STATE["usable"] = _STATE["bytes"] = None


def directory() -> Path | None:
    """Where programs are kept: the directory :func:`use_directory` set, else
    ``programs`` in approxcv's compilation cache when approxcv configured that cache itself
    (:func:`approxcv._runtime.setup.configure`), else ``None`` (off). Resolved once configured
    (every call of a program asks, and naming the CPU reads ``/proc/cpuinfo``)."""
    if _STATE["dir"] is not None:
        return _STATE["dir"]
    if _STATE["default"] is None and setup.configured():
        in_use = setup.cache_directory()
        _STATE["default"] = (Path(in_use) / "programs" if in_use
                             and Path(in_use) == compilation_cache.cache_dir() else False)
    return _STATE["default"] or None


def disabled_by_env() -> bool:
    """Whether :data:`DISABLE_ENV` turns the cache off."""
    return compilation_cache.switched_off(DISABLE_ENV)


@contextlib.contextmanager
def paused():
    """A block in which no call goes through this cache (every program is traced and
    lowered, as a test that counts lowerings expects)."""
    before = _STATE["paused"]
    _STATE["paused"] = True
    try:
        yield
    finally:
        _STATE["paused"] = before


def active() -> bool:
    """Whether calls go through this cache now (module docstring)."""
    if _STATE["paused"] or directory() is None or jax.config.jax_disable_jit:
        return False
    if _STATE["usable"] is None:
        _STATE["usable"] = (not disabled_by_env() and jax.default_backend() == "cpu"
                            and jax.device_count() == 1 and _checked_release())
    return _STATE["usable"]


def _checked_release() -> bool:
    """Whether the installed jax and jaxlib lie in the releases the store has been
    checked on (:data:`~approxcv._runtime.workarounds.STORE_CHECKED_JAX`); outside them the
    store is off, said once per process (``stats["off"]`` and a ``RuntimeWarning``)."""
    on, why = workarounds.store_checked(jax.__version__, metadata.version("jaxlib"))
    if not on:
        stats["off"] = why
        warnings.warn(why, RuntimeWarning, stacklevel=2)
    return on


def quiet_jax_cache() -> bool:
    """Whether a call that does not go through this cache (:func:`active` is false: it is
    turned off, or JAX's cache is the user's own) should be compiled by
    :func:`compile_bypassed`, so that a load from JAX's cache is silent: JAX's cache is on,
    on one CPU device (where this cache would run), not paused, jit not disabled."""
    if _STATE["paused"] or jax.config.jax_disable_jit or not jax.config.jax_compilation_cache_dir:
        return False
    if _STATE.get("one_cpu") is None:
        _STATE["one_cpu"] = jax.default_backend() == "cpu" and jax.device_count() == 1
    return _STATE["one_cpu"]


def clear() -> None:
    """Forget the programs held in this process (as ``jax.clear_caches`` does for JAX's):
    the wrappers of :func:`approxcv._runtime.compile.jit` register their in-memory tables here."""
    for table in list(_TABLES):
        table.clear()
    with _LOCK:
        _PROGRAM_LOCKS.clear()


#: a lock per program being loaded or compiled (:func:`program_lock`)
_PROGRAM_LOCKS: dict = {}


def program_lock(key) -> threading.Lock:
    """The lock of the program ``key`` (any hashable name): threads that call one program
    at once load or compile it once (two loaded or compiled copies only cost time)."""
    with _LOCK:
        return _PROGRAM_LOCKS.setdefault(key, threading.Lock())


_TABLES: list = []


def register_table(table: dict) -> dict:
    """Let :func:`clear` empty ``table``; returns it."""
    _TABLES.append(table)
    return table


# --------------------------------------------------------------------------- fingerprints

def _root(module: str | None) -> str:
    return (module or "").partition(".")[0]


def _trusted(module: str | None) -> bool:
    """Whether a key may name functions and classes of ``module``: approxcv's, the
    libraries' of :data:`TRUSTED_ROOTS`, or Python's standard library's (their versions are
    in the key)."""
    root = _root(module)
    return root in TRUSTED_ROOTS or (root in sys.stdlib_module_names and root != "__main__")


@functools.cache
def _installed(module: str) -> bool:
    """Whether ``module`` is part of an installed library (trusted, standard library, or a
    file under ``site-packages``/``dist-packages``), not a script's or a test's."""
    if _trusted(module):
        return True
    found = sys.modules.get(module)
    path = str(getattr(found, "__file__", "") or "")
    return "site-packages" in path or "dist-packages" in path


def _named(obj, what: str) -> str:
    """``module:qualname`` of a function or class of a trusted package, else
    :class:`Unkeyable`."""
    module = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None) or getattr(obj, "__name__", None)
    if not _trusted(module) or not qualname:
        raise Unkeyable(f"{what} of module {module!r}")
    return f"{module}:{qualname}"


def _array(a) -> str:
    a = np.asarray(a)
    if a.size > MAX_ARRAY_ELEMENTS or a.dtype == object:
        raise Unkeyable(f"array of {a.size} elements held by value")
    digest = hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()[:24]
    return f"array({a.dtype.str},{a.shape},{digest})"


def fingerprint(x, _seen=None, _depth: int = 0) -> str:
    """A string that names ``x`` exactly (module docstring), or :class:`Unkeyable`."""
    if _depth > 40:
        raise Unkeyable("nested too deeply")
    t = type(x)
    if x is None or t in (bool, int, float, complex, str, bytes):
        return f"{t.__name__}:{x!r}"
    if isinstance(x, (np.generic, np.ndarray)):
        return _array(x)
    if isinstance(x, jax.Array):
        if isinstance(x, jax.core.Tracer):
            raise Unkeyable("a tracer")
        return _array(x)
    if isinstance(x, np.dtype):
        return f"dtype:{x.str}"
    if isinstance(x, jax.tree_util.PyTreeDef):
        text = str(x)
        if " at 0x" in text:
            raise Unkeyable("a pytree definition naming an object by address")
        return f"treedef:{text}"
    _seen = () if _seen is None else _seen
    if id(x) in _seen:                  # a function that calls itself: its place on the path
        return f"back:{_seen.index(id(x))}"
    _seen = _seen + (id(x),)
    sub = functools.partial(fingerprint, _seen=_seen, _depth=_depth + 1)
    if isinstance(x, type):
        return "type:" + _named(x, "a class")
    if isinstance(x, enum.Enum):
        return f"enum:{_named(t, 'an enum')}.{x.name}"
    if t in (tuple, list):
        return f"{t.__name__}(" + ",".join(sub(v) for v in x) + ")"
    if isinstance(x, tuple) and hasattr(t, "_fields"):        # a NamedTuple
        return f"{_named(t, 'a named tuple')}(" + ",".join(sub(v) for v in x) + ")"
    if t is dict:
        return "dict{" + ",".join(sorted(f"{sub(k)}:{sub(v)}" for k, v in x.items())) + "}"
    if t in (set, frozenset):
        return f"{t.__name__}{{" + ",".join(sorted(sub(v) for v in x)) + "}"
    if isinstance(x, functools.partial):
        return (f"partial({sub(x.func)};{sub(x.args)};{sub(x.keywords)})")
    if isinstance(x, types.MethodType):
        return f"method({sub(x.__func__)};{sub(x.__self__)})"
    program = getattr(x, "__acv_program__", None)
    if program is not None:                     # a function wrapped by compile.jit
        return "program(" + ",".join(sub(v) for v in program) + ")"
    if isinstance(x, types.FunctionType):
        return _function(x, sub)
    if isinstance(x, (types.BuiltinFunctionType, np.ufunc)):
        return "builtin:" + _named(x, "a built-in function")
    if hasattr(x, "__wrapped__") and _trusted(t.__module__):
        # functools.cache, jax.jit, jax.custom_jvp/vjp objects: the function they wrap
        # (rules of custom derivatives are approxcv's source, in the key)
        return f"wrapped({_named(t, 'a wrapper')};{sub(x.__wrapped__)})"
    if _root(t.__module__) == "approxcv":
        return f"object({_named(t, 'an object')};{sub(_attributes(x))})"
    raise Unkeyable(f"a {t.__module__}.{t.__qualname__} value")


def _function(f, sub) -> str:
    """A function by name, closure and defaults."""
    name = _named(f, "a function")
    cells = tuple(c.cell_contents if _filled(c) else "<empty>" for c in f.__closure__ or ())
    return (f"function({name};{sub(cells)};{sub(f.__defaults__)};"
            f"{sub(f.__kwdefaults__)})")


def _filled(cell) -> bool:
    try:
        cell.cell_contents
    except ValueError:
        return False
    return True


def _attributes(x) -> dict:
    """The attributes of an approxcv object (``__dict__`` and ``__slots__``)."""
    attrs = dict(getattr(x, "__dict__", {}))
    for cls in type(x).__mro__:
        for slot in getattr(cls, "__slots__", ()):
            if slot not in ("__dict__", "__weakref__") and hasattr(x, slot):
                attrs[slot] = getattr(x, slot)
    return attrs


# ---------------------------------------------------------------------------- environment

#: the installed approxcv package, whose sources :func:`source_digest` reads (this module
#: lives in its ``_runtime/``)
PACKAGE_ROOT = Path(__file__).resolve().parents[1]


@functools.cache
def source_digest() -> str:
    """sha256 of every ``.py`` file of the installed approxcv package (names and bytes)."""
    h = hashlib.sha256()
    for path in sorted(PACKAGE_ROOT.rglob("*.py")):
        h.update(str(path.relative_to(PACKAGE_ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


@functools.cache
def _versions() -> str:
    names = sorted(r for r in TRUSTED_ROOTS if r != "approxcv")
    found = []
    for name in names:
        try:
            found.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            pass
    return f"python={sys.version};" + ";".join(found)


_CACHE_SETTINGS = ("compilation_cache", "persistent_cache", "log_compiles",
                   "explain_cache_misses", "logging_level")


def environment() -> str:
    """What besides a program's own key decides its compiled code (module docstring)."""
    try:
        context = workarounds.trace_context()      # JAX's trace context (private)
    except (ImportError, AttributeError) as err:
        raise Unkeyable(f"JAX's trace context is unavailable ({err})") from None
    if " at 0x" in context:
        raise Unkeyable("JAX's trace context names an object by address")
    settings = sorted((k, repr(v)) for k, v in jax.config.values.items()
                      if not any(s in k for s in _CACHE_SETTINGS))
    return "|".join([_toolchain(), source_digest(), repr(settings), context])


def _toolchain() -> str:
    """The key's format, the versions of Python and the libraries, ``XLA_FLAGS`` and the
    backend: what decides how XLA compiles and which options it knows (part of
    :func:`environment`; the key of :func:`record_options`)."""
    return "|".join([SCHEMA, _versions(), os.environ.get("XLA_FLAGS", ""),
                     jax.default_backend()])


def namespace_digest() -> str:
    """sha256 of approxcv's module- and class-level settings (module docstring);
    :class:`Unkeyable` when a function, class or mock of a script or test (a module of no
    installed library) is bound in approxcv's namespace."""
    h = hashlib.sha256()
    for name in sorted(m for m in list(sys.modules) if _root(m) == "approxcv"):
        module = sys.modules.get(name)
        if module is None:
            continue
        # a copy: a lazy import in another thread may bind a name meanwhile
        for attr, value in sorted(dict(vars(module)).items()):
            _setting(h, f"{name}.{attr}", value, name)
            if isinstance(value, type) and value.__module__ == name:
                for cattr, cvalue in sorted(vars(value).items()):
                    if cattr.startswith("__"):
                        continue
                    _setting(h, f"{name}.{attr}.{cattr}", cvalue, name)
    return h.hexdigest()


_SIMPLE = (bool, int, float, complex, str, bytes, type(None))


def _setting(h, where: str, value, module: str) -> None:
    if isinstance(value, _SIMPLE) or (isinstance(value, (tuple, frozenset))
                                      and all(isinstance(v, _SIMPLE) for v in value)):
        text = (repr(sorted(value, key=repr)) if isinstance(value, frozenset)
                else repr(value))                  # a set's order varies by process
        h.update(f"{where}={text};".encode())
        return
    if isinstance(value, (staticmethod, classmethod)):
        value = value.__func__
    if isinstance(value, (types.FunctionType, type)):
        origin = getattr(value, "__module__", None)
        if not _installed(origin or "__main__"):
            raise Unkeyable(f"{where} is bound to {origin}.{value.__qualname__}")
        return
    if _root(type(value).__module__) == "unittest":
        raise Unkeyable(f"{where} is a mock")


# ------------------------------------------------------------------------------- the keys

def avals(leaves) -> tuple:
    """``(shape, dtype, weak)`` of each dynamic argument (Python scalars by type). A NumPy
    scalar is an array (``np.float64`` is also a Python ``float``, but JAX gives it the
    strong type of a 0-d array: the same program as a ``jax.Array`` of its dtype)."""
    out = []
    for leaf in leaves:
        if hasattr(leaf, "shape") and hasattr(leaf, "dtype"):
            out.append((tuple(leaf.shape), str(leaf.dtype),
                        bool(getattr(leaf, "weak_type", False))))
        elif isinstance(leaf, (bool, int, float, complex)):
            out.append(type(leaf).__name__)
        else:
            raise Unkeyable(f"a {type(leaf).__name__} argument")
    return tuple(out)


def program_key(program, statics, treedef, shapes) -> str:
    """The file name of a program: sha256 of the environment, approxcv's settings, the
    program (its function, options), its static arguments and its arguments' shapes."""
    text = "|".join([environment(), namespace_digest(), fingerprint(program),
                     fingerprint(statics), fingerprint(treedef), repr(shapes)])
    return hashlib.sha256(text.encode()).hexdigest()


# ---------------------------------------------------------------------------- the storage

class RejectedEntry(Exception):
    """A stored entry that is not, byte for byte, what was stored under its key (the
    message says why): it is never handed to XLA."""


def entry_bytes(key: str, payload: bytes) -> bytes:
    """The file of the program ``key``: a header of three lines — :data:`ENTRY_FORMAT`,
    ``key`` and the sha256 of ``payload`` — then ``payload``."""
    digest = hashlib.sha256(payload).hexdigest()
    return b"\n".join([ENTRY_FORMAT, key.encode(), digest.encode(), payload])


def verified_payload(key: str, blob: bytes) -> bytes:
    """The payload of the entry ``blob`` read under ``key`` (:func:`entry_bytes`), or
    :class:`RejectedEntry`: another format, another key, or bytes other than those
    written."""
    parts = blob.split(b"\n", 3)
    if len(parts) != 4 or parts[0] != ENTRY_FORMAT:
        raise RejectedEntry("entry of another format")
    stored_key, digest, payload = parts[1:]
    if stored_key != key.encode():
        raise RejectedEntry("entry stored under another key")
    if hashlib.sha256(payload).hexdigest().encode() != digest:
        raise RejectedEntry("damaged entry (digest mismatch)")
    return payload


def load(key: str, options: dict | None):
    """The stored program ``key`` (compiled with the XLA ``options``), or ``None``: none
    stored, or an entry rejected (:func:`verified_payload`; one XLA cannot load), which is
    then removed and counted (:func:`reject`)."""
    path = directory() / key
    try:
        blob = path.read_bytes()
    except OSError:
        return None
    try:
        return _deserialize(verified_payload(key, blob), options)
    except RejectedEntry as why:
        reject(key, str(why))
    except Exception as err:  # noqa: BLE001  (one XLA cannot load: compiled again)
        reject(key, f"unreadable entry: {type(err).__name__}: {err}")
    return None


def reject(key: str, why: str) -> None:
    """Count the stored program ``key`` as rejected (``why``, in :data:`stats`) and remove
    it: the caller compiles it again and stores it anew."""
    stats["rejected"] += 1
    stats["reasons"][why[:160]] += 1
    discard(key)


def _serialize(compiled) -> tuple:
    """``(payload, in_tree, out_tree)`` of ``compiled`` (:func:`approxcv._runtime.workarounds.
    serialize`); :class:`Unkeyable` for a program with constant arguments."""
    try:
        return workarounds.serialize(compiled)
    except workarounds.ConstantArguments as why:
        raise Unkeyable(str(why)) from None


def _deserialize(blob: bytes, options: dict | None):
    """The program of a verified payload (:func:`verified_payload`) loaded with the XLA
    ``options`` it was compiled with (:func:`approxcv._runtime.workarounds.deserialize`), one
    at a time, without the line jaxlib 0.9-0.10 logs for every load
    (:func:`approxcv._runtime.workarounds.quiet_loader_warnings`)."""
    payload, in_tree, out_tree = pickle.loads(blob)
    with _XLA_LOCK, workarounds.quiet_loader_warnings():
        return workarounds.deserialize(payload, in_tree, out_tree, options)


def store(key: str, compiled) -> None:
    """Write ``compiled`` under ``key`` atomically (a failure only leaves it unstored)."""
    folder = directory()
    if (folder / key).exists():     # another thread stored it (serializing a program that
        return                      # has run may fail: XLA's sort comparator, LessThan)
    why = unstorable(compiled)
    if why is not None:
        stats["reasons"][f"not stored: {why}"] += 1
        return
    try:
        with _XLA_LOCK:
            blob = entry_bytes(key, pickle.dumps(_serialize(compiled)))
        folder.mkdir(parents=True, exist_ok=True)
        _make_room(folder, len(blob))
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-")
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, folder / key)
        _STATE["bytes"] += len(blob)
        stats["stored"] += 1
    except Exception as err:  # noqa: BLE001  (not stored: compiled again next time)
        stats["reasons"][f"not stored: {type(err).__name__}: {err}"[:160]] += 1


#: the custom calls a stored program may make: jaxlib's LAPACK kernels, set up before a
#: load (:func:`approxcv._runtime.workarounds.prepare_lapack_kernels`)
STORABLE_CUSTOM_CALLS = ("lapack_",)


def unstorable(compiled) -> str | None:
    """Why ``compiled`` cannot be stored, or ``None``: host callbacks or side effects (they
    refer to objects of this process), or a custom call other than
    :data:`STORABLE_CUSTOM_CALLS` (whose kernel a later process may not have set up)."""
    unloaded = workarounds.unloaded_executable(compiled)
    if unloaded is None:
        return "not serializable"
    if workarounds.has_callbacks_or_effects(unloaded):
        return "host callbacks or effects"
    targets = set(re.findall(r'custom_call_target="([^"]+)"', compiled.as_text() or ""))
    other = sorted(t for t in targets if not t.startswith(STORABLE_CUSTOM_CALLS))
    return f"custom call {other[0]}" if other else None


def _make_room(directory: Path, incoming: int) -> None:
    """Keep the directory under :data:`MAX_BYTES` with ``incoming`` more bytes: its size is
    read once per process and then counted; past the limit it is read again and the least
    recently written entries are removed."""
    if _STATE["bytes"] is None:
        _STATE["bytes"] = sum(size for _, size, _ in _entries(directory))
    if _STATE["bytes"] + incoming <= MAX_BYTES:
        return
    entries = _entries(directory)                   # other processes write here too
    total = sum(size for _, size, _ in entries) + incoming
    for _, size, path in sorted(entries):
        if total <= MAX_BYTES:
            break
        try:
            os.remove(path)
        except OSError:
            pass
        total -= size
    _STATE["bytes"] = total - incoming


def _entries(directory: Path) -> list:
    """``(mtime, bytes, path)`` of every file in ``directory``."""
    out = []
    for entry in os.scandir(directory):
        if entry.is_file():
            st = entry.stat()
            out.append((st.st_mtime, st.st_size, entry.path))
    return out


def compiled_program(jitted, program, statics, treedef, shapes, args, kwargs):
    """``(program, key)``: the compiled program of ``jitted`` for the call ``(args,
    kwargs)`` (its static values ``statics``, the pytree definition ``treedef`` and
    :func:`avals` ``shapes`` of its other arguments), and the key of a program loaded from
    the directory (its first run is to be checked, :func:`checked_run`) or ``None``. A
    program not found is lowered, compiled and stored (:func:`compile_and_store`).
    ``(None, None)`` when no key can be made (:class:`Unkeyable`, counted in
    :data:`stats`)."""
    try:
        key = program_key(program, statics, treedef, shapes)
    except Unkeyable as why:
        stats["bypassed"] += 1
        stats["reasons"][str(why)] += 1
        return None, None
    found = load(key, program[-1])
    if found is not None:
        stats["loaded"] += 1
        return found, key
    return compile_and_store(jitted, key, args, kwargs), None


def compile_and_store(jitted, key: str, args, kwargs):
    """``jitted`` lowered and compiled for the call ``(args, kwargs)``, outside JAX's cache,
    and stored under ``key`` if that took :data:`MIN_SECONDS`."""
    start = time.perf_counter()
    with _outside_jax_cache():
        # traced outside the lock: a trace may call (load, compile) other programs
        lowered = jitted.lower(*args, **kwargs)
        with _XLA_LOCK, workarounds.counting_jax_cache_hits() as hits:
            compiled = lowered.compile()
    stats["compiled"] += 1
    if hits[0]:
        # loaded from JAX's cache: such an executable does not serialize whole (jaxlib
        # 0.9.2 writes a program whose kernels are missing), so it is not stored
        stats["reasons"]["from JAX's cache, not stored"] += 1
    elif time.perf_counter() - start >= MIN_SECONDS:
        with _LOCK:
            store(key, compiled)
    return compiled


def compile_bypassed(jitted, args, kwargs):
    """``jitted`` (a program no key can name, compiled without :data:`MARK`) lowered and
    compiled for the call ``(args, kwargs)`` through JAX's own cache, without the line
    jaxlib 0.9-0.10 logs when that cache loads it
    (:func:`approxcv._runtime.workarounds.quiet_loader_warnings`); where JAX's cache takes only
    approxcv's programs (an AVX-512 CPU whose loader logs false errors,
    :data:`approxcv._runtime.compilation_cache.own_threshold`), with approxcv's threshold in this
    thread. Returns a ``jax.stages.Compiled`` (it takes the dynamic arguments only)."""
    lowered = jitted.lower(*args, **kwargs)
    own = compilation_cache.own_threshold
    with (workarounds.jax_cache_threshold(own) if own is not None
          else contextlib.nullcontext()), workarounds.quiet_loader_warnings():
        return lowered.compile()


#: what :func:`checked_run` returns for a program that failed to run
NOT_RUN = object()


def checked_run(loaded, key: str, args, kwargs):
    """The outputs of the loaded program ``loaded`` (stored under ``key``) on ``(args,
    kwargs)``, waited for; :data:`NOT_RUN` when it fails to run with any exception (XLA's
    ``Function ... not found``: an executable stored without all its kernels; JAX's
    ``TypeError`` for arguments it was not compiled for), the entry then rejected
    (:func:`reject`; the caller compiles it again)."""
    try:
        return jax.block_until_ready(loaded(*args, **kwargs))
    except Exception as err:  # noqa: BLE001  (compiled again: a real error recurs there)
        reject(key, f"stored program failed to run: {type(err).__name__}: {err}")
        return NOT_RUN


def options_known(options: dict) -> bool:
    """Whether a process with this Python, JAX, jaxlib and ``XLA_FLAGS`` has already compiled
    a program with the XLA ``options`` (:func:`record_options`): approxcv's check that XLA
    knows its options (:func:`approxcv._runtime.compile.compiler_options`, a small compile of
    0.02-0.1 s in every process) is then skipped."""
    path = _options_path(options)
    return path is not None and path.exists()


def record_options(options: dict) -> None:
    """Record that this XLA compiles with ``options`` (an empty file in the directory)."""
    path = _options_path(options)
    if path is None:
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.touch()
    except OSError:
        pass


def _options_path(options: dict) -> Path | None:
    if not active():
        return None
    text = _toolchain() + "|" + repr(sorted(options.items()))
    return directory() / ("options-" + hashlib.sha256(text.encode()).hexdigest()[:32])


def discard(key: str) -> None:
    """Remove the stored program ``key`` (if another process has not already)."""
    try:
        os.remove(directory() / key)
    except OSError:
        pass


def _outside_jax_cache():
    """A context in which a program compiled is not written to JAX's cache: one copy on
    disk, and one JAX's cache could hand back would not serialize whole (JAX's threshold
    raised in the compiling thread only, :func:`approxcv._runtime.workarounds.
    jax_cache_threshold`; no effect where that is missing)."""
    return workarounds.jax_cache_threshold(float("inf"))
