"""``loo(fitted, method=...)``: every Bayesian LOO estimator behind one call.

At each hyperparameter point ``theta_s`` of the fit a conditional LOO density
``p(y_i | x_i, D_-i, theta_s)`` comes from the named estimator (:mod:`.estimators`) or
from brute force (:mod:`.brute`); with more than one point they are combined by
importance weighting over the points (:mod:`.importance`, eq. 44): raw weights for every
method except ``"is"``, which Pareto-smooths them and reports ``k_hat`` and the
effective sample size. ``"is"`` uses the inference's own conditional estimator
(``"exact"`` for the Gaussian likelihood, ``"la"`` for Laplace, ``"ep"`` for EP).

Unreliable points (``diagnostics["unreliable_causes"]``, :data:`CAUSES`): the estimator's
own flags (:mod:`.estimators`), every point when the full-data posterior did not converge
at some hyperparameter point (``"posterior_not_converged"``: a fast estimator has nothing
to stand on), the marginal's Pareto ``k_hat > 0.7`` (``"q"``, ``"tq"``;
:func:`~approxcv.bayes.estimators.marginal_pareto_k`, averaged over the hyperparameter
points with their weights), refits that
converged from no start (brute force), ``k_hat > 0.7`` (``"is"``) and any non-finite
value. They are listed and named in one
:class:`~approxcv.errors.UnreliableFoldWarning`, as ``cross_validate`` does.
"""
from __future__ import annotations

import functools
import time
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from .._compile import jit
from .. import folds as _folds
from .._validate import check_choice, check_positive_int
from ..engine.fingerprint import result_fingerprint
from ..errors import ArgumentTypeError, InvalidArgumentError, UnreliableFoldWarning
from .brute import brute_force_lpd
from .estimators import ESTIMATORS, la_loo, marginal_pareto_k
from .gp import FittedGP
from .importance import K_HAT_THRESHOLD, combine_points
from .result import BayesLOOResult

__all__ = ["loo", "METHODS"]

METHODS = ("exact", "la", "ep", "q", "tq", "waic_g", "waic_v", "is", "brute")
FORMS = {"exact": ("cavity", "sk"), "la": ("cavity", "lr")}
#: what each cause in ``diagnostics["unreliable_causes"]`` means (the warning's words)
CAUSES = {
    "estimator": "flagged by the estimator's own checks (non-finite, improper or "
                 "wider-than-prior cavity, other sites moving with the point left out, far "
                 "from the cavity estimate, unresolved quadrature, p_waic > 0.4)",
    "posterior_not_converged": "on a full-data posterior that did not converge",
    "pareto_k_marginal": "with Pareto k_hat > 0.7 of the ratios 1/p(y_i | f) under the "
                         "marginal (Q-LOO / TQ-LOO are importance sampling from it)",
    "not_converged": "brute-force refits that converged from no start",
    "non_finite": "non-finite refit values",
    "pareto_k": "with Pareto k_hat > 0.7 over hyperparameter points",
    "non_finite_lpd": "non-finite values",
}


@functools.partial(jit, static_argnames=("name", "lik", "form"))
def _at_points(posterior, points, X, y, *, name, lik, form):
    """Conditional ``(lpd (S, n), unreliable (S, n))`` of estimator ``name``."""
    if name == "exact":
        fn = ESTIMATORS["exact_sk" if form == "sk" else "exact"]
    elif name == "la":
        fn = functools.partial(la_loo, form=form)
    else:
        fn = ESTIMATORS[name]
    return jax.vmap(lambda post, theta: fn(post, y, lik, theta, X))(posterior, points)


def _base(fitted) -> str:
    if fitted.gp.lik.name == "gaussian":
        return "exact"
    return "la" if fitted.inference == "laplace" else "ep"


def _check(fitted, method, form):
    if not isinstance(fitted, FittedGP):
        raise ArgumentTypeError(f"`fitted` must be a FittedGP (from GP.fit), got "
                                f"{type(fitted).__name__}")
    check_choice("method", method, METHODS)
    if method == "exact" and fitted.gp.lik.name != "gaussian":
        raise InvalidArgumentError("`method` 'exact' needs the Gaussian likelihood, the fit "
                                   f"has {fitted.gp.lik.name!r} (use 'la', 'ep' or 'brute')")
    if method == "la" and fitted.inference != "laplace":
        raise InvalidArgumentError("`method` 'la' needs inference='laplace'")
    if method == "ep" and fitted.inference != "ep":
        raise InvalidArgumentError("`method` 'ep' needs inference='ep'")
    if method == "is" and len(fitted.points) < 2:
        raise InvalidArgumentError("`method` 'is' weights hyperparameter points: fit with "
                                   "hyper='ccd' or supply draws")
    if form is not None:
        if method not in FORMS:
            raise InvalidArgumentError(f"`form` applies to methods {sorted(FORMS)} only")
        check_choice("form", form, FORMS[method])


def _check_brute_options(method, executor, checkpoint, batch_size, progress):
    """Options of brute force only: a named error when given to a fast method (they would be
    ignored: no checkpoint written, no executor used)."""
    check_positive_int("batch_size", batch_size)
    if method == "brute":
        return
    given = [name for name, value, default in (
        ("executor", executor, None), ("checkpoint", checkpoint, None),
        ("batch_size", batch_size, 32), ("progress", progress, False)) if value != default]
    if given:
        raise InvalidArgumentError(f"{', '.join(f'`{g}`' for g in given)} only apply to "
                                   f"method='brute' (refits); method={method!r} computes "
                                   "every point at once from the fitted posterior")


