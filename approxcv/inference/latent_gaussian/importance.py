"""LOO over hyperparameter points by importance weighting (seed §3.6, eq. 41-45).

With conditional LOO densities ``p_si = p(y_i | x_i, D_-i, theta_s)`` at points ``theta_s``
carrying weights ``w_s`` (CCD weights, or equal for draws), the log importance ratios of
point ``i`` are ``log r_si = log w_s - log p_si`` (eq. 43, starting from the CCD weights);
with normalised weights ``w~_si``::

    log p(y_i | x_i, D_-i) = log sum_s w~_si p_si        (eq. 41 at y~_i = y_i; eq. 44)

``smooth=True`` replaces the ratios by Pareto-smoothed ones from arviz-stats
(``psislw``, Vehtari et al.; ``k_hat`` per point) when there are at least
``PSIS_MIN_POINTS`` points (arviz-stats needs 5 tail draws); with fewer, the raw weights
are used and ``k_hat`` is NaN, as the seed does for small CCD designs. The effective sample
size is ``1 / sum_s w~_si^2`` (eq. 45).
"""
from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

__all__ = ["combine_points", "psis_log_weights", "PSIS_MIN_POINTS", "K_HAT_THRESHOLD"]

#: fewest points arviz-stats' Pareto smoothing accepts (a tail of at least 5)
PSIS_MIN_POINTS = 25
#: k_hat above which an importance-sampling estimate is not trusted (Vehtari et al.)
K_HAT_THRESHOLD = 0.7


def psis_log_weights(log_ratios: np.ndarray):
    """``(log weights (S, n), k_hat (n,))``: arviz-stats' Pareto smoothing of the ratios
    ``(S, n)`` of each column (``r_eff = 1``), normalised over ``S``. (arviz-stats'
    ``psislw`` takes log-likelihood-like values and smooths their negatives, hence the
    sign.)"""
    from arviz_stats.base.array import array_stats
    lw, k = array_stats.psislw(-np.asarray(log_ratios, float).T, r_eff=1.0, axis=-1)
    lw = np.asarray(lw).T
    return lw - logsumexp(lw, axis=0, keepdims=True), np.asarray(k, float)


def combine_points(lpd: np.ndarray, weights: np.ndarray, smooth: bool):
    """``(lpd (n,), k_hat (n,), ess (n,))`` from conditional ``lpd (S, n)`` and point
    ``weights (S,)`` (module docstring)."""
    lpd = np.asarray(lpd, float)
    with np.errstate(divide="ignore"):
        log_ratios = np.log(np.asarray(weights, float))[:, None] - lpd
    S = lpd.shape[0]
    if smooth and S >= PSIS_MIN_POINTS:
        lw, k = psis_log_weights(log_ratios)
    else:
        lw = log_ratios - logsumexp(log_ratios, axis=0, keepdims=True)
        k = np.full(lpd.shape[1], np.nan)
    ess = 1.0 / np.sum(np.exp(2 * lw), axis=0)
    return logsumexp(lw + lpd, axis=0), k, ess
