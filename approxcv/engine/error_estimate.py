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

**Screened estimates** (the IJ's default, ``error_estimate="screened"``). The two steps and
the held-out pass at ``u*`` cost several passes per fold, more than the IJ itself. Where
the objective splits (``F(u, w_o) = F(u, 1) - L_o(u)``,
:meth:`~approxcv.models.base.Model.objective_splits`) the first step alone gives the fold
loss's first-order change along it and the contraction
(:func:`approxcv.engine.chord.screen_terms`), hence a *screen* of the same estimate::

    screen = |change| / |L_o(u_m) + change|.

It leaves out the later steps and the second order: measured against the full estimate it
is within 0.67-1.37x on 90 % of the demo's folds (PoissonHMM(2), T = 2,000, 200 i.i.d. 10 %
folds) and 0.87-1.02x on SIDS's, but the later steps can matter more than the first where
the first is nearly orthogonal to the fold loss's gradient (a leave-one-out fold of a
PoissonHMM at T = 1,200: screen 3.6e-4, full estimate 5.1e-3, exact error 6.4e-3). So the
screen is trusted only where what it leaves out is bounded: were the later steps to
contract at a rate ``rho``, they could change the fold loss by at most ``reach rho / (1 -
rho)`` to first order (``reach = ||grad L_o||_{H^-1} ||d_1||_H``, Cauchy-Schwarz). The
screen's ``rho = ||d_1||_H / ||delta||_H`` compares the first step with the IJ's own step,
which is a chord step only where ``F`` is linear in ``w``; for latent-variable models it
overstates the contraction (:data:`SCREEN_MAX_RATE`), which makes the bound conservative. A
fold keeps the screen as its estimate (its correction ``d_1``) when ``rho`` is below
:data:`SCREEN_MAX_RATE` and ``(|change| + reach rho / (1 - rho)) / |L_o(u_m)|`` is at most
:data:`SCREEN_FRACTION` of ``tol``; every other fold — possibly off, not contracting fast,
or not finite — gets the full estimate above (:func:`screened_estimate_errors`). Folds in lanes take the first step
from the held-out pass they need anyway (:func:`approxcv.engine.lanes.lanes_first_steps`).
Short folds of a long series (windows), matrix-free IJ and NS take the full estimate on
every fold.

