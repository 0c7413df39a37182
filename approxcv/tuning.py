"""Approximate leave-one-out (ALOOCV) for regularised ERM, and tuning many penalty weights by it.

For a GLM-type model (:mod:`approxcv.models.erm`: ``Ridge``, ``Logistic``,
``PoissonRegression``, ``ElasticNet``) with penalty ``lam^T r(theta)``:

* :func:`aloocv` estimates leave-one-out (or leave-``q``-out / k-fold) CV by one Newton step
  per fold from the full fit (Beirami et al. 2017), the IJ, or the linearised influence
  function; LOO Hessians are rank-one downdates of one Cholesky factor
  (:mod:`approxcv.engine.aloo`). ``ACV(lam) = 1/n sum_i l_i(theta_i)``.
* :func:`aloocv_gradient` differentiates ``ACV`` with respect to the vector ``lam``:

  - ``"seed"`` (seed Lemma 4 / Corollary 5 / eq. 16): the exact LOO solution satisfies
    ``d theta^(i) / d lam = -H_{-i}(theta^(i))^{-1} d_lam grad r``; substituting the ALOOCV
    point ``theta_i`` gives ``dACV/dlam ~ -1/n sum_i [d_lam grad_theta(lam^T r)(theta_i)]^T
    H_{-i}(theta_i)^{-1} grad l_i(theta_i)``. Needs a new Hessian per sample at ``theta_i``
    (``O(n (n D^2 + D^3))``).
  - ``"full_fit_hessian"``: the same formula with ``H_{-i}`` kept at the full fit
    ``theta_hat``, reusing the rank-one downdated factors that ALOOCV already built
    (``O(n D^2)``). Identical to ``"seed"`` when the loss is quadratic.
  - ``"implicit"``: the exact derivative of the ALOOCV estimate itself, by implicit
    differentiation of ``theta_hat(lam)`` (``d theta_hat / d lam = -H^{-1} d_lam grad r``)
    and automatic differentiation of the closed-form (Sherman-Morrison) ALOOCV map.

  Penalty weights are kept positive by optimising ``rho = log lam`` (``dACV/drho = lam *
  dACV/dlam``).
* :func:`tune_regularization` runs Algorithm 1 (full gradient) or Algorithm 2 (stochastic:
  a random mini-batch of LOO terms per step) of the seed paper with an optax optimiser,
  refitting warm-started at every step, and returns the path as a DataFrame.

Example:
    >>> import numpy as np
    >>> from approxcv.models.ridge import Ridge
    >>> from approxcv.tuning import aloocv, tune_regularization
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(60, 5)); y = X[:, 0] + rng.normal(size=60)
    >>> res = aloocv(Ridge(1.0), (X, y))          # exact LOO for ridge
    >>> out = tune_regularization(Ridge(np.ones(5)), (X, y), np.ones(5), max_iter=20)
    >>> out.best_lam.shape
    (5,)
"""
from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field
from functools import partial

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import pandas as pd

from ._validate import check_choice, check_positive_int
from .engine import aloo
from .engine.linalg import factor_hessian
from .errors import ArgumentTypeError, InvalidArgumentError, NotPositiveDefiniteError
from .folds import Folds, as_folds

__all__ = ["AlooResult", "aloocv", "aloocv_gradient", "exact_cv", "TuneResult",
           "tune_regularization", "METHODS", "GRADIENTS"]

METHODS = ("newton", "ij", "influence")
GRADIENTS = ("implicit", "seed", "full_fit_hessian")


