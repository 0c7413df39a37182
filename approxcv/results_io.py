"""Saving and loading :class:`~approxcv.results.CVResult` s: a result is two files beside
each other, ``NAME.json`` (what it is: method, scheme, timings, scalar diagnostics, the
layout of its parameters; readable as it stands) and ``NAME.npz`` (every array: folds, losses,
parameters, per-fold diagnostics). ``load_result`` gives back the same result: equal
arrays of the same dtypes and shapes, the same scalars of the same types, the same
NamedTuple of parameters (JAX arrays come back as NumPy arrays). Nothing is pickled.
"""
from __future__ import annotations

import dataclasses
import importlib
import json
import sys
from collections import namedtuple
from pathlib import Path
from typing import NamedTuple

import numpy as np

from .errors import ArgumentTypeError, ResultFileError

__all__ = ["save_result", "load_result", "load_results", "SavedResult"]

FORMAT, VERSION = "approxcv-cvresult", 1
# the fields stored by layout rather than by the generic encoder
_SPECIAL = ("folds", "point_loss", "params")


class SavedResult(NamedTuple):
    """A result read back, with its file ``label`` (the name without suffix) and the
    ``model`` recorded when it was saved (``None`` if none was)."""
    label: str
    result: object
    model: str | None
    path: Path


def _stem(path) -> Path:
    """``path`` without a ``.json`` / ``.npz`` suffix."""
    p = Path(path)
    return p.with_suffix("") if p.suffix in (".json", ".npz") else p


class _Encoder:
    """Turns a value into JSON, moving every array into ``self.arrays`` (named ``a0``,
    ``a1``, ...); ``where`` names the value in error messages."""

    def __init__(self):
        self.arrays: dict[str, np.ndarray] = {}

    def array(self, value, scalar: bool = False) -> dict:
        """Store ``value`` as the next array; return its reference (dtype and shape
        recorded, ``scalar`` for a NumPy scalar)."""
        arr = np.asarray(value)
        if arr.dtype.hasobject:
            raise ArgumentTypeError("an object array cannot be saved")
        key = f"a{len(self.arrays)}"
        self.arrays[key] = arr
        ref = {"__array__": key, "dtype": arr.dtype.str, "shape": list(arr.shape)}
        return {**ref, "scalar": True} if scalar else ref

    def __call__(self, value, where: str):
        """The JSON form of ``value`` (arrays stored aside); raise naming ``where``."""
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, (int, float)) and type(value) in (int, float):
            return value
        if isinstance(value, np.generic):
            return self._guard(lambda: self.array(value, scalar=True), where)
        if isinstance(value, np.ndarray) or hasattr(value, "__array__") and hasattr(
                value, "dtype"):                      # NumPy and JAX arrays
            return self._guard(lambda: self.array(value), where)
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            cls = type(value)
            return {"__namedtuple__": f"{cls.__module__}:{cls.__qualname__}",
                    "fields": {f: self(getattr(value, f), f"{where}.{f}")
                               for f in value._fields}}
        if isinstance(value, (list, tuple)):
            items = [self(v, f"{where}[{i}]") for i, v in enumerate(value)]
            return items if isinstance(value, list) else {"__tuple__": items}
        if isinstance(value, dict):
            return self._dict(value, where)
        raise ArgumentTypeError(f"`{where}` holds a {type(value).__name__}, which a saved "
                                "result cannot store (arrays, numbers, strings, lists, "
                                "tuples, dicts and NamedTuples can be stored)")

    def _dict(self, value: dict, where: str):
        """A plain JSON object for string keys, else ``{"__dict__": [[key, value], ...]}``."""
        plain = all(isinstance(k, str) and not k.startswith("__") for k in value)
        if plain:
            return {k: self(v, f"{where}[{k!r}]") for k, v in value.items()}
        for k in value:
            if not (k is None or type(k) in (bool, int, float, str)):
                raise ArgumentTypeError(f"`{where}` has a key of type {type(k).__name__}, "
                                        "which a saved result cannot store")
        return {"__dict__": [[k, self(v, f"{where}[{k!r}]")] for k, v in value.items()]}

    @staticmethod
    def _guard(store, where: str):
        """``store()``, an object array reported as the value ``where``."""
        try:
            return store()
        except ArgumentTypeError:
            raise ArgumentTypeError(f"`{where}` is an object array, which a saved result "
                                    "cannot store") from None