**Slow and non-contracting folds** (the screened estimate's second stage). Two steps see
the slowest mode of the iteration only where it dominates them; a fold whose two steps
contract at ``rho >= SLOW_RATE`` takes two more chord steps from its extrapolated point
``u*`` (one more round of the same iteration: ``u** = u* - d_1' - d_2' / (1 - lambda')``)
and its estimate is taken at ``u**``. A fold whose iteration does not contract (``rho >=
1`` in either round, or a step that is not finite) has no extrapolation: its estimate is
that of the first step, ``|L_o(u_m - d_1) - L_o(u_m)| / |L_o(u_m - d_1)|`` (finite where
the first step is), recorded as such, and the fold is unreliable by its own cause
``"chord_not_contracting"`` whatever that number (:func:`contracting`). Measured on
PoissonHMM(3) at T = 1,201 (Puerto Rico daily deaths) and on a seeded series of the same
size drawn from a fit of it, 200 i.i.d. folds of 1 % and 2 % (``benchmarks/hmm_flags.py``):
the chord iteration with ``H`` oscillates where a fold frees a weakly identified parameter
(the initial distribution when the fold holds the first day; a rare state's transitions)
and stops contracting where the fold's curvature exceeds twice ``H``'s; the old
extrapolation with ``rho`` for ``lambda`` and no second round caught 1 of 5, 3 of 4 and 2
of 5 folds more than 1 % off, and gave ``inf`` on 0, 3 and 20 folds.
"""
from __future__ import annotations

import time
from functools import partial
from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax

from .batching import fold_batch_size, fold_weights, per_fold_chunks
from .._runtime import jit, map_in_batches
from .diagnostics import estimate_causes, unreliable_causes
from .chord import (chord_step, contraction_rate, extrapolate, first_chord_step,
                    second_chord_step, screen_terms, signed_rate)
from .fold_buckets import fold_bucket
from .heldout import heldout_losses, unscored_losses
from .lanes import (lanes_chord_steps, lanes_first_steps, lanes_fold_losses,
                    lanes_second_steps, use_lanes)
from .matrix_free import block_conjugate_gradient
from .windows import taylor_chord_steps, use_taylor_chord_steps

__all__ = ["finish_error_estimate", "ij_chord_steps", "ij_chord_steps_cg",
           "full_hessian_chord_steps", "slow_second_round",
           "refined_params", "estimate_errors", "ij_first_steps", "ij_second_steps",
           "ChordScreen", "ij_chord_screen", "screened_estimate_errors", "contracting",
           "SCREEN_FRACTION", "SCREEN_MAX_RATE", "SLOW_RATE"]

#: a fold keeps its screen as its estimate when the screen and the bound of what the later
#: steps could add are at most this fraction of ``tol`` (a 10x margin for the second order
#: and for the contraction estimate) ...
SCREEN_FRACTION = 0.1
#: ... and the first step ``d_1`` is shorter than the IJ's own step ``delta`` (``H``-norms):
#: the IJ point is nearer the fold's optimum than the fit was. Where ``F`` is linear in the
#: weights (i.i.d. losses) that ratio is the contraction of the chord iteration; for latent
#: variable models it also holds the IJ's linearisation in the weights and overstates the
#: contraction (PoissonHMM(2), T = 5,000, 1,000 i.i.d. 10 % folds: median 0.32, 99 %
#: quantile 2.2, where the two steps measured at most 0.23)
SCREEN_MAX_RATE = 1.0
#: a fold whose two chord steps contract at ``rho`` at least this takes a second round of two
#: steps from its extrapolated point (module docstring): its slowest mode, or a diverging one
#: the first step hardly excited, may not have shown in the first two. Measured
#: (``benchmarks/hmm_flags.py``, PoissonHMM(3), 200 i.i.d. folds of 1-2 % of T = 1,200): the
#: folds more than 1 % off that one round missed had ``rho`` = 0.42-0.68 (the one at 0.42: a
#: mode of the iteration at -9.8 that the third step showed, 1.4 % off, estimated 0.03 %);
#: 0.3 leaves a margin below them, and 10-25 % of the folds take the second round
SLOW_RATE = 0.3


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
    den_sq = jnp.sum(d[0] * r[0], axis=1)
    rho = contraction_rate(jnp.sum(d[1] * r[1], axis=1), den_sq, value[0])
    lam = signed_rate(jnp.sum(d[0] * r[1], axis=1), den_sq, rho)
    return (jax.vmap(extrapolate)(d[0], d[1], rho, lam), rho, converged[0] & converged[1])


@partial(jit, static_argnums=(0, 7, 8))
def ij_first_steps(fun, chol, u_1, g_1, params, index, data, n: int, batch_size: int):
    """``(d_1 (n_folds, D), change, reach, rho (n_folds,) each)``: every IJ fold's first
    chord step (``M = H``) and its screen terms (:func:`approxcv.engine.chord.screen_terms`),
    one gradient per fold."""
    g_1_step = jsl.cho_solve((chol, True), g_1)            # H^{-1} g_1: once, not per fold

    def one(args):
        u, idx = args
        d1, r1, value = first_chord_step(fun, chol, u, fold_weights(idx, n), data)
        return (d1, *screen_terms(chol, d1, r1, value, u - u_1, g_1, g_1_step))
    return map_in_batches(one, (params, index), batch_size)


@partial(jit, static_argnums=(0, 6, 7))
def ij_second_steps(fun, chol, params, d1, index, data, n: int, batch_size: int):
    """``(correction (n_folds, D), rho (n_folds,))`` of IJ folds from their first chord
    steps ``d1``: one more gradient per fold (:func:`approxcv.engine.chord.
    second_chord_step`)."""
    def one(args):
        u, d, idx = args
        return second_chord_step(fun, chol, u, d, fold_weights(idx, n), data)
    return map_in_batches(one, (params, d1, index), batch_size)


class ChordScreen(NamedTuple):
    """The IJ's first chord steps of every fold, for :func:`screened_estimate_errors`.

    step: ``(n_folds, D)`` ``d_1``; change: ``(n_folds,)`` first-order change of the fold
    loss along ``-d_1``; reach: ``(n_folds,)`` its bound along any step as long; rate: ``(n_folds,)`` the contraction estimate ``rho``; second:
    ``rows -> (correction, rho)`` of those folds by their second chord steps
    (:func:`ij_second_steps`; folds in lanes: :func:`approxcv.engine.lanes.
    lanes_second_steps`); again: ``(rows, points) -> (correction, rho)``, two chord steps
    from ``points`` (``(len(rows), D)``) for those folds, with the same factor
    (:func:`full_hessian_chord_steps`): the second round of a slow fold."""
    step: np.ndarray
    change: np.ndarray
    reach: np.ndarray
    rate: np.ndarray
    second: Callable
    again: Callable


def ij_chord_screen(problem, params, index, options, chol, grad, info=None,
                    partial: bool = False):
    """The :class:`ChordScreen` of the IJ folds ``params`` (Cholesky factor ``chol`` of
    ``H``, ``grad = grad F(u_1, 1)``), or ``None`` where the screen does not apply (the
    option ``error_estimate="full"``, an objective that does not split, ``hessian_diagonal``
    (the factor is not ``H``'s), short folds in windows of a long series, and folds that
    remove units they do not score (``partial``): their held-out loss is not the training
    loss the objective splits off). Folds in lanes also give their held-out losses
    (``info["heldout"]``)."""
    if (partial or options.error_estimate != "screened" or not getattr(problem, "splits", False)
            or options.hessian_diagonal or use_taylor_chord_steps(problem, index)):
        return None
    params, index = np.asarray(params), np.asarray(index)
    if use_lanes(problem, index):
        step, change, reach, rate, heldout = lanes_first_steps(
            problem, params, index, chol, grad, options.batch_size, options.progress)
        if info is not None:
            info["heldout"] = heldout
    else:
        u_1, g_1 = jnp.asarray(problem.u_full), jnp.asarray(grad)
        step, change, reach, rate = per_fold_chunks(
            problem, lambda b, p, i: ij_first_steps(problem.fun, chol, u_1, g_1, p, i,
                                                    problem.data, problem.n_units, b),
            (params, index), options.batch_size, "error estimates", options.progress)
    step = np.asarray(step)

    def second(rows):
        if use_lanes(problem, index[rows]):
            return lanes_second_steps(problem, params[rows], step[rows], index[rows], chol,
                                      options.batch_size, options.progress)
        return per_fold_chunks(
            problem, lambda b, p, d, i: ij_second_steps(problem.fun, chol, p, d, i,
                                                        problem.data, problem.n_units, b),
            (params[rows], step[rows], index[rows]), options.batch_size, "error estimates",
            options.progress)

    def again(rows, points):
        return full_hessian_chord_steps(problem, points, index[rows], options, chol)
    return ChordScreen(step, np.asarray(change), np.asarray(reach), np.asarray(rate), second,
                       again)


def full_hessian_chord_steps(problem, params, index, options, chol=None, info=None,
                             unscored=None):
    """``(correction (n_folds, D), rho (n_folds,))`` of the fold points ``params`` with
    ``M = H`` at ``(u_1, 1)``: :func:`ij_chord_steps` with the Cholesky factor ``chol`` the
    IJ holds, else (matrix-free) :func:`ij_chord_steps_cg` (a row CG could not solve is NaN:
    its estimate unknown, not the fold). Short folds on a long series take
    :func:`approxcv.engine.windows.taylor_chord_steps` (recorded in ``info``; folds its
    checks do not vouch for take the full passes); many long folds of one series go in lanes
    (:func:`approxcv.engine.lanes.lanes_chord_steps`, whose pass also gives the held-out
    losses at ``params``: ``info["heldout"]``, with the ``unscored`` units' term taken off,
    :func:`approxcv.engine.heldout.heldout_losses`). Applied to the IJ's points this is the IJ's own
    estimate; applied to a refined point ``u*`` it is the next round of the same iteration
    (``method="auto"``'s chord stage)."""
    if chol is not None:
        def full(p_rows, idx_rows):
            return per_fold_chunks(problem, lambda b, p, i: ij_chord_steps(
                problem.fun, chol, p, i, problem.data, problem.n_units, b),
                (p_rows, idx_rows), options.batch_size, "error estimates", options.progress)
        if use_lanes(problem, index):
            step, rate, heldout = lanes_chord_steps(problem, params, index, chol,
                                                    options.batch_size, options.progress)
            if info is not None:
                info["heldout"] = heldout_losses(problem, params, index, options.batch_size,
                                                 options.progress, unscored=unscored,
                                                 removed=heldout)
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
                    points: bool = True, unscored=None):
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
        unscored: ``(n_folds, m')`` padded removed-but-not-scored indices, or ``None``: the
            fold loss at ``u*`` is then the difference of both terms there, as at ``u_m``
            (:func:`approxcv.engine.heldout.heldout_losses`).

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
        if unscored is not None:
            loss_star = np.asarray(loss_star, np.float64) - unscored_losses(
                problem, refined, unscored, batch_size, progress)
    else:
        batch = batch_size or fold_batch_size(problem, len(index))
        loss_star, points_star = (np.asarray(a) for a in heldout_losses(
            problem, refined, index, batch, progress, unscored=unscored))
    fold_loss = np.asarray(fold_loss, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.abs(loss_star - fold_loss) / np.abs(loss_star)
    est = np.where(np.isnan(est) & (loss_star == fold_loss), 0.0, est)   # 0/0: no change
    est = np.where(ok & np.isfinite(est), est, np.inf)
    return est, loss_star, points_star


def contracting(rate) -> np.ndarray:
    """``(n_folds,) bool``: where the chord iteration behind a fold's estimate contracts
    (``rho < 1``; NaN, a step that is not finite, does not). Elsewhere the fold is unreliable
    by the cause ``"chord_not_contracting"``, not by the size of its estimate."""
    return np.asarray(rate, np.float64) < 1.0


def _padded_rows(rows):
    """``rows`` padded with copies of the first to a :func:`~approxcv.engine.fold_buckets.
    fold_bucket` count (programs shared across counts)."""
    return np.concatenate([rows, np.repeat(rows[:1], fold_bucket(rows.size) - rows.size)])


def slow_second_round(params, correction, rate, again):
    """Folds whose chord steps contract at ``SLOW_RATE <= rho < 1`` take a second round of
    two steps from their extrapolated point ``u* = params - correction`` (module
    docstring): ``again(rows, points) -> (correction, rho)`` of those rows (padded to a
    :func:`~approxcv.engine.fold_buckets.fold_bucket` count here). Returns ``(correction,
    rate)`` with those rows' corrections summed over both rounds and the second round's
    ``rho``; the other rows unchanged."""
    correction, rate = np.array(correction, np.float64), np.array(rate, np.float64)
    slow = np.flatnonzero(contracting(rate) & (rate >= SLOW_RATE)
                          & np.all(np.isfinite(correction), axis=1))
    if slow.size:
        sub = _padded_rows(slow)
        start = np.asarray(params, np.float64)[sub] - correction[sub]
        corr2, rho2 = (np.array(a, np.float64)[:slow.size] for a in again(sub, start))
        correction[slow], rate[slow] = correction[slow] + corr2, rho2
    return correction, rate


def screened_estimate_errors(problem, params, fold_loss, index, screen: ChordScreen, tol,
                             batch_size: int | None = None, progress: bool = False,
                             unscored=None):
    """Every fold's estimate from the IJ's :class:`ChordScreen` (module docstring, screened
    estimates): the screen where it vouches (at most ``SCREEN_FRACTION * tol``, ``rho <
    SCREEN_MAX_RATE``), else the full two-step estimate (their second chord steps and
    :func:`estimate_errors`), run on those folds only, padded to a
    :func:`~approxcv.engine.fold_buckets.fold_bucket` count; of those, folds contracting at
    ``rho >= SLOW_RATE`` take a second round from their extrapolated point, and folds
    whose iteration does not contract take the first step's estimate (module docstring,
    slow and non-contracting folds).

    Returns ``(estimate, correction, rho, full_rows)``: the correction ``u_m - u*`` and
    contraction of every fold (screened folds: ``d_1`` and the screen's ``rho``; slow
    folds: both rounds' correction and the second round's ``rho``; NaN correction and
    ``rho >= 1`` or NaN where the iteration does not contract, :func:`contracting`), and
    the rows that took the full estimate.
    """
    rate = np.array(screen.rate, np.float64)
    loss = np.asarray(fold_loss, np.float64)
    change = np.asarray(screen.change, np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        est = np.abs(change) / np.abs(loss + change)
        # what the later steps could add at most, were they to contract at the screen's rate
        rest = np.asarray(screen.reach, np.float64) * rate / (1.0 - rate)
        bound = (np.abs(change) + rest) / np.abs(loss)
    est = np.where(np.isnan(est) & (change == 0.0), 0.0, est)       # 0/0: no change
    vouched = (np.isfinite(est) & (rate < SCREEN_MAX_RATE)
               & (np.where(np.isnan(bound), np.inf, bound) <= SCREEN_FRACTION * tol))
    step = np.asarray(screen.step, np.float64)
    correction = np.where(vouched[:, None], step, np.nan)
    est = np.where(vouched, est, np.inf)
    rows = np.flatnonzero(~vouched)
    if rows.size:
        padded = _padded_rows(rows)
        corr, rho = (np.array(a, np.float64) for a in screen.second(padded))
        corr, rho = corr[:rows.size], rho[:rows.size]
        corr, rho = slow_second_round(np.asarray(params)[rows], corr, rho,
                                      lambda sub, points: screen.again(rows[sub], points))
        # where the iteration does not contract, the first step's estimate (and its cause)
        ok = contracting(rho)
        taken = np.where(ok[:, None], corr, step[rows])
        taken = np.concatenate([taken, np.repeat(taken[:1], padded.size - rows.size, 0)])
        sub = estimate_errors(problem, np.asarray(params)[padded], loss[padded],
                              np.asarray(index)[padded], taken, batch_size, progress,
                              points=False, unscored=None if unscored is None
                              else np.asarray(unscored)[padded])[0]
        est[rows], rate[rows] = sub[:rows.size], rho
        correction[rows] = np.where(ok[:, None], corr, np.nan)
    return est, correction, rate, rows


def finish_error_estimate(problem, params_flat, fold_loss, folds, diagnostics: dict,
                          options, stages: dict) -> None:
    """Every fold's error estimate of a method that left its ingredients in
    ``diagnostics``, in place: the IJ's screen (``"chord_screen"``:
    :func:`screened_estimate_errors`, two chord steps only where the screen cannot vouch;
    ``diagnostics["error_estimate_screened"]``) or NS's correction (``"chord_correction"``:
    :func:`estimate_errors`). Sets ``error_estimate``, ``chord_rate``, ``tol`` and the
    causes of :func:`~approxcv.engine.diagnostics.estimate_causes` in
    ``diagnostics["unreliable"]``; ``stages["error_estimate"]`` its time. ``folds`` as the
    method ran them (padded); nothing for a method that leaves neither."""
    diagnostics.pop("chord_factor", None)    # the IJ's factor of H: internal (auto)
    if "chord_screen" not in diagnostics and "chord_correction" not in diagnostics:
        return
    t = time.perf_counter()
    index, unscored = folds.padded(), folds.unscored_padded()
    if "chord_screen" in diagnostics:
        est, _, rate, full = screened_estimate_errors(
            problem, params_flat, fold_loss, index, diagnostics.pop("chord_screen"),
            options.tol, options.batch_size, options.progress, unscored=unscored)
        screened = np.ones(len(folds), bool)
        screened[full] = False
        diagnostics["error_estimate_screened"] = screened
    else:
        est = estimate_errors(problem, params_flat, fold_loss, index,
                              diagnostics.pop("chord_correction"), options.batch_size,
                              options.progress, points=False, unscored=unscored)[0]
        rate = diagnostics["chord_rate"]
    diagnostics["chord_rate"] = np.asarray(rate)
    causes = unreliable_causes(diagnostics.get("unreliable"), len(folds))
    causes.update(estimate_causes(est, rate, options.tol))
    diagnostics.update(error_estimate=est, unreliable=causes, tol=options.tol)
    stages["error_estimate"] = stages.get("error_estimate", 0.0) + time.perf_counter() - t
