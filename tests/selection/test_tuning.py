"""Gradients of ALOOCV in the penalty weights, and tuning by Algorithms 1 and 2."""
import warnings

import numpy as np
import optax
import pytest

import approxcv as acv
from approxcv.errors import ArgumentTypeError, InvalidArgumentError
from approxcv.models.erm.elastic_net import ElasticNet, SupportChangeWarning
from approxcv.models.erm.logistic import Logistic
from approxcv.models.erm.ridge import Ridge
from approxcv.selection.tuning import GRADIENTS, aloocv_gradient, tune_regularization


def loo(model, data, method="ns", params=None):
    """Mean leave-one-out loss of ``model`` by ``cross_validate``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SupportChangeWarning)
        res = acv.cross_validate(model, data, acv.folds.leave_one_out(len(data[1])), method,
                                 params=params, progress=False)
    return float(res.fold_loss.mean())


@pytest.fixture(scope="module")
def ridge_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 4))
    return X, X @ [1.0, -0.5, 0.0, 0.0] + 0.5 * rng.normal(size=30)


@pytest.fixture(scope="module")
def logistic_data():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 4))
    y = (X @ [1.0, -2.0, 0.5, 0.0] + rng.normal(size=120) > 0).astype(float)
    return X, y


def central_difference(fun, lam, h):
    lam = np.asarray(lam, dtype=float)
    out = []
    for j in range(lam.size):
        e = np.zeros(lam.size)
        e[j] = h * lam[j]
        out.append((fun(lam + e) - fun(lam - e)) / (2 * h * lam[j]))
    return np.array(out)


@pytest.mark.parametrize("gradient", GRADIENTS)
def test_ridge_gradient_matches_finite_differences_of_exact_loo(ridge_data, gradient):
    """For ridge ALOOCV is exact LOO, and all three gradients are its exact derivative."""
    X, y = ridge_data
    lam = np.array([0.5, 1.0, 2.0, 4.0])
    acv_value, grad = aloocv_gradient(Ridge(tuple(lam)), (X, y), gradient=gradient)
    exact = lambda lm: loo(Ridge(tuple(lm)), (X, y), "exact")  # noqa: E731
    np.testing.assert_allclose(acv_value, exact(lam), rtol=1e-10)
    np.testing.assert_allclose(grad, central_difference(exact, lam, 1e-5), rtol=1e-6,
                               atol=1e-12)


def test_logistic_gradients(logistic_data):
    """implicit == d ALOOCV / d lam; the seed's eq. 16 approximates it and d LOO / d lam."""
    X, y = logistic_data
    lam = 3.0
    acv_value, g_implicit = aloocv_gradient(Logistic(lam), (X, y), gradient="implicit")
    fd = central_difference(lambda lm: loo(Logistic(float(lm[0])), (X, y)), [lam], 1e-4)
    np.testing.assert_allclose(g_implicit, fd, rtol=1e-6)
    _, g_seed = aloocv_gradient(Logistic(lam), (X, y), gradient="seed")
    np.testing.assert_allclose(g_seed, g_implicit, rtol=0.02)
    exact = loo(Logistic(lam), (X, y), "exact")
    np.testing.assert_allclose(acv_value, exact, rtol=0.01)
    fd_exact = central_difference(lambda lm: loo(Logistic(float(lm[0])), (X, y), "exact"),
                                  [lam], 1e-3)
    # measured 1.4e-3 (eq. 16 is an approximation); the full-fit-Hessian variant is 14 % off
    np.testing.assert_allclose(g_seed, fd_exact, rtol=0.015)


