"""``"auto"``: the cheapest method that can vouch for each fold, within a refit budget.

1. ``ij`` on every fold, with its error estimate (:mod:`approxcv.engine.error_estimate`);
2. ``chord`` on the folds whose IJ estimate exceeds ``tol``: the IJ's estimate already
   computed the extrapolated chord point ``u*`` (two chord steps with the IJ's factor of
   ``H`` and their geometric sum); it becomes the fold's point, and two more chord steps
   from it give its own error estimate, up to :data:`CHORD_ROUNDS` rounds. Each round costs
   two gradients and two held-out evaluations per fold and no new Hessian, so it is far
   cheaper than NS (a Hessian per fold) where the iteration contracts — the time-varying
   Poisson event model's IJ errors of 1-6 %, which NS's own estimate could not vouch for
   and sent to exact refits costing a third of exact CV;
3. ``ns`` on the folds no chord round vouches for (or that the IJ cannot vouch for); an NS
   estimate replaces the earlier one only where it is better vouched
   (:func:`better_vouched`: finite, with an error estimate of its own) — a failed step keeps
   the earlier, flagged estimate, and the fold goes on to the next stage
   (``diagnostics["ns_rejected_folds"]``);
4. ``exact`` refits of the folds whose NS estimate still exceeds ``tol`` (or that NS cannot
   vouch for), the worst estimates first, at most ``max_exact`` of them, and of the folds
   whose objective is lower at one of the refits' starts than at their estimate: the
   starts hold the model's known optima (``model.known_optima``, where the fit's other
   starts ended), and such a fold's optimum may lie in another basin (cause
   ``"other_basin"`` until refitted; :mod:`approxcv.engine.other_basins`);
5. ``exact`` refits of the folds whose objective is lower at one of those refits than at
   their own IJ/NS point (:func:`lower_optimum_elsewhere`): the local estimate vouches for
   its basin, but another basin is better for the fold (an error estimate built from
   derivatives at one point cannot see that). They start from the lower refit too and
   count against ``max_exact``; ``diagnostics["other_optimum_folds"]`` lists them.
6. where an exact refit's full-data objective is lower than the fit's, the fit is not the
   best optimum and no estimate derived from it can stand: every fold not refitted exactly
   is unreliable (cause ``"fit_not_best_optimum"``; ``diagnostics["better_optimum_folds"]``,
   :class:`~approxcv.errors.LocalOptimumWarning`).

**Leave-future-out folds** (every fold removes a suffix ``{s, ..., n - 1}``,
:func:`~approxcv.folds.future_origins`; :func:`auto_future`): the origins are walked one
after another from an *expansion point*, at first the full-data fit; each fold is expanded
from the current point (:mod:`approxcv.engine.future`: the chord iteration with that point's
Hessian, started there, and the IJ's error estimate) and refined by the chord rounds of
step 2; the first fold of the walk that none vouches for (or the ``k``-th, ``2k``-th, ...
of the walk with ``refit_every=k``) is refitted exactly and becomes the expansion point of
the folds after it (the approximate LFO of Bürkner, Gabry & Vehtari 2020, with the IJ in
place of importance sampling and the error estimate in place of Pareto k). No NS stage:
a refit there serves every later fold. After the walk the earliest origin is refitted
when the walk did not (the probe, :data:`LFO_PROBE`). Step 5 follows (folds lower at one of
the refits than at their own expansion are refitted from it, within ``max_exact``;
:data:`OTHER_OPTIMUM_ROUNDS` rounds, each round's refits candidates of the next); then a
fold not refitted whose objective is lower at any optimum the refits reached (their
runner-up starts included) than at its estimate is marked ``"other_basin"``
(:mod:`approxcv.engine.other_basins`).

``diagnostics["fold_method"]`` records which method produced each fold (``"ij"``,
``"chord"``, ``"ns"``, ``"exact"``); ``diagnostics["error_estimate"]`` is that method's
estimate (0 for a reliable exact refit, NaN for an unreliable one). Folds that still need a
refit when the budget is spent keep their best-vouched numbers and are unreliable (cause
``"over_budget"``); every other cause is the one of the method that produced the fold.
"""
from __future__ import annotations

import dataclasses
import time
import warnings

import numpy as np

from ...errors import user_stacklevel
from ..audit import refit_problem
from ..diagnostics import unreliable_causes
from ..fold_buckets import bucketed
from ..error_estimate import (contracting, estimate_errors, full_hessian_chord_steps,
                              refined_params, screened_estimate_errors)
