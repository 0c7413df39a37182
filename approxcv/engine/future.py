"""Expansions of leave-future-out folds from a refit: the pieces ``method="auto"``'s walk over
the origins uses (:mod:`approxcv.engine.methods.auto`).

An *expansion point* (:class:`Reference`) is a fit ``u_r`` at the weights ``w_r`` it is the
optimum of — the full-data fit (``w_r = 1``) or an exact refit of a fold (``w_r = w_o``,
``grad F(u_r, w_r) = 0``) — with the Cholesky factor of ``H_r = d2F/du2 (u_r, w_r)``. A fold
``i`` is expanded from it by the chord iteration of :mod:`approxcv.engine.chord` with ``M =
H_r`` started at ``u_r``::

    u_i ~ u_r - H_r^{-1} grad F(u_r, w_i)                 (the first step)

continued by a second step and the geometric sum of the rest (:func:`~approxcv.engine.chord.
extrapolate`). At the full-data fit of a model whose objective is linear in the weights the
first step *is* the IJ (``grad F(u_1, w_i) = -J (w_i - 1)``); for a latent-variable model it
uses the fold's exact gradient instead of ``J``'s linearisation in ``w`` (the weights of
leave-future-out folds change by whole units, where that linearisation is weakest), and from
a refit it needs no ``J`` at all — so the weights may go up (units added to a refit on a
shorter past) or down (units removed) alike. The fold's error estimate is the IJ's: two more
chord steps from ``u_i`` with ``H_r`` (:func:`~approxcv.engine.error_estimate.
estimate_errors`). Every program is one the engine already compiles: ``H_r`` from the fit's
derivative sweep at other weights (:func:`~approxcv.optim.newton.value_and_derivatives`),
the chord steps and held-out passes of the IJ's error estimate, on fold sets padded to
:func:`~approxcv.engine.fold_buckets.bucketed` counts.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np

from ..optim.newton import polish_jacobian, value_and_derivatives
from ..optim.pd import factor_hessian
from ..errors import NotPositiveDefiniteError
from .error_estimate import estimate_errors, full_hessian_chord_steps, refined_params
from .fold_buckets import bucketed
from .heldout import heldout_losses

__all__ = ["Reference", "reference_at", "expand_from"]


class Reference(NamedTuple):
    """An expansion point: ``fold_id`` (``-1``: the full-data fit), ``u`` ``(D,)`` the fit
    there, ``chol`` the Cholesky factor of ``H_r`` (``None``: not positive definite, not
    usable) and ``reliable`` (``H_r`` needed no jitter)."""
    fold_id: int
    u: np.ndarray
    chol: object
    reliable: bool


def reference_at(problem, u, index_row, fold_id: int) -> Reference:
    """The :class:`Reference` of the refit ``u`` of the fold with removed units ``index_row``
    (padded with ``n``): ``H_r`` at ``(u, w_o)`` from the fit's compiled derivative sweep
    (the ``with_jacobian`` the fit's polish used, so no new program), factored with the
    recorded jitter ladder."""
    n = problem.n_units
    w = np.ones(n)
    idx = np.asarray(index_row)
    w[idx[idx < n]] = 0.0
    dim = int(np.shape(u)[0])
    hess = value_and_derivatives(problem.fun, np.asarray(u, np.float64), w, problem.data,
                                 polish_jacobian(dim, n))[2]
    try:
        factor = factor_hessian(hess, warn=False)
    except NotPositiveDefiniteError:
        return Reference(int(fold_id), np.asarray(u, np.float64), None, False)
    return Reference(int(fold_id), np.asarray(u, np.float64), factor.chol,
                     bool(factor.reliable))


def expand_from(problem, folds, rows, ref: Reference, options):
    """The folds ``rows`` of ``folds`` expanded from ``ref`` (module docstring).

    Returns ``(params (k, D), fold_loss (k,), points (k, m), estimate (k,), correction (k,
    D))`` of the ``k = len(rows)`` folds: the extrapolated chord point from ``u_r``, its
    held-out losses, its error estimate (``inf`` where an iteration does not contract) and
    the correction of its own two chord steps (where ``method="auto"``'s chord rounds go
    on from). Runs on the folds padded to a :func:`bucketed` count.
    """
    rows = np.asarray(rows)
    sub, k = bucketed(folds, rows), rows.size
    index, unscored = sub.padded(), sub.unscored_padded()
    start = np.ascontiguousarray(np.broadcast_to(ref.u, (len(sub), ref.u.shape[0])))
    step = full_hessian_chord_steps(problem, start, index, options, ref.chol)[0]
    u, ok = refined_params(start, step)
    loss, points = (np.asarray(a) for a in heldout_losses(problem, u, index,
                                                          options.batch_size,
                                                          unscored=unscored))
    corr = np.asarray(full_hessian_chord_steps(problem, u, index, options, ref.chol)[0])
    est = np.asarray(estimate_errors(problem, u, loss, index, corr, options.batch_size,
                                     points=False, unscored=unscored)[0])
    est = np.where(ok, est, np.inf)
    return u[:k], loss[:k], points[:k], est[:k], corr[:k]
