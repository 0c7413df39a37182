"""Which optimum an exact refit keeps, and when to distrust it.

A fold's objective ``F(u, w_o)`` may have several local optima; a refit keeps the lowest
one it finds, from three kinds of starts:

1. the fit ``u_1`` (the warm start) and the model's own starts (:func:`best_of_starts`);
2. other folds' refits (:func:`cross_fold_refits`): folds differ little, so a better
   optimum one fold found is often near a better optimum of another — and a fold whose
   warm refit stays in the fit's basin, still a local minimum, is reached by no start
   of its own. Each fold's objective is evaluated (objective evaluations only, batched)
   at the refits of ``CROSS_CANDIDATES`` folds at evenly spaced ranks of the full-data
   objective ``F(u_j, 1)`` (every fold when there are no more; so distinct basins are
   represented) and of its two neighbouring folds; a fold is refitted from the lowest of
   them when that is lower than its current refit by more than ``RESTART_RTOL * scale``,
   for up to ``CROSS_ROUNDS`` rounds while some candidate is lower (a fold is refitted
   from one refit of another fold once; a repaired fold's new refit is a new candidate
   for the others). That is ``n_folds x
   (CROSS_CANDIDATES + 2)`` objective evaluations a round, next to the hundreds of
   objective-and-gradient evaluations of one refit;
3. *basin starts*: when some fold's refit lowers the full-data objective below the fit's,
   the fit is a local optimum that is not the best, and a fold whose warm refit stayed in
   the fit's basin may have a lower optimum in the better basin that evaluating its
   objective at other folds' optima does not reveal (those optima sit where *their*
   folds' data put them: on the call volumes, PoissonHMM(3) fitted at a local optimum
   left 3 of 30 folds 0.16-1.6 nats above a 20-start search that way). Every fold above
   the lowest refit (full-data objective) that no candidate repairs in a round is then
   refitted from that refit — a refit per fold each time the lowest refit changes (at
   most ``CROSS_ROUNDS``), spent only when the fit is shown not to be the best.

A different start wins only by more than ``RESTART_RTOL * scale`` (a relabelled copy of
the same optimum, e.g. permuted states, never replaces the warm start). Every fold keeps
the runner-up: the lowest converged optimum *distinct* from the chosen one (fold
objective higher by more than ``RESTART_RTOL * scale``), and the lowest fold objective
seen anywhere (any start's end, converged or not, and every cross-fold evaluation).

Flags (:func:`unreliable_optima`; causes of
:data:`~approxcv.engine.diagnostics.UNRELIABLE_CAUSES`):

* ``worse_optimum``: the chosen refit is not the lowest fold objective found (a start or a
  cross-fold candidate went lower, but its refit did not converge);
* ``restart_disagreement``: the runner-up lies within ``OPTIMUM_GAP_NATS`` of the chosen
  optimum — a mode that close carries material posterior mass (at least ``e^-2`` of the
  chosen one's density) — and its held-out predictive density differs materially: by more
  than ``HELDOUT_RTOL`` (1 %) relatively per left-out unit, i.e. the held-out fold losses
  differ by more than ``|o| log(1 + HELDOUT_RTOL)`` nats. Which optimum the fold "has"
  then changes its CV loss. (A difference of losses is free of the data's units — the
  Jacobian of a change of units cancels — a ratio of losses is not.)

Starts that merely end in clearly worse optima, or in a copy of the same optimum, are not
flagged: the chosen refit is the best optimum found and the CV loss is its loss.
"""
from __future__ import annotations

from functools import partial

import jax
import numpy as np

from .batching import fold_weights, heldout_batch_size
from .heldout import heldout_losses
from .._runtime import jit, map_in_batches

__all__ = ["RESTART_RTOL", "CROSS_CANDIDATES", "CROSS_ROUNDS", "OPTIMUM_GAP_NATS", "HELDOUT_RTOL",
           "best_of_starts", "cross_fold_refits", "full_objectives", "pair_objectives",
           "unreliable_optima"]