from ..derivatives import full_derivatives
from ..diagnostics import fit_diagnostics
from ..future import Reference, expand_from, reference_at
from ...folds import future_origins
from ...optim.newton import polish_jacobian
from ...optim.pd import factor_hessian
from ..heldout import heldout_losses
from ..exact_optima import (RESTART_RTOL, candidate_columns, full_objectives,
                            pair_objectives)
from ..other_basins import other_basin_folds
from ...errors import LocalOptimumWarning
from .exact import better_optimum_message
from .model_estimators import model_estimator, run_model_estimator
from ..registry import get_method, register_method

#: rounds of the chord stage (each: two chord steps and their extrapolation per fold)
CHORD_ROUNDS = 3

#: a chord round vouches for a fold only if its estimate is at most this fraction of the
#: previous one (the IJ's, then the last round's): the extrapolation to ``u*`` claims to
#: remove the estimated error up to higher order, so an estimate that barely shrinks means
#: the iteration is not in the linear regime its model assumes (measured in
#: ``benchmarks/trust.py``: a K = 3 sunspots fold whose estimates went 1.06 % -> 0.65 %
#: was 13 % off, its exact refit in another basin; the folds of the event model that the
#: stage serves shrink 4x or more per round)
CHORD_SHRINK = 0.5

#: diagnostics of the IJ (the fit's state) that ``auto`` reports as its own
_FIT_KEYS = ("grad_norm", "newton_step_norm", "inexact_fit", "hessian_min_eig",
             "hessian_max_eig", "jitter", "condition_number", "solver")


def _pad(points, width: int) -> np.ndarray:
    out = np.zeros((points.shape[0], width))
    out[:, :points.shape[1]] = points
    return out


def run_with_estimate(name, problem, folds, options, keep: int | None = None):
    """Run the registered method ``name`` on ``folds`` and evaluate it: ``(params, fold_loss,
    points, estimate, causes, diagnostics, correction)`` of the first ``keep`` folds (all
    by default); ``estimate`` is NaN and ``correction`` ``None`` when the method gives
    none."""
    keep = len(folds) if keep is None else keep
    params, diag = get_method(name)[0](problem, folds, options)
    params = np.array(params)
    index, unscored = folds.padded(), folds.unscored_padded()
    fold_loss, points = (np.array(a) for a in (diag.pop("heldout") if "heldout" in diag
                                               else heldout_losses(problem, params, index,
                                                                   options.batch_size,
                                                                   unscored=unscored)))
    correction, screen = diag.pop("chord_correction", None), diag.pop("chord_screen", None)
    if screen is not None:          # ij: its screen, the two steps where it cannot vouch
        est, correction, diag["chord_rate"], _ = (np.asarray(a)[:keep] for a in
                                                   screened_estimate_errors(
            problem, params, fold_loss, index, screen, options.tol, options.batch_size,
            unscored=unscored))
    elif correction is not None:
        correction = np.asarray(correction)[:keep]
        est = estimate_errors(problem, params[:keep], fold_loss[:keep], index[:keep],
                              correction, options.batch_size, points=False,
                              unscored=None if unscored is None else unscored[:keep])[0]
    else:
        est = np.full(keep, np.nan)
    causes = unreliable_causes(diag.pop("unreliable", None), len(folds))
    if correction is not None:      # its estimate says nothing where the chord diverges
        causes["chord_not_contracting"] = np.zeros(len(folds), bool)
        causes["chord_not_contracting"][:keep] = ~contracting(diag["chord_rate"][:keep])
    return (params[:keep], fold_loss[:keep], points[:keep], est,
            {k: v[:keep] for k, v in causes.items()}, diag, correction)


