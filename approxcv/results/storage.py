"""Saving and loading :class:`~approxcv.results.CVResult` s: a result is two files beside
each other, ``NAME.json`` (what it is: method, scheme, timings, scalar diagnostics, the
layout of its parameters; readable as it stands) and ``NAME.npz`` (every array: folds, losses,
parameters, per-fold diagnostics). ``load_result`` gives back the same result: equal
arrays of the same dtypes and shapes, the same scalars of the same types, the same
NamedTuple of parameters (JAX arrays come back as NumPy arrays). Nothing is pickled.

The ``.json`` records the sha256 of its ``.npz`` and a save replaces the pair atomically
(:func:`save_result`): a load never pairs one save's metadata with another's arrays, and a
save that fails (killed, a full disk, a read-only folder) leaves the earlier result intact.
Every failure is a named error (:class:`~approxcv.errors.ResultFileError` on reading,
:class:`~approxcv.errors.ResultWriteError` on writing) naming the file and what to do.
"""
from __future__ import annotations

import contextlib
import dataclasses
import errno
import glob
import hashlib
import importlib
import io
import json
import os
import sys
import secrets
import warnings
from collections import namedtuple
from pathlib import Path
from typing import NamedTuple

import numpy as np

from ..errors import user_stacklevel
from ..folds import Folds
from ..errors import ArgumentTypeError, ResultFileError, ResultFileWarning, ResultWriteError

__all__ = ["save_result", "load_result", "load_results", "scan_results", "SavedResult",
           "Skipped", "write_atomic"]

# version 2 records the sha256 of the .npz in the .json; version 1 files (no digest) load
FORMAT, VERSION = "approxcv-cvresult", 2
READABLE = (1, 2)


class NotAResultError(ResultFileError):
    """A ``.json`` that is not a saved result at all (e.g. a demo's summary.json)."""


# the fields stored by layout rather than by the generic encoder
_SPECIAL = ("folds", "point_loss", "params")


class SavedResult(NamedTuple):
    """A result read back, with its file ``label`` (the name without suffix) and the
    ``model`` recorded when it was saved (``None`` if none was)."""
    label: str
    result: object
    model: str | None
    path: Path


def is_result_class(cls) -> bool:
    """Whether ``cls`` is :class:`~approxcv.results.CVResult` or a subclass: a dataclass
    that declares itself a saved-result type (``SAVED_RESULT = True``). Read off the class
    so that this module, which the result type uses to save itself, does not import it."""
    return (isinstance(cls, type) and dataclasses.is_dataclass(cls)
            and getattr(cls, "SAVED_RESULT", False) is True)


def _stem(path) -> Path:
    """``path`` without a ``.json`` / ``.npz`` suffix."""
    p = Path(path)
    return p.with_suffix("") if p.suffix in (".json", ".npz") else p


def _beside(stem: Path, suffix: str) -> Path:
    """``STEM.suffix``: ``stem`` with ``suffix`` added, never replacing a dot in its name
    (``lam=0.3`` -> ``lam=0.3.json``, not ``lam=0.json``)."""
    return stem.with_name(stem.name + suffix)


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


def _oserror_text(err: OSError) -> str:
    """What an ``OSError`` means for the user, and what to fix."""
    code = getattr(err, "errno", None)
    what = err.strerror or str(err) or type(err).__name__
    fix = {errno.ENOSPC: "free some space or save elsewhere",
           errno.EDQUOT: "free some space or save elsewhere",
           errno.EACCES: "make the folder writable or save elsewhere",
           errno.EPERM: "make the folder writable or save elsewhere",
           errno.EROFS: "the file system is read-only: save elsewhere",
           errno.ENOENT: "create the folder first",
           errno.ENOTDIR: "a file stands where a folder is needed: save elsewhere"}.get(code)
    return f"{what}" + (f" ({fix})" if fix else "")