#: two refits of one fold reach different optima when their fold objectives differ by
#: more than this times the objective's scale (number of observations): far above
#: round-off (~1e-12 per observation), far below a different local optimum
RESTART_RTOL = 1e-6
#: other folds' refits, at evenly spaced ranks of the full-data objective, at which every
#: fold's objective is evaluated (plus its two neighbouring folds'): all of them for up to
#: this many folds (on PoissonHMM(3) with 15 folds, 8 ranks missed a candidate 7 nats
#: lower that evaluating all 15 finds)
CROSS_CANDIDATES = 32
#: most rounds of cross-fold starts (a round runs while some candidate beats a fold's
#: refit: a repaired fold's refit may in turn repair another)
CROSS_ROUNDS = 4
#: a competing optimum this close (nats of fold objective) to the chosen one carries
#: material posterior mass: if its held-out loss differs, the fold is flagged
OPTIMUM_GAP_NATS = 2.0
#: held-out predictive densities at two optima differ materially above this relative
#: difference per left-out unit (fold losses further apart than |o| log(1 + HELDOUT_RTOL))
HELDOUT_RTOL = 0.01


def best_of_starts(out: dict, n_folds: int, n_starts: int, scale: float) -> dict:
    """Per fold, from ``out`` (``(n_folds * n_starts,)`` rows of refit results, a fold's
    starts consecutive, the warm start first): the record of the warm start unless another
    converged start is lower by more than ``RESTART_RTOL * scale`` (then the lowest), and

    * ``start_spread``: the range of converged objectives;
    * ``warm_gap``: the warm start's objective minus the lowest converged one;
    * ``alt_u``, ``alt_objective``: the runner-up, the lowest converged start whose
      objective exceeds the chosen one by more than ``RESTART_RTOL * scale`` (NaN, inf
      where none);
    * ``lowest_objective``: the lowest finite objective of any start, converged or not.
    """
    tol = RESTART_RTOL * scale
    shaped = {k: np.asarray(v).reshape((n_folds, n_starts) + np.shape(v)[1:])
              for k, v in out.items()}
    objective = shaped["objective"]
    finite = np.isfinite(objective)
    ok = shaped["converged"] & finite
    value = np.where(ok, objective, np.inf)
    lowest = np.argmin(value, 1)
    warm_ok = ok[:, 0] & (value[:, 0] <= value.min(1) + tol)
    best = np.where(warm_ok | ~ok.any(1), 0, lowest)
    rows = np.arange(n_folds)
    rec = {k: v[rows, best] for k, v in shaped.items()}
    hi = np.where(ok, objective, -np.inf).max(1)
    with np.errstate(invalid="ignore"):      # inf - inf where no start converged: masked
        rec["start_spread"] = np.where(ok.sum(1) > 1, hi - value.min(1), 0.0)
        rec["warm_gap"] = np.where(ok[:, 0] & ok.any(1), value[:, 0] - value.min(1), 0.0)
        distinct = ok & (objective > rec["objective"][:, None] + tol)
    alt_value = np.where(distinct, objective, np.inf)
    alt = np.argmin(alt_value, 1)
    rec["alt_objective"] = alt_value[rows, alt]
    rec["alt_u"] = np.where(distinct.any(1)[:, None], shaped["u"][rows, alt], np.nan)
    rec["lowest_objective"] = np.where(finite, objective, np.inf).min(1)
    return rec


@partial(jit, static_argnums=(0, 4))
def _full_objective(fun, us, ones, data, batch_size):
    return map_in_batches(lambda u: fun(u, ones, data), us, batch_size)


#: :func:`full_objectives` evaluates at least this many rows (a power of two): the fit
#: alone and the refits of up to this many folds share one compiled program
MIN_OBJECTIVE_ROWS = 8


def full_objectives(problem, us) -> np.ndarray:
    """``F(u_j, 1)`` at every row of ``us (k, D)``. The rows are padded (repeating the last)
    to the next power of two, at least :data:`MIN_OBJECTIVE_ROWS`, so the evaluation at the
    fit and at every fold's refit are one compiled program for small fold counts, and a few
    for large ones."""
    us = np.asarray(us, np.float64)
    k = len(us)
    if k == 0:
        return np.zeros(0)
    rows = max(MIN_OBJECTIVE_ROWS, 1 << (k - 1).bit_length())
    padded = np.concatenate([us, np.repeat(us[-1:], rows - k, axis=0)])
    ones = np.ones(problem.n_units)         # NumPy: an eager jnp.ones compiles a program
    batch = heldout_batch_size(problem.n_units, problem.data, rows)
    return np.asarray(_full_objective(problem.fun, padded, ones, problem.data, batch))[:k]


@partial(jit, static_argnums=(0, 5, 6))
def _pair_objectives(fun, us, cols, index, data, n: int, batch_size: int):
    """``F(us[cols[i, c]], w_i)`` ``(n_folds, C)``: folds in batches, candidates ``vmap``ped."""
    def one(args):
        idx, col = args
        w = fold_weights(idx, n)
        return jax.vmap(lambda u: fun(u, w, data))(us[col])
    return map_in_batches(one, (index, cols), batch_size)