def chord_rounds(problem, folds, rows, params, correction, previous, chol, options):
    """The chord stage (module docstring, step 2) on the folds ``rows``.

    From each fold's IJ point and chord correction, up to :data:`CHORD_ROUNDS` rounds: move
    to ``u* = u - correction``, take two chord steps with ``M = H`` there and estimate the
    error of ``L_o(u*)`` as the IJ's estimate does. A fold is vouched for when its estimate
    is within ``tol`` and at most :data:`CHORD_SHRINK` times the previous one; it leaves the
    stage unvouched when its estimate shrinks less than that or its iteration stops
    contracting.

    Returns ``(vouched_rows, params, fold_loss, points, estimate)`` of the vouched folds.
    Each round costs the chord steps and one held-out evaluation (at the next extrapolated
    point, which the estimate needs and the next round starts from), on the fold subset
    padded to :func:`bucketed` shapes; the first round also evaluates its starting point.
    """
    index = folds.padded()
    out_rows, out = [], []
    live = np.asarray(rows)
    u, ok = refined_params(np.asarray(params)[live], np.asarray(correction)[live])
    live, u = live[ok], u[ok]
    prev = np.asarray(previous, np.float64)[live]
    loss = points = None                      # held-out losses at u, once evaluated
    for _ in range(CHORD_ROUNDS):
        if not live.size:
            break
        sub = bucketed(folds, live)
        pad, keep = len(sub) - live.size, live.size
        u_pad, sub_index = np.concatenate([u, np.repeat(u[:1], pad, axis=0)]), sub.padded()
        sub_unscored = sub.unscored_padded()
        if loss is None:
            loss, points = (np.asarray(a)[:keep] for a in heldout_losses(
                problem, u_pad, sub_index, options.batch_size, unscored=sub_unscored))
        corr = full_hessian_chord_steps(problem, u_pad, sub_index, options, chol)[0]
        loss_pad = np.concatenate([loss, np.repeat(loss[:1], pad)])
        est, loss_next, points_next = (a[:keep] for a in estimate_errors(
            problem, u_pad, loss_pad, sub_index, corr, options.batch_size,
            unscored=sub_unscored))
        shrinks = est <= CHORD_SHRINK * prev
        done = (est <= options.tol) & shrinks
        out_rows.append(live[done])
        out.append((u[done], loss[done], _pad(points[done], index.shape[1]), est[done]))
        # a fold that goes on moves to its extrapolated point, whose losses are known
        u_next, ok = refined_params(u, corr[:keep])
        go_on = ~done & shrinks & ok
        live, u, prev = live[go_on], u_next[go_on], est[go_on]
        loss, points = loss_next[go_on], points_next[go_on]
    if not out_rows:
        return np.zeros(0, int), None, None, None, None
    rows = np.concatenate(out_rows)
    return (rows, *(np.concatenate([o[k] for o in out]) for k in range(4)))


def better_vouched(old_loss, old_est, new_params, new_loss, new_est) -> np.ndarray:
    """``(n,) bool``: where a refinement's estimate may replace the earlier one — its
    parameters and held-out loss are finite, and it has an error estimate (or the earlier
    one has none, or an earlier loss was not finite). A step that fails (NS on a fold
    Hessian that is not positive definite can step to a non-finite loss) keeps the earlier,
    flagged estimate. Estimates of different methods are not compared by size: NS's own
    estimate can exceed the IJ's on a fold where NS is the closer of the two (measured on a
    fold leaving out half of a 120-step series: IJ 4.7 % off, estimated 5.0 %; NS 1.1 %
    off, estimated 9.0 %)."""
    ok = np.isfinite(new_loss) & np.all(np.isfinite(new_params), axis=1)
    old_vouched = np.isfinite(old_loss) & np.isfinite(old_est)
    return ok & (np.isfinite(new_est) | ~old_vouched)


def _any(causes: dict, n: int) -> np.ndarray:
    bad = np.zeros(n, bool)
    for m in causes.values():
        bad |= m
    return bad


def lower_optimum_elsewhere(problem, folds, params, method, causes, batch_size=None):
    """Folds whose local estimate sits in a worse basin than an exact refit found.

    Every fold not refitted exactly has its objective ``F(u, w_o)`` evaluated at its own
    point and at up to :data:`~approxcv.engine.exact_optima.CROSS_CANDIDATES` reliable
    exact refits (of other folds; evenly spaced in their full-data objective). A fold is
    returned when a refit is lower by more than ``RESTART_RTOL * scale``: within one basin
    another fold's optimum is a worse point for this fold than a local estimate that
    vouches for itself, so a lower one lies in another basin, where the fold's exact
    refit may land. Returns ``(mask (n_folds,), lowest candidate per fold (n_folds, D))``.
    """
    n_folds = len(folds)
    good = np.flatnonzero((method == "exact") & ~_any(causes, n_folds))
    rows = np.flatnonzero(method != "exact")
    mask, start = np.zeros(n_folds, bool), np.zeros_like(params)
    if not good.size or not rows.size:
        return mask, start
    full = full_objectives(problem, params[good])
    picks = candidate_columns(full, np.ones(good.size, bool))[0, :-2]
    picks = good[np.unique(picks)]
    cols = np.concatenate([rows[:, None], np.tile(picks, (rows.size, 1))], axis=1)
    values = pair_objectives(problem, params, cols, folds.padded()[rows], batch_size)
    best = np.argmin(values[:, 1:], axis=1)
    lower = values[np.arange(rows.size), 1 + best] < values[:, 0] - RESTART_RTOL * problem.scale
    mask[rows] = lower
    start[rows] = params[picks[best]]
    return mask, start


