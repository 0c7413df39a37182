"""Folds as padded index arrays, weights built inside each batch.

The engine never materialises the ``(n_folds, n)`` weight matrix: folds travel as a padded
index array ``(n_folds, m)`` (``m`` = the largest fold; padding points at ``n``, out of
range), and each vectorised batch builds its own weights ``w_o = 1 - 1[o]`` with a
scatter that drops the padding. Memory is ``O(batch_size * n + n_folds * m)``.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..optim.hessian import data_entries
from .._runtime import carry_placement, current_platform, jit, map_in_batches
from ..executors import host_workers
from .._progress import counted, progress_bar

__all__ = ["fold_weights", "fold_indicator", "fold_points",
           "heldout_batch_size", "fold_batch_size", "in_chunks", "per_fold_chunks"]


def fold_weights(index, n: int, dtype=jnp.float64):
    """``w_o`` ``(n,)``: 0 at the fold's units ``index`` (padding ``>= n`` ignored), 1 elsewhere."""
    return jnp.ones(n, dtype).at[index].set(0.0, mode="drop")


def fold_indicator(index, n: int, dtype=jnp.float64):
    """``1 - w_o`` ``(n,)``: 1 at the fold's units, 0 elsewhere."""
    return jnp.zeros(n, dtype).at[index].set(1.0, mode="drop")