def write_atomic(path, data: bytes | str) -> Path:
    """Write ``data`` to ``path`` through a temporary file in the same folder, renamed over
    ``path`` only once it is complete and flushed: a kill or a full disk leaves ``path`` as
    it was (an earlier file intact, or none), never a truncated file.

    Raises:
        ResultWriteError: the folder is missing or not writable, or the disk is full (the
            message names the path and what to fix).
    """
    path = Path(path)
    if isinstance(data, str):
        data = data.encode("utf-8")
    if not path.parent.is_dir():
        raise ResultWriteError(f"cannot write {str(path)!r}: the folder {str(path.parent)!r} "
                               "does not exist (create it first)")
    tmp = None
    try:
        tmp = path.parent / f".{path.name}.{secrets.token_hex(6)}.tmp"
        # mode 0o666 less the umask, as an ordinary write would give (not mkstemp's 0o600)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as err:
        raise ResultWriteError(f"cannot write {str(path)!r}: {_oserror_text(err)}; any "
                               "earlier file there is left as it was") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
    return path


def _pending_npz(stem: Path, digest: str) -> Path:
    """Where a save puts its arrays until its ``.json`` is in place (see :func:`save_result`)."""
    return stem.with_name(f"{stem.name}.{digest[:16]}.npz.pending")


def save_result(result, path, *, model=None) -> Path:
    """Write ``result`` to ``PATH.json`` and ``PATH.npz`` (a ``.json`` / ``.npz`` suffix of
    ``path`` is dropped, missing folders are created); return the ``.json`` path. ``model``
    (a model or a string) is recorded as its ``repr``: a report pairs approximate and exact
    results only of the same model, and labels model comparisons with it.

    The save is atomic: the ``.json`` records the sha256 of its ``.npz`` (the load checks
    it), the arrays are written first to ``PATH.<digest>.npz.pending``, then the ``.json``
    replaces the old one in one rename (the commit), then the arrays are renamed to
    ``PATH.npz``. Killed or out of space at any point, the old result still loads (before
    the commit) or the new one does (after it: the load finds the pending arrays by their
    digest); never the old metadata with the new arrays.

    Raises:
        ArgumentTypeError: ``result`` is not a CVResult, or holds a value that cannot be
            stored (the message names it, e.g. ``result.diagnostics['key']``).
        ResultWriteError: the folder cannot be created or written, or the disk is full (the
            message says what to fix); an earlier result at ``path`` is left intact.
    """
    if not is_result_class(type(result)):
        raise ArgumentTypeError(f"`result` must be a CVResult, got {type(result).__name__}")
    stem = _stem(path)
    enc = _Encoder()
    folds = result.folds
    layout = {"n": int(folds.n), "ids": enc.array(folds.ids), "sizes": enc.array(folds.sizes),
              "units": enc.array(np.concatenate([np.asarray(folds[i]) for i in
                                                 range(len(folds))]))}
    if getattr(folds, "partial", False):     # folds that remove more than they score
        layout["scored_sizes"] = enc.array(folds.scored_sizes)
        layout["scored_units"] = enc.array(np.concatenate(folds.scored))
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
    buf = io.BytesIO()
    np.savez_compressed(buf, **enc.arrays)
    arrays = buf.getvalue()
    meta["npz_sha256"] = hashlib.sha256(arrays).hexdigest()
    text = json.dumps(meta, indent=1, allow_nan=True)
    try:
        stem.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise ResultWriteError(f"cannot create the folder {str(stem.parent)!r} for the result "
                               f"{str(stem)!r}: {_oserror_text(err)}") from None
    pending = write_atomic(_pending_npz(stem, meta["npz_sha256"]), arrays)
    json_path = _beside(stem, ".json")
    try:
        write_atomic(json_path, text)          # the commit: from here on the new result loads
    except ResultWriteError:
        with contextlib.suppress(OSError):
            pending.unlink()
        raise
    try:
        os.replace(pending, _beside(stem, ".npz"))
    except OSError as err:
        raise ResultWriteError(
            f"the result {str(json_path)!r} is saved, but its arrays stay in {str(pending)!r} "
            f"(renaming them to {str(_beside(stem, '.npz'))!r} failed: "
            f"{_oserror_text(err)}); it loads as it is") from None
    for stray in stem.parent.glob(f"{glob.escape(stem.name)}.*.npz.pending"):
        with contextlib.suppress(OSError):     # left by saves killed before their commit
            stray.unlink()
    return json_path


