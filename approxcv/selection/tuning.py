"""Tuning one or many penalty weights of a regularised ERM model by approximate LOO.

For a GLM-type model (:mod:`approxcv.models.erm`: ``Ridge``, ``Logistic``,
``PoissonRegression``, ``ElasticNet``) with penalty ``lam^T r(theta)``, the leave-one-out
estimate tuned here is ALOOCV — the ``ns`` method of :func:`approxcv.cross_validate`
(one Newton step per sample from the full fit, Beirami et al. 2017),
``ACV(lam) = 1/n sum_i l_i(theta_i)``. Cross-validation itself (any method, any folds)
is :func:`approxcv.cross_validate`; this module only tunes.

* :func:`aloocv_gradient` (:mod:`approxcv.selection.tuning_gradient`) differentiates ``ACV`` with
  respect to the vector ``lam`` (``"implicit"``, ``"seed"``, ``"full_fit_hessian"``).
  Penalty weights are kept positive by optimising ``rho = log lam``.
* :func:`tune_regularization` takes Newton steps with the exact Hessian of ALOOCV in
  ``log lam`` (:mod:`approxcv.selection.tuning_newton`; the default for a smooth penalty
  with at most :data:`NEWTON_MAX_WEIGHTS` weights), or runs Algorithm 1 (full gradient) or Algorithm 2
  (stochastic: a random mini-batch of LOO terms per step) of the seed paper with an optax
  optimiser, refitting warm-started at every step; it returns the path as a DataFrame and
  the :class:`~approxcv.results.CVResult` of leave-one-out CV at the best weights
  (``cv_result``, with its ``elpd`` and ``se`` on the package's scale: higher is better),
  which :func:`approxcv.compare` ranks beside any other model's.

Example:
    >>> import numpy as np
    >>> from approxcv.models import Ridge
    >>> from approxcv.selection import tune_regularization
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 5)); y = X[:, 0] + rng.normal(size=60)
    >>> out = tune_regularization(Ridge(np.ones(5)), (X, y), np.ones(5), max_iter=20)
    >>> out.best_lam.shape, out.cv_result.method, out.elpd == -60 * out.best_acv
    ((5,), 'ns', True)
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import jax.numpy as jnp
import numpy as np
import pandas as pd

from ..errors import user_stacklevel
from .._validate import check_choice, check_in_range, check_positive, check_positive_int
from ..engine.registry import get_method
from ..errors import (ArgumentTypeError, ConvergenceWarning, InvalidArgumentError,
                     NotPositiveDefiniteError)
from ..folds import leave_one_out
from ..results import CVResult, compare
from .tuning_gradient import GRADIENTS, _problem_gradient, aloocv_gradient
from ..api import cross_validate
from .tuning_newton import newton_tune
from ..models.erm.elastic_net import SupportChangeWarning

__all__ = ["aloocv_gradient", "TuneResult", "tune_regularization", "resolve_algorithm",
           "GRADIENTS", "NEWTON_MAX_WEIGHTS"]

@dataclass(eq=False)
class TuneResult:
    """Outcome of :func:`tune_regularization`.

    Two scales, as in the rest of the package: the path records ALOOCV, the mean held-out
    *loss* the tuning minimises (``acv``: lower is better); the result at the best weights
    is a :class:`~approxcv.results.CVResult` (:attr:`cv_result`) whose :attr:`elpd` (expected
    log predictive density, ``-sum`` of the left-out losses: higher is better) and
    :attr:`se` are those of :func:`approxcv.compare`, which ranks it beside any other
    model's result on the same data and folds (``acv.compare({"tuned": out.cv_result,
    ...})``). With the default ``method="ns"``, ``elpd == -n * best_acv``.

    Attributes:
        path: DataFrame, one row per iteration: ``iteration``, ``acv`` (estimate used for
            the step: full or mini-batch), ``acv_full`` (full ALOOCV, NaN where not
            evaluated), ``grad_norm`` (of ``dACV/dlog lam``), ``seconds`` (cumulative),
            ``test_loss`` (if test data were given), ``support_size`` (elastic net), and
            the weights ``lam`` (one weight) or ``lam_0 .. lam_{m-1}``.
        best_lam: ``(m,)`` weights with the smallest full ALOOCV on the path.
        best_acv: that ALOOCV (a mean loss per sample: lower is better).
        best_params: the fit at ``best_lam``.
        model: ``model.with_lam(best_lam)``.
        cv_result: :class:`~approxcv.results.CVResult` of leave-one-out CV of ``model`` at
            ``best_params`` by ``method`` (default ``"ns"``: its mean fold loss is
            ``best_acv``); computed at the first access (the tuning itself does not pay
            for it).
        algorithm, gradient: the settings used (``algorithm`` as resolved from
            ``"auto"``).
        converged: the tuning's own stopping test was met (``"newton"``: the gradient
            test; the first-order algorithms run ``max_iter`` steps or stop at ``stop_rtol``
            and report ``True``).
    """
    path: pd.DataFrame
    best_lam: np.ndarray
    best_acv: float
    best_params: tuple
    model: object
    _cv_thunk: object = field(repr=False)
    algorithm: str
    gradient: str
    converged: bool = True
    _cv: object = field(default=None, repr=False)

    @property
    def cv_result(self) -> CVResult:
        """Leave-one-out :class:`~approxcv.results.CVResult` at the best weights (computed
        once, at the first access)."""
        if self._cv is None:
            self._cv = self._cv_thunk()
        return self._cv

    @property
    def elpd(self) -> float:
        """Expected log predictive density of leave-one-out CV at the best weights,
        ``sum_i -loss_i`` over the samples (higher is better; :func:`approxcv.compare`'s
        ``elpd`` of :attr:`cv_result`, computed at its first access)."""
        return float(compare({"tuned": self.cv_result})["elpd"].iloc[0])

    @property
    def se(self) -> float:
        """Standard error of :attr:`elpd`, ``sqrt(n) sd(-loss_i)`` (:func:`approxcv.compare`'s
        ``se``)."""
        return float(compare({"tuned": self.cv_result})["se"].iloc[0])

    @property
    def lam_path(self) -> np.ndarray:
        """``(iterations, m)`` penalty weights along the path."""
        cols = [c for c in self.path.columns if c == "lam" or c.startswith("lam_")]
        return self.path[cols].to_numpy()


def _check_lam0(model, lam0) -> np.ndarray:
    m = int(np.asarray(model.lam_vector()).size)
    lam0 = np.asarray(lam0, dtype=np.float64).reshape(-1)
    if lam0.size == 1 and m > 1:
        lam0 = np.full(m, lam0[0])
    if lam0.shape != (m,):
        raise InvalidArgumentError(f"`lam0` must have {m} entries (as model.lam_vector()), "
                                   f"got {lam0.size}")
    if not np.all(np.isfinite(lam0)) or np.any(lam0 <= 0):
        raise InvalidArgumentError("`lam0` must be positive and finite (the tuning works on "
                                   "log lam)")
    return lam0


def _test_loss(model, test_data, u):
    """Mean held-out loss on a test set at the flat parameters ``u``."""
    if test_data is None:
        return np.nan
    return float(jnp.mean(model.loss(model.design(test_data) @ u, test_data.y)))


def _warn_support_change(u, support_prev, it, warn, warned) -> bool:
    """Warn once when the set of non-zero coefficients changes along the path."""
    if support_prev is None or np.array_equal(np.asarray(u) != 0, support_prev) or warned:
        return warned
    if warn:
        warnings.warn(f"the support changed at iteration {it}; ALOOCV and its gradient are "
                      "piecewise smooth in lam", SupportChangeWarning, stacklevel=user_stacklevel())
    return True


#: ``algorithm="auto"`` takes Newton steps for at most this many penalty weights
NEWTON_MAX_WEIGHTS = 10


def resolve_algorithm(model, algorithm: str) -> str:
    """``"auto"`` -> ``"newton"`` for a smooth penalty (no elastic-net support, which makes
    ALOOCV piecewise smooth in ``lam``) with at most :data:`NEWTON_MAX_WEIGHTS` weights: its
    Hessian in ``log lam`` costs one derivative sweep per weight, and a handful of Newton
    steps replace tens of first-order ones; otherwise ``"full"`` (Adam on the exact
    gradient). Other values are returned checked."""
    check_choice("algorithm", algorithm, ("auto", "newton", "full", "stochastic"))
    smooth = bool(getattr(model, "smooth_penalty", False))
    if algorithm == "newton" and not smooth:
        raise InvalidArgumentError(
            "`algorithm='newton'` needs a smooth penalty; the elastic net's ALOOCV is only "
            "piecewise smooth in lam (its support changes): use 'full' or 'stochastic'")
    if algorithm != "auto":
        return algorithm
    m = int(np.asarray(model.lam_vector()).size)
    return "newton" if smooth and m <= NEWTON_MAX_WEIGHTS else "full"


def _tune_newton(model, prepared, lam, max_iter, test, cv_thunk_for, u0=None,
                 xtol: float = 0.0) -> TuneResult:
    """:func:`approxcv.selection.tuning_newton.newton_tune` from ``lam`` (the fit from ``u0``,
    default zero, by the loop's own Newton refits; ``xtol`` its step test), its path as a
    DataFrame."""
    # host-side arrays in NumPy: each eager jax.numpy operation compiles a small program
    design = model.design(prepared)
    u0 = np.zeros(design.shape[1]) if u0 is None else np.asarray(u0, np.float64)
    prob = model.smooth_problem(prepared, u0)
    t0 = time.perf_counter()
    res = newton_tune(u0, np.log(np.asarray(lam, np.float64)), prob.design, prob.y, prob.aux,
                      prob.loss_fn, prob.penalty_fn, max_iter=max_iter, xtol=xtol)
    acv_path = np.asarray(res.path_acv)
    rows_n = int(np.sum(np.isfinite(acv_path)))
    if rows_n == 0 or not np.isfinite(float(res.acv)):
        raise NotPositiveDefiniteError(
            "the ALOOCV estimate is not finite at lam0: a (leave-one-out) Hessian is not "
            "positive definite (too little regularisation?)")
    u = res.u
    lam_path = np.exp(np.asarray(res.path_rho)[:rows_n])
    step_seconds = res.path_time[:rows_n] - t0      # when each accepted step was done
    # built by columns: a frame from a list of row dicts took about 1 ms of an estimator's
    # 40 ms fit
    columns = {"iteration": np.arange(rows_n), "acv": acv_path[:rows_n],
               "acv_full": acv_path[:rows_n],
               "grad_norm": np.asarray(res.path_grad_norm, np.float64)[:rows_n],
               "seconds": np.asarray(step_seconds, np.float64)}
    if test is not None:
        columns["test_loss"] = np.r_[np.full(rows_n - 1, np.nan), _test_loss(model, test, u)]
    columns.update({"lam": lam_path[:, 0]} if lam_path.shape[1] == 1 else
                   {f"lam_{k}": lam_path[:, k] for k in range(lam_path.shape[1])})
    path = pd.DataFrame(columns)
    converged = bool(res.converged)
    if not converged:
        gmax = float(jnp.max(jnp.abs(res.grad)))
        warnings.warn(f"tune_regularization (newton): the gradient test was not met in "
                      f"{max_iter} steps (|dACV/dlog lam| = {gmax:.3g}); or a Hessian "
                      "needed jitter", ConvergenceWarning, stacklevel=user_stacklevel())
    if not bool(res.refit_converged):
        warnings.warn("tune_regularization (newton): a refit along the path did not reach "
                      "its gradient tolerance", ConvergenceWarning, stacklevel=user_stacklevel())
    best_lam = np.exp(np.asarray(res.rho))
    best_model = model.with_lam(best_lam)
    best_params = best_model.flat_to_params(u)
    return TuneResult(path, best_lam, float(res.acv), best_params, best_model,
                      cv_thunk_for(best_model, best_params), "newton", "implicit", converged)


def tune_regularization(model, data, lam0, *, algorithm: str = "auto",
                        gradient: str = "implicit", optimizer=None,
                        learning_rate: float = 0.1, max_iter: int = 50,
                        minibatch_size: int | None = None, eval_every: int = 10, seed: int = 0,
                        stop_rtol: float = 0.0, test_data=None, method: str = "ns",
                        warn: bool = True, init_params=None, xtol: float = 0.0) -> TuneResult:
    """Tune penalty weights on ALOOCV in ``rho = log lam``: Newton steps with its exact
    Hessian, or gradient descent (seed Algorithms 1/2).

    ``"newton"`` (:mod:`approxcv.selection.tuning_newton`): damped Newton steps on ``rho`` with the
    exact gradient and Hessian of ALOOCV (implicit differentiation through the fit), refits
    by Newton on the smooth objective, each step one compiled program; it stops at a
    stationary point (``|dACV/drho| <= 1e-9 (1 + ACV)``) or, with ``xtol``, once the next
    Newton step is at most ``xtol``. ``"full"``/``"stochastic"``:
    every iteration refits the model warm-started at the previous fit, computes ALOOCV and
    its gradient (:func:`aloocv_gradient`), and takes one optax step on ``rho``.

    Args:
        model: an ERM model; its weights are replaced by ``lam0`` and the iterates.
        data: ``(X, y)``.
        lam0: starting weights, positive, ``(m,)`` or a scalar broadcast to ``m``.
        algorithm: ``"auto"`` (default: :func:`resolve_algorithm` — ``"newton"`` for a
            smooth penalty with at most :data:`NEWTON_MAX_WEIGHTS` weights, else
            ``"full"``), ``"newton"``, ``"full"`` (Algorithm 1: Adam on all ``n`` LOO
            terms per step) or ``"stochastic"`` (Algorithm 2: ``minibatch_size`` random LOO
            terms per step). ``"newton"`` ignores ``gradient``, ``optimizer``,
            ``learning_rate``, ``minibatch_size``, ``eval_every``, ``seed`` and
            ``stop_rtol``; its
            path has the accepted points, ``seconds`` at each (the wall time since the call
            when the step was done, compilation included, as for the other algorithms)
            and ``test_loss`` at the last only.
        gradient: one of :data:`GRADIENTS`.
        optimizer: an ``optax.GradientTransformation``; default ``optax.adam(learning_rate)``.
        learning_rate: step size of the default optimiser (in ``log lam``).
        max_iter: number of iterations.
        minibatch_size: mini-batch size of Algorithm 2 (default ``max(1, n // 10)``).
        eval_every: Algorithm 2 evaluates the full ALOOCV every ``eval_every`` iterations
            (and at the last) to choose the best weights.
        seed: seed of the mini-batch sampling.
        stop_rtol: stop early when the full ALOOCV changes by less than ``stop_rtol``
            (relative; ``tol`` is everywhere else the error-estimate threshold).
        test_data: optional ``(X_test, y_test)``; the out-of-sample loss is recorded.
        method: the ``cross_validate`` method of the leave-one-out :class:`CVResult` at the
            best weights (``TuneResult.cv_result``); ``"ns"`` (ALOOCV, default) is what the path
            descends. ``"ij"`` under-corrects at weak regularisation (docs/erm.md).
        warn: warn when the elastic-net support changes along the path.
        init_params: the model's parameters to start the first fit from (e.g. its fit at
            ``lam0``); default: from zero.
        xtol: ``"newton"`` only: also stop at an accepted point whose undamped Newton step
            in ``log lam`` is at most ``xtol`` (the weights are then within about a factor
            ``e^xtol`` of the optimum; the step is not taken). ``0`` (default): off, the
            gradient test alone.

    Returns:
        :class:`TuneResult`: the path (ALOOCV, a loss: lower is better) and, at the best
        weights, ``cv_result`` (a :class:`~approxcv.results.CVResult`), ``elpd`` and
        ``se`` (higher is better, as everywhere in the package).
    """
    import optax

    algorithm = resolve_algorithm(model, algorithm)
    check_choice("gradient", gradient, GRADIENTS)
    get_method(method)
    max_iter = check_positive_int("max_iter", max_iter)
    eval_every = check_positive_int("eval_every", eval_every)
    if optimizer is not None and not hasattr(optimizer, "update"):
        raise ArgumentTypeError("`optimizer` must be an optax.GradientTransformation")
    lam = _check_lam0(model, lam0)
    xtol = check_in_range("xtol", xtol, 0.0, float("inf"), "left")
    prepared, _, n = model.prepare(data)
    test = model.prepare(test_data)[0] if test_data is not None else None
    u_init = (None if init_params is None else
              model.params_to_flat(model.check_params(init_params, prepared,
                                                         name="init_params")))

    def cv_thunk_for(best_model, best_params):
        # on the user's data, not the prepared arrays: the result records their digest,
        # so acv.compare ranks it beside results of other models on the same data
        return lambda: cross_validate(best_model, data, leave_one_out(n), method,
                                      params=best_params, progress=False, warn=warn)
    if algorithm == "newton":
        return _tune_newton(model, prepared, lam, max_iter, test, cv_thunk_for, u_init, xtol)
    if algorithm == "stochastic":
        minibatch_size = min(check_positive_int(
            "minibatch_size", minibatch_size or max(1, n // 10)), n)
    rng = np.random.default_rng(seed)
    opt = optimizer or optax.adam(learning_rate)
    rho = jnp.log(jnp.asarray(lam))
    state = opt.init(rho)
    rows, u_prev, support_prev, warned = [], u_init, None, False
    t0 = time.perf_counter()
    for it in range(max_iter):
        lam = np.exp(np.asarray(rho))
        u, info = model.fit_flat(prepared, jnp.asarray(lam), u0=u_prev)
        prob = model.smooth_problem(prepared, u)._replace(lam=jnp.asarray(lam))
        support = info.get("support_size")
        if support is not None:
            warned = _warn_support_change(u, support_prev, it, warn, warned)
            support_prev = np.asarray(u) != 0
        if algorithm == "full":
            acv, grad = _problem_gradient(prob, gradient, np.arange(n), 128)
            acv_full = acv
        else:
            acv, grad = _problem_gradient(prob, gradient, rng.choice(n, minibatch_size, False),
                                          128)
            acv_full = np.nan
            if it % eval_every == 0 or it == max_iter - 1:
                acv_full = _problem_gradient(prob, "implicit", np.arange(n), 128)[0]
        grad_rho = lam * grad
        row = {"iteration": it, "acv": acv, "acv_full": acv_full,
               "grad_norm": float(np.linalg.norm(grad_rho)),
               "seconds": time.perf_counter() - t0, "test_loss": _test_loss(model, test, u)}
        if support is not None:
            row["support_size"] = support
        row.update({"lam": lam[0]} if lam.size == 1 else
                   {f"lam_{j}": lam[j] for j in range(lam.size)})
        rows.append(row)
        if stop_rtol > 0 and len(rows) > 1 and np.isfinite(acv_full):
            prev = [r["acv_full"] for r in rows[:-1] if np.isfinite(r["acv_full"])]
            if prev and abs(prev[-1] - acv_full) <= stop_rtol * abs(prev[-1]):
                break
        updates, state = opt.update(jnp.asarray(grad_rho), state, rho)
        rho = optax.apply_updates(rho, updates)
        u_prev = u
    path = pd.DataFrame(rows)
    if test is None:
        path = path.drop(columns="test_loss")
    best = int(np.nanargmin(path["acv_full"].to_numpy()))
    names = ["lam"] if lam.size == 1 else [f"lam_{j}" for j in range(lam.size)]
    best_lam = np.atleast_1d(np.asarray(path.iloc[best][names], dtype=np.float64))
    best_model = model.with_lam(best_lam)
    best_params = best_model.fit(prepared)
    return TuneResult(path, best_lam, float(path["acv_full"].iloc[best]), best_params,
                      best_model, cv_thunk_for(best_model, best_params), algorithm, gradient)
