"""The cross-validation methods of a GP, at its fitted hyperparameters
(:meth:`approxcv.models.GP.own_estimators`; the engine's registered methods of the same
names call them, :mod:`approxcv.engine.methods.model_estimators`).

Every method returns, per fold ``S``, the pointwise losses ``-log p(y_i | y_-S)`` of its
points and their sum as the fold loss (the ``loo`` package's K-fold elpd; for
leave-one-out, the usual LOO density), with the hyperparameters held at the full-data fit:

* ``"la"`` (``inference="laplace"``), ``"ep"`` (``inference="ep"``): block cavities
  (:mod:`approxcv.inference.latent_gaussian.cavities`) of the model's posterior, any folds (for one point:
  LA-LOO, EP-LOO, seed eq. 36-37). Each model has the one of its inference: every method
  estimates the model's ``"exact"`` (refits of its own posterior);
* ``"q"``, ``"tq"``, ``"waic_g"``, ``"waic_v"``: from the marginals of the model's
  inference (:mod:`approxcv.inference.latent_gaussian.estimators`), leave-one-out folds only;
* ``"is"``: the inference's own estimator importance-weighted over the hyperparameter
  points with Pareto smoothing (``hyper="ccd"``), leave-one-out folds only;
* ``"exact"``: the latent posterior refitted without each fold (:mod:`approxcv.models.gp.refits`);
  for the Gaussian likelihood the refit is closed form: the block cavity of the exact
  posterior, no iteration;
* ``"auto"``: the model's own block cavities (LA for ``inference="laplace"``, EP for
  ``"ep"``), then refits of its own posterior where a fold is flagged — its one-step error
  estimate above ``tol`` or another cause below — the largest estimates first, at most
  ``max_exact``. Every value is the model's own inference's: an EP GP is never given a
  Laplace number (LA-LOO estimates another posterior). The Gaussian likelihood: the
  closed-form exact refit.

**Error estimate and ``tol``.** ``"la"`` and ``"ep"`` record per fold the one-step error
estimate of :mod:`approxcv.inference.latent_gaussian.cavities` (the change of the fold's
value when the other sites are updated once, as the refit would move them) as
``diagnostics["error_estimate"]``: like every model's, the *relative* error of the fold
loss, flagged above ``tol`` (default 0.01) as ``error_estimate_above_tol``; the same in
nats is ``diagnostics["error_estimate_nats"]``. On MASS birthwt (probit, LOO, K-fold,
grouped and age blocks) and quine (Poisson, EP) it flags 9 of 11 to all of the folds more
than 1 % off their refits (``benchmarks/gp_flags.py``).

``"q"``, ``"tq"``, ``"waic_g"`` and ``"waic_v"`` record the error estimate of
:func:`reference_error_estimate`: the distance of the value to the model's own cavity value
(LA-/EP-LOO, the ``cavity_check``'s reference) plus that cavity's one-step estimate, in nats
(``error_estimate_nats``) and relative to the cavity's point loss (``error_estimate``),
flagged above ``tol`` as ``error_estimate_above_tol``. On seeded 100-point subsets of MASS
crabs, Pima.tr, birthwt and quine (32 data x inference x method cells,
``benchmarks/gp_flags.py --part loo``) the flags catch 2,527 of the 2,535 points more than
1 % off their refits (before: 1,317) and all 899 more than 0.1 nats and 1 % off (before:
880, misses in 12 cells).

With several hyperparameter points the pointwise densities at each are combined by
importance weighting over the points (seed eq. 44; :mod:`approxcv.inference.latent_gaussian.importance`).

Unreliable folds (``diagnostics["unreliable"]``, by cause): ``error_estimate_above_tol``
(``la``, ``ep``, ``auto``, ``q``, ``tq``, ``waic_*``), ``site_shift`` (``la``,
``ep``: the other sites would move with the fold left out, :mod:`approxcv.inference.latent_gaussian.cavities`;
the value in ``diagnostics["site_shift"]``), ``improper_block_cavity`` (an improper,
wider-than-prior or non-finite cavity), ``estimator_flags`` (``q``, ``tq``, ``waic_*``,
``is``: the leave-one-out estimator's own checks: an improper or wider-than-prior cavity,
far from the cavity estimate, unresolved quadrature, ``p_waic > 0.4``),
``posterior_not_converged`` (every fold: the full-data posterior did not converge at some
point), ``pareto_k`` (``is``), ``refit_unconverged`` (``exact``), ``over_budget``
(``auto``). ``q`` and ``tq`` also report the marginal's Pareto ``k_hat``
(``diagnostics["pareto_k_marginal"]``), no longer a cause: they are quadratures, not
draws, and the error estimate measures their error itself (``k_hat > 0.7`` flagged 193 of
the 200 EP Q-LOO points of MASS crabs, 14 of them 0.1 nats off their refits).
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..._runtime import jit
from ...inference.latent_gaussian.cavities import block_cavity_lpd
from ...inference.latent_gaussian.estimators import ESTIMATORS, SHIFT_TOL, marginal_pareto_k
from ...inference.latent_gaussian.importance import K_HAT_THRESHOLD, combine_points
from ...inference.latent_gaussian.posterior import posteriors_at
from .refits import RefitBatch, refit_lpd
from ...errors import UnsupportedMethodError

__all__ = ["gp_estimators", "supported", "METHODS", "LOO_ONLY"]

#: the methods a GP supports
METHODS = ("la", "ep", "q", "tq", "waic_g", "waic_v", "is", "exact", "auto")
#: estimators of leave-one-out only
LOO_ONLY = ("q", "tq", "waic_g", "waic_v", "is")


class _Fitted:
    """The data, hyperparameter points and their posteriors (computed once per inference,
    on first use)."""

    def __init__(self, lik, inference, damping, data, theta, log_weights, key):
        self.lik, self.inference, self.damping, self.key = lik, inference, damping, key
        self.X, self.y = (jnp.asarray(a) for a in data)
        self.theta = np.asarray(theta, float)
        w = np.exp(np.asarray(log_weights, float) - np.max(log_weights))
        self.weights = w / w.sum()
        self._posts = {}

    @property
    def n(self) -> int:
        return int(self.y.shape[0])

    def posterior(self, inference: str):
        if inference not in self._posts:
            self._posts[inference] = posteriors_at(self.theta, self.X, self.y, self.lik,
                                                   inference, self.damping)
        return self._posts[inference]

    def converged(self, inference: str) -> bool:
        return bool(np.asarray(self.posterior(inference).converged).all())


def _combine(lpd_s, weights, smooth=False):
    """``(lpd (F, m), k_hat (F, m), ess (F, m))`` from ``lpd_s (S, F, m)``."""
    S, F, m = lpd_s.shape
    if S == 1:
        nan = np.full((F, m), np.nan)
        return lpd_s[0], nan, np.ones((F, m))
    lpd, k, ess = combine_points(lpd_s.reshape(S, F * m), weights, smooth)
    return lpd.reshape(F, m), k.reshape(F, m), ess.reshape(F, m)


def _result(lpd, folds, causes, extra):
    """``(fold_loss (F,), points (F, m), diagnostics)`` from ``lpd (F, m)`` over the
    positions of ``folds.padded()``: the points a fold scores keep ``-lpd``, padded slots
    and removed units it does not score (``folds.scored``) get 0, and the fold loss is the
    sum over its scored points (the ``loo`` package's K-fold elpd)."""
    points = np.where(folds.scored_mask(), -np.asarray(lpd, float), 0.0)
    return points.sum(1), points, {"unreliable": causes, **extra}


def _loo_rows(folds, name):
    if not np.all(folds.sizes == 1):
        raise UnsupportedMethodError(
            f"method={name!r} is a leave-one-out estimator: every fold must leave out one "
            f"point, got folds of sizes up to {int(folds.sizes.max())} (for other folds use "
            "'la', 'ep' or 'exact')")
    return folds.padded()[:, 0]


def _point_estimator(fit, name, inference):
    """``(lpd (S, n), bad (S, n))`` of a leave-one-out estimator at every point."""
    post = fit.posterior(inference)
    fn = ESTIMATORS[name]
    lik, X, y = fit.lik, fit.X, fit.y
    out = _at_points(post, jnp.asarray(fit.theta), X, y, fn=fn, lik=lik)
    return np.asarray(out[0]), np.asarray(out[1])


@functools.partial(jit, static_argnames=("fn", "lik"))
def _at_points(post, points, X, y, *, fn, lik):
    return jax.vmap(lambda p, t: fn(p, y, lik, t, X))(post, points)


@functools.partial(jit, static_argnames=("lik", "inference"))
def _blocks(post, points, X, y, index, *, lik, inference):
    return jax.vmap(lambda p, t: block_cavity_lpd(p, t, X, y, index, lik=lik,
                                                  inference=inference))(post, points)


def step_error_estimate(lpd_s, step_s):
    """``(relative (F,), nats (F,))``: the one-step error estimate of each fold's loss
    (:mod:`approxcv.inference.latent_gaussian.cavities`), ``|sum_i (lpd_step_i - lpd_i)|``
    in nats and relative to the fold loss ``|sum_i lpd_i|``, the largest over the
    hyperparameter points ``(S, F, m)``; ``inf`` where the step is not finite."""
    nats = np.abs(np.sum(step_s - lpd_s, axis=2))
    rel = nats / np.maximum(np.abs(np.sum(lpd_s, axis=2)), 1e-300)
    nats, rel = (np.where(np.isfinite(a), a, np.inf).max(0) for a in (nats, rel))
    return rel, nats


def cavity_method(fit, name, folds, options):
    """``"la"`` / ``"ep"``: block cavities of that inference's posterior (any folds), with
    the one-step error estimate of every fold (relative, against ``options.tol``)."""
    inference = "laplace" if name == "la" else "ep"
    post = fit.posterior(inference)
    index = np.asarray(folds.padded())
    lpd_s, bad_s, shift_s, step_s = (np.asarray(a) for a in _blocks(
        post, jnp.asarray(fit.theta), fit.X, fit.y, jnp.asarray(index), lik=fit.lik,
        inference=inference))
    lpd, _, ess = _combine(lpd_s, fit.weights)
    shift = shift_s.max(0)
    scored = folds.scored_mask()[None]
    est, est_nats = step_error_estimate(np.where(scored, lpd_s, 0.0),
                                        np.where(scored, step_s, 0.0))
    causes = {"error_estimate_above_tol": ~(est <= options.tol),
              "site_shift": ~(shift <= SHIFT_TOL),
              "improper_block_cavity": bad_s.any(0),
              "posterior_not_converged": np.full(len(folds), not fit.converged(inference))}
    extra = {"estimator": name, "inference": inference, "site_shift": shift,
             "error_estimate": est, "error_estimate_nats": est_nats, "tol": options.tol}
    if len(fit.theta) > 1:
        extra["ess"] = ess
    return _result(lpd, folds, causes, extra)


def reference_error_estimate(lpd_s, cavity_s, step_s):
    """``(relative (F,), nats (F,))``: the error estimate of a leave-one-out estimator's
    value ``lpd`` against the model's own refit, from its cavity value ``cavity`` (LA-/EP-LOO,
    the reference of the ``cavity_check``) and that cavity's value one site update further
    ``step`` (:mod:`approxcv.inference.latent_gaussian.cavities`), each ``(S, F)`` over the
    hyperparameter points::

        nats = |lpd - cavity| + |step - cavity|,      relative = nats / min(|cavity|, |step|)

    (the distance to the reference plus the reference's own one-step estimate: a bound of
    ``|lpd - step|`` by the triangle inequality), the largest over the points; ``inf``
    where a term is not finite."""
    nats = np.abs(lpd_s - cavity_s) + np.abs(step_s - cavity_s)
    rel = nats / np.maximum(np.minimum(np.abs(cavity_s), np.abs(step_s)), 1e-300)
    nats, rel = (np.where(np.isfinite(a), a, np.inf).max(0) for a in (nats, rel))
    return rel, nats


def _cavity_reference(fit, rows):
    """``(cavity (S, F), step (S, F))``: the one-point block cavity of the fitted
    inference at every row, and its value one site update further."""
    post = fit.posterior(fit.inference)
    cav, _, _, step = _blocks(post, jnp.asarray(fit.theta), fit.X, fit.y,
                              jnp.asarray(np.asarray(rows)[:, None]), lik=fit.lik,
                              inference=fit.inference)
    return np.asarray(cav)[:, :, 0], np.asarray(step)[:, :, 0]


def loo_method(fit, name, folds, options):
    """``"q"``, ``"tq"``, ``"waic_g"``, ``"waic_v"``, ``"is"``: leave-one-out folds; the
    first four with the error estimate of :func:`reference_error_estimate` (relative,
    against ``options.tol``)."""
    rows = _loo_rows(folds, name)
    base = name
    if name == "is":
        if len(fit.theta) < 2:
            raise UnsupportedMethodError(
                "method='is' importance-weights hyperparameter points: use GP(..., "
                "hyper='ccd') or pass params with several points")
        base = ("exact" if fit.lik.name == "gaussian"
                else "la" if fit.inference == "laplace" else "ep")
    lpd_s, bad_s = _point_estimator(fit, base, fit.inference)
    lpd_s = lpd_s[:, rows][:, :, None]
    lpd, k, ess = _combine(lpd_s, fit.weights, smooth=name == "is")
    causes = {"estimator_flags": bad_s[:, rows].any(0),
              "posterior_not_converged": np.full(len(folds),
                                                 not fit.converged(fit.inference))}
    extra = {"estimator": name, "inference": fit.inference}
    if name != "is":
        cav, step = _cavity_reference(fit, rows)
        est, est_nats = reference_error_estimate(lpd_s[:, :, 0], cav, step)
        causes["error_estimate_above_tol"] = ~(est <= options.tol)
        extra.update(error_estimate=est, error_estimate_nats=est_nats, tol=options.tol)
    if name in ("q", "tq"):
        post = fit.posterior(fit.inference)
        k_marg = marginal_pareto_k(fit.lik, np.asarray(fit.X), np.asarray(fit.y), fit.theta,
                                   post.mean, post.var)[:, rows]
        # a diagnostic, no longer a cause: Q-/TQ-LOO are quadratures, not draws, and
        # k_hat > 0.7 flagged 193 of 200 EP Q-LOO points on MASS crabs of which 14 are
        # 0.1 nats off; the error estimate above measures the error itself
        extra["pareto_k_marginal"] = fit.weights @ np.where(np.isfinite(k_marg), k_marg,
                                                            np.inf)
    if name == "is":
        causes["pareto_k"] = np.isfinite(k[:, 0]) & (k[:, 0] > K_HAT_THRESHOLD)
        extra["pareto_k"] = k[:, 0]
    if len(fit.theta) > 1:
        extra["ess"] = ess[:, 0]
    return _result(lpd, folds, causes, extra)


def exact_method(fit, name, folds, options):
    """``"exact"``: refits of the latent posterior without each fold (closed form for the
    Gaussian likelihood)."""
    if fit.lik.name == "gaussian":
        out = cavity_method(fit, "la", folds, options)
        diag = out[2]
        causes = diag["unreliable"]
        for key in ("site_shift", "error_estimate_above_tol"):   # exact: the sites are
            causes.pop(key)                                     # exact, none moves
        for key in ("error_estimate", "error_estimate_nats", "tol"):
            diag.pop(key)
        diag.update(estimator="exact", exact_closed_form=True)
        return out
    index = np.asarray(folds.padded())
    post = fit.posterior(fit.inference)
    per = max(1, min(int(options.exact_batch_size), len(folds)))
    task = RefitBatch(fit.lik, fit.inference, fit.damping, fit.X, fit.y, fit.theta,
                      post.warm, index, per)
    lpd_s, conv, its, start = refit_lpd(task, fit.key, options.executor, options.checkpoint,
                                        options.progress)
    lpd, _, ess = _combine(lpd_s, fit.weights)
    causes = {"refit_unconverged": ~conv.all(0)}
    extra = {"estimator": "exact", "inference": fit.inference,
             "exact_converged": conv.all(0), "exact_iterations": its.sum(0),
             "exact_start": start.min(0)}
    return _result(lpd, folds, causes, extra)


def auto_method(fit, name, folds, options):
    """``"auto"``: the model's own block cavities (LA for ``inference="laplace"``, EP for
    ``"ep"``), then refits of its own posterior where a fold's flags fire or its one-step
    error estimate exceeds ``tol``, the largest estimates first, at most ``max_exact``
    (module docstring). The Gaussian likelihood: the closed-form exact refit."""
    if fit.lik.name == "gaussian":
        fold_loss, points, diag = exact_method(fit, "exact", folds, options)
        diag.update(fold_method=np.full(len(folds), "exact", dtype=object),
                    error_estimate=np.zeros(len(folds)), estimator="auto", tol=options.tol)
        return fold_loss, points, diag
    own = "la" if fit.inference == "laplace" else "ep"
    fold_loss, points, diag = cavity_method(fit, own, folds, options)
    flagged = np.any(list(diag["unreliable"].values()), 0)
    estimate = np.asarray(diag["error_estimate"], float).copy()
    need = np.flatnonzero(flagged)
    need = need[np.argsort(-estimate[need], kind="stable")]
    budget = len(need) if options.max_exact is None else int(options.max_exact)
    refit, over = need[:budget], need[budget:]
    method = np.full(len(folds), own, dtype=object)
    causes = {"over_budget": np.isin(np.arange(len(folds)), over)}
    extra = {}
    if len(refit):
        ex_loss, ex_pts, ex_diag = exact_method(fit, "exact", folds.subset(refit), options)
        fold_loss[refit] = ex_loss
        points[refit] = 0.0
        points[refit, :ex_pts.shape[1]] = ex_pts
        method[refit] = "exact"
        ok = ~ex_diag["unreliable"]["refit_unconverged"]
        estimate[refit] = np.where(ok, 0.0, np.nan)
        causes["refit_unconverged"] = np.isin(np.arange(len(folds)), refit[~ok])
        extra["exact_folds"] = folds.ids[refit]
    # folds kept at the cavity estimate over budget carry its own flags
    for key, mask in diag["unreliable"].items():
        causes[key] = mask & (method != "exact")
    extra.update(estimator="auto", inference=fit.inference, fold_method=method,
                 error_estimate=estimate, tol=options.tol, site_shift=diag["site_shift"])
    return fold_loss, points, {"unreliable": causes, **extra}


_RUN = {"la": cavity_method, "ep": cavity_method, "exact": exact_method,
        "auto": auto_method, **{m: loo_method for m in LOO_ONLY}}


def supported(inference: str) -> tuple:
    """The methods of a GP with this ``inference``: every method estimates the model's
    ``"exact"`` (refits of its own posterior), so a Laplace GP has ``"la"`` and an EP GP
    ``"ep"``, not the other (EP-LOO estimates another posterior than Laplace refits: 34 %
    apart on the table test's probit problem)."""
    other = "ep" if inference == "laplace" else "la"
    return tuple(m for m in METHODS if m != other)


def gp_estimators(lik, inference, damping, data, theta, log_weights, key) -> dict:
    """``{method: fn(folds, options) -> (fold_loss (F,), points (F, m), diagnostics)}`` of a
    GP at hyperparameter points ``theta (S, p)`` with ``log_weights (S,)`` (module
    docstring, :func:`supported`); the posteriors are computed on first use and shared by
    the methods."""
    fit = _Fitted(lik, inference, damping, data, theta, log_weights, key)
    return {m: functools.partial(_RUN[m], fit, m) for m in supported(inference)}