def _read_meta(path: Path) -> dict:
    """The ``.json`` half of a saved result, checked to be one."""
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
    except OSError as err:
        raise ResultFileError(f"cannot read {str(path)!r}: {_oserror_text(err)}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultFileError(f"{str(path)!r} is damaged (truncated or not JSON: {err}); "
                              "save the result again") from None
    if not isinstance(meta, dict) or meta.get("format") != FORMAT:
        raise NotAResultError(f"{str(path)!r} is not a saved approxcv result")
    if meta.get("version") not in READABLE:
        raise ResultFileError(f"{str(path)!r} has format version {meta.get('version')!r}; "
                              f"this approxcv reads versions {list(READABLE)} (save it again "
                              "with this approxcv, or read it with the one that wrote it)")
    return meta


def _result_class(spec: str, path: Path):
    """The CVResult (sub)class ``module:qualname`` a file names, or raise naming the file."""
    cls = _find_class(spec)
    if cls is None or not is_result_class(cls):
        raise ResultFileError(f"{str(path)!r} holds a {spec!r}, which is not a CVResult "
                              "class approxcv can find")
    return cls


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _arrays_path(stem: Path, json_path: Path, meta: dict) -> Path:
    """The ``.npz`` that belongs to ``meta``: ``STEM.npz`` if its sha256 is the one the
    ``.json`` records, else the pending arrays of a save killed after its commit."""
    npz_path = _beside(stem, ".npz")
    digest = meta.get("npz_sha256")
    try:
        if digest is None:                  # format version 1: no digest recorded
            if not npz_path.is_file():
                raise FileNotFoundError(errno.ENOENT, "no such file", str(npz_path))
            return npz_path
        if npz_path.is_file() and _file_digest(npz_path) == digest:
            return npz_path
        pending = _pending_npz(stem, digest)
        if pending.is_file() and _file_digest(pending) == digest:
            return pending
    except OSError as err:
        if err.errno == errno.ENOENT:
            raise ResultFileError(f"{str(json_path)!r} has lost its arrays: "
                                  f"{str(npz_path)!r} does not exist") from None
        raise ResultFileError(f"cannot read {str(npz_path)!r}: {_oserror_text(err)}") from None
    if not npz_path.is_file():
        raise ResultFileError(f"{str(json_path)!r} has lost its arrays: {str(npz_path)!r} "
                              "does not exist")
    raise ResultFileError(f"{str(npz_path)!r} is not the file {str(json_path)!r} was saved "
                          "with (its sha256 differs): it is damaged, or the two files do not "
                          "belong together (copied from another result); save the result "
                          "again")


