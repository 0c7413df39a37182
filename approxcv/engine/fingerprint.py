"""Stable digests of the inputs that determine a result, for binding checkpoints to them.

:func:`fingerprint` digests each named input separately, so a mismatch can name the input
that differs; :func:`run_digest` digests a whole fingerprint (the one string a checkpoint's
batch files carry); :func:`fold_digest` digests one fold's left-out set.
"""
from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import types
from collections.abc import Mapping

import numpy as np

from ..errors import InvalidArgumentError

__all__ = ["fingerprint", "fold_digest", "run_digest", "folds_digest", "result_fingerprint"]


def fingerprint(**inputs) -> dict[str, str]:
    """Stable sha256 digest of each named input: ``{name: hex digest}``.

    Arrays (NumPy, JAX, anything with ``__array__``) by dtype, shape and bytes; dicts, lists,
    tuples (named tuples by class name too) and dataclasses by their items; numbers, strings
    and ``None`` by ``repr``; an object with a ``static_key()`` method by its key; a JAX pytree
    node by its treedef and leaves; a function by name, bytecode, defaults and closure (a
    ``functools.partial`` by function and arguments); any other object by its class and public
    (non-underscore) attributes — give it a ``static_key()`` if its state lives elsewhere.
    Digests are equal across processes for equal inputs (and across machines and Python
    versions, except for functions, whose bytecode is part of their digest).
    """
    out = {}
    for name, value in inputs.items():
        h = hashlib.sha256()
        _feed(h, value, name, set(), 0)
        out[name] = h.hexdigest()
    return out


