"""ALOOCV kernels: Cholesky downdates, LOO / leave-q-out Newton steps, IJ, influence."""
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import approxcv as acv
from approxcv.engine import aloo
from approxcv.models.logistic import Logistic
from approxcv.models.ridge import Ridge
from approxcv.tuning import aloocv, exact_cv


def spd(dim, seed):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(dim + 3, dim))
    return a.T @ a + 0.1 * np.eye(dim), rng


@settings(max_examples=15, deadline=None, derandomize=True)
@given(dim=st.sampled_from([1, 4]), seed=st.integers(0, 10_000), frac=st.floats(0.0, 0.9))
def test_rank_one_downdate_equals_fresh_factorisation(dim, seed, frac):
    """chol(H - x x^T) from the downdate of chol(H) equals a new factorisation."""
    h, rng = spd(dim, seed)
    x = rng.normal(size=dim)
    # scale x so that H - x x^T stays positive definite: x^T H^{-1} x = frac < 1
    x *= np.sqrt(frac / (x @ np.linalg.solve(h, x))) if frac > 0 else 0.0
    down = aloo.cholesky_rank_one_downdate(jnp.linalg.cholesky(h), jnp.asarray(x))
    np.testing.assert_allclose(down, np.linalg.cholesky(h - np.outer(x, x)), rtol=1e-9,
                               atol=1e-10)
    up = aloo.cholesky_rank_one_update(jnp.linalg.cholesky(h), jnp.asarray(x))
    np.testing.assert_allclose(up, np.linalg.cholesky(h + np.outer(x, x)), rtol=1e-9,
                               atol=1e-10)


def test_rank_q_downdate_and_indefinite_downdate():
    h, rng = spd(6, 1)
    rows = 0.3 * rng.normal(size=(3, 6))
    padded = np.vstack([rows, np.zeros((2, 6))])        # zero rows are padding
    down = aloo.cholesky_downdate_rows(jnp.linalg.cholesky(h), jnp.asarray(padded))
    np.testing.assert_allclose(down, np.linalg.cholesky(h - rows.T @ rows), rtol=1e-9,
                               atol=1e-10)
    x = 2.0 * np.linalg.cholesky(h)[:, 0]                 # H - x x^T is indefinite
    assert np.isnan(np.asarray(aloo.cholesky_rank_one_downdate(jnp.linalg.cholesky(h), x))).any()


N = 120


def fit_and_derivatives(model, X, y):
    """``(params, smooth problem, GLM terms, Hessian)`` at the full fit."""
    params = model.fit((X, y))
    data, _, _ = model.prepare((X, y))
    prob = model.smooth_problem(data, model.params_to_flat(params))
    terms = aloo.glm_terms(prob.loss_fn, prob.design, prob.y, prob.u)
    hess = aloo.glm_hessian(terms, jax.hessian(prob.penalty_fn)(prob.u, prob.lam, None))
    return params, prob, terms, hess


@pytest.fixture(scope="module")
def logistic_fit():
    # the data of tests/test_tuning.py: kernels compiled once for both files
    rng = np.random.default_rng(1)
    X = rng.normal(size=(N, 4))
    y = (X @ [1.0, -2.0, 0.5, 0.0] + rng.normal(size=N) > 0).astype(float)
    model = Logistic(0.8)
    params, prob, terms, hess = fit_and_derivatives(model, X, y)
    return model, (X, y), params, prob, terms, hess


def brute_force_newton(prob, terms, hess, fold):
    """u_1 + (H - sum_o d_i a_i a_i^T)^{-1} sum_o g_i a_i with a fresh solve."""
    fold = np.asarray(fold)
    a = np.asarray(terms.design)[fold]
    h_o = np.asarray(hess) - (a * np.asarray(terms.curv)[fold][:, None]).T @ a
    return np.asarray(prob.u) + np.linalg.solve(h_o, a.T @ np.asarray(terms.grad)[fold])


