"""Exact CV: refit every fold, warm-started at the full-data fit."""
from __future__ import annotations

import hashlib
import os
import warnings

import numpy as np

from ..errors import ConvergenceWarning, InvalidArgumentError
from ..executors import run_batches
from .optimize import batched_minimize, batched_newton_minimize

SOLVERS = ("bfgs", "newton", "lbfgs")


class RefitBatch:
    """Picklable task refitting a batch of folds with one ``jit(vmap(...))`` call.

    ``solver="bfgs"``: :func:`~approxcv.engine.minimize` (BFGS + Newton polish);
    ``solver="newton"``: :func:`~approxcv.engine.optimize.newton_minimize` (damped Newton,
    ``max_steps`` Newton steps); ``solver="lbfgs"``: L-BFGS without Newton polish (large
    ``D``: nothing of size ``D x D``). ``__call__(u_full, weights, data) -> (u (b, D),
    converged (b,), num_steps (b,), grad_norm (b,))`` as NumPy arrays.
    """

    def __init__(self, fun, scale: float, max_steps: int, newton_steps: int,
                 pad_to: int | None = None, solver: str = "bfgs"):
        self.fun, self.scale, self.pad_to = fun, scale, pad_to
        self.max_steps, self.newton_steps, self.solver = max_steps, newton_steps, solver

    def __call__(self, u_full, weights, data):
        if self.solver == "newton":
            solver = batched_newton_minimize(self.fun, self.scale, self.max_steps)
        else:
            solver = batched_minimize(self.fun, self.scale, self.max_steps,
                                      0 if self.solver == "lbfgs" else self.newton_steps,
                                      self.solver)
        size = len(weights)
        if self.pad_to and size < self.pad_to:  # same shapes for every batch: compile once
            weights = np.concatenate([weights, np.repeat(weights[-1:], self.pad_to - size, 0)])
        u0s = np.broadcast_to(u_full, (len(weights),) + np.shape(u_full))
        res = solver(u0s, weights, data)
        return tuple(np.asarray(o)[:size]
                     for o in (res.u, res.converged, res.num_steps, res.grad_norm))


def _row_digest(row) -> str:
    return hashlib.sha1(np.ascontiguousarray(row, dtype=np.float64).tobytes()).hexdigest()


def _load_checkpoint(path, u_full, weights, fold_ids):
    """Return ``{fold_id: (u, converged, steps, gnorm)}`` from a checkpoint, verified."""
    if path is None or not os.path.exists(path):
        return {}
    with np.load(path, allow_pickle=False) as ck:
        if ck["u_full"].shape != u_full.shape or not np.allclose(ck["u_full"], u_full):
            raise InvalidArgumentError(
                f"`checkpoint` {path!r} was written for a different full-data fit; "
                "delete it or pass another path")
        done = {}
        by_id = {int(i): k for k, i in enumerate(fold_ids)}
        for k, fid in enumerate(ck["fold_ids"]):
            fid = int(fid)
            if fid in by_id:
                if ck["digests"][k] != _row_digest(weights[by_id[fid]]):
                    raise InvalidArgumentError(
                        f"`checkpoint` {path!r} holds fold {fid} with different left-out units")
                done[fid] = (ck["u"][k], bool(ck["converged"][k]), int(ck["num_steps"][k]),
                             float(ck["grad_norm"][k]))
    return done


def _save_checkpoint(path, u_full, done, weights, fold_ids):
    ids = sorted(done)
    pos = {int(i): k for k, i in enumerate(fold_ids)}
    tmp = f"{path}.tmp.npz"
    np.savez(tmp, u_full=u_full, fold_ids=np.array(ids, dtype=np.int64),
             u=np.stack([done[i][0] for i in ids]),
             converged=np.array([done[i][1] for i in ids]),
             num_steps=np.array([done[i][2] for i in ids]),
             grad_norm=np.array([done[i][3] for i in ids]),
             digests=np.array([_row_digest(weights[pos[i]]) for i in ids]))
    os.replace(tmp, path)


