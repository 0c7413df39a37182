"""Ridge's leave-one-out search on a wide design (``p > n``): the ``n x n`` (dual, kernel)
form, for :class:`~approxcv.sklearn.RidgeALO` with one penalty weight.

For ridge ALOOCV is exact leave-one-out: the PRESS residuals ``e_i = r_i / (1 - h_i)`` with
the leverages ``h_i = s_i a_i^T (A^T S A + P)^{-1} a_i`` (``S`` the sample weights, ``P``
the penalty, the intercept unpenalised). The general search (:mod:`._penalty_search`)
factors the ``(p + 1) x (p + 1)`` Hessian at every weight and differentiates through the
factorisation for its Newton steps: ``O(p^3)`` per evaluation, more than 20 minutes for
``RidgeALO`` on 30 x 2,000. Here the intercept is eliminated by weighted centering
(``X_c = X - 1 xbar^T``, ``xbar = X^T s / sum s``; ``A^T S A`` is then block diagonal) and,
with ``B = S^{1/2} X_c`` and the kernel ``K = B B^T``,

    H = X_c (X_c^T S X_c + lam I)^{-1} X_c^T S,      h_i = s_i / sum s + [K (K + lam I)^{-1}]_ii.

One decomposition ``K = U diag(d) U^T`` (from the thin SVD ``B = U diag(sqrt d) V^T``,
``O(n^2 p)``) then gives every weight's leverages, residuals and fit in ``O(n r)``
(``r = rank B <= n``), with ``tau_k = lam / (d_k + lam)``, ``z = S^{1/2} y_c``,
``q = U^T z``:

    1 - h_i          = m0_i + sum_k U_ik^2 tau_k,       m0_i = 1 - s_i / sum s - sum_k U_ik^2
    s_i^{1/2} r_i    = (z - U q)_i + sum_k U_ik q_k tau_k
    w                = V diag(sqrt d_k / (d_k + lam)) q,    b = ybar - xbar^T w,

sums of cancelling terms avoided (``1 - h_i`` stays accurate where ``h_i -> 1``, at weak
penalties on a wide design). ``ACV(rho) = 1/(2n) sum_i s_i e_i^2`` is rational in ``lam``:
its first and second derivatives in ``rho = log lam`` are exact
(``d tau / d rho = tau (1 - tau)``), so the search is the general one's — the grid, then
Newton steps from the vertex of the grid's parabola, stopping once the next step in ``rho``
is at most :data:`~approxcv.sklearn._penalty_search.XTOL`, kept only where it improves on
the grid — at ``O(n r)`` per step.
"""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from ._models import WeightedRidge
from ._penalty_search import XTOL, PenaltySearch, parabola_vertex

__all__ = ["RidgeDual", "ridge_dual", "dual_acv", "dual_loo_residuals", "dual_fit",
           "dual_search", "MAX_STEP"]

#: largest Newton step in ``rho = log lam`` (a factor e^2 in ``lam``, as the general search)
MAX_STEP = 2.0


class RidgeDual(NamedTuple):
    """The decomposition of :func:`ridge_dual`: ``U`` ``(n, r)``, ``d`` ``(r,)``, ``q``
    ``(r,)``, ``m`` ``(n,) = z - U q``, ``m0`` ``(n,)`` (module docstring), ``root_s``
    ``(n,)`` the square roots of the sample weights, ``V`` ``(p, r)``, ``xbar``, ``ybar``
    (0 without intercept)."""
    U: np.ndarray
    d: np.ndarray
    q: np.ndarray
    m: np.ndarray
    m0: np.ndarray
    root_s: np.ndarray
    V: np.ndarray
    xbar: np.ndarray
    ybar: float


def ridge_dual(X, y, s, fit_intercept: bool) -> RidgeDual:
    """Center ``X`` and ``y`` by the sample weights ``s`` (with an intercept) and decompose
    ``B = S^{1/2} X_c`` (module docstring); singular values below ``max(n, p) eps sigma_max``
    are dropped (the centering's null direction, collinear rows): they add nothing."""
    X, y, s = (np.asarray(a, np.float64) for a in (X, y, s))
    if fit_intercept:
        xbar, ybar = s @ X / np.sum(s), float(s @ y / np.sum(s))
        c = s / np.sum(s)
    else:
        xbar, ybar, c = np.zeros(X.shape[1]), 0.0, np.zeros(len(y))
    root_s = np.sqrt(s)
    B = root_s[:, None] * (X - xbar)
    U, sigma, Vt = np.linalg.svd(B, full_matrices=False)
    keep = sigma > max(B.shape) * np.finfo(np.float64).eps * (sigma[0] if sigma.size else 0)
    U, sigma, V = U[:, keep], sigma[keep], Vt[keep].T
    z = root_s * (y - ybar)
    q = U.T @ z
    m0 = np.maximum(1.0 - c - np.sum(U ** 2, axis=1), 0.0)
    return RidgeDual(U, sigma ** 2, q, z - U @ q, m0, root_s, V, xbar, ybar)


def _tau(dual: RidgeDual, rho):
    """``tau_k = lam / (d_k + lam)`` at ``rho = log lam`` (``(..., r)`` for ``rho (...)``)."""
    rho = np.asarray(rho, np.float64)[..., None]
    return 1.0 / (1.0 + dual.d * np.exp(-rho))