def _import_allowed(module: str) -> bool:
    """Classes are looked up only in modules already imported or in approxcv itself: a file
    never makes approxcv import code the user did not."""
    return module in sys.modules or module == "approxcv" or module.startswith("approxcv.")


def _find_class(spec: str):
    """The class named ``module:qualname``, or ``None`` where it cannot be looked up."""
    module, _, qualname = spec.partition(":")
    if not _import_allowed(module):
        return None
    try:
        obj = importlib.import_module(module)
        for part in qualname.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        return None
    return obj if isinstance(obj, type) else None


def _namedtuple_class(spec: str, fields: list):
    """The NamedTuple class ``spec`` names, or a stand-in ``namedtuple`` with its name and
    fields where that class cannot be looked up (the values are intact either way)."""
    cls = _find_class(spec)
    if cls is not None and issubclass(cls, tuple) and list(getattr(cls, "_fields", ())) == fields:
        return cls
    return namedtuple(spec.rpartition(":")[2].rpartition(".")[2] or "Params", fields)


def _decode(value, arrays, path: Path):
    """Invert :class:`_Encoder`."""
    if isinstance(value, list):
        return [_decode(v, arrays, path) for v in value]
    if not isinstance(value, dict):
        return value
    if "__array__" in value:
        try:
            arr = arrays[value["__array__"]]
        except KeyError:
            raise ResultFileError(f"{str(path)!r} lacks the array {value['__array__']!r} its "
                                  ".json names: the two files do not belong together") from None
        if arr.dtype.str != value.get("dtype") or list(arr.shape) != value.get("shape"):
            raise ResultFileError(f"{str(path)!r}: array {value['__array__']!r} has dtype "
                                  f"{arr.dtype.str} and shape {list(arr.shape)}, its .json "
                                  f"says {value.get('dtype')} and {value.get('shape')}: the "
                                  "two files do not belong together")
        return arr[()] if value.get("scalar") else arr
    if "__tuple__" in value:
        return tuple(_decode(v, arrays, path) for v in value["__tuple__"])
    if "__dict__" in value:
        return {k: _decode(v, arrays, path) for k, v in value["__dict__"]}
    if "__namedtuple__" in value:
        fields = value["fields"]
        cls = _namedtuple_class(value["__namedtuple__"], list(fields))
        return cls(**{k: _decode(v, arrays, path) for k, v in fields.items()})
    return {k: _decode(v, arrays, path) for k, v in value.items()}


def save_result(result, path, *, model=None) -> Path:
    """Write ``result`` to ``PATH.json`` and ``PATH.npz`` (a ``.json`` / ``.npz`` suffix of
    ``path`` is dropped); return the ``.json`` path. ``model`` (a model or a string) is
    recorded as its ``repr``: a report pairs approximate and exact results only of the same
    model, and labels model comparisons with it.

    Raises:
        ArgumentTypeError: ``result`` is not a CVResult, or holds a value that cannot be
            stored (the message names it, e.g. ``result.diagnostics['key']``).
    """
    from .results import CVResult
    if not isinstance(result, CVResult):
        raise ArgumentTypeError(f"`result` must be a CVResult, got {type(result).__name__}")
    stem = _stem(path)
    enc = _Encoder()
    folds = result.folds
    layout = {"n": int(folds.n), "ids": enc.array(folds.ids), "sizes": enc.array(folds.sizes),
              "units": enc.array(np.concatenate([np.asarray(folds[i]) for i in
                                                 range(len(folds))]))}
    point_sizes = [len(p) for p in result.point_loss]
    cls = type(result)
    meta = {
        "format": FORMAT, "version": VERSION, "class": f"{cls.__module__}:{cls.__qualname__}",
        "model": None if model is None else (model if isinstance(model, str) else repr(model)),
        "folds": layout,
        "point_loss": {"sizes": enc.array(np.asarray(point_sizes, np.int64)),
                       "values": enc.array(np.concatenate(
                           [np.asarray(p) for p in result.point_loss]))},
        "params": enc(result.params, "result.params"),
        "fields": {f.name: enc(getattr(result, f.name), f"result.{f.name}")
                   for f in dataclasses.fields(result) if f.name not in _SPECIAL},
    }
    text = json.dumps(meta, indent=1, allow_nan=True)
    stem.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(stem.with_suffix(".npz"), **enc.arrays)
    json_path = stem.with_suffix(".json")   # written last: it marks a complete result
    json_path.write_text(text)
    return json_path