def record_better_optima(diagnostics, causes, better, method, warn: bool):
    """Exact refits that landed below the fit (``better``: per refit call, the fold ids
    and the largest gap): ``diagnostics["better_optimum_folds"]`` and
    ``["better_optimum_gap"]``, every fold not refitted exactly marked
    ``"fit_not_best_optimum"`` (its estimate is derived from a fit that is not the best
    optimum), and a :class:`~approxcv.errors.LocalOptimumWarning`."""
    ids = np.concatenate([b[0] for b in better])
    worst = max(better, key=lambda b: b[1])
    gap, first = worst[1], int(worst[0][0])
    diagnostics["better_optimum_folds"], diagnostics["better_optimum_gap"] = ids, gap
    causes["fit_not_best_optimum"] = method != "exact"
    if warn:
        warnings.warn(better_optimum_message(int(ids.size), int(method.size), gap, first),
                      LocalOptimumWarning, stacklevel=user_stacklevel())


def auto(problem, folds, options):
    """IJ, then NS, then exact refits where needed (module docstring)."""
    if model_estimator(problem, "auto") is not None:    # the model's own (a GP)
        return run_model_estimator(problem, folds, options, "auto")
    origins = future_origins(folds)
    dim = int(problem.u_full.shape[0])
    if origins is not None and options.dense(dim, problem.n_units):
        return auto_future(problem, folds, options, origins)
    quiet = dataclasses.replace(options, warn=False)
    n_folds, width = len(folds), folds.padded().shape[1]    # rows as wide as every index
    seconds = {}
    t = time.perf_counter()
    params, fold_loss, points, est, causes, diag_ij, correction = run_with_estimate(
        "ij", problem, folds, quiet)
    chol = diag_ij.pop("chord_factor", None)
    points = _pad(points, width)
    seconds["ij"] = time.perf_counter() - t
    method = np.full(n_folds, "ij", dtype=object)
    diagnostics = {k: diag_ij[k] for k in _FIT_KEYS if k in diag_ij}
    diagnostics["ij_error_estimate"] = est.copy()
    need = _any(causes, n_folds) | ~(est <= options.tol)
    counts = {"ij": n_folds, "chord": 0, "ns": 0, "exact": 0}
    better = []         # exact refits below the fit: (fold ids, largest gap) per refit call

    def replace(rows, sub_params, sub_loss, sub_points, sub_est, sub_causes, name):
        params[rows], fold_loss[rows], est[rows] = sub_params, sub_loss, sub_est
        points[rows] = _pad(sub_points, width)
        method[rows] = name
        for key in list(causes):
            causes[key][rows] = False
        for key, mask in sub_causes.items():
            causes.setdefault(key, np.zeros(n_folds, bool))[rows] = mask

    def refit_exactly(target, rows):
        """Exact refits of ``rows`` on ``target`` replace their estimates; returns the
        exact method's diagnostics."""
        sub = folds.subset(rows)
        sub_params, diag_ex = get_method("exact")[0](target, sub, quiet)
        sub_params = np.asarray(sub_params)
        if sub_params.shape[1] != params.shape[1]:
            raise RuntimeError("exact refits and the local surrogate have different "
                               "parameter layouts")
        sub_loss, sub_points = heldout_losses(target, sub_params, sub.padded(),
                                              options.batch_size,
                                              unscored=sub.unscored_padded())
        sub_causes = unreliable_causes(diag_ex.pop("unreliable", None), rows.size)
        sub_est = np.where(_any(sub_causes, rows.size), np.nan, 0.0)
        replace(rows, sub_params, sub_loss, sub_points, sub_est, sub_causes, "exact")
        if "better_optimum_folds" in diag_ex:
            better.append((np.asarray(diag_ex["better_optimum_folds"]),
                           float(diag_ex["better_optimum_gap"])))
        return diag_ex

    # the chord stage: only folds the IJ could vouch for but for its estimate
    rows = np.flatnonzero(need & ~_any(causes, n_folds))
    if rows.size:
        t = time.perf_counter()
        done, *out = chord_rounds(problem, folds, rows, params, correction, est, chol,
                                  options)
        if done.size:
            replace(done, out[0], out[1], out[2], out[3], {}, "chord")
            need[done] = False
        seconds["chord"] = time.perf_counter() - t
        counts["chord"] = int(done.size)
    if need.any():
        t = time.perf_counter()
        rows = np.flatnonzero(need)
        sub_params, sub_loss, sub_points, sub_est, sub_causes = run_with_estimate(
            "ns", problem, bucketed(folds, rows), quiet, len(rows))[:5]
        take = better_vouched(fold_loss[rows], est[rows], sub_params, sub_loss, sub_est)
        sub_causes = {k: v[take] for k, v in sub_causes.items()}
        replace(rows[take], sub_params[take], sub_loss[take], sub_points[take],
                sub_est[take], sub_causes, "ns")
        seconds["ns"] = time.perf_counter() - t
        counts["ns"] = int(rows.size)
        diagnostics["ns_rejected_folds"] = folds.ids[rows[~take]]
        need[rows[take]] = _any(sub_causes, int(take.sum())) | ~(sub_est[take] <= options.tol)
    # folds above one of the refits' starts on their own objective (the starts hold the
    # model's known optima, model.known_optima): their optimum may lie in another basin,
    # which no local estimate follows: refitted like the folds no estimate vouches for
    target = refit_problem(problem)
    causes["other_basin"] = np.zeros(n_folds, bool)
    vouched = np.flatnonzero(~need)
    if vouched.size and target.starts is not None and len(target.starts):
        t = time.perf_counter()
        above = other_basin_folds(target, params[vouched], folds.padded()[vouched],
                                  np.asarray(target.starts))["mask"]
        need[vouched[above]] = causes["other_basin"][vouched[above]] = True
        seconds["other_basins"] = time.perf_counter() - t
    rows = np.flatnonzero(need)
    # the worst estimates first; those whose chord does not contract say nothing: first too
    worst = np.where(causes.get("chord_not_contracting", np.zeros(n_folds, bool))[rows],
                     np.inf, np.nan_to_num(est[rows], nan=np.inf))
    order = rows[np.argsort(-worst, kind="stable")]
    budget = len(order) if options.max_exact is None else int(options.max_exact)
    refit, over = np.sort(order[:budget]), np.sort(order[budget:])
    if refit.size:
        t = time.perf_counter()
        diag_ex = refit_exactly(target, refit)
        seconds["exact"] = time.perf_counter() - t
        counts["exact"] = int(refit.size)
        for key in ("exact_converged", "exact_objective", "exact_start_spread"):
            if key in diag_ex:
                diagnostics[f"auto_{key}"] = diag_ex[key]
    # a local method cannot see another basin: test its folds against the optima the
    # exact refits found, and refit (from the lower one) where one is lower
    lower, lower_start = lower_optimum_elsewhere(target, folds, params, method, causes,
                                                 options.batch_size)
    spent = int(refit.size)
    budget_left = np.inf if options.max_exact is None else int(options.max_exact) - spent
    rows = np.flatnonzero(lower)
    second = rows[:int(min(rows.size, budget_left))]
    if second.size:
        t = time.perf_counter()
        extra = np.unique(lower_start[second], axis=0)
        if target.starts is not None:
            extra = np.concatenate([np.asarray(target.starts), extra])
        refit_exactly(target._replace(starts=extra), second)
        seconds["exact_other_optimum"] = time.perf_counter() - t
        counts["exact"] += int(second.size)
    over = np.union1d(over, rows[second.size:])
    diagnostics["other_optimum_folds"] = folds.ids[rows]
    if better:          # the fit is not the best optimum: no local estimate can stand on it
        record_better_optima(diagnostics, causes, better, method, options.warn)
    above = ~(est <= options.tol) & (method != "exact")
    causes["error_estimate_above_tol"] = above & ~np.isin(np.arange(n_folds), over)
    causes["over_budget"] = np.isin(np.arange(n_folds), over)
    diagnostics.update(fold_method=method.astype(str), error_estimate=est,
                       auto_counts=counts, over_budget_folds=folds.ids[over],
                       unreliable=causes, heldout=(fold_loss, points),
                       stage_seconds=seconds)
    return params, diagnostics