def heldout_batch_size(n_units: int, data, n_folds: int) -> int:
    """Folds evaluated per vectorised batch: about 2e6 units (or 4e6 data entries) at once."""
    size = max(n_units, data_entries(data) // 2, 1)
    return int(max(1, min(n_folds, 2_000_000 // size)))


#: folds per vectorised batch for models that evaluate rows in sequence on CPU
#: (``batch_rows="map"``, a recursion over time): small batches in a ``lax.map``
SEQUENTIAL_ROWS_BATCH = 8


def fold_batch_size(problem, n_folds: int) -> int:
    """Folds per vectorised batch of per-fold evaluations (held-out losses, gradients):
    :func:`heldout_batch_size`, but at most ``SEQUENTIAL_ROWS_BATCH`` for a model that
    declares ``batch_rows="map"`` on CPU (an HMM's forward pass ``vmap``-ped over 400 folds
    ran about 4x slower than over 8-16 at a time, T = 5,000)."""
    size = heldout_batch_size(problem.n_units, problem.data, n_folds)
    if getattr(problem, "batch_rows", "vmap") == "map" and current_platform() == "cpu":
        size = min(size, SEQUENTIAL_ROWS_BATCH)
    return size


@partial(jit, static_argnums=(0, 4, 5))
def _heldout(heldout, params_flat, index, data, n: int, batch_size: int):
    """Fold and point losses of every fold. Folds of at most one unit (``index`` of width
    1: leave-one-out) take the point loss from the fold loss — by the protocol's
    definitions ``-log p(x_o | x_kept)`` and ``-log p(x_t | x_kept)`` coincide for
    ``o = {t}`` — so the model's per-unit computation is unused and compiled away (for a
    hidden MRF, the backward elimination of its site marginals)."""
    single = index.shape[1] == 1

    def one(args):
        u, idx = args
        return fold_points(*heldout(u, fold_weights(idx, n), data), idx, idx, n, single)
    return map_in_batches(one, (params_flat, index), batch_size)


def fold_points(fold, points, idx, local, n: int, single: bool):
    """``(fold, (m,) point losses of the fold's units)`` from a model's ``(fold, points)``:
    ``points`` gathered at ``local`` (the units' positions in ``points``; padding out of
    range gives 0), or — for one-unit folds (``single``) — the fold loss itself at every
    real unit (``idx < n``), so the per-unit computation compiles away."""
    if single:
        return fold, jnp.where(idx < n, fold, 0.0)
    return fold, points.at[local].get(mode="fill", fill_value=0.0)


#: a per-fold stage whose work (folds x data entries) exceeds this runs in chunks of folds:
#: one core each at once (:func:`in_chunks`), and a progress bar with an estimate of the
#: remaining time when ``progress``
PROGRESS_WORK = 2 ** 28
#: about this many chunks then
PROGRESS_CHUNKS = 40


def progress_chunk(n_folds: int, batch_size: int, data,
                   work_per_fold: int | None = None) -> int:
    """Folds per compiled call of a per-fold stage: all of them, or — with more than
    :data:`PROGRESS_WORK` folds x ``work_per_fold`` (default: the data entries,
    leave-one-out on a long series being every fold a pass over all the data) — a multiple
    of ``batch_size`` giving about :data:`PROGRESS_CHUNKS` calls, so that the cores share
    them and a bar (when one is shown) can move."""
    work = data_entries(data) if work_per_fold is None else work_per_fold
    if n_folds * max(work, 1) <= PROGRESS_WORK:
        return n_folds
    per = max(1, -(-n_folds // PROGRESS_CHUNKS))
    return int(min(n_folds, -(-per // batch_size) * batch_size))


def in_chunks(fn, arrays, chunk: int, desc: str, progress: bool = True,
              workers: int | None = None):
    """``fn(*arrays)`` (each with a leading fold axis; a tuple of fold-indexed outputs)
    computed ``chunk`` folds a call — the last chunk padded with copies of its first row,
    so that every call has one shape and one compiled program — with a bar (counts and
    the remaining time) when ``progress``, on a terminal (:mod:`approxcv._progress`);
    outputs concatenated as NumPy arrays.

    ``workers`` calls run at once in threads (default
    :func:`~approxcv.executors.host_workers`; a compiled call releases the GIL), the outputs
    written in fold order whatever order the calls finish in. The fold recursions these
    chunks run use one core each on CPU: two workers on two cores took 0.43 s for two
    chunks of 32 held-out passes that one after another took 0.94 s (T = 200,000)."""
    arrays = [np.asarray(a) for a in arrays]
    n = arrays[0].shape[0]
    if chunk >= n:
        return tuple(np.asarray(o) for o in fn(*(jnp.asarray(a) for a in arrays)))
    outs = None
    workers = host_workers() if workers is None else workers

    def call(start):
        take = min(chunk, n - start)
        rows = np.where(np.arange(chunk) < take, start + np.arange(chunk), start)
        return start, take, [np.asarray(o) for o in fn(*(jnp.asarray(a[rows]) for a in arrays))]

    def write(start, take, out):
        nonlocal outs
        if outs is None:            # written in place: no list of parts to concatenate
            outs = tuple(np.empty((n,) + o.shape[1:], o.dtype) for o in out)
        for dest, o in zip(outs, out):
            dest[start:start + take] = o[:take]
        bar.update(counted(start, take, n))

    starts = range(0, n, chunk)
    with progress_bar(counted(0, n, n), desc, progress, unit="fold") as bar:
        if workers <= 1:
            for start in starts:
                write(*call(start))
            return outs
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait
        with ThreadPoolExecutor(workers) as pool:
            pending = set()
            for start in starts:                # at most ``workers`` chunks in flight
                pending.add(pool.submit(carry_placement(call), start))
                if len(pending) >= workers:
                    done, pending = wait(pending, return_when=FIRST_COMPLETED)
                    for f in done:
                        write(*f.result())
            for f in pending:
                write(*f.result())
    return outs


def per_fold_chunks(problem, program, arrays, batch_size: int | None, desc: str,
                    progress: bool = True):
    """``program(batch, *arrays)`` of a per-fold stage over every fold: ``batch`` folds per
    vectorised batch (``batch_size``, default :func:`fold_batch_size`), in the chunks of
    :func:`progress_chunk` (:func:`in_chunks`: cores share them, a bar can move)."""
    n = len(arrays[0])
    batch = int(batch_size or fold_batch_size(problem, n))
    return in_chunks(lambda *a: program(batch, *a), arrays,
                     progress_chunk(n, batch, problem.data), desc, progress)
