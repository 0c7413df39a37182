"""Per-fold error estimates of approximate CV: two more chord steps from the method's point.

The exact fold parameter solves ``grad F(u, w_o) = 0``. From the method's point ``u_m`` (IJ or
NS), a *chord iteration* with a fixed positive definite matrix ``M`` that the method already
factored (IJ: ``M = H = d2F/du2 (u_1, 1)``; NS: ``M = H(u_1, w_o)``) converges to it::

    u_{k+1} = u_k - M^{-1} grad F(u_k, w_o).

Two steps ``d_1``, ``d_2`` cost two gradients per fold and solves with the held factor. Near
the solution the iteration is linear, so its steps shrink geometrically by
``rho = ||d_2||_M / ||d_1||_M`` (``||x||_M = sqrt(x' M x)``, a unit-free norm), and the sum
of the remaining steps gives the exact parameter (Aitken-style extrapolation)::

    u* = u_m - d_1 - d_2 / (1 - rho).

The **error estimate** of a fold is ``|L_o(u*) - L_o(u_m)| / |L_o(u*)|``, with ``L_o`` the
held-out fold loss: the estimated relative error of the method's fold loss against exact
CV. Where ``rho >= 1`` the iteration does not contract, so nothing can be vouched for: the
estimate is ``inf``.

Why this estimate: it is zero where the method is exact (``grad F(u_m, w_o) = 0``); it is
exact where the iteration is exactly geometric — a quadratic objective whose fold changes
the Hessian by a rank-one term, e.g. ridge leave-one-out, where ``u*`` is the exact refit
and the estimate of the IJ's error is the IJ-NS gap that ``docs/erm.md`` explains; for NS
it measures what the change of curvature along the step left over, which the positive
definiteness of ``H(w_o)`` cannot see. It also captures the IJ's linearisation in the
weights (for latent-variable models ``F`` is not linear in ``w``). Costs per fold: two
gradients and one held-out evaluation — the same order as the held-out evaluation every
method already does, far below NS's Hessian per fold or a refit. What it cannot see: a
refit that jumps to another basin of a multimodal objective (exact CV's restarts find
those; ``method="auto"`` and ``audit=`` measure them).
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .batching import fold_batch_size, fold_weights, in_chunks, progress_chunk
from .._batched_map import map_in_batches
from .chord import chord_step, contraction_rate, extrapolate
from .heldout import heldout_losses
from .lanes import lanes_chord_steps, lanes_fold_losses, use_lanes
from .matrix_free import block_conjugate_gradient
from .windows import taylor_chord_steps, use_taylor_chord_steps
from .._compile import jit

__all__ = ["ij_chord_steps", "ij_chord_steps_cg", "full_hessian_chord_steps",
           "refined_params", "estimate_errors"]


@partial(jit, static_argnums=(0, 5, 6))
def ij_chord_steps(fun, chol, params, index, data, n: int, batch_size: int):
    """Chord corrections of every IJ fold (``M = H``, one factor for all folds):
    ``(correction (n_folds, D), rho (n_folds,))``."""
    def one(args):
        u, idx = args
        return chord_step(fun, chol, u, fold_weights(idx, n), data)
    return map_in_batches(one, (params, index), batch_size)


@partial(jit, static_argnums=(0, 5, 7, 8, 9))
def ij_chord_steps_cg(fun, u_1, params, index, data, n: int, rtol, max_steps: int,
                      batch_size: int, hvp_batch_size: int | None):
    """Matrix-free :func:`ij_chord_steps`: each chord step solves ``H d = grad F(u, w_o)``
    for all folds by block CG on Hessian-vector products at ``(u_1, 1)``.
    Returns ``(correction, rho, converged (n_folds,))``."""
    ones = jnp.ones(n, u_1.dtype)
    value_grad = jax.value_and_grad(fun, argnums=0)
    _, hvp = jax.linearize(lambda u: value_grad(u, ones, data)[1], u_1)
    tols = jnp.full(params.shape[0], rtol, u_1.dtype)

    def step(us):
        val, res = map_in_batches(
            lambda a: value_grad(a[0], fold_weights(a[1], n, u_1.dtype), data),
            (us, index), batch_size)
        sol = block_conjugate_gradient(lambda v: map_in_batches(hvp, v, hvp_batch_size), res,
                                       tols, max_steps)
        return val, res, sol
    def scan_step(us, _):
        val, res, sol = step(us)
        return us - sol.x, (val, res, sol.x, sol.converged)
    # a rolled loop of two steps: one copy of the gradients and the CG solve, not two
    _, (value, r, d, converged) = lax.scan(scan_step, params, None, length=2)
    rho = contraction_rate(jnp.sum(d[1] * r[1], axis=1), jnp.sum(d[0] * r[0], axis=1),
                           value[0])
    return (jax.vmap(extrapolate)(d[0], d[1], rho), rho, converged[0] & converged[1])


def full_hessian_chord_steps(problem, params, index, options, chol=None, info=None):
    """``(correction (n_folds, D), rho (n_folds,))`` of the fold points ``params`` with
    ``M = H`` at ``(u_1, 1)``: :func:`ij_chord_steps` with the Cholesky factor ``chol`` the
    IJ holds, else (matrix-free) :func:`ij_chord_steps_cg` (a row CG could not solve is NaN:
    its estimate unknown, not the fold). Short folds on a long series take
    :func:`approxcv.engine.windows.taylor_chord_steps` (recorded in ``info``; folds its
    checks do not vouch for take the full passes); many long folds of one series go in lanes
    (:func:`approxcv.engine.lanes.lanes_chord_steps`, whose pass also gives the held-out
    losses at ``params``: ``info["heldout"]``). Applied to the IJ's points this is the IJ's own
    estimate; applied to a refined point ``u*`` it is the next round of the same iteration
    (``method="auto"``'s chord stage)."""
    if chol is not None:
        def full(p_rows, idx_rows):
            batch = int(options.batch_size or fold_batch_size(problem, len(idx_rows)))
            chunk = progress_chunk(len(idx_rows), batch, problem.data)
            return in_chunks(lambda p, i: ij_chord_steps(problem.fun, chol, p, i,
                                                         problem.data, problem.n_units,
                                                         batch),
                             (p_rows, idx_rows), chunk, "error estimates", options.progress)
        if use_lanes(problem, index):
            step, rate, heldout = lanes_chord_steps(problem, params, index, chol,
                                                    options.batch_size, options.progress)
            if info is not None:
                info["heldout"] = heldout
            return step, rate
        if use_taylor_chord_steps(problem, index):
            return taylor_chord_steps(problem, params, index, chol, full, options.progress,
                                      info=info)
        return full(np.asarray(params), np.asarray(index))
    index = jnp.asarray(index)
    hvp_batch = int(max(1, 2_000_000 // max(problem.n_units, 1)))
    step, rate, solved = ij_chord_steps_cg(
        problem.fun, problem.u_full, jnp.asarray(params), index, problem.data,
        problem.n_units, options.cg_rtol, options.cg_max_steps,
        min(options.batch_size or 64, hvp_batch), hvp_batch)
    return (np.where(np.asarray(solved)[:, None], np.asarray(step), np.nan),
            np.asarray(rate))


def refined_params(params, correction):
    """``u* = u_m - correction`` (NumPy) and the mask ``ok`` of rows where it is finite
    (elsewhere the row stays ``u_m``)."""
    params, correction = np.asarray(params, np.float64), np.asarray(correction, np.float64)
    ok = np.all(np.isfinite(correction), axis=1)
    return params - np.where(ok[:, None], correction, 0.0), ok


def estimate_errors(problem, params, fold_loss, index, correction,
                    batch_size: int | None = None, progress: bool = False,
                    points: bool = True):
    """Estimated relative error ``|L_o(u*) - L_o(u_m)| / |L_o(u*)|`` of every fold loss.

    Args:
        problem: the :class:`~approxcv.problem.Problem`.
        params: ``(n_folds, D)`` the method's fold parameters ``u_m``.
        fold_loss: ``(n_folds,)`` held-out fold losses at ``params``.
        index: ``(n_folds, m)`` padded left-out indices.
        correction: ``(n_folds, D)`` the chord correction ``u_m - u*`` (NaN rows: the
            iteration does not contract).
        progress: a progress bar for a long held-out pass.
        points: also return the point losses at ``u*`` (else ``None``: folds in lanes
            then need only the forward passes, :func:`approxcv.engine.lanes.
            lanes_fold_losses`).

    Returns:
        ``(estimate (n_folds,), refined_fold_loss (n_folds,), refined_points (n_folds,
        m))``: the estimate is ``inf`` where the chord iteration does not contract or
        anything is not finite; the held-out losses at ``u*`` (at ``u_m`` where the
        correction is NaN) are what ``method="auto"``'s next chord round starts from.
    """
    refined, ok = refined_params(params, correction)
    if not points and use_lanes(problem, index):
        loss_star, points_star = lanes_fold_losses(problem, refined, index, batch_size,
                                                   progress), None
    else:
        batch = batch_size or fold_batch_size(problem, len(index))
        loss_star, points_star = (np.asarray(a) for a in heldout_losses(
            problem, refined, index, batch, progress))
    fold_loss = np.asarray(fold_loss, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.abs(loss_star - fold_loss) / np.abs(loss_star)
    est = np.where(np.isnan(est) & (loss_star == fold_loss), 0.0, est)   # 0/0: no change
    est = np.where(ok & np.isfinite(est), est, np.inf)
    return est, loss_star, points_star