#: the order in which :func:`auto_future` walks the origins: ``"backward"`` (from the last
#: origin to the first, every fold expanded from the nearest refit at a later origin, at
#: first the full-data fit: units removed) or ``"forward"`` (Bürkner et al.'s order, from
#: the first origin, every fold expanded from the nearest refit at an earlier origin: units
#: added). See :func:`auto_future` for the choice and ``benchmarks/lfo.py`` for both measured
LFO_WALK = "backward"

#: rounds of step 5 after the walk: the refits one round makes (in another basin) are
#: candidates of the next, so a basin the walk's refits reached spreads to the folds whose
#: objective is lower there. One, as :func:`auto`: on Nile (GaussianHMM(2), 50 origins,
#: M = 4, ``benchmarks/lfo.py``), where exact LFO itself flags 16 folds for competing
#: optima, three rounds took the elpd error from 2.0 % to 1.35 % with 11 refits instead of
#: 6 (and 1.2x instead of 7.5x faster than exact): refits chasing optima exact cannot
#: choose between
OTHER_OPTIMUM_ROUNDS = 1

#: after the walk, refit the earliest origin (the shortest training set) when the walk did
#: not: the fold whose objective is furthest from the full data's, where another basin of
#: the objective is likeliest to be the lower one; its refit is a candidate of step 5 for
#: every other fold
LFO_PROBE = True