def test_eq16_gradients_match_brute_force(logistic_data):
    """Both eq.-16 variants against a NumPy loop with fresh leave-one-out Hessians."""
    X, y = logistic_data
    lam = 2.0
    params = Logistic(lam).fit((X, y))
    a = np.c_[X, np.ones(len(y))]
    u = np.r_[params.coef, params.intercept]
    sigmoid = lambda e: 1 / (1 + np.exp(-e))  # noqa: E731

    def loo_hessian(v, i):
        mu = sigmoid(a @ v)
        d = mu * (1 - mu)
        d[i] = 0.0
        return (a * d[:, None]).T @ a + lam * np.diag([1.0] * X.shape[1] + [0.0])

    g = sigmoid(a @ u) - y
    cheap = seed = 0.0
    for i in range(len(y)):
        h_i = loo_hessian(u, i)
        u_i = u + np.linalg.solve(h_i, g[i] * a[i])
        grad_loss = (sigmoid(a[i] @ u_i) - y[i]) * a[i]
        d_lam_grad_penalty = np.r_[u_i[:-1], 0.0]
        cheap -= d_lam_grad_penalty @ np.linalg.solve(h_i, grad_loss) / len(y)
        seed -= d_lam_grad_penalty @ np.linalg.solve(loo_hessian(u_i, i), grad_loss) / len(y)
    for name, expected in (("full_fit_hessian", cheap), ("seed", seed)):
        _, got = aloocv_gradient(Logistic(lam), (X, y), params, gradient=name)
        np.testing.assert_allclose(got, [expected], rtol=1e-9)


def test_elastic_net_gradient_on_a_fixed_support(ridge_data):
    """Inside one support the surrogate is quadratic: all gradients equal d ALOOCV / d lam."""
    X, y = ridge_data
    lam = np.array([3.0, 1.0])
    model = ElasticNet(*lam)
    params = model.fit((X, y))

    def acv_at(lm):
        m = ElasticNet(*lm)
        p = m.fit((X, y))
        assert np.array_equal(p.coef != 0, params.coef != 0)      # same support
        return loo(m, (X, y), params=p)

    fd = central_difference(acv_at, lam, 1e-5)
    for name in GRADIENTS:
        _, grad = aloocv_gradient(model, (X, y), params, gradient=name)
        np.testing.assert_allclose(grad, fd, rtol=1e-5)


def test_stochastic_subset_gradient_is_unbiased_piece(ridge_data):
    """Mini-batch terms average to the full gradient over a partition."""
    X, y = ridge_data
    model = Ridge(tuple([1.0] * 4))
    full = aloocv_gradient(model, (X, y))
    parts = [aloocv_gradient(model, (X, y), subset=np.arange(s, s + 10)) for s in (0, 10, 20)]
    np.testing.assert_allclose(np.mean([p[0] for p in parts]), full[0], rtol=1e-12)
    np.testing.assert_allclose(np.mean([p[1] for p in parts], axis=0), full[1], rtol=1e-10)


def test_algorithm_1_tunes_per_coordinate_ridge():
    """ACV decreases; irrelevant coordinates are penalised more than relevant ones."""
    rng = np.random.default_rng(7)
    n, p = 80, 10
    X = rng.normal(size=(n, p))
    y = X[:, :3] @ [2.0, -1.5, 1.0] + rng.normal(size=n)
    res = tune_regularization(Ridge(np.ones(p)), (X, y), 1.0, algorithm="full", max_iter=25,
                              learning_rate=0.3, test_data=(X[:20] + 0.1, y[:20]))
    path = res.path
    assert {"iteration", "acv", "acv_full", "seconds", "test_loss", "lam_0", "lam_9"} <= set(
        path.columns)
    assert path["acv"].iloc[-1] < path["acv"].iloc[0]
    assert np.all(res.lam_path > 0)
    assert res.best_acv == pytest.approx(path["acv_full"].min())
    lam = res.best_lam
    assert np.exp(np.mean(np.log(lam[3:]))) > 3 * np.exp(np.mean(np.log(lam[:3])))
    # the best model is refitted at best_lam; its leave-one-out CVResult is NS (ALOOCV),
    # whose mean is the recorded best ALOOCV
    assert res.cv_result.method == "ns" and len(res.cv_result.fold_loss) == 80
    assert res.cv_result.fold_loss.mean() == pytest.approx(res.best_acv, rel=1e-8)