def _load_arrays(npz_path: Path) -> dict:
    """Every array of ``npz_path``; a file that is not an intact ``.npz`` raises naming it."""
    try:
        with open(npz_path, "rb") as fh:
            magic = fh.read(4)
        if magic != b"PK\x03\x04":
            raise ResultFileError(f"{str(npz_path)!r} is not an .npz archive (damaged, or not "
                                  "written by approxcv); save the result again")
        with np.load(npz_path, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    except ResultFileError:
        raise
    except OSError as err:
        raise ResultFileError(f"cannot read {str(npz_path)!r}: {_oserror_text(err)}") from None
    except Exception as err:   # zipfile.BadZipFile, zlib.error, EOFError, ValueError, ...
        raise ResultFileError(f"{str(npz_path)!r} is damaged ({type(err).__name__}: "
                              f"{_one_line(err)}); save the result again") from None


def _one_line(err) -> str:
    text = " ".join(str(err).split())
    return text[:200] + ("…" if len(text) > 200 else "")


def read_result(path) -> SavedResult:
    """Read the result saved at ``path`` (the stem, or either file) with its label and
    model; see :func:`load_result`."""
    stem = _stem(path)
    json_path = _beside(stem, ".json")
    if not json_path.is_file():
        raise ResultFileError(f"no saved result at {str(stem)!r}: {str(json_path)!r} "
                              "does not exist")
    meta = _read_meta(json_path)
    npz_path = _arrays_path(stem, json_path, meta)
    arrays = _load_arrays(npz_path)
    try:
        lay = meta["folds"]
        sizes = _decode(lay["sizes"], arrays, npz_path)
        cuts = np.cumsum(sizes)[:-1]
        scored = None
        if "scored_units" in lay:
            scored = np.split(_decode(lay["scored_units"], arrays, npz_path),
                              np.cumsum(_decode(lay["scored_sizes"], arrays, npz_path))[:-1])
        folds = Folds(np.split(_decode(lay["units"], arrays, npz_path), cuts), lay["n"],
                      ids=_decode(lay["ids"], arrays, npz_path), scored=scored)
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
        ResultFileError: no result there, or its files are damaged (truncated, altered), do
            not belong together, cannot be read (permissions), or are of another format
            version (the message names the file and what to do).
    """
    return read_result(path).result


class Skipped(NamedTuple):
    """A file in a result directory that was not read as a result, and why."""
    path: Path
    reason: str


def scan_results(directory) -> tuple[list[SavedResult], list[Skipped]]:
    """``(results, skipped)``: every result saved in ``directory`` and in its ``results/``
    folder, by label (labels that repeat are prefixed with their folder), and every file
    there that was not read, with why: a damaged, mismatched or unreadable result, one of
    another format version, a ``.json`` that is not a saved result (the demo's
    ``summary.json`` excepted), an ``.npz`` without its ``.json``.

    Raises:
        ResultFileError: ``directory`` does not exist, is not a directory or cannot be
            listed.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise ResultFileError(f"no result directory {str(directory)!r}: "
                              + ("it is not a directory" if directory.exists()
                                 else "it does not exist"))
    found, skipped, seen = [], [], set()
    for folder in (directory, directory / "results"):
        if not folder.is_dir():
            continue
        try:
            names = sorted(folder.iterdir())
        except OSError as err:
            raise ResultFileError(f"cannot list {str(folder)!r}: {_oserror_text(err)}") from None
        jsons = [p for p in names if p.suffix == ".json" and p.is_file()]
        for json_path in jsons:
            try:
                saved = read_result(json_path)
            except NotAResultError as err:
                if not (folder == directory and json_path.name == "summary.json"):
                    skipped.append(Skipped(json_path, str(err)))
                continue
            except ResultFileError as err:
                skipped.append(Skipped(json_path, str(err)))
                continue
            if saved.label in seen:
                saved = saved._replace(label=f"{folder.name}/{saved.label}")
            seen.add(saved.label)
            found.append(saved)
        stems = {p.with_suffix("") for p in jsons}
        for npz_path in (p for p in names if p.suffix == ".npz" and p.is_file()):
            if npz_path.with_suffix("") not in stems:
                skipped.append(Skipped(npz_path, f"{str(npz_path)!r} has no .json beside it "
                                       "(not a complete saved result)"))
    return found, skipped


def saved_results(directory) -> list[SavedResult]:
    """The results of :func:`scan_results` (the skipped files left out)."""
    return scan_results(directory)[0]


def load_results(directory, *, skip_damaged: bool = False) -> dict:
    """``{label: CVResult}`` for every result saved in ``directory`` (and its ``results/``
    folder); labels are the file names without suffix. A ``.json`` that is not a saved
    result (e.g. the demo's ``summary.json``) is not one.

    Args:
        skip_damaged: ``False`` (default): a result that cannot be read raises; ``True``:
            it is left out with a :class:`~approxcv.errors.ResultFileWarning` naming it.

    Raises:
        ResultFileError: ``directory`` does not exist, or (``skip_damaged=False``) a result
            there cannot be read (the message lists every such file and why).
    """
    found, skipped = scan_results(directory)
    bad = [s for s in skipped if not s.reason.endswith("is not a saved approxcv result")]
    if bad:
        listing = "; ".join(s.reason for s in bad)
        if not skip_damaged:
            raise ResultFileError(f"{len(bad)} file(s) in {str(directory)!r} cannot be read as "
                                  f"saved results: {listing}. Pass skip_damaged=True to load "
                                  "the others")
        warnings.warn(f"skipped {len(bad)} file(s) that cannot be read as saved results: "
                      f"{listing}", ResultFileWarning, stacklevel=user_stacklevel())
    return {s.label: s.result for s in found}
