"""Checkpoints of per-fold results, bound to every input that determines them.

A checkpoint is a directory that is only ever added to::

    <path>/header.json               format, version, fingerprint, record fields (written once)
    <path>/batch-<time>-<uuid>.npz   one file per appended batch of finished folds, each
                                     carrying the run digest of the fingerprint
    <path>/.lock                     lock (``filelock``) guarding creation/check of the header

Every file is written under a unique temporary name in the directory (``.tmp-<uuid>``, ignored
by readers) and published by ``os.replace``, so a reader sees a whole file or none, and any
number of processes may append to one path at once without losing a fold.

Binding. :func:`~approxcv.engine.fingerprint.fingerprint` digests each named input (data, model hyperparameters, scheme,
level, options that change results, the full-data parameters); the checkpoint adds the
approxcv version (``approxcv_version``: refits of another release are not trusted). The header
keeps the digests and a mismatch raises :class:`~approxcv.errors.CheckpointError` naming the
differing inputs. Every batch file stores :func:`~approxcv.engine.fingerprint.run_digest` of the
whole fingerprint, so a batch file copied in from another run's directory (merging two
machines' results) is refused, naming the file, instead of mixing another run's refits in.
Folds are bound one by one: each record stores :func:`~approxcv.engine.fingerprint.fold_digest` of its left-out set, so a
fold id whose contents changed is refused, and a run on a subset of the folds (or on more
folds) resumes from the same directory without touching the other folds' records.

Records. A record is a dict of named per-fold values, declared once as ``fields = {name:
(dtype, shape)}`` (e.g. ``{"u": ("f8", (D,)), "converged": ("?", ())}``); every batch stores
``run_digest ()``, ``fold_ids (k,)``, ``fold_digests (k,)`` and one ``(k, *shape)`` array per
field. A batch file that cannot be read (truncated, a flipped byte) raises ``CheckpointError``
naming it, whatever the zip or NumPy reader raised.

Validity. A record is never converged when a field named in ``finite`` (default ``("u",)``)
holds NaN or inf: on append and on load its ``converged`` (if declared) is set to False. A
non-finite refit is a real, deterministic outcome, so it is kept and reported, not refused.

Duplicates. Concurrent runs may both finish a fold; :meth:`Checkpoint.load` then returns the
best record by (converged first, finite first, lower ``objective``, lower ``grad_norm``, for
the fields that are declared), and the earliest written among equals.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import struct
import time
import uuid
import zipfile
import zlib
from collections.abc import Mapping, Sequence

import numpy as np

from ..errors import CheckpointError, InvalidArgumentError
from .fingerprint import fingerprint, fold_digest, run_digest
from .._version import __version__

__all__ = ["Checkpoint", "fingerprint", "fold_digest"]  # the digests are re-exported

FORMAT, VERSION = "approxcv-checkpoint", 2   # 2: batch files carry the run digest
_HEADER, _LOCK = "header.json", ".lock"
VERSION_KEY = "approxcv_version"   # the fingerprint entry a checkpoint adds itself
# what reading a damaged .npz can raise (zipfile: NotImplementedError for an unknown
# compression, RuntimeError for an "encrypted" member, struct.error for a cut header, ...)
_READ_ERRORS = (OSError, EOFError, ValueError, KeyError, IndexError, TypeError, AttributeError,
                NotImplementedError, RuntimeError, MemoryError, OverflowError, struct.error,
                zipfile.BadZipFile, zipfile.LargeZipFile, zlib.error)
_STALE_TMP_S = 24 * 3600  # temporary files older than this are left-overs of killed writers


class Checkpoint:
    """Per-fold records in a directory, bound to a fingerprint; see the module docstring.

    ``Checkpoint(path, fingerprint, fields)`` opens ``path`` — creating it and its header if
    absent — and raises :class:`~approxcv.errors.CheckpointError` if it was written for another
    fingerprint or other fields, is damaged, is not a checkpoint directory, or is a file (such
    as a checkpoint of the earlier single-``.npz`` format).

    Args:
        path: directory of the checkpoint (a name ending in ``.npz`` is an ordinary name here).
        fingerprint: ``{input name: digest}``, usually from :func:`fingerprint`; the approxcv
            version is added as ``approxcv_version``.
        fields: ``{field name: (dtype, shape)}`` of one fold's record, e.g. ``{"u": ("f8",
            (D,)), "converged": ("?", ()), "num_steps": ("i8", ()), "grad_norm": ("f8", ())}``.
        finite: fields that must be finite for a record to count as converged (a declared
            ``converged`` field is boolean).
        timeout: seconds to wait for the header lock.
    """

    def __init__(self, path, fingerprint: Mapping[str, str],
                 fields: Mapping[str, tuple], *, finite: Sequence[str] = ("u",),
                 timeout: float = 60.0):
        self.path = os.fspath(path)
        self.fingerprint = {**{str(k): str(v) for k, v in fingerprint.items()},
                            VERSION_KEY: _approxcv_version()}
        self.run_digest = run_digest(self.fingerprint)
        self.fields = {str(k): (np.dtype(d).str, tuple(int(s) for s in shape))
                       for k, (d, shape) in fields.items()}
        if not self.fields:
            raise InvalidArgumentError("`fields` must declare at least one record field")
        self.finite = tuple(f for f in finite if f in self.fields)
        self._digests: dict[int, str] = {}
        self._open(timeout)

    def __repr__(self) -> str:
        return f"Checkpoint({self.path!r}, fields={sorted(self.fields)})"

    # ---- public
    def load(self, fold_ids, fold_digests) -> dict[int, dict[str, np.ndarray]]:
        """Records of the requested folds found on disk: ``{fold_id: {field: value}}``.

        ``fold_digests[k]`` is :func:`fold_digest` of fold ``fold_ids[k]``; a stored record of a
        requested fold with another digest raises ``CheckpointError``. Folds on disk that were
        not requested are neither returned nor touched. Scalar fields come back as NumPy
        scalars, others as arrays. The digests are remembered for :meth:`append`.
        """
        want = self._remember(fold_ids, fold_digests)
        best: dict[int, tuple] = {}  # fold id -> (rank, record)
        for name in self._batches():
            ids, digests, arrays = self._read_batch(name, want)
            if arrays is None:
                continue
            for k, fid in enumerate(ids.tolist()):
                if fid not in want:
                    continue
                if digests[k] != want[fid]:
                    raise CheckpointError(
                        f"checkpoint {self.path!r} holds fold {fid} with different left-out "
                        f"units (in {name}); delete it or pass another path")
                rec = {f: a[k] for f, a in arrays.items()}
                rank = self._validate(rec)
                if fid not in best or rank < best[fid][0]:
                    best[fid] = (rank, rec)
        return {fid: rec for fid, (_, rec) in best.items()}

    def append(self, records: Mapping[int, Mapping], fold_digests: Mapping[int, str] | None = None
               ) -> str | None:
        """Write ``{fold_id: {field: value}}`` as one new batch file; return its path.

        ``fold_digests`` (``{fold_id: digest}``) defaults to those given to :meth:`load`. Every
        record must have exactly the declared fields and shapes. Nothing is rewritten.
        """
        if not records:
            return None
        digests = self._digests if fold_digests is None else {
            int(k): str(v) for k, v in fold_digests.items()}
        items = sorted((int(k), v) for k, v in records.items())
        ids = [fid for fid, _ in items]
        if len(set(ids)) != len(ids):
            raise InvalidArgumentError("`records` lists a fold id twice")
        missing = [fid for fid in ids if fid not in digests]
        if missing:
            raise InvalidArgumentError(f"no fold digest for fold(s) {missing[:10]}; pass "
                                       "`fold_digests` or load() those folds first")
        arrays = {"run_digest": np.array(self.run_digest),
                  "fold_ids": np.array(ids, dtype=np.int64),
                  "fold_digests": np.array([digests[fid] for fid in ids], dtype=str)}
        for fid, rec in items:
            if set(rec) != set(self.fields):
                raise InvalidArgumentError(
                    f"record of fold {fid} has fields {sorted(rec)}, the checkpoint declares "
                    f"{sorted(self.fields)}")
        for f, (dtype, shape) in self.fields.items():
            vals = [np.asarray(rec[f]) for _, rec in items]
            bad = [fid for (fid, _), v in zip(items, vals) if v.shape != shape]
            if bad:
                raise InvalidArgumentError(f"field {f!r} of fold {bad[0]} has shape "
                                           f"{vals[ids.index(bad[0])].shape}, expected {shape}")
            try:
                arrays["field_" + f] = np.stack(vals).astype(dtype, casting="same_kind")
            except TypeError as e:
                raise InvalidArgumentError(f"field {f!r} cannot be stored as {dtype}: {e}") from e
        if "converged" in self.fields:
            finite = self._finite_rows({f: arrays["field_" + f] for f in self.finite}, len(ids))
            conv = arrays["field_converged"]
            arrays["field_converged"] = np.where(finite, conv, False).astype(conv.dtype)
        return self._publish(arrays, f"batch-{time.time_ns():020d}-{uuid.uuid4().hex}.npz")

    # ---- header
    def _open(self, timeout: float) -> None:
        import filelock

        if os.path.exists(self.path) and not os.path.isdir(self.path):
            raise CheckpointError(
                f"checkpoint {self.path!r} is a file, not a checkpoint directory (checkpoints "
                "of the earlier single-.npz format cannot be resumed); delete it or pass another path")
        if os.path.isdir(self.path) and not os.path.exists(os.path.join(self.path, _HEADER)):
            self._refuse_foreign()
        try:
            os.makedirs(self.path, exist_ok=True)
            with filelock.FileLock(os.path.join(self.path, _LOCK), timeout=timeout):
                self._remove_stale_tmp()
                header = os.path.join(self.path, _HEADER)
                if not os.path.exists(header):
                    self._refuse_foreign()
                    self._publish_header()
                    return
                stored = self._read_header()
        except filelock.Timeout as e:
            raise CheckpointError(f"checkpoint {self.path!r}: lock {_LOCK} not acquired within "
                                  f"{timeout} s") from e
        except OSError as e:
            raise CheckpointError(f"checkpoint {self.path!r} cannot be opened: {e}") from e
        self._verify(stored)

    def _refuse_foreign(self) -> None:
        """Refuse a directory without a header that holds anything but hidden files. (The
        header is published before any batch, so it is looked for again after the listing.)"""
        others = sorted(n for n in os.listdir(self.path)
                        if not n.startswith(".") and n != _HEADER)
        if others and not os.path.exists(os.path.join(self.path, _HEADER)):
            raise CheckpointError(
                f"checkpoint {self.path!r} has no {_HEADER} but holds {others[:3]}: it is not a "
                "checkpoint directory (or its header was deleted); pass another path")

    def _publish_header(self) -> None:
        body = {"format": FORMAT, "version": VERSION, "fingerprint": self.fingerprint,
                "fields": {f: [d, list(s)] for f, (d, s) in self.fields.items()}}
        self._publish(json.dumps(body, indent=1, sort_keys=True).encode(), _HEADER)

    def _read_header(self) -> dict:
        file = os.path.join(self.path, _HEADER)
        try:
            with open(file, encoding="utf-8") as fh:
                head = json.load(fh)
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise CheckpointError(f"checkpoint {self.path!r}: {_HEADER} is unreadable "
                                  f"({type(e).__name__}: {e})") from e
        if not isinstance(head, dict) or head.get("format") != FORMAT:
            raise CheckpointError(f"checkpoint {self.path!r}: {_HEADER} is not an approxcv "
                                  "checkpoint header")
        if head.get("version") != VERSION:
            raise CheckpointError(f"checkpoint {self.path!r} has format version "
                                  f"{head.get('version')!r}; this approxcv reads version {VERSION}")
        fp, fields = head.get("fingerprint"), head.get("fields")
        ok_fp = isinstance(fp, dict) and all(isinstance(v, str) for v in fp.values())
        ok_fields = isinstance(fields, dict) and all(
            isinstance(v, list) and len(v) == 2 and isinstance(v[0], str)
            and isinstance(v[1], list) and all(isinstance(s, int) for s in v[1])
            for v in fields.values())
        if not (ok_fp and ok_fields):
            raise CheckpointError(f"checkpoint {self.path!r}: {_HEADER} lacks a valid "
                                  f"{'fingerprint' if not ok_fp else 'fields'} entry")
        return {"fingerprint": fp, "fields": {f: (d, tuple(s)) for f, (d, s) in fields.items()}}

    def _verify(self, stored: dict) -> None:
        fp = stored["fingerprint"]
        changed = [k for k in self.fingerprint if k in fp and fp[k] != self.fingerprint[k]]
        only_file = sorted(set(fp) - set(self.fingerprint))
        only_run = [k for k in self.fingerprint if k not in fp]
        if changed or only_file or only_run:
            why = [f"different {', '.join(changed)}"] if changed else []
            if VERSION_KEY in changed:
                why[0] += f" ({fp[VERSION_KEY]}; this is {self.fingerprint[VERSION_KEY]})"
            why += [f"inputs {only_file} that this run does not record"] if only_file else []
            why += [f"no record of inputs {only_run}"] if only_run else []
            raise CheckpointError(f"checkpoint {self.path!r} was written for {'; '.join(why)}; "
                                  "delete it or pass another path")
        if stored["fields"] != self.fields:
            raise CheckpointError(
                f"checkpoint {self.path!r} stores record fields {stored['fields']}, this run "
                f"needs {self.fields}; delete it or pass another path")

    # ---- batches
    def _batches(self) -> list[str]:
        try:
            names = os.listdir(self.path)
        except OSError as e:
            raise CheckpointError(f"checkpoint {self.path!r} cannot be listed: {e}") from e
        return sorted(n for n in names if n.startswith("batch-") and n.endswith(".npz"))

    def _read_batch(self, name: str, want: Mapping[int, str]):
        """``(fold_ids, fold_digests, {field: array} or None if no wanted fold)``, checked;
        a batch file of another run (another run digest) is refused whatever it holds."""
        try:
            ids, digests, digest, arrays = self._read_npz(name, want)
        except _READ_ERRORS as e:
            raise CheckpointError(
                f"checkpoint {self.path!r}: batch file {name} is damaged ({type(e).__name__}: "
                f"{e}); delete that file to refit its folds") from e
        if digest != self.run_digest:
            raise CheckpointError(
                f"checkpoint {self.path!r}: batch file {name} was written by another run (its "
                f"fingerprint differs from {_HEADER}'s; copied from another checkpoint "
                "directory?); move that file away to use this checkpoint")
        return ids, digests, arrays

    def _read_npz(self, name: str, want: Mapping[int, str]):
        """``(fold_ids, fold_digests, run digest, {field: array} or None)`` of one batch file;
        raises one of ``_READ_ERRORS`` when it is unreadable or malformed."""
        with np.load(os.path.join(self.path, name), allow_pickle=False) as z:
            ids, digests = z["fold_ids"], z["fold_digests"]
            k = len(ids)
            if ids.ndim != 1 or ids.dtype.kind not in "iu":
                raise ValueError(f"fold_ids has shape {ids.shape} and dtype {ids.dtype}")
            if digests.shape != (k,) or digests.dtype.kind != "U":
                raise ValueError(f"fold_digests has shape {digests.shape}, dtype "
                                 f"{digests.dtype}; expected ({k},) strings")
            if "run_digest" not in z.files:
                raise ValueError("run_digest is missing")
            digest = z["run_digest"]
            if digest.shape != () or digest.dtype.kind != "U":
                raise ValueError(f"run_digest has shape {digest.shape} and dtype {digest.dtype}")
            digest = str(digest)
            if digest != self.run_digest or not any(int(i) in want for i in ids):
                return ids, digests, digest, None
            arrays = {}
            for f, (dtype, shape) in self.fields.items():
                if "field_" + f not in z.files:
                    raise ValueError(f"field {f!r} is missing")
                a = z["field_" + f]
                if a.dtype.str != dtype or a.shape != (k,) + shape:
                    raise ValueError(f"field {f!r} has shape {a.shape} and dtype {a.dtype}, "
                                     f"expected {(k,) + shape} and {np.dtype(dtype)}")
                arrays[f] = a
        return ids, digests, digest, arrays

    def _publish(self, content, name: str) -> str:
        """Write ``content`` (bytes, or a dict of arrays as ``.npz``) to a unique temporary
        file, flush it to disk, and rename it to ``name`` atomically."""
        tmp = os.path.join(self.path, f".tmp-{uuid.uuid4().hex}")
        final = os.path.join(self.path, name)
        try:
            with open(tmp, "wb") as fh:
                if isinstance(content, bytes):
                    fh.write(content)
                else:
                    np.savez(fh, **content)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        except BaseException as e:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            if isinstance(e, OSError):
                raise CheckpointError(f"checkpoint {self.path!r}: cannot write {name}: {e}") from e
            raise
        return final

    def _remove_stale_tmp(self) -> None:
        now = time.time()
        for n in os.listdir(self.path):
            if n.startswith(".tmp-"):
                with contextlib.suppress(OSError):
                    p = os.path.join(self.path, n)
                    if now - os.path.getmtime(p) > _STALE_TMP_S:
                        os.remove(p)

    # ---- records
    def _remember(self, fold_ids, fold_digests) -> dict[int, str]:
        ids = [int(i) for i in np.asarray(fold_ids).ravel()]
        digests = [str(d) for d in fold_digests]
        if len(ids) != len(digests):
            raise InvalidArgumentError(f"{len(ids)} fold ids but {len(digests)} fold digests")
        want: dict[int, str] = {}
        for fid, d in zip(ids, digests):
            if want.setdefault(fid, d) != d:
                raise InvalidArgumentError(f"fold id {fid} is given twice with different folds")
        self._digests.update(want)
        return want

    @staticmethod
    def _finite_rows(arrays: Mapping[str, np.ndarray], k: int) -> np.ndarray:
        """``(k,)`` True where every given ``(k, ...)`` field is finite."""
        ok = np.ones(k, dtype=bool)
        for a in arrays.values():
            if a.dtype.kind in "fc":
                ok &= np.isfinite(a.reshape(len(a), -1)).all(axis=1)
        return ok

    def _validate(self, rec: dict) -> tuple:
        """Unmark a non-finite record as converged (in place); return its rank (smaller is
        better): converged, finite, lower ``objective``, lower ``grad_norm``."""
        one = {f: np.asarray(rec[f])[None] for f in self.finite}
        finite = bool(self._finite_rows(one, 1)[0])
        if "converged" in rec and not finite:
            rec["converged"] = np.False_

        def num(f):
            v = float(rec[f]) if f in rec and np.ndim(rec[f]) == 0 else math.inf
            return v if math.isfinite(v) else math.inf
        return (not bool(rec.get("converged", True)), not finite, num("objective"),
                num("grad_norm"))


def _approxcv_version() -> str:
    """The installed approxcv's version."""
    return __version__