@pytest.mark.filterwarnings("ignore::approxcv.models.erm.elastic_net.SupportChangeWarning")
def test_algorithm_2_and_elastic_net(ridge_data):
    X, y = ridge_data
    res = tune_regularization(ElasticNet(1.0, 1.0), (X, y), [1.0, 1.0], algorithm="stochastic",
                              minibatch_size=8, max_iter=12, eval_every=4,
                              optimizer=optax.sgd(0.5), seed=3)
    path = res.path
    assert path["acv_full"].notna().sum() == 4               # iterations 0, 4, 8 and the last
    assert "support_size" in path and res.best_lam.shape == (2,)
    assert path["acv_full"].iloc[-1] <= path["acv_full"].iloc[0]
    # the CVResult at the best weights: NS on the support surrogate, full layout
    assert res.cv_result.params.coef.shape == (30, 4) and "support_change" in res.cv_result.diagnostics
    assert res.cv_result.fold_loss.mean() == pytest.approx(res.best_acv, rel=1e-8)


def test_tuning_argument_errors(ridge_data):
    X, y = ridge_data
    with pytest.raises(InvalidArgumentError, match="`lam0` must have 4"):
        tune_regularization(Ridge(np.ones(4)), (X, y), [1.0, 1.0])
    with pytest.raises(InvalidArgumentError, match="`lam0` must be positive"):
        tune_regularization(Ridge(1.0), (X, y), 0.0)
    with pytest.raises(InvalidArgumentError, match="`algorithm`"):
        tune_regularization(Ridge(1.0), (X, y), 1.0, algorithm="bfgs")
    with pytest.raises(InvalidArgumentError, match="smooth penalty"):
        tune_regularization(ElasticNet(1.0, 1.0), (X, y), [1.0, 1.0], algorithm="newton")
    with pytest.raises(InvalidArgumentError, match="`gradient`"):
        aloocv_gradient(Ridge(1.0), (X, y), gradient="fd")
    with pytest.raises(ArgumentTypeError, match="`optimizer`"):
        tune_regularization(Ridge(1.0), (X, y), 1.0, optimizer="adam")
    with pytest.raises(InvalidArgumentError, match="`method`"):
        tune_regularization(Ridge(1.0), (X, y), 1.0, method="aloo")
    with pytest.raises(InvalidArgumentError, match="`xtol`"):
        tune_regularization(Ridge(1.0), (X, y), 1.0, xtol=-1e-3)


def test_newton_and_adam_reach_the_closed_form_loo_optimum(ridge_data):
    """Ridge: ALOOCV is exact LOO, ``mean (r_i / (1 - h_i))^2 / 2``; its minimiser in lam
    by a scalar search on the closed form, against Newton steps and Adam."""
    from scipy.optimize import minimize_scalar
    X, y = ridge_data
    A = np.column_stack([X, np.ones(len(y))])

    def closed_form_loo(log_lam):
        pen = np.exp(log_lam) * np.diag([1.0] * X.shape[1] + [0.0])
        hat = A @ np.linalg.solve(A.T @ A + pen, A.T)
        r = y - hat @ y
        return np.mean(0.5 * (r / (1 - np.diag(hat))) ** 2)
    best = minimize_scalar(closed_form_loo, bounds=(-8, 8), method="bounded",
                           options={"xatol": 1e-10})
    newton = tune_regularization(Ridge(1.0), (X, y), 1.0)
    assert newton.algorithm == "newton" and newton.converged
    assert newton.best_lam[0] == pytest.approx(np.exp(best.x), rel=1e-5)
    assert newton.best_acv == pytest.approx(best.fun, rel=1e-9)
    assert len(newton.path) <= 10 and np.all(np.diff(newton.path["acv"]) <= 0)
    # every accepted step has its time (since the call, compilation included), in order
    seconds = newton.path["seconds"].to_numpy()
    assert len(seconds) > 1 and np.all(np.isfinite(seconds)) and np.all(seconds > 0)
    assert np.all(np.diff(seconds) >= 0)
    # the step test stops at the first point whose next Newton step is <= xtol: fewer
    # steps, the optimum within xtol in log lam (here 1e-3: a visible difference)
    near = tune_regularization(Ridge(1.0), (X, y), 1.0, xtol=1e-3)
    assert near.converged and len(near.path) < len(newton.path)
    assert abs(np.log(near.best_lam[0]) - best.x) <= 1e-3
    adam = tune_regularization(Ridge(1.0), (X, y), 1.0, algorithm="full", max_iter=40,
                               learning_rate=0.3)
    assert adam.best_acv == pytest.approx(newton.best_acv, rel=1e-4)
    assert adam.best_acv >= newton.best_acv * (1 - 1e-12)


