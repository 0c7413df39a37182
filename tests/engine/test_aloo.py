"""ERM fast paths: Cholesky downdates, the ``ns`` path on GLM structure, the closed-form IJ
Jacobian and the influence function, each against brute force or the generic engine."""
import warnings

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import approxcv as acv
from approxcv.engine import aloo
from approxcv.engine.options import Options
from approxcv.engine.methods.ij import ij
from approxcv.engine.methods.ns import ns
from approxcv.models.erm.logistic import Logistic
from approxcv.models.erm.ridge import Ridge
from approxcv.problem import make_problem


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


@pytest.fixture(scope="module")
def logistic_problem():
    # the data of tests/test_tuning.py: kernels compiled once for both files
    rng = np.random.default_rng(1)
    X = rng.normal(size=(N, 4))
    y = (X @ [1.0, -2.0, 0.5, 0.0] + rng.normal(size=N) > 0).astype(float)
    model = Logistic(0.8)
    params = model.fit((X, y))
    problem = make_problem(model, (X, y), params, local=True)
    terms = aloo.glm_terms(problem.glm.loss, problem.glm.design, problem.glm.y,
                           problem.u_full)
    hess = aloo.glm_hessian(terms, jnp.diag(jnp.asarray([0.8] * 4 + [0.0])))
    return model, (X, y), params, problem, terms, hess


def brute_force_newton(problem, terms, hess, fold):
    """u_1 + (H - sum_o d_i a_i a_i^T)^{-1} sum_o g_i a_i with a fresh solve."""
    fold = np.asarray(fold)
    a = np.asarray(terms.design)[fold]
    h_o = np.asarray(hess) - (a * np.asarray(terms.curv)[fold][:, None]).T @ a
    return np.asarray(problem.u_full) + np.linalg.solve(h_o, a.T @ np.asarray(terms.grad)[fold])


@pytest.mark.parametrize("k, refactor", [(N, False), (4, False), (4, True)],
                         ids=["loo", "kfold-downdate", "kfold-refactor"])
def test_downdated_newton_steps_equal_fresh_solves(logistic_problem, k, refactor):
    _, _, _, problem, terms, hess = logistic_problem
    folds = acv.folds.leave_one_out(N) if k == N else acv.folds.kfold(N, k, seed=1)
    params, pivot = aloo.fold_newton_params(
        jnp.linalg.cholesky(hess), hess, terms, problem.u_full, jnp.asarray(folds.padded()),
        jnp.zeros(5), batch_size=7, refactor=refactor)
    assert np.all(np.asarray(pivot) > 0)
    fresh = np.stack([brute_force_newton(problem, terms, hess, f) for f in folds])
    np.testing.assert_allclose(params, fresh, rtol=1e-9, atol=1e-11)
    if k == N:   # Sherman-Morrison closed form (tuning differentiates it)
        closed = aloo.loo_newton_params_closed_form(jnp.linalg.cholesky(hess), terms,
                                                    problem.u_full)
        np.testing.assert_allclose(closed, fresh, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("method", [ns, ij], ids=["ns", "ij"])
def test_glm_fast_paths_equal_the_generic_methods(logistic_problem, method):
    """``ns`` by downdates and ``ij`` with the closed-form J equal the generic methods
    (the same problem without its GLM structure), leave-one-out and unequal folds."""
    *_, problem, _, _ = logistic_problem
    generic = problem._replace(glm=None)
    for folds in (acv.folds.leave_one_out(N), acv.folds.iid(N, 0.05, 30, seed=2)):
        fast, d_fast = method(problem, folds, Options(progress=False))
        slow, d_slow = method(generic, folds, Options(progress=False))
        np.testing.assert_allclose(fast, slow, rtol=1e-10, atol=1e-12)
        assert d_fast["unreliable"].keys() == d_slow["unreliable"].keys()
        for k in d_fast["unreliable"]:
            np.testing.assert_array_equal(d_fast["unreliable"][k], d_slow["unreliable"][k])
        assert d_fast["grad_norm"] == pytest.approx(d_slow["grad_norm"], rel=1e-6, abs=1e-12)
    if method is ns:
        assert d_fast["ns_path"] == "glm_downdate" and not d_fast["ns_downdate_fallback"].any()


def test_failed_downdates_fall_back_to_the_generic_step():
    """Ridge without a penalty and D = n: leaving a sample out makes H_{-i} singular, the
    downdate fails, and those folds take the generic jittered Newton step instead."""
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(4, 3)), rng.normal(size=4)
    model = Ridge(0.0)
    params = model.fit((X, y))
    problem = make_problem(model, (X, y), params)
    folds = acv.folds.leave_one_out(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fast, diag = ns(problem, folds, Options(progress=False))
        slow, _ = ns(problem._replace(glm=None), folds, Options(progress=False))
    assert diag["ns_downdate_fallback"].all() and np.all(diag["ns_jitter"] > 0)
    np.testing.assert_array_equal(fast, slow)


def test_influence_function_underestimates(logistic_problem):
    model, data, params, problem, _, _ = logistic_problem
    loo = acv.folds.leave_one_out(N)
    infl = aloo.influence_losses(problem, loo)[0].mean()
    newton = acv.cross_validate(model, data, loo, "ns", params=params, progress=False)
    exact = acv.cross_validate(model, data, loo, "exact", params=params, progress=False)
    newton, exact = newton.fold_loss.mean(), exact.fold_loss.mean()
    assert infl < newton and infl < exact
    assert abs(newton - exact) < abs(infl - exact)


def test_ridge_influence_and_ns_formulas():
    """Ridge: the IF loss is 1/2 r^2 (1 + 2 h), NS is 1/2 r^2 / (1 - h)^2 (exact LOO)."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(25, 3))
    y = X @ [1.0, 0.0, -1.0] + rng.normal(size=25)
    model = Ridge(0.5)
    params = model.fit((X, y))
    problem = make_problem(model, (X, y), params)
    terms = aloo.glm_terms(problem.glm.loss, problem.glm.design, problem.glm.y,
                           problem.u_full)
    hess = aloo.glm_hessian(terms, jnp.diag(jnp.asarray([0.5] * 3 + [0.0])))
    lev = np.asarray(aloo.leverages(jnp.linalg.cholesky(hess), terms))
    resid = y - np.asarray(problem.glm.design @ problem.u_full)
    loo = acv.folds.leave_one_out(25)
    infl = aloo.influence_losses(problem, loo)[0]
    np.testing.assert_allclose(infl, 0.5 * resid ** 2 * (1 + 2 * lev), rtol=1e-10)
    res = acv.cross_validate(model, (X, y), loo, "ns", params=params, progress=False)
    np.testing.assert_allclose(res.fold_loss, 0.5 * resid ** 2 / (1 - lev) ** 2, rtol=1e-10)