def _distinct_rows(rows) -> np.ndarray:
    """The finite rows of ``rows (R, D)``, each once (rows within 1e-8 of the scale of an
    earlier one dropped)."""
    rows = np.asarray(rows, np.float64)
    rows = rows[np.all(np.isfinite(rows), axis=1)]
    out = []
    for r in rows:
        if not any(np.all(np.abs(r - o) <= 1e-8 * (1 + np.max(np.abs(o)))) for o in out):
            out.append(r)
    return np.asarray(out).reshape(-1, rows.shape[1])


def _walk_refits(n: int, every: int | None) -> np.ndarray:
    """``(n,) bool`` over the positions of the walk: those ``refit_every=k`` refits
    regardless of their estimates, the ``k``-th, ``2k``-th, ... (positions ``k - 1``, ``2k -
    1``, ...)."""
    forced = np.zeros(n, bool)
    if every:
        forced[every - 1::every] = True
    return forced


def auto_future(problem, folds, options, origins, walk: str | None = None):
    """``method="auto"`` on leave-future-out folds (module docstring): walk the origins,
    expand each fold from the current expansion point, refit exactly where no estimate
    vouches for it (or where ``refit_every`` says so) and make that refit the expansion
    point of the folds after it. Returns ``(params, diagnostics)`` as :func:`auto`.

    Which expansion point: the walk goes **backward** in time by default
    (:data:`LFO_WALK`), so each fold is expanded from the nearest fit whose training set
    contains its own — the full-data fit for the last origins, then the refit at the
    nearest later origin — and the expansion only removes units. Bürkner, Gabry & Vehtari
    (2020) walk forward from a refit at the first origin (importance sampling needs a
    proposal fitted on less data than the target); the expansion here needs no such
    order (from a refit on ``y_{<s*}`` to an origin ``s > s*`` the weights of ``s*..s-1``
    go from 0 to 1, and the chord step uses the fold's exact gradient, not ``J``'s
    linearisation), but walking forward the first expansion point is either a refit at the
    first origin or the full-data fit at the far end of the walk, where walking backward
    the full-data fit is a free expansion point next to the first folds of the walk (the
    last origins, which remove the fewest units). Measured in ``benchmarks/lfo.py`` (both
    orders; ``walk="forward"``).

    After the walk, the earliest origin (the shortest training set, where another basin
    of the objective is likeliest to be the lower one) is refitted when the walk did not
    and a refit is left (:data:`LFO_PROBE`; ``diagnostics["lfo_probe"]``); its refit is a
    candidate of step 5. Then every fold not refitted is checked against every optimum
    the refits reached, their runner-up starts included, and against the refits' starts
    (the model's known optima among them)
    (:func:`~approxcv.engine.other_basins.other_basin_folds`): where one is lower on the
    fold's objective than its estimate, the fold is marked ``"other_basin"``. On Nile
    (GaussianHMM(2), 50 origins, ``benchmarks/lfo.py``) this took the folds more than 1 %
    off exact and unflagged from 11 to 3 (M = 1) and from 10 to 3 (M = 4).

    ``diagnostics``: as :func:`auto`'s, plus ``refit_origins`` (fold ids of the folds the
    walk refitted, in walk order; ``other_optimum_folds`` those refitted after it, step
    5), ``lfo_probe`` (the probe's fold id, or empty), ``lfo_reference`` (per fold: the
    fold id of the expansion point it was expanded from, ``-1`` the full-data fit, its own
    id where it was refitted), ``lfo_origins`` and ``lfo_walk``.
    """
    walk = LFO_WALK if walk is None else walk
    quiet = dataclasses.replace(options, warn=False, progress=False)
    n_folds, width = len(folds), folds.padded().shape[1]
    dim, n = int(problem.u_full.shape[0]), problem.n_units
    seconds = {}
    t = time.perf_counter()
    grad, hess, _ = full_derivatives(problem, quiet, with_jacobian=polish_jacobian(dim, n))
    factor = factor_hessian(hess, warn=False)
    fit = fit_diagnostics(grad, factor, problem.u_full, warn=False)
    diagnostics = {k: fit[k] for k in _FIT_KEYS if k in fit}
    seconds["derivatives"] = time.perf_counter() - t
    order = np.argsort(np.asarray(origins), kind="stable")
    if walk == "backward":
        order = order[::-1]
    elif walk != "forward":
        raise ValueError(f"walk must be 'backward' or 'forward', got {walk!r}")
    forced = _walk_refits(n_folds, options.refit_every)
    params = np.tile(np.asarray(problem.u_full, np.float64), (n_folds, 1))
    fold_loss, est = np.full(n_folds, np.nan), np.full(n_folds, np.inf)
    points = np.zeros((n_folds, width))
    first_est = np.full(n_folds, np.inf)
    method = np.full(n_folds, "ij", dtype=object)
    reference = np.full(n_folds, -1, dtype=np.int64)
    causes = {"hessian_not_pd": np.zeros(n_folds, bool)}
    counts = {"ij": 0, "chord": 0, "ns": 0, "exact": 0}
    budget = np.inf if options.max_exact is None else int(options.max_exact)
    ref = Reference(-1, np.asarray(problem.u_full, np.float64), factor.chol,
                    bool(factor.reliable))
    refitted, over, better = [], [], []
    found = []                  # every optimum the refits reached (and their runners-up)
    target = refit_problem(problem)
    index = folds.padded()

    def refit(target, rows):
        """Exact refits of ``rows`` replace their numbers; returns their reliability."""
        sub = folds.subset(rows)
        sub_params, diag_ex = get_method("exact")[0](target, sub, quiet)
        sub_params = np.asarray(sub_params)
        sub_loss, sub_points = heldout_losses(target, sub_params, sub.padded(),
                                              options.batch_size,
                                              unscored=sub.unscored_padded())
        sub_causes = unreliable_causes(diag_ex.pop("unreliable", None), rows.size)
        bad = _any(sub_causes, rows.size)
        params[rows], fold_loss[rows] = sub_params, np.asarray(sub_loss)
        points[rows] = _pad(np.asarray(sub_points), width)
        est[rows], method[rows] = np.where(bad, np.nan, 0.0), "exact"
        for key in causes:
            causes[key][rows] = False
        for key, mask in sub_causes.items():
            causes.setdefault(key, np.zeros(n_folds, bool))[rows] = mask
        if "better_optimum_folds" in diag_ex:
            better.append((np.asarray(diag_ex["better_optimum_folds"]),
                           float(diag_ex["better_optimum_gap"])))
        found.extend([sub_params, np.asarray(diag_ex.get("exact_competing_u",
                                                          np.zeros((0, dim))))])
        refitted.extend(int(r) for r in rows)
        reference[rows] = folds.ids[rows]
        return ~bad

    pos = 0                                   # the walk's position of ``pending[0]``
    pending = order
    seconds["expand"] = seconds["chord"] = seconds["exact"] = 0.0
    while pending.size:
        t = time.perf_counter()
        p, loss, pts, e, corr = expand_from(problem, folds, pending, ref, quiet)
        params[pending], fold_loss[pending], est[pending] = p, loss, e
        points[pending] = _pad(pts, width)
        first_est[pending] = e
        method[pending], reference[pending] = "ij", ref.fold_id
        causes["hessian_not_pd"][pending] = not ref.reliable
        vouched = (e <= options.tol) & ref.reliable
        seconds["expand"] += time.perf_counter() - t
        rows = pending[~vouched & ref.reliable]
        if rows.size:                          # the chord rounds of step 2, from there
            t = time.perf_counter()
            full_corr = np.zeros_like(params)
            full_corr[pending] = corr
            done, *out = chord_rounds(problem, folds, rows, params, full_corr, est,
                                      ref.chol, quiet)
            if done.size:
                params[done], fold_loss[done], est[done] = out[0], out[1], out[3]
                points[done] = out[2]
                method[done] = "chord"
                vouched[np.isin(pending, done)] = True
            seconds["chord"] += time.perf_counter() - t
        needs = ~vouched | forced[pos:pos + pending.size]
        if not needs.any():
            break
        j = int(np.argmax(needs))
        row = pending[j]
        if len(refitted) >= budget:            # no refit left: the rest keep their numbers
            over = pending[~vouched]
            break
        t = time.perf_counter()
        if refit(target, np.array([row]))[0]:  # a reliable refit: the next expansion point
            new = reference_at(problem, params[row], index[row], int(folds.ids[row]))
            if new.chol is not None:
                ref = new
        reference[row] = int(folds.ids[row])
        seconds["exact"] += time.perf_counter() - t
        pos += j + 1
        pending = pending[j + 1:]
    walked = np.asarray(refitted, dtype=np.int64)
    t = time.perf_counter()
    earliest = int(np.argmin(np.asarray(origins)))
    probe = LFO_PROBE and earliest not in refitted and len(refitted) < budget
    if probe:                                  # the shortest training set (LFO_PROBE)
        refit(target, np.array([earliest]))
    seconds["exact_probe"] = time.perf_counter() - t
    # as in :func:`auto`, step 5: folds whose objective is lower at one of the walk's
    # refits than at their own expansion (another basin), refitted from it within budget
    other = np.zeros(0, np.int64)
    t = time.perf_counter()
    for _ in range(OTHER_OPTIMUM_ROUNDS if refitted else 0):
        lower, lower_start = lower_optimum_elsewhere(target, folds, params, method, causes,
                                                     options.batch_size)
        rows = np.flatnonzero(lower)
        second = rows[:int(min(rows.size, max(budget - len(refitted), 0)))]
        other = np.union1d(other, rows)
        over = np.union1d(np.asarray(over, np.int64), rows[second.size:])
        if not second.size:
            break
        extra = np.unique(lower_start[second], axis=0)
        if target.starts is not None:
            extra = np.concatenate([np.asarray(target.starts), extra])
        refit(target._replace(starts=extra), second)
    over = np.setdiff1d(over, np.asarray(refitted, np.int64))
    seconds["exact_other_optimum"] = time.perf_counter() - t
    # another basin the refits found (their optima and runners-up, unreliable ones too)
    # or one of their starts (the model's known optima among them) that is lower on a
    # fold's objective than its estimate: no local estimate follows it
    t = time.perf_counter()
    local = np.flatnonzero(method != "exact")
    starts = [] if target.starts is None else [np.asarray(target.starts)]  # known optima
    known = _distinct_rows(np.concatenate(found + starts) if found or starts
                           else np.zeros((0, dim)))
    causes["other_basin"] = np.zeros(n_folds, bool)
    if local.size and known.size:
        causes["other_basin"][local] = other_basin_folds(
            target, params[local], folds.padded()[local], known)["mask"]
    seconds["other_basins"] = time.perf_counter() - t
    refitted = np.asarray(refitted, dtype=np.int64)
    over = np.asarray(over, dtype=np.int64)
    counts["exact"] = int(refitted.size)
    counts["chord"] = int(np.sum(method == "chord"))
    counts["ij"] = int(np.sum(method == "ij"))
    if better:
        record_better_optima(diagnostics, causes, better, method, options.warn)
    above = ~(est <= options.tol) & (method != "exact")
    is_over = np.isin(np.arange(n_folds), over)
    causes["error_estimate_above_tol"] = above & ~is_over
    causes["over_budget"] = is_over
    diagnostics.update(fold_method=method.astype(str), error_estimate=est,
                       ij_error_estimate=first_est, auto_counts=counts,
                       over_budget_folds=folds.ids[np.sort(over)],
                       other_optimum_folds=folds.ids[other],
                       refit_origins=folds.ids[walked],
                       lfo_probe=folds.ids[[earliest]] if probe else folds.ids[:0],
                       lfo_reference=reference, lfo_origins=np.asarray(origins),
                       lfo_walk=walk, unreliable=causes, heldout=(fold_loss, points),
                       stage_seconds=seconds)
    return params, diagnostics


register_method("auto", auto, local=True, refits=True)
__all__ = ["auto", "auto_future", "run_with_estimate", "LFO_WALK"]