def test_init_params_start_the_first_fit_and_are_checked(ridge_data):
    """A warm start (the fit at lam0) changes where the first fit starts, not where the
    tuning ends; parameters of another shape are refused by name."""
    X, y = ridge_data
    cold = tune_regularization(Ridge(1.0), (X, y), 1.0)
    fit = Ridge(1.0).fit((X, y))
    warm = tune_regularization(Ridge(1.0), (X, y), 1.0, init_params=fit)
    assert warm.converged and warm.best_lam[0] == pytest.approx(cold.best_lam[0], rel=1e-8)
    assert warm.best_acv == pytest.approx(cold.best_acv, rel=1e-12)
    adam = tune_regularization(Ridge(1.0), (X, y), 1.0, algorithm="full", max_iter=3,
                               init_params=fit)
    assert np.isfinite(adam.best_acv)
    wrong = fit._replace(coef=np.ones(X.shape[1] + 1))
    with pytest.raises((ArgumentTypeError, InvalidArgumentError), match="init_params"):
        tune_regularization(Ridge(1.0), (X, y), 1.0, init_params=wrong)


def test_tuned_result_is_a_cv_result_on_the_elpd_scale(ridge_data):
    """The result at the tuned weights is a CVResult whose elpd (higher is better) is
    -n ALOOCV, and acv.compare ranks it beside another model's result on the same folds."""
    X, y = ridge_data
    n = len(y)
    out = tune_regularization(Ridge(1.0), (X, y), 1.0)
    assert isinstance(out.cv_result, acv.CVResult) and out.cv_result is out.cv_result
    assert out.cv_result.method == "ns" and len(out.cv_result) == n
    assert out.elpd == pytest.approx(-n * out.best_acv, rel=1e-10)
    assert out.se == pytest.approx(np.sqrt(n) * np.std(
        -np.concatenate(out.cv_result.point_loss), ddof=1), rel=1e-10)
    heavy = Ridge(100.0)
    other = acv.cross_validate(heavy, (X, y), acv.folds.leave_one_out(n), "ns",
                               params=heavy.fit((X, y)), progress=False)
    table = acv.compare({"tuned": out.cv_result, "lam=100": other})
    assert list(table.index) == ["tuned", "lam=100"] and table["dse"].iloc[1] > 0
    assert table.loc["tuned", "elpd"] == pytest.approx(out.elpd, rel=1e-12)


@pytest.mark.parametrize("lam", [2.0, (0.5, 1.0, 3.0)])
def test_separable_penalty_hessian_equals_the_full_hessian(lam):
    import jax
    import jax.numpy as jnp
    from approxcv.selection.tuning_gradient import penalty_hessian
    model = acv.models.Ridge(lam)
    pen = model.penalty
    assert pen.separable
    u = jnp.asarray([0.3, -1.2, 2.0, 0.7])          # three coefficients and the intercept
    lam_vec = model.lam_vector()
    np.testing.assert_allclose(penalty_hessian(pen, u, lam_vec, None),
                               jax.hessian(pen)(u, lam_vec, None), rtol=1e-12, atol=1e-14)