# ====================================================================== ALOOCV
@dataclass
class AlooResult:
    """Approximate CV of an ERM model.

    Attributes:
        method: ``"newton"`` (ALOOCV), ``"ij"`` or ``"influence"`` (linearised loss).
        estimate: mean held-out loss over all left-out samples (``ACV`` for LOO).
        fold_loss: ``(n_folds,)`` summed held-out loss of each fold (for leave-one-out,
            fold ``i`` leaves out sample ``i``, so this is the per-sample LOO loss).
        point_loss: ``(n_folds, n)`` held-out loss of each left-out sample (0 elsewhere);
            ``None`` for leave-one-out, where it would be ``diag(fold_loss)``.
        params: ``(n_folds, D)`` flat fold parameters ``(coef, intercept)`` (``None`` for
            ``"influence"``, which does not produce parameters).
        ok: ``(n_folds,)`` False where the fold Hessian was not positive definite.
        folds: the :class:`~approxcv.folds.Folds`, ``None`` for leave-one-out.
        seconds: wall time after the full fit.
        diagnostics: dict (Hessian eigenvalues, jitter, support checks for the elastic net).
    """
    method: str
    estimate: float
    fold_loss: np.ndarray
    point_loss: np.ndarray | None
    params: np.ndarray | None
    ok: np.ndarray
    folds: Folds | None
    seconds: float
    diagnostics: dict = field(default_factory=dict)

    def loo_losses(self) -> np.ndarray:
        """``(n,)`` held-out loss of each sample (leave-one-out only)."""
        if self.folds is not None:
            raise InvalidArgumentError("loo_losses() needs leave-one-out folds (folds=None)")
        return self.fold_loss


def _full_fit(model, data, params):
    """``(prepared, n, u_full)``: prepare the data and fit unless ``params`` are given."""
    prepared, _, n = model.prepare(data)
    if params is None:
        params = model.fit(prepared)
    return prepared, n, model.params_to_flat(params)


@partial(jax.jit, static_argnames=("loss_fn", "penalty_fn"))
def _glm_derivatives(design, y, u, lam, aux, loss_fn, penalty_fn):
    """``(terms, H, grad F)`` at ``u`` (``H`` and ``grad F`` include the penalty)."""
    terms = aloo.glm_terms(loss_fn, design, y, u)
    pen_hess = jax.hessian(penalty_fn)(u, lam, aux)
    grad = design.T @ terms.grad + jax.grad(penalty_fn)(u, lam, aux)
    return terms, aloo.glm_hessian(terms, pen_hess), grad


def _derivatives(prob):
    """``(terms, H, grad F)`` of the smooth problem at its fit."""
    return _glm_derivatives(prob.design, prob.y, prob.u, prob.lam, prob.aux, prob.loss_fn,
                            prob.penalty_fn)


@partial(jax.jit, static_argnames=("loss_fn",))
def _heldout_points(params, design, y, weights, loss_fn):
    """``(fold_loss (F,), points (F, n))``: losses of left-out samples at fold parameters."""
    points = jnp.where(weights > 0, 0.0, loss_fn(params @ design.T, y[None, :]))
    return points.sum(axis=1), points


@partial(jax.jit, static_argnames=("loss_fn",))
def _loo_points(params, design, y, loss_fn):
    """``(n,)`` loss of sample ``i`` at the parameters ``params[i]`` of its LOO fold."""
    return loss_fn(jnp.sum(params * design, axis=1), y)


@jax.jit
def _loo_ij_params(chol, terms, u):
    """IJ for leave-one-out: ``u_i = u_1 + g_i H^{-1} a_i``, ``(n, D)``."""
    return u[None, :] + (jsl.cho_solve((chol, True), terms.design.T) * terms.grad[None, :]).T


def _loo_weights(n: int) -> np.ndarray:
    return 1.0 - np.eye(n)