def test_loo_downdates_equal_fresh_newton_and_closed_form(logistic_fit):
    _, _, _, prob, terms, hess = logistic_fit
    chol = jnp.linalg.cholesky(hess)
    params, ok = aloo.loo_newton_params(chol, terms, prob.u, batch_size=7)
    assert np.all(ok)
    fresh = np.stack([brute_force_newton(prob, terms, hess, [i]) for i in range(N)])
    np.testing.assert_allclose(params, fresh, rtol=1e-10, atol=1e-12)
    closed = aloo.loo_newton_params_closed_form(hess, terms, prob.u)
    np.testing.assert_allclose(closed, fresh, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("refactor", [False, True])
def test_leave_q_out_newton_equals_fresh(logistic_fit, refactor):
    _, _, _, prob, terms, hess = logistic_fit
    folds = acv.folds.kfold(N, 4, seed=1)                 # folds of size 30
    index, mask = aloo.padded_folds(folds.weights())
    params, ok = aloo.fold_newton_params(jnp.linalg.cholesky(hess), hess, terms, prob.u, index,
                                         mask, refactor=refactor)
    fresh = np.stack([brute_force_newton(prob, terms, hess, f) for f in folds])
    assert np.all(ok)
    np.testing.assert_allclose(params, fresh, rtol=1e-9, atol=1e-11)


def test_cross_validate_ns_equals_aloocv(logistic_fit):
    model, data, params, *_ = logistic_fit
    res = acv.cross_validate(model, data, acv.folds.leave_one_out(N), method="ns",
                             params=params, progress=False)
    ours = aloocv(model, data, params)
    np.testing.assert_allclose(res.fold_loss, ours.loo_losses(), rtol=1e-10)
    np.testing.assert_allclose(res.params_flat, ours.params, rtol=1e-10, atol=1e-12)


def test_ij_matches_engine_and_influence_underestimates(logistic_fit):
    model, data, params, *_ = logistic_fit
    folds = acv.folds.kfold(N, 5, seed=0)
    res = acv.cross_validate(model, data, folds, method="ij", params=params, progress=False)
    ij = aloocv(model, data, params, folds=folds, method="ij")
    np.testing.assert_allclose(ij.fold_loss, res.fold_loss, rtol=1e-10)
    newton = aloocv(model, data, params)
    infl = aloocv(model, data, params, method="influence")
    exact = exact_cv(model, data, params)[0]
    assert infl.estimate < newton.estimate
    assert infl.estimate < exact
    assert abs(newton.estimate - exact) < abs(infl.estimate - exact)


def test_ridge_influence_formula_and_kfold_exactness():
    """Ridge: IF loss is 1/2 r^2 (1 + 2 h), ALOOCV k-fold is exact k-fold CV."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(25, 3))
    y = X @ [1.0, 0.0, -1.0] + rng.normal(size=25)
    model = Ridge(0.5)
    params, prob, terms, hess = fit_and_derivatives(model, X, y)
    lev = np.asarray(aloo.leverages(jnp.linalg.cholesky(hess), terms))
    resid = y - np.asarray(prob.design @ prob.u)
    infl = aloocv(model, (X, y), params, method="influence").loo_losses()
    np.testing.assert_allclose(infl, 0.5 * resid ** 2 * (1 + 2 * lev), rtol=1e-10)
    np.testing.assert_allclose(aloocv(model, (X, y), params).loo_losses(),
                               0.5 * resid ** 2 / (1 - lev) ** 2, rtol=1e-10)
    folds = acv.folds.kfold(25, 5, seed=3)
    approx = aloocv(model, (X, y), params, folds=folds)
    exact = exact_cv(model, (X, y), params, folds=folds)
    np.testing.assert_allclose(approx.estimate, exact[0], rtol=1e-10)


def test_failed_downdate_is_flagged():
    """Without a penalty and with D = n, leaving a sample out makes H_{-i} singular."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(4, 3))
    y = rng.normal(size=4)
    model = Ridge(0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = aloocv(model, (X, y))
    assert not res.ok.all()