def _warn_unreliable(method, causes, n):
    """One :class:`UnreliableFoldWarning` naming the unreliable points and their causes."""
    bad = np.zeros(n, bool)
    for mask in causes.values():
        bad |= mask
    if not bad.any():
        return
    named = "; ".join(f"{int(m.sum())} {CAUSES.get(k, k)}" for k, m in causes.items()
                      if m.any())
    ids = np.flatnonzero(bad)
    warnings.warn(
        f"bayes.loo(method={method!r}): {int(bad.sum())} of {n} points are unreliable "
        f"(points {ids[:10].tolist()}{' ...' if len(ids) > 10 else ''}): {named}. Their "
        "numbers are kept but are not estimates; listed in diagnostics['unreliable_folds'] "
        "(by cause: diagnostics['unreliable_causes'])", UnreliableFoldWarning, stacklevel=3)


def loo(fitted, method: str = "la", *, form: str | None = None, executor=None,
        checkpoint=None, batch_size: int = 32, progress: bool = False) -> BayesLOOResult:
    """Leave-one-out estimate of ``fitted`` by ``method`` (module docstring).

    Args:
        fitted: a :class:`~approxcv.bayes.gp.FittedGP`.
        method: one of :data:`METHODS`.
        form: ``"cavity"`` (default) or ``"sk"`` for ``"exact"`` (eq. 30-31 / 32-34);
            ``"cavity"`` (default) or ``"lr"`` for ``"la"`` (eq. 31+37 / 38-39).
        executor, checkpoint, batch_size, progress: for ``"brute"`` only (where its batches
            run, a checkpoint directory to resume from, folds per compiled batch, a bar);
            given to another method they raise (they would be ignored).

    Returns:
        :class:`BayesLOOResult`; unreliable points are listed in its diagnostics and named
        in one :class:`~approxcv.errors.UnreliableFoldWarning`.

    Raises:
        InvalidArgumentError: a bad ``method``/``form``, or a brute-force option given to
            another method.
    """
    _check(fitted, method, form)
    _check_brute_options(method, executor, checkpoint, batch_size, progress)
    t0 = time.perf_counter()
    n, S = fitted.n, len(fitted.points)
    X, y = jnp.asarray(fitted.X), jnp.asarray(fitted.y)
    diagnostics: dict = {"n_samples": S}
    causes: dict = {}
    if method == "brute":
        lpd_s, conv, its, start = brute_force_lpd(fitted, executor, checkpoint, batch_size,
                                                  progress)
        diagnostics.update(converged=conv, iterations=its, start=start)
        causes["not_converged"] = ~conv.all(0)
        causes["non_finite"] = ~np.isfinite(lpd_s).all(0)
        estimator = "brute"
    else:
        estimator = _base(fitted) if method == "is" else method
        lpd_s, bad = _at_points(fitted.posterior, jnp.asarray(fitted.points), X, y,
                                name=estimator, lik=fitted.gp.lik,
                                form=form or ("cavity" if estimator in FORMS else None))
        lpd_s, bad = np.asarray(lpd_s), np.asarray(bad)
        causes["estimator"] = bad.any(0)
        if estimator in ("q", "tq"):
            k_marg = marginal_pareto_k(fitted)
            diagnostics["pareto_k_marginal"] = k_marg
            k_mean = np.asarray(fitted.weights) @ np.where(np.isfinite(k_marg), k_marg, np.inf)
            causes["pareto_k_marginal"] = ~(k_mean <= K_HAT_THRESHOLD)
        # a fast estimator reads the full-data posterior: if that did not converge at some
        # hyperparameter point, no point's value can be vouched for
        post_ok = np.asarray(fitted.posterior.converged, bool).all()
        causes["posterior_not_converged"] = np.full(n, not post_ok)
    if S == 1:
        lpd = lpd_s[0]
    else:
        lpd, k, ess = combine_points(lpd_s, fitted.weights, smooth=method == "is")
        diagnostics["ess"] = ess
        if method == "is":
            diagnostics["pareto_k"] = k
            causes["pareto_k"] = np.isfinite(k) & (k > K_HAT_THRESHOLD)
    seconds = time.perf_counter() - t0
    unreliable = np.zeros(n, bool)
    for flag in causes.values():
        unreliable |= flag
    lpd = np.asarray(lpd, float)
    causes["non_finite_lpd"] = ~np.isfinite(lpd)
    unreliable |= causes["non_finite_lpd"]
    diagnostics["unreliable_causes"] = {c: np.flatnonzero(f) for c, f in causes.items()}
    diagnostics["unreliable_folds"] = np.flatnonzero(unreliable)
    _warn_unreliable(method, causes, n)
    return BayesLOOResult(
        method=method, scheme=None, level="point", folds=_folds.leave_one_out(n),
        fold_loss=-lpd, point_loss=[np.array([-v]) for v in lpd], params=fitted.points,
        params_flat=np.asarray(fitted.points), seconds=seconds, diagnostics=diagnostics,
        fit_seconds=fitted.fit_seconds, estimator=method if method != "exact" or form is None
        else f"exact_{form}", inference=fitted.inference, lpd_points=lpd_s,
        fingerprint=result_fingerprint((fitted.X, fitted.y), _folds.leave_one_out(n), "point"))