def exact_params(fun, u_full, weights, fold_ids=None, *, data=None, executor=None,
                 batch_size: int = 8, checkpoint: str | None = None, progress: bool = True,
                 scale: float = 1.0, max_steps: int | None = None, newton_steps: int = 2,
                 solver: str = "bfgs"):
    """Refit every fold from ``u_full`` with the shared optimiser.

    Args:
        fun: flat objective ``f(u, w, data)``.
        u_full: ``(D,)`` warm start.
        weights: ``(n_folds, n)`` fold weights.
        fold_ids: identifiers of the folds (for checkpoints); default ``0..n_folds-1``.
        data: passed to ``fun``.
        executor: ``None`` (in process) or an executor with ``submit`` (see
            :mod:`approxcv.executors`); each batch of folds is one task.
        batch_size: folds refitted together by one ``vmap``.
        checkpoint: path of an ``.npz`` file; finished folds are saved after every batch
            and skipped when the run is resumed.
        progress: show a progress bar.
        scale, max_steps, newton_steps: passed to :func:`~approxcv.engine.minimize`
            (``max_steps`` default: 1000 BFGS steps, or 50 Newton steps).
        solver: ``"bfgs"`` (BFGS + ``newton_steps`` Newton polish; default) or ``"newton"``
            (damped Newton with a dense Hessian and backtracking, see
            :func:`~approxcv.engine.optimize.newton_minimize`: a few steps from the warm
            start, far faster for models with a few hundred parameters and long data) or
            ``"lbfgs"`` (L-BFGS, ``O(D)`` memory, for large ``D``).

    Returns:
        dict with ``u (n_folds, D)``, ``converged``, ``num_steps``, ``grad_norm`` (each
        ``(n_folds,)``). Unconverged folds are kept and reported with a
        :class:`ConvergenceWarning`, never dropped.
    """
    if solver not in SOLVERS:
        raise InvalidArgumentError(f"`solver` must be one of {SOLVERS}, got {solver!r}")
    if max_steps is None:
        max_steps = 50 if solver == "newton" else 1000
    u_full = np.asarray(u_full, dtype=np.float64)
    weights = np.asarray(weights, dtype=np.float64)
    fold_ids = np.arange(len(weights)) if fold_ids is None else np.asarray(fold_ids)
    if checkpoint is not None and not str(checkpoint).endswith(".npz"):
        raise InvalidArgumentError(f"`checkpoint` must be a path ending in .npz, got {checkpoint!r}")
    done = _load_checkpoint(checkpoint, u_full, weights, fold_ids)
    todo = [k for k, fid in enumerate(fold_ids) if int(fid) not in done]
    batches = [(u_full, weights[todo[s:s + batch_size]], data)
               for s in range(0, len(todo), batch_size)]
    positions = [todo[s:s + batch_size] for s in range(0, len(todo), batch_size)]

    def record(i, out):
        for j, k in enumerate(positions[i]):
            done[int(fold_ids[k])] = (out[0][j], bool(out[1][j]), int(out[2][j]), float(out[3][j]))
        if checkpoint is not None:
            _save_checkpoint(checkpoint, u_full, done, weights, fold_ids)

    task = RefitBatch(fun, scale, max_steps, newton_steps, pad_to=batch_size,
                      solver=solver)
    run_batches(task, batches, executor=executor, progress=progress, desc="exact CV",
                sizes=[len(p) for p in positions], on_result=record)
    rows = [done[int(fid)] for fid in fold_ids]
    result = {"u": np.stack([r[0] for r in rows]),
              "converged": np.array([r[1] for r in rows]),
              "num_steps": np.array([r[2] for r in rows]),
              "grad_norm": np.array([r[3] for r in rows])}
    if not result["converged"].all():
        bad = np.flatnonzero(~result["converged"])
        warnings.warn(f"exact refits of {bad.size} fold(s) did not converge (fold positions "
                      f"{bad[:10].tolist()}...); their results are kept and flagged in "
                      "diagnostics['exact_converged']", ConvergenceWarning, stacklevel=3)
    return result
