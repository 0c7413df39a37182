"""Fold sets padded to a few sizes, so that one compiled program serves many fold counts.

Every per-fold program of the local methods (the IJ's solve and chord steps, NS's Newton
steps, the held-out pass, the error estimate) is specialised to the number of folds. A
second run with another number of folds — 50 folds, then 60; a subset the ``auto`` method
refines — would compile them all again (seconds each). :func:`bucketed` pads a fold set with
copies of its widest fold to :func:`fold_bucket` folds: a power of two (at least
:data:`MIN_BUCKET`) up to :data:`POW2_MAX_FOLDS` folds, above that ``q 2^k`` with ``q`` in
4..7 (at most 25 % more folds). The copies are valid folds, computed and then dropped
(:func:`trim_per_fold`); each fold's numbers are computed by itself, so the padding changes
no fold's result.
"""
from __future__ import annotations

import numpy as np

from .._runtime import count_bucket
from ..folds import Folds

__all__ = ["MIN_BUCKET", "POW2_MAX_FOLDS", "PER_FOLD_KEYS", "fold_bucket", "bucketed",
           "trim_per_fold", "unpad_folds"]

#: the fewest folds a bucket holds
MIN_BUCKET = 8
#: fold counts up to this are padded to a power of two; above it to ``q 2^k``, ``q`` in 4..7
POW2_MAX_FOLDS = 64
#: diagnostics of the local methods with one entry per fold (leading axis), trimmed with
#: the folds; ``unreliable`` is a dict of such arrays
PER_FOLD_KEYS = ("fold_gradient_norm", "chord_rate", "error_estimate",
                 "error_estimate_screened", "ns_hessian_min_eig",
                 "ns_jitter", "ns_downdate_fallback", "unreliable")


def fold_bucket(n_folds: int) -> int:
    """Folds after padding: ``max(8, 2^ceil(log2 n))`` up to :data:`POW2_MAX_FOLDS`, else
    the next ``q 2^k`` with ``q`` in 4..7 (``n <= result < 1.25 n``)."""
    return count_bucket(n_folds, MIN_BUCKET, POW2_MAX_FOLDS)


def bucketed(folds: Folds, rows=None) -> Folds:
    """``folds`` (or ``folds.subset(rows)``) padded to :func:`fold_bucket` folds with copies
    of the widest fold of ``folds`` (ids ``-1, -2, ...``), so the padded fold set also has
    the width of ``folds`` (and its ``width``); its first ``len(rows)`` folds are the
    requested ones."""
    rows = np.arange(len(folds)) if rows is None else np.asarray(rows)
    size = fold_bucket(max(len(rows), 1))
    widest = int(np.argmax(folds.sizes))
    take = [int(r) for r in rows] + [widest] * (size - len(rows))
    ids = np.concatenate([folds.ids[rows], -np.arange(1, size - len(rows) + 1)])
    scored = [folds.scored[r] for r in take] if folds.partial else None
    return Folds([folds[r] for r in take], folds.n, ids=ids, width=folds.width,
                 scored=scored)


def trim_per_fold(diagnostics: dict, keep: int) -> None:
    """Cut the :data:`PER_FOLD_KEYS` entries of ``diagnostics`` to their first ``keep``
    folds, in place."""
    for key in PER_FOLD_KEYS:
        value = diagnostics.get(key)
        if isinstance(value, dict):
            diagnostics[key] = {k: np.asarray(v)[:keep] for k, v in value.items()}
        elif value is not None and np.ndim(value):
            diagnostics[key] = np.asarray(value)[:keep]


def unpad_folds(n_folds: int, diagnostics: dict, *per_fold):
    """``per_fold`` arrays (leading axis: the folds as run, padded by :func:`bucketed`) and
    the :data:`PER_FOLD_KEYS` of ``diagnostics`` cut to the user's ``n_folds`` folds (in
    place for ``diagnostics``); unchanged where nothing was padded."""
    if len(per_fold[0]) == n_folds:
        return per_fold
    trim_per_fold(diagnostics, n_folds)
    return tuple(np.asarray(a)[:n_folds] for a in per_fold)