def _read_meta(path: Path) -> dict:
    """The ``.json`` half of a saved result, checked to be one."""
    try:
        meta = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultFileError(f"cannot read {str(path)!r} as a saved result: {err}") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise ResultFileError(f"{str(path)!r} is not a saved approxcv result")
    if meta.get("version") != VERSION:
        raise ResultFileError(f"{str(path)!r} has format version {meta.get('version')!r}; "
                              f"this approxcv reads version {VERSION}")
    return meta


def _result_class(spec: str, path: Path):
    """The CVResult (sub)class ``module:qualname`` a file names, or raise naming the file."""
    from .results import CVResult
    cls = _find_class(spec)
    if cls is None or not issubclass(cls, CVResult):
        raise ResultFileError(f"{str(path)!r} holds a {spec!r}, which is not a CVResult "
                              "class approxcv can find")
    return cls


def read_result(path) -> SavedResult:
    """Read the result saved at ``path`` (the stem, or either file) with its label and
    model; see :func:`load_result`."""
    from .folds import Folds
    stem = _stem(path)
    json_path, npz_path = stem.with_suffix(".json"), stem.with_suffix(".npz")
    if not json_path.is_file():
        raise ResultFileError(f"no saved result at {str(stem)!r}: {str(json_path)!r} "
                              "does not exist")
    meta = _read_meta(json_path)
    try:
        with np.load(npz_path, allow_pickle=False) as npz:
            arrays = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, EOFError) as err:
        raise ResultFileError(f"cannot read the arrays {str(npz_path)!r}: {err}") from None
    try:
        lay = meta["folds"]
        sizes = _decode(lay["sizes"], arrays, npz_path)
        cuts = np.cumsum(sizes)[:-1]
        folds = Folds(np.split(_decode(lay["units"], arrays, npz_path), cuts), lay["n"],
                      ids=_decode(lay["ids"], arrays, npz_path))
        pl = meta["point_loss"]
        point_loss = np.split(_decode(pl["values"], arrays, npz_path),
                              np.cumsum(_decode(pl["sizes"], arrays, npz_path))[:-1])
        fields = {k: _decode(v, arrays, npz_path) for k, v in meta["fields"].items()}
        result = _result_class(meta["class"], json_path)(
            folds=folds, point_loss=point_loss,
            params=_decode(meta["params"], arrays, npz_path), **fields)
    except (KeyError, TypeError, ValueError) as err:
        if isinstance(err, ResultFileError):
            raise
        raise ResultFileError(f"{str(json_path)!r} is damaged: {type(err).__name__}: "
                              f"{err}") from None
    return SavedResult(stem.name, result, meta.get("model"), json_path)


def load_result(path):
    """The :class:`~approxcv.results.CVResult` saved by ``result.save(path)``; ``path`` is
    the name it was saved under, or either of its two files.

    Raises:
        ResultFileError: no result there, or its files are damaged, do not belong together,
            or are of another format version (the message names the file).
    """
    return read_result(path).result


def saved_results(directory) -> list[SavedResult]:
    """Every result saved in ``directory`` and in its ``results/`` folder, by label (a
    ``.json`` that is not a saved result, such as the demo's ``summary.json``, is skipped;
    labels that repeat are prefixed with their folder)."""
    directory = Path(directory)
    found, seen = [], set()
    for folder in (directory, directory / "results"):
        for json_path in sorted(folder.glob("*.json")) if folder.is_dir() else ():
            try:
                _read_meta(json_path)
            except ResultFileError:
                continue
            saved = read_result(json_path)
            if saved.label in seen:
                saved = saved._replace(label=f"{folder.name}/{saved.label}")
            seen.add(saved.label)
            found.append(saved)
    return found


def load_results(directory) -> dict:
    """``{label: CVResult}`` for every result saved in ``directory`` (and its ``results/``
    folder); labels are the file names without suffix."""
    return {s.label: s.result for s in saved_results(directory)}