def dual_loo_residuals(dual: RidgeDual, lam) -> np.ndarray:
    """``(n,)`` ``s_i^{1/2} e_i``: the leave-one-out residuals ``y_i - yhat_{-i}`` times the
    square roots of the sample weights, at penalty weight ``lam`` (0 for a sample of
    weight 0, whose leave-one-out loss is 0)."""
    tau = _tau(dual, np.log(lam))
    return (dual.m + dual.U @ (dual.q * tau)) / (dual.m0 + dual.U ** 2 @ tau)


def dual_acv(dual: RidgeDual, lams, n: int) -> np.ndarray:
    """ALOOCV ``1/(2n) sum_i s_i e_i^2`` (exact leave-one-out) at every weight of ``lams``."""
    tau = _tau(dual, np.log(np.asarray(lams, np.float64)))           # (k, r)
    num = dual.m + tau * dual.q @ dual.U.T                           # (k, n)
    den = dual.m0 + tau @ (dual.U ** 2).T
    return 0.5 * np.sum((num / den) ** 2, axis=-1) / n


def _acv_derivatives(dual: RidgeDual, rho: float, n: int):
    """``(ACV, dACV/drho, d2ACV/drho2)`` at ``rho`` (module docstring)."""
    tau = _tau(dual, rho)
    t1 = tau * (1.0 - tau)
    t2 = t1 * (1.0 - 2.0 * tau)
    U2 = dual.U ** 2
    num, num1, num2 = dual.m + dual.U @ (dual.q * tau), dual.U @ (dual.q * t1), \
        dual.U @ (dual.q * t2)
    den, den1, den2 = dual.m0 + U2 @ tau, U2 @ t1, U2 @ t2
    e = num / den
    e1 = (num1 - e * den1) / den
    e2 = (num2 - 2.0 * e1 * den1 - e * den2) / den
    return (0.5 * float(e @ e) / n, float(e @ e1) / n, float(e1 @ e1 + e @ e2) / n)


def dual_fit(dual: RidgeDual, lam: float, fit_intercept: bool) -> np.ndarray:
    """The flat fit ``(w, b)`` (``w`` alone without intercept) at ``lam``."""
    w = dual.V @ (dual.q * np.sqrt(dual.d) / (dual.d + lam))
    return np.r_[w, dual.ybar - dual.xbar @ w] if fit_intercept else w


def _newton(dual: RidgeDual, rho: float, n: int, max_iter: int):
    """Damped Newton steps on ``ACV(rho)`` from ``rho`` (at most ``max_iter``): a step
    ``-g/h`` (``h > 0``; else ``MAX_STEP`` downhill), capped at :data:`MAX_STEP` and halved
    until it decreases ACV (Armijo); stops at a stationary point or once the next step is
    at most :data:`XTOL`. ``[(rho, acv), ...]``: the start and every accepted point."""
    f, g, h = _acv_derivatives(dual, rho, n)
    path = [(rho, f)]
    for _ in range(max_iter):
        if not np.isfinite(f) or abs(g) <= 1e-9 * (1.0 + abs(f)):
            break
        step = -g / h if h > 0 else -np.sign(g) * MAX_STEP
        if h > 0 and abs(step) <= XTOL:
            break
        step = float(np.clip(step, -MAX_STEP, MAX_STEP))
        for _ in range(40):
            f_new, g_new, h_new = _acv_derivatives(dual, rho + step, n)
            if np.isfinite(f_new) and f_new <= f + 1e-4 * g * step:
                break
            step *= 0.5
        else:
            break
        rho, f, g, h = rho + step, f_new, g_new, h_new
        path.append((rho, f))
    return path


def dual_search(X, y, s, grid, fit_intercept: bool, newton_steps: int) -> PenaltySearch:
    """The penalty search of :func:`~approxcv.sklearn._penalty_search.search_penalty` for
    ridge with one weight, in the dual form (module docstring): ALOOCV on the ``grid``,
    then up to ``newton_steps`` Newton steps from the grid's parabola vertex, kept where
    they improve on the best grid point. ``acv`` is the mean over the ``n`` rows of ``X``;
    ``u`` the flat fit at the chosen weight."""
    n = X.shape[0]
    dual = ridge_dual(X, y, s, fit_intercept)
    grid = np.asarray(grid, np.float64)
    acv = dual_acv(dual, grid, n)
    acv = np.where(np.isfinite(acv), acv, np.inf)
    best = int(np.argmin(acv))
    lam, value, refined = float(grid[best]), float(acv[best]), False
    rows = {"lam": list(grid), "acv": list(acv), "stage": ["grid"] * len(grid)}
    if newton_steps > 0 and np.isfinite(value):
        path = _newton(dual, np.log(parabola_vertex(grid, acv, best)), n, newton_steps)
        rho_best, acv_best = min(path, key=lambda point: point[1])
        if acv_best <= value:
            lam, value, refined = float(np.exp(rho_best)), float(acv_best), True
            rows["lam"] += [float(np.exp(r)) for r, _ in path]
            rows["acv"] += [float(a) for _, a in path]
            rows["stage"] += ["newton"] * len(path)
    model = WeightedRidge(lam, None, fit_intercept=fit_intercept)
    return PenaltySearch(np.array([lam]), value, pd.DataFrame(rows), refined, model, None,
                         dual_fit(dual, lam, fit_intercept))