def aloocv(model, data, params=None, *, folds=None, method: str = "newton",
           batch_size: int = 256, warn: bool = True) -> AlooResult:
    """Approximate leave-one-out (default) or leave-``q``-out CV of a regularised ERM model.

    Args:
        model: an ERM model (``Ridge``, ``Logistic``, ``PoissonRegression``, ``ElasticNet``).
        data: ``(X, y)``.
        params: the full-data fit; fitted when ``None``.
        folds: ``None`` for leave-one-out, or :class:`~approxcv.folds.Folds` / index arrays
            (leave-``q``-out, k-fold).
        method: ``"newton"`` — ALOOCV, one Newton step per fold with the fold Hessian from
            rank-one downdates of one Cholesky factor (exact for ridge); ``"ij"`` — the
            full-fit Hessian; ``"influence"`` — IJ with the held-out loss linearised (seed
            Lemma 3; underestimates LOO).
        batch_size: folds per vectorised batch.
        warn: warn on jitter and (elastic net) support changes.

    Returns:
        :class:`AlooResult`. For the elastic net the support rule applies (see
        :mod:`approxcv.models.elastic_net`) and ``diagnostics["support_change"]`` flags folds
        whose support would change.
    """
    check_choice("method", method, METHODS)
    prepared, n, u_full = _full_fit(model, data, params)
    folds = as_folds(folds, n) if folds is not None else None
    t0 = time.perf_counter()
    prob = model.smooth_problem(prepared, u_full)
    terms, hess, grad = _derivatives(prob)
    factor = factor_hessian(hess, warn=warn)
    chol = factor.chol
    loo = folds is None
    weights = None if loo else jnp.asarray(folds.weights())
    u_loc = prob.u
    params_loc, fold_loss, points = None, None, None
    if loo and method == "newton":
        params_loc, ok = aloo.loo_newton_params(chol, terms, u_loc, grad, batch_size=batch_size)
    elif loo and method == "ij":
        params_loc = _loo_ij_params(chol, terms, u_loc)
    elif loo:
        lev = aloo.leverages(chol, terms)
        fold_loss = terms.loss + terms.grad ** 2 * lev
    elif method == "newton":
        index, mask = aloo.padded_folds(weights)
        refactor = index.shape[1] > max(1, prob.design.shape[1] // 3)
        params_loc, ok = aloo.fold_newton_params(chol, hess, terms, u_loc, index, mask, grad,
                                                 batch_size=batch_size, refactor=refactor)
    elif method == "ij":
        params_loc = aloo.fold_ij_params(chol, terms, u_loc, weights)
    else:
        fold_loss, points = aloo.influence_losses(chol, terms, weights)
    if params_loc is not None:
        if method == "ij":
            ok = jnp.all(jnp.isfinite(params_loc), axis=1)
        if loo:
            fold_loss = _loo_points(params_loc, prob.design, prob.y, prob.loss_fn)
        else:
            fold_loss, points = _heldout_points(params_loc, prob.design, prob.y, weights,
                                                prob.loss_fn)
    else:
        ok = jnp.ones(fold_loss.shape[0], bool)
    fold_loss, ok = np.asarray(fold_loss), np.asarray(ok)
    points = None if points is None else np.asarray(points)
    diagnostics = {"hessian_min_eig": factor.min_eig, "jitter": factor.jitter,
                   "condition_number": factor.condition_number,
                   "grad_norm": float(jnp.linalg.norm(grad))}
    full_params = None
    if params_loc is not None:
        full_params = np.zeros((len(fold_loss), len(u_full)))
        full_params[:, prob.active] = np.asarray(params_loc)
        if hasattr(model, "support_violations"):
            w_np = _loo_weights(n) if loo else np.asarray(weights)
            diagnostics["support_change"] = model.support_violations(
                prepared, u_full, full_params, w_np, warn=warn)
    n_out = n if loo else int(np.sum(np.asarray(weights) <= 0))
    estimate = float(fold_loss.sum() / n_out)
    seconds = time.perf_counter() - t0
    return AlooResult(method, estimate, fold_loss, points, full_params, ok, folds, seconds,
                      diagnostics)


def exact_cv(model, data, params=None, *, folds=None, batch_size: int = 64):
    """Exact CV by refitting every fold warm-started at the full fit (``model.refit_batch``).

    Ridge uses its closed form, the elastic net FISTA + polish, other models BFGS + Newton
    (:func:`approxcv.engine.batched_minimize`), all ``vmap``ped over folds.

    Returns:
        ``(estimate, point_loss (n_folds, n), params (n_folds, D), converged (n_folds,))``.
    """
    prepared, n, u_full = _full_fit(model, data, params)
    weights = _loo_weights(n) if folds is None else as_folds(folds, n).weights()
    u, converged = model.refit_batch(prepared, model.lam_vector(), u_full, weights,
                                     batch_size=batch_size)
    eta = np.asarray(jnp.asarray(u) @ model.design(prepared).T)
    points = np.where(weights > 0, 0.0, np.asarray(model.loss(eta, prepared.y[None, :])))
    return float(points.sum() / np.sum(weights <= 0)), points, u, converged


# ============================================================ lambda gradients
def _acv_closed_form(u, lam, design, y, aux, subset, loss_fn, penalty_fn):
    """``ACV`` over ``subset`` by Sherman-Morrison (differentiable in ``u`` and ``lam``)."""
    terms = aloo.glm_terms(loss_fn, design, y, u)
    hess = aloo.glm_hessian(terms, jax.hessian(penalty_fn)(u, lam, aux))
    sub = aloo.GLMTerms(*(t[subset] for t in terms))
    params = aloo.loo_newton_params_closed_form(hess, sub, u)
    eta = jnp.sum(params * sub.design, axis=1)
    return jnp.mean(loss_fn(eta, y[subset]))


def _implicit(u, lam, design, y, aux, subset, loss_fn, penalty_fn):
    """ACV and its total derivative in ``lam`` through ``theta_hat(lam)``."""
    acv, (g_u, g_lam) = jax.value_and_grad(_acv_closed_form, argnums=(0, 1))(
        u, lam, design, y, aux, subset, loss_fn, penalty_fn)
    terms = aloo.glm_terms(loss_fn, design, y, u)
    hess = aloo.glm_hessian(terms, jax.hessian(penalty_fn)(u, lam, aux))
    v = jnp.linalg.solve(hess, g_u)
    # d theta_hat / d lam = -H^{-1} B with B = d_lam grad_u penalty  (D, m)
    vb = jax.grad(lambda lm: jnp.vdot(v, jax.grad(penalty_fn)(u, lm, aux)))(lam)
    return acv, g_lam - vb


def _per_sample(i, u, lam, design, y, aux, chol, terms, loss_fn, penalty_fn, refresh):
    """ALOOCV loss of sample ``i`` and its eq.-16 gradient contribution ``(m,)``."""
    a, g, d = design[i], terms.grad[i], terms.curv[i]
    chol_i = aloo.cholesky_rank_one_downdate(chol, jnp.sqrt(jnp.maximum(d, 0.0)) * a)
    u_i = u + jsl.cho_solve((chol_i, True), g * a)
    eta_i = jnp.dot(a, u_i)
    loss_i, dloss = jax.value_and_grad(lambda e: loss_fn(e[None], y[i][None])[0])(eta_i)
    if refresh:   # seed eq. 16: leave-one-out Hessian at theta_i
        t_i = aloo.glm_terms(loss_fn, design, y, u_i)
        h_i = (aloo.glm_hessian(t_i, jax.hessian(penalty_fn)(u_i, lam, aux))
               - t_i.curv[i] * jnp.outer(a, a))
        chol_i = jnp.linalg.cholesky(0.5 * (h_i + h_i.T))
    v = jsl.cho_solve((chol_i, True), dloss * a)
    grad_lam = -jax.grad(lambda lm: jnp.vdot(v, jax.grad(penalty_fn)(u_i, lm, aux)))(lam)
    return loss_i, grad_lam


@partial(jax.jit, static_argnames=("loss_fn", "penalty_fn", "gradient", "batch_size"))
def _acv_and_gradient(u, lam, design, y, aux, subset, loss_fn, penalty_fn, gradient,
                      batch_size):
    """``(ACV over subset, dACV/dlam (m,))`` for one of :data:`GRADIENTS`."""
    if gradient == "implicit":
        return _implicit(u, lam, design, y, aux, subset, loss_fn, penalty_fn)
    terms = aloo.glm_terms(loss_fn, design, y, u)
    hess = aloo.glm_hessian(terms, jax.hessian(penalty_fn)(u, lam, aux))
    chol = jnp.linalg.cholesky(0.5 * (hess + hess.T))
    losses, grads = aloo.map_batches(
        lambda i: _per_sample(i, u, lam, design, y, aux, chol, terms, loss_fn, penalty_fn,
                              gradient == "seed"), subset, batch_size)
    return jnp.mean(losses), jnp.mean(grads, axis=0)


def _problem_gradient(prob, gradient, subset, batch_size):
    acv, grad = _acv_and_gradient(prob.u, prob.lam, prob.design, prob.y, prob.aux,
                                  jnp.asarray(subset), prob.loss_fn, prob.penalty_fn,
                                  gradient, batch_size)
    if not (np.isfinite(float(acv)) and np.all(np.isfinite(np.asarray(grad)))):
        raise NotPositiveDefiniteError(
            "the ALOOCV estimate or its gradient is not finite: a leave-one-out Hessian is "
            "not positive definite at this `lam` (too little regularisation?)")
    return float(acv), np.asarray(grad)


def aloocv_gradient(model, data, params=None, *, gradient: str = "implicit", subset=None,
                    batch_size: int = 128):
    """ALOOCV estimate and its gradient with respect to the penalty weights ``lam``.

    Args:
        model, data, params: as for :func:`aloocv` (the fit is treated as stationary).
        gradient: one of :data:`GRADIENTS` (see the module docstring): ``"implicit"`` (exact
            derivative of the estimate), ``"seed"`` (seed eq. 16, Hessian at each
            leave-one-out point) or ``"full_fit_hessian"`` (eq. 16 with the Hessian kept at
            the full fit — cheaper, reuses the downdated factors).
        subset: indices of the samples whose LOO terms are averaged (default: all).

    Returns:
        ``(acv, grad (m,))`` with ``m`` the number of penalty weights (``model.lam_vector()``).
    """
    check_choice("gradient", gradient, GRADIENTS)
    prepared, n, u_full = _full_fit(model, data, params)
    subset = np.arange(n) if subset is None else np.asarray(subset, dtype=np.int64)
    return _problem_gradient(model.smooth_problem(prepared, u_full), gradient, subset,
                             batch_size)


# ================================================================= tuning
@dataclass
class TuneResult:
    """Outcome of :func:`tune_regularization`.

    Attributes:
        path: DataFrame, one row per iteration: ``iteration``, ``acv`` (estimate used for
            the step: full or mini-batch), ``acv_full`` (full ALOOCV, NaN where not
            evaluated), ``grad_norm`` (of ``dACV/dlog lam``), ``seconds`` (cumulative),
            ``test_loss`` (if test data were given), ``support_size`` (elastic net), and
            the weights ``lam`` (one weight) or ``lam_0 .. lam_{m-1}``.
        best_lam: ``(m,)`` weights with the smallest full ALOOCV on the path.
        best_acv: that ALOOCV.
        best_params: the fit at ``best_lam``.
        model: ``model.with_lam(best_lam)``.
        algorithm, gradient: the settings used.
    """
    path: pd.DataFrame
    best_lam: np.ndarray
    best_acv: float
    best_params: tuple
    model: object
    algorithm: str
    gradient: str

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


def tune_regularization(model, data, lam0, *, algorithm: str = "full",
                        gradient: str = "implicit", optimizer=None,
                        learning_rate: float = 0.1, max_iter: int = 50,
                        batch_size: int | None = None, eval_every: int = 10, seed: int = 0,
                        tol: float = 0.0, test_data=None, warn: bool = True) -> TuneResult:
    """Tune penalty weights by gradient descent on ALOOCV in ``log lam`` (seed Algorithms 1/2).

    Every iteration refits the model warm-started at the previous fit, computes ALOOCV and
    its gradient (:func:`aloocv_gradient`), and takes one optax step on ``rho = log lam``.

    Args:
        model: an ERM model; its weights are replaced by ``lam0`` and the iterates.
        data: ``(X, y)``.
        lam0: starting weights, positive, ``(m,)`` or a scalar broadcast to ``m``.
        algorithm: ``"full"`` (Algorithm 1: all ``n`` LOO terms per step) or
            ``"stochastic"`` (Algorithm 2: ``batch_size`` random LOO terms per step).
        gradient: one of :data:`GRADIENTS`.
        optimizer: an ``optax.GradientTransformation``; default ``optax.adam(learning_rate)``.
        learning_rate: step size of the default optimiser (in ``log lam``).
        max_iter: number of iterations.
        batch_size: mini-batch size of Algorithm 2 (default ``max(1, n // 10)``).
        eval_every: Algorithm 2 evaluates the full ALOOCV every ``eval_every`` iterations
            (and at the last) to choose the best weights.
        seed: seed of the mini-batch sampling.
        tol: stop early when the full ALOOCV changes by less than ``tol`` (relative).
        test_data: optional ``(X_test, y_test)``; the out-of-sample loss is recorded.
        warn: warn when the elastic-net support changes along the path.

    Returns:
        :class:`TuneResult`.
    """
    import optax

    check_choice("algorithm", algorithm, ("full", "stochastic"))
    check_choice("gradient", gradient, GRADIENTS)
    max_iter = check_positive_int("max_iter", max_iter)
    eval_every = check_positive_int("eval_every", eval_every)
    if optimizer is not None and not hasattr(optimizer, "update"):
        raise ArgumentTypeError("`optimizer` must be an optax.GradientTransformation")
    lam = _check_lam0(model, lam0)
    prepared, _, n = model.prepare(data)
    test = model.prepare(test_data)[0] if test_data is not None else None
    if algorithm == "stochastic":
        batch_size = check_positive_int("batch_size", batch_size or max(1, n // 10))
        batch_size = min(batch_size, n)
    rng = np.random.default_rng(seed)
    opt = optimizer or optax.adam(learning_rate)
    rho = jnp.log(jnp.asarray(lam))
    state = opt.init(rho)
    rows, u_prev, support_prev, warned = [], None, None, False
    t0 = time.perf_counter()
    for it in range(max_iter):
        lam = np.exp(np.asarray(rho))
        u, info = model.fit_flat(prepared, jnp.asarray(lam), u0=u_prev)
        prob = model.smooth_problem(prepared, u)._replace(lam=jnp.asarray(lam))
        support = info.get("support_size")
        has_support = callable(getattr(model, "support", None))
        if support_prev is not None and has_support:
            if not np.array_equal(model.support(u), support_prev) and warn and not warned:
                from .models.elastic_net import SupportChangeWarning
                warnings.warn(f"the support changed at iteration {it}; ALOOCV and its "
                              "gradient are piecewise smooth in lam", SupportChangeWarning,
                              stacklevel=2)
                warned = True
        support_prev = model.support(u) if has_support else None
        last = it == max_iter - 1
        if algorithm == "full":
            acv, grad = _problem_gradient(prob, gradient, np.arange(n), 128)
            acv_full = acv
        else:
            subset = rng.choice(n, batch_size, replace=False)
            acv, grad = _problem_gradient(prob, gradient, subset, 128)
            acv_full = np.nan
            if it % eval_every == 0 or last:
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
        if tol > 0 and len(rows) > 1 and np.isfinite(acv_full):
            prev = [r["acv_full"] for r in rows[:-1] if np.isfinite(r["acv_full"])]
            if prev and abs(prev[-1] - acv_full) <= tol * abs(prev[-1]):
                break
        updates, state = opt.update(jnp.asarray(grad_rho), state, rho)
        rho = optax.apply_updates(rho, updates)
        u_prev = u
    path = pd.DataFrame(rows)
    if test is None:
        path = path.drop(columns="test_loss")
    best = int(np.nanargmin(path["acv_full"].to_numpy()))
    best_lam = np.atleast_1d(np.asarray(
        path.iloc[best][["lam"] if lam.size == 1 else [f"lam_{j}" for j in range(lam.size)]],
        dtype=np.float64))
    best_model = model.with_lam(best_lam)
    best_params = best_model.fit(prepared)
    return TuneResult(path, best_lam, float(path["acv_full"].iloc[best]), best_params,
                      best_model, algorithm, gradient)