def run_digest(fingerprint: Mapping[str, str]) -> str:
    """sha256 of a whole fingerprint ``{input name: digest}`` (independent of key order)."""
    body = json.dumps({str(k): str(v) for k, v in fingerprint.items()}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def fold_digest(left_out) -> str:
    """sha256 of a fold's left-out set: an index array (order and repeats ignored) or a boolean
    mask over units. Strip batch padding first."""
    a = np.asarray(left_out)
    if a.dtype == bool:
        a = np.flatnonzero(a)
    if a.size and a.dtype.kind not in "iu":
        raise InvalidArgumentError(f"`left_out` must hold integer indices or be a boolean mask, "
                                   f"got dtype {a.dtype}")
    return hashlib.sha256(np.unique(a.astype(np.int64)).tobytes()).hexdigest()


def folds_digest(folds) -> str:
    """sha256 of a :class:`~approxcv.folds.Folds`: its number of units, fold ids and the
    left-out units of every fold, in order (equal digests, the same folds)."""
    h = hashlib.sha256()
    units = [np.asarray(folds[i], np.int64) for i in range(len(folds))]
    for arr in (np.asarray([folds.n]), folds.ids, np.asarray([len(u) for u in units]),
                np.concatenate(units) if units else np.zeros(0)):
        h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
    if getattr(folds, "partial", False):     # folds that remove more than they score
        h.update(b"scored")
        for arr in (folds.scored_sizes, np.concatenate(folds.scored)):
            h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
    return h.hexdigest()


def _canonical(x, depth: int = 0):
    """``x`` in a form whose digest ignores how equal data are spelled: a tuple as a list,
    a numeric array (NumPy, JAX, a list of numbers) as float64 NumPy."""
    if depth > 64:
        return x
    if isinstance(x, (list, tuple)) and not hasattr(x, "_fields"):
        try:
            arr = np.asarray(x)
        except (ValueError, TypeError):      # ragged: a list of sequences
            arr = None
        if arr is not None and arr.dtype.kind in "biuf" and arr.size:
            return np.ascontiguousarray(arr, dtype=np.float64)
        return [_canonical(v, depth + 1) for v in x]
    if isinstance(x, np.ndarray) or (hasattr(x, "__array__") and hasattr(x, "dtype")
                                     and hasattr(x, "shape")):
        arr = np.asarray(x)
        return (np.ascontiguousarray(arr, dtype=np.float64) if arr.dtype.kind in "biuf"
                else arr)
    return x


def result_fingerprint(data, folds, level: str) -> dict:
    """What a cross-validation result was computed on, to refuse comparing results of other
    inputs: ``{"data": sha256 of the data or None, "level": level, "units": number of units,
    "folds": folds_digest(folds)}``.

    The data are digested after :func:`_canonical` (a tuple and a list, an int and a float
    array of equal values digest alike); data that cannot be digested (an object without a
    stable representation) give ``None``: unknown, never compared.
    """
    try:
        digest = fingerprint(data=_canonical(data))["data"]
    except (InvalidArgumentError, TypeError, ValueError):
        digest = None
    return {"data": digest, "level": str(level), "units": int(folds.n),
            "folds": folds_digest(folds)}


def _token(h, *parts) -> None:
    for p in parts:
        b = p if isinstance(p, bytes) else str(p).encode()
        h.update(b"%d:" % len(b) + b)


def _feed(h, x, name: str, seen: set, depth: int) -> None:
    """Feed ``x`` into ``h``, unambiguously (every token length-prefixed, typed)."""
    if depth > 64:
        raise InvalidArgumentError(f"cannot fingerprint input {name!r}: nested too deeply")
    if isinstance(x, np.generic):
        x = x.item()
    if x is None or isinstance(x, (bool, int, float, complex, str, bytes)):
        return _token(h, type(x).__name__, repr(x))
    if isinstance(x, type):
        return _token(h, "type", x.__module__, x.__qualname__)
    if id(x) in seen:
        return _token(h, "cycle")
    seen = seen | {id(x)}
    key = getattr(x, "static_key", None)
    if callable(key):
        _token(h, "static_key", type(x).__module__, type(x).__qualname__)
        return _feed(h, key(), name, seen, depth + 1)
    if isinstance(x, np.ndarray) or (hasattr(x, "__array__") and hasattr(x, "shape")
                                     and hasattr(x, "dtype")):
        return _feed_array(h, np.asarray(x), name, seen, depth)
    if isinstance(x, Mapping):
        _token(h, "map", type(x).__qualname__, len(x))
        for k in sorted(x, key=repr):
            _feed(h, k, name, seen, depth + 1)
            _feed(h, x[k], name, seen, depth + 1)
        return None
    if isinstance(x, (list, tuple)):
        _token(h, "seq", type(x).__qualname__, len(x))
        for v in x:
            _feed(h, v, name, seen, depth + 1)
        return None
    if isinstance(x, (set, frozenset)):
        subs = sorted(fingerprint(v=v)["v"] for v in x)
        return _token(h, "set", len(subs), *subs)
    if dataclasses.is_dataclass(x):
        fields = [f.name for f in dataclasses.fields(x) if not f.name.startswith("_")]
        return _feed_attrs(h, x, fields, name, seen, depth)
    if hasattr(x, "__array__"):  # e.g. a pandas DataFrame: columns + values
        _feed(h, list(getattr(x, "columns", [])), name, seen, depth + 1)
        return _feed_array(h, np.asarray(x), name, seen, depth)
    if _is_pytree_node(x):
        import jax

        leaves, treedef = jax.tree_util.tree_flatten(x)
        if " at 0x" not in str(treedef):
            _token(h, "pytree", str(treedef))
            return _feed(h, leaves, name, seen, depth + 1)
    if isinstance(x, functools.partial):
        _token(h, "partial")
        return _feed(h, [x.func, x.args, x.keywords], name, seen, depth + 1)
    if callable(x) and hasattr(x, "__qualname__"):
        return _feed_callable(h, x, name, seen, depth)
    if hasattr(x, "__dict__"):
        fields = sorted(k for k in vars(x) if not k.startswith("_"))
        return _feed_attrs(h, x, fields, name, seen, depth)
    text = repr(x)
    if " at 0x" in text:
        raise InvalidArgumentError(f"cannot fingerprint input {name!r}: {type(x).__qualname__} "
                                   "has no stable representation; give it a static_key() method")
    return _token(h, "repr", type(x).__qualname__, text)


def _feed_array(h, a: np.ndarray, name, seen, depth) -> None:
    _token(h, "array", a.dtype.str, a.shape)
    if a.dtype.hasobject:
        for v in a.ravel().tolist():
            _feed(h, v, name, seen, depth + 1)
    else:
        h.update(np.ascontiguousarray(a).tobytes())


def _feed_callable(h, f, name, seen, depth) -> None:
    """A function by name, code, constants, defaults and closure; a bound method with its
    object. (Two lambdas with different bodies or captured values differ.)"""
    _token(h, "callable", getattr(f, "__module__", ""), f.__qualname__)
    code = getattr(f, "__code__", None)
    if isinstance(code, types.CodeType):
        _feed_code(h, code, name, seen, depth)
        cells = []
        for c in getattr(f, "__closure__", None) or ():
            try:
                cells.append(c.cell_contents)
            except ValueError:  # an empty cell
                cells.append(None)
        _feed(h, [getattr(f, "__defaults__", None), cells], name, seen, depth + 1)
    wrapped = getattr(f, "__wrapped__", None)  # functools.wraps, jax.jit
    if wrapped is not None:
        _feed(h, wrapped, name, seen, depth + 1)
    owner = getattr(f, "__self__", None)
    if owner is not None and not isinstance(owner, types.ModuleType):
        _feed(h, owner, name, seen, depth + 1)


def _feed_code(h, code: types.CodeType, name, seen, depth) -> None:
    _token(h, "code", code.co_code)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _feed_code(h, c, name, seen, depth + 1)
        else:
            _feed(h, c, name, seen, depth + 1)


def _feed_attrs(h, x, fields, name, seen, depth) -> None:
    _token(h, "object", type(x).__module__, type(x).__qualname__, len(fields))
    for f in fields:
        _token(h, f)
        _feed(h, getattr(x, f), name, seen, depth + 1)


def _is_pytree_node(x) -> bool:
    try:
        import jax
    except ImportError:  # pragma: no cover - jax is a dependency
        return False
    leaves = jax.tree_util.tree_leaves(x)
    return not (len(leaves) == 1 and leaves[0] is x)
