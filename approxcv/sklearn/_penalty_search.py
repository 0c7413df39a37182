"""Choosing ridge-type penalty weights by ALOOCV for the estimators: a coarse grid in one
common weight (every grid point's fit and ALOOCV in one compiled program,
:func:`~approxcv.selection.tuning_gradient.grid_aloocv`), then Newton steps in every weight
from the vertex of the grid's parabola around its best point.

``ACV(lam) = 1/n sum_i s_i phi(eta_i^{(-i)}, y_i)`` (ALOOCV, :mod:`approxcv.selection.tuning`). The grid
makes the search robust on small or (nearly) separable data, where the Newton iteration from a
poor start can run towards ``lam = 0`` or infinity; the Newton steps then reach the optimum
until their next step would move ``log lam`` by at most :data:`XTOL`. A Newton result is
kept only when it is finite and improves on the best grid point (it may leave the grid's
range: a group whose weight grows without bound is one the data do not support); otherwise
the best grid point is the answer and ``refined`` is ``False``.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..errors import ApproxCVError, ApproxCVWarning, ConvergenceWarning
from ._tuning import grid_aloocv, tune_regularization

__all__ = ["PenaltySearch", "search_penalty", "parabola_vertex", "XTOL"]

#: the Newton stage stops once its next step in ``log lam`` is at most this: the weights
#: are then within 0.1 % of ALOOCV's minimiser, 37 times inside ALOOCV's own distance
#: from exact leave-one-out's minimiser (3.7 % on breast cancer: docs/sklearn.md). On
#: breast cancer 1e-5 took one more refit and derivative sweep (warm fit 42 -> 37 ms,
#: medians of 20), for a C 0.07 % away and ALOOCV 4e-8 relative lower
XTOL = 1e-3


@dataclass
class PenaltySearch:
    """Outcome of :func:`search_penalty`.

    lam: ``(m,)`` chosen weights; acv: ALOOCV there; path: DataFrame (``lam`` or
    ``lam_0..``, ``acv``, ``stage`` = ``"grid"``/``"newton"``); refined: the Newton stage was
    kept; model: the model at ``lam``; tune: the
    :class:`~approxcv.selection.tuning.TuneResult` of the Newton stage (``None`` if not run
    or not kept); u: the flat fit at ``lam`` on the searched data, the one ALOOCV was
    computed at (the grid's Newton fit, or the Newton stage's), so the estimator needs no
    refit.
    """
    lam: np.ndarray
    acv: float
    path: pd.DataFrame
    refined: bool
    model: object
    tune: object
    u: np.ndarray


def parabola_vertex(grid, acv, best: int) -> float:
    """The Newton stage's start: the weight at the vertex of the parabola in
    ``rho = log lam`` through the best grid point and its two neighbours,
    ``rho* = rho_b - (1/2) [d_-^2 (f_b - f_+) - d_+^2 (f_b - f_-)] /
    [d_- (f_b - f_+) + d_+ (f_b - f_-)]`` (``d_- = rho_b - rho_-``, ``d_+ = rho_+ - rho_b``;
    the minimum of that parabola, which lies between the neighbours since ``f_b`` is the
    least); the best grid point itself at an end of the grid or where a value is not finite.
    On a grid a decade apart the vertex is about ten times closer to the optimum than the
    grid point, which saves the Newton stage one or two refits and derivative sweeps."""
    if best == 0 or best == len(grid) - 1 or not np.all(np.isfinite(acv[best - 1:best + 2])):
        return float(grid[best])
    r = np.log(np.asarray(grid[best - 1:best + 2], np.float64))
    f = np.asarray(acv[best - 1:best + 2], np.float64)
    dm, dp = r[1] - r[0], r[2] - r[1]
    am, ap = f[1] - f[0], f[1] - f[2]          # both <= 0: f_b is the least
    den = dm * ap + dp * am
    if not den < 0:                            # a flat triple: no curvature to go by
        return float(grid[best])
    rho = r[1] - 0.5 * (dm ** 2 * ap - dp ** 2 * am) / den
    return float(np.exp(np.clip(rho, r[0], r[2])))


def _search_path(grid, acv, tune) -> pd.DataFrame:
    """``lam``, ``acv`` and ``stage`` of every grid point, then of every accepted Newton
    point (``tune``: its result, or ``None``), whose weights are in ``lam`` or, when it
    tuned several, in ``lam_0..`` (NaN on the grid's rows). Built by columns, once: frames
    built row by row and concatenated took about 2 ms of an estimator's 40 ms fit."""
    k = 0 if tune is None else len(tune.path)
    one = k and "lam" in tune.path.columns
    columns = {"lam": np.r_[grid, tune.path["lam"].to_numpy() if one else np.full(k, np.nan)],
               "acv": np.r_[acv, tune.path["acv_full"].to_numpy() if k else []],
               "stage": ["grid"] * len(grid) + ["newton"] * k}
    for c in ([] if one or not k else [c for c in tune.path.columns if c.startswith("lam_")]):
        columns[c] = np.r_[np.full(len(grid), np.nan), tune.path[c].to_numpy()]
    return pd.DataFrame(columns)


def search_penalty(model, data, grid, n_weights: int, max_iter: int) -> PenaltySearch:
    """Grid over one common weight (``grid`` ``(k,)``, positive), then Newton in all
    ``n_weights`` weights (``max_iter`` steps; 0: grid only) from the grid's
    :func:`parabola_vertex` and the best grid point's fit, stopping at ``XTOL``."""
    lams = np.repeat(np.asarray(grid, np.float64)[:, None], n_weights, axis=1)
    data = model.prepare(data)[0]                   # checked once, for both stages
    u_grid, acv = grid_aloocv(model, data, lams)   # the whole grid: one compiled program
    acv = np.asarray(acv, np.float64)
    best = int(np.argmin(acv))
    lam_best, acv_best = np.full(n_weights, grid[best]), float(acv[best])
    lam_start = np.full(n_weights, parabola_vertex(grid, acv, best))
    # the grid's fit at the best point (None where no grid fit converged: the estimator
    # then fits at the chosen weights itself)
    u_best = np.asarray(u_grid[best]) if np.isfinite(acv_best) else None
    tune, refined = None, False
    if max_iter > 0 and np.isfinite(acv_best):
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ApproxCVWarning)
                out = tune_regularization(
                    model, data, lam_start, algorithm="newton", max_iter=max_iter, warn=False,
                    xtol=XTOL,
                    init_params=None if u_best is None else model.flat_to_params(u_best))
            for w in caught:            # only approxcv's own warnings are the search's
                if not issubclass(w.category, ApproxCVWarning):
                    warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
            if np.isfinite(out.best_acv) and out.best_acv <= acv_best:
                tune, refined = out, True
                lam_best, acv_best = np.asarray(out.best_lam, np.float64), float(out.best_acv)
                # a refit on the path that missed its tolerance: the estimator refits
                converged = not any(issubclass(w.category, ConvergenceWarning)
                                    for w in caught)
                u_best = (np.asarray(model.params_to_flat(out.best_params)) if converged
                          else None)
        except ApproxCVError:
            pass
    path = _search_path(grid, acv, tune if refined else None)
    return PenaltySearch(lam_best, acv_best, path, refined,
                         model.with_lam(lam_best), tune, u_best)