def pair_objectives(problem, us, cols, index, batch_size: int | None = None) -> np.ndarray:
    """``F(us[cols[i, c]], w_i)`` ``(n_folds, C)`` for the folds of the padded ``index``:
    objective evaluations only, folds in batches, candidates ``vmap``ped."""
    batch = batch_size or max(1, heldout_batch_size(problem.n_units, problem.data,
                                                    cols.shape[0]) // cols.shape[1])
    return np.asarray(_pair_objectives(problem.fun, jax.numpy.asarray(us),
                                       jax.numpy.asarray(cols), jax.numpy.asarray(index),
                                       problem.data, problem.n_units, int(batch)))


def candidate_columns(full, ok, n_ranks: int = CROSS_CANDIDATES) -> np.ndarray:
    """``(n_folds, min(n_ranks, n_folds) + 2)`` fold positions whose refits serve as starts
    of each fold: the usable (``ok``) refits at evenly spaced ranks of the full-data
    objective ``full`` (repeated to fill when fewer), then the fold's two neighbours
    (cyclically). The width depends on ``n_folds`` only: one compiled evaluation a run."""
    n_folds = len(full)
    width = min(n_ranks, n_folds)
    good = np.flatnonzero(ok & np.isfinite(full))
    order = good[np.argsort(full[good], kind="stable")]
    if order.size:
        picks = order[np.unique(np.round(np.linspace(0, order.size - 1,
                                                     min(width, order.size))).astype(int))]
    else:
        picks = np.zeros(1, int)
    rows = np.arange(n_folds)
    return np.concatenate([np.tile(np.resize(picks, width), (n_folds, 1)),
                           ((rows - 1) % n_folds)[:, None], ((rows + 1) % n_folds)[:, None]],
                          axis=1)


def _usable(rec) -> np.ndarray:
    """Refits that may serve as starts and as incumbents: converged, finite."""
    return (rec["converged"].astype(bool) & np.isfinite(rec["objective"])
            & np.all(np.isfinite(rec["u"]), axis=1))


def cross_fold_refits(problem, index, rec: dict, refit, on_improved=None,
                      rounds: int = CROSS_ROUNDS, at_fit: float | None = None) -> np.ndarray:
    """Refit folds from other folds' refits (module docstring), updating ``rec`` in place.

    Args:
        problem: the :class:`~approxcv.problem.Problem`.
        index: ``(n_folds, m)`` padded left-out indices.
        rec: per-fold records stacked over folds (fields of :func:`best_of_starts`).
        refit: ``refit(u0s (k, D), positions (k,)) -> dict`` of refit results
            (``u``, ``converged``, ``num_steps``, ``grad_norm``, ``objective``) of the folds
            at ``positions`` from ``u0s``.
        on_improved: called with the positions of the folds improved by each round.
        rounds: at most this many rounds.
        at_fit: the full-data objective at the fit, ``F(u_1, 1)``. When given and some
            refit lies below it, the fit is a local optimum that is not the best: every
            fold whose refit is above the lowest refit (full-data objective) and that no
            candidate repairs is refitted from that refit (*basin starts*).

    Returns:
        ``(n_folds,)`` bool: folds whose refit is now one from another fold's optimum.
    """
    n_folds = len(index)
    tol = RESTART_RTOL * problem.scale
    improved = np.zeros(n_folds, bool)
    if n_folds < 2:
        return improved
    rows = np.arange(n_folds)
    index = jax.numpy.asarray(index)
    tried = np.zeros((n_folds, n_folds), bool)     # fold i was refitted from refit j as it is
    for _ in range(rounds):
        usable = _usable(rec)
        if not usable.any():
            break
        u = np.where(usable[:, None], rec["u"], problem.u_full)    # finite rows to evaluate
        full = full_objectives(problem, u)
        cols = candidate_columns(full, usable)
        batch = max(1, heldout_batch_size(problem.n_units, problem.data, n_folds)
                    // cols.shape[1])
        values = np.asarray(_pair_objectives(problem.fun, jax.numpy.asarray(u),
                                             jax.numpy.asarray(cols), index, problem.data,
                                             problem.n_units, batch))
        values = np.where(usable[cols] & (cols != rows[:, None]) & np.isfinite(values),
                          values, np.inf)
        rec["lowest_objective"] = np.fmin(rec["lowest_objective"], values.min(1))
        values = np.where(tried[rows[:, None], cols], np.inf, values)
        pick = np.argmin(values, 1)
        best = values[rows, pick]
        go = np.isfinite(best) & (~usable | (best < rec["objective"] - tol))
        start = cols[rows, pick]
        basin = None if at_fit is None else _basin_start(full, usable, at_fit, tol)
        if basin is not None:       # the fit is beaten: the rest start from the best refit
            forced = ~go & ~tried[:, basin] & (full > full[basin] + tol)
            start = np.where(forced, basin, start)
            go |= forced
        if not go.any():
            break
        at = np.flatnonzero(go)
        tried[at, start[at]] = True
        out = refit(u[start[at]], at)
        new_obj = np.asarray(out["objective"])
        rec["lowest_objective"][at] = np.fmin(rec["lowest_objective"][at], new_obj)
        ok = (np.asarray(out["converged"]).astype(bool) & np.isfinite(new_obj)
              & np.all(np.isfinite(out["u"]), axis=1))
        better = ok & (~usable[at] | (new_obj < rec["objective"][at] - tol))
        if not better.any():
            continue
        at, take = at[better], np.flatnonzero(better)
        tried[:, at] = False                              # new refits: new starts
        was = usable[at]
        # the replaced refit becomes the runner-up (a distinct optimum, lower than the old
        # runner-up); the warm start's gap grows by the improvement
        rec["alt_u"][at] = np.where(was[:, None], rec["u"][at], rec["alt_u"][at])
        rec["alt_objective"][at] = np.where(was, rec["objective"][at],
                                            rec["alt_objective"][at])
        rec["warm_gap"][at] = np.where(was, rec["warm_gap"][at] + rec["objective"][at]
                                       - new_obj[take], rec["warm_gap"][at])
        for f in ("u", "converged", "num_steps", "grad_norm", "objective"):
            rec[f][at] = np.asarray(out[f])[take]
        improved[at] = True
        if on_improved is not None:
            on_improved(at)
    return improved


def _basin_start(full, usable, at_fit: float, tol: float):
    """The position of the usable refit with the lowest full-data objective ``full`` when
    it is below the fit's ``at_fit`` by more than ``tol`` (the fit is then a local optimum
    that is not the best), else None."""
    value = np.where(usable & np.isfinite(full), full, np.inf)
    j = int(np.argmin(value))
    return j if value[j] < at_fit - tol else None


def unreliable_optima(problem, index, rec: dict, batch_size: int | None = None,
                      unscored=None) -> dict:
    """``worse_optimum`` and ``restart_disagreement`` masks (module docstring), and
    ``competing_loss``: the held-out fold loss at the runner-up where it lies within
    ``OPTIMUM_GAP_NATS`` of the chosen optimum (NaN elsewhere); ``unscored``: the folds'
    removed-but-not-scored units (:func:`approxcv.engine.heldout.heldout_losses`)."""
    tol = RESTART_RTOL * problem.scale
    objective, converged = rec["objective"], rec["converged"].astype(bool)
    lowest = rec["lowest_objective"]
    with np.errstate(invalid="ignore"):
        worse = np.isfinite(lowest) & ~(objective <= lowest + tol)
        gap = rec["alt_objective"] - objective
        near = converged & np.isfinite(gap) & (gap <= OPTIMUM_GAP_NATS)
    competing = np.full(len(objective), np.nan)
    disagree = np.zeros(len(objective), bool)
    if near.any():
        # all rows (the runner-up where near, the chosen refit elsewhere): the shapes of the
        # engine's own held-out evaluation, so its compiled program serves both
        alt = np.where(near[:, None], rec["alt_u"], rec["u"])
        at_alt = heldout_losses(problem, alt, index, batch_size, unscored=unscored)[0]
        at_chosen = heldout_losses(problem, rec["u"], index, batch_size, unscored=unscored)[0]
        left_out = np.sum(np.asarray(index) < problem.n_units, axis=1)    # scored units
        if unscored is not None:
            left_out = left_out - np.sum(np.asarray(unscored) < problem.n_units, axis=1)
        with np.errstate(invalid="ignore"):
            differ = np.abs(at_alt - at_chosen) > left_out * np.log1p(HELDOUT_RTOL)
        disagree = near & differ
        competing = np.where(near, at_alt, np.nan)
    return {"worse_optimum": worse, "restart_disagreement": disagree,
            "competing_loss": competing}
