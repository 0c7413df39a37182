"""Held-out losses of every fold at its parameters, by the cheapest exact evaluation the
problem offers: windows of one long series, folds in lanes, or one full pass per fold.

A fold that removes more units than it scores (``R`` removed from training, ``S`` scored,
:class:`~approxcv.folds.Folds` with ``scored=``) has the held-out loss ``-log p(x_S | x_K)``
(``K`` the kept units) with ``R \\ S`` marginalised out. Every model's held-out loss of an
index set ``R`` at parameters ``theta`` is the joint ``-log p(x_R | x_{not R})`` and its
point losses are ``-log p(x_t | x_{not R})``, so, both at the fold's parameters::

    -log p(x_S | x_K) = heldout(theta, R) - heldout(theta, R \\ S),

and the scored units' point losses are ``heldout(theta, R)``'s at ``t in S``: one more
held-out pass over the folds whose ``R \\ S`` is not empty (:func:`unscored_losses`), on the
same evaluation paths.
"""
from __future__ import annotations

import time

import numpy as np

from .batching import _heldout, per_fold_chunks
from .lanes import lanes_heldout_losses, use_lanes
from .windows import use_windows, windowed_heldout_losses

__all__ = ["heldout_losses", "unscored_losses", "method_heldout_losses", "scored_points",
           "in_sample_lpd"]


def _removed_losses(problem, params_flat, index, batch_size, progress, info):
    """``heldout(theta, R)`` of every fold: ``(fold_loss, point_loss (n_folds, m))``."""
    def full(params, idx):
        return per_fold_chunks(problem, lambda b, p, i: _heldout(
            problem.heldout, p, i, problem.data, problem.n_units, b), (params, idx),
            batch_size, "held-out losses", progress)
    if use_windows(problem, index):
        return windowed_heldout_losses(problem, params_flat, index, progress, info, full)
    if use_lanes(problem, index):
        return lanes_heldout_losses(problem, params_flat, index, batch_size, progress)
    return full(params_flat, index)


def unscored_losses(problem, params_flat, unscored, batch_size: int | None = None,
                    progress: bool = False) -> np.ndarray:
    """``(n_folds,)`` ``heldout(theta_o, R_o \\ S_o)``: the joint held-out loss of the units
    each fold removes but does not score (``unscored``: ``(n_folds, m')`` padded with
    ``n``, :meth:`~approxcv.folds.Folds.unscored_padded`), at the fold's parameters; 0 for a
    fold that scores every unit it removes (a row of padding only, never evaluated)."""
    unscored = np.asarray(unscored)
    params_flat = np.asarray(params_flat)
    out = np.zeros(len(unscored))
    real = unscored < problem.n_units
    rows = np.flatnonzero(real.any(axis=1))
    if rows.size:
        width = int(real.sum(axis=1).max())
        sub = np.ascontiguousarray(unscored[rows, :width])
        out[rows] = np.asarray(_removed_losses(problem, params_flat[rows], sub, batch_size,
                                               progress, None)[0])
    return out


def heldout_losses(problem, params_flat, index, batch_size: int | None = None,
                   progress: bool = False, info: dict | None = None, unscored=None,
                   removed=None):
    """Held-out losses of every fold at its parameters.

    Short folds on one long series (leave-one-out, say) are evaluated in windows of the
    series when the model offers them (:mod:`approxcv.engine.windows`: accepted only where
    doubling the window no longer changes the loss, else the full pass); many long folds of
    one series, with folds in lanes when the model offers them (:mod:`approxcv.engine.lanes`).

    Args:
        problem: the :class:`~approxcv.problem.Problem`.
        params_flat: ``(n_folds, D)`` per-fold unconstrained parameters.
        index: ``(n_folds, m)`` padded removed indices (padding ``n``).
        batch_size: folds per vectorised batch (default: by memory).
        progress: a progress bar with the remaining time for long runs
            (:func:`progress_chunk`).
        info: a dict to record how windows were used in (``"heldout_windows"``).
        unscored: ``(n_folds, m')`` padded removed-but-not-scored indices
            (:meth:`~approxcv.folds.Folds.unscored_padded`), or ``None`` (every removed unit
            scored): the fold loss is then ``heldout(R) - heldout(R \\ S)`` (module
            docstring).
        removed: ``(fold_loss, point_loss)`` of ``index`` already evaluated at
            ``params_flat`` (a method's pass in lanes), so that only the unscored term is
            computed.

    Returns:
        ``(fold_loss (n_folds,), point_loss (n_folds, m))`` NumPy arrays; the point losses
        are at the positions of ``index`` (those of units a fold does not score are
        ``-log p(x_t | x_K)`` too, not part of its score); padded entries 0.
    """
    fold, points = (removed if removed is not None else
                    _removed_losses(problem, params_flat, index, batch_size, progress, info))
    if unscored is None:
        return fold, points
    rest = unscored_losses(problem, params_flat, unscored, batch_size, progress)
    return np.asarray(fold, np.float64) - rest, points


def method_heldout_losses(problem, params_flat, folds, diagnostics: dict, options,
                          stages: dict):
    """``(fold_loss (F,), points (F, m))`` of the folds as the method ran them (padded):
    the method's own (``diagnostics["heldout"]``, popped) or :func:`heldout_losses` at its
    fold parameters, ``-log p(x_S | x_K)``; ``stages["heldout"]`` its time."""
    t = time.perf_counter()
    if "heldout" in diagnostics:                 # the method evaluated its folds already
        fold_loss, points = diagnostics.pop("heldout")
    else:
        fold_loss, points = heldout_losses(problem, params_flat, folds.padded(),
                                           options.batch_size, options.progress, diagnostics,
                                           unscored=folds.unscored_padded())
    stages["heldout"] = stages.get("heldout", 0.0) + time.perf_counter() - t
    return fold_loss, points


def scored_points(points, folds, n_folds: int, flat: bool = False):
    """The point losses of the scored units of the first ``n_folds`` folds (the user's),
    from ``points`` ``(n_folds', m)`` at the positions of ``folds.padded()``: a list of
    arrays, one per fold (``flat``: concatenated)."""
    points = np.asarray(points)[:n_folds]
    sizes = folds.scored_sizes[:n_folds]
    if folds.partial:
        picked = points[folds.scored_mask()[:n_folds]]
    elif np.all(sizes == points.shape[1]) and not flat:
        return list(points)                  # folds of one size: rows, no copy
    else:
        picked = points[np.arange(points.shape[1]) < sizes[:, None]]
    return picked if flat else np.split(picked, np.cumsum(sizes)[:-1])


def in_sample_lpd(problem, folds, n_folds: int, options, stages: dict) -> np.ndarray:
    """``log p(x_o | x_kept; theta_full)`` of every scored unit of the first ``n_folds``
    folds, concatenated: the held-out pass at the full-data fit (``p = lpd - elpd``);
    ``stages["in_sample"]`` its time."""
    t = time.perf_counter()
    full = np.broadcast_to(np.asarray(problem.u_full), (len(folds), problem.u_full.shape[0]))
    _, points = heldout_losses(problem, np.ascontiguousarray(full), folds.padded(),
                               options.batch_size, options.progress)
    stages["in_sample"] = time.perf_counter() - t
    return -scored_points(points, folds, n_folds, flat=True)
