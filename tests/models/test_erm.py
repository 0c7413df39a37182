"""GLM-type ERM models: fits against scikit-learn, exact LOO for ridge, input validation."""
import warnings

import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import ArgumentTypeError, InvalidArgumentError, InvalidDataError
from approxcv.models.elastic_net import ElasticNet, SupportChangeWarning
from approxcv.models.logistic import Logistic
from approxcv.models.poisson_regression import PoissonRegression
from approxcv.models.ridge import Ridge
from approxcv.tuning import aloocv, exact_cv

sklearn = pytest.importorskip("sklearn")
from sklearn import linear_model  # noqa: E402


def regression_data(n=40, p=6, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    beta = np.zeros(p)
    beta[:3] = [1.5, -2.0, 0.7]
    return X, X @ beta + 0.3 + 0.8 * rng.normal(size=n)


@pytest.fixture(scope="module")
def reg():
    return regression_data()


# ----------------------------------------------------------------- ridge
def test_ridge_fit_matches_sklearn(reg):
    X, y = reg
    params = Ridge(2.5).fit((X, y))
    ref = linear_model.Ridge(alpha=2.5).fit(X, y)
    np.testing.assert_allclose(params.coef, ref.coef_, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(params.intercept, ref.intercept_, rtol=1e-10)


def test_ridge_aloocv_is_exact_loo(reg):
    """ALOOCV (one Newton step) equals refitting without each sample, to round-off."""
    X, y = reg
    model = Ridge(tuple(np.linspace(0.3, 3.0, X.shape[1])))
    approx = aloocv(model, (X, y)).loo_losses()
    _, points, _, _ = exact_cv(model, (X, y))
    np.testing.assert_allclose(approx, np.diag(points), rtol=1e-10)


def test_ridge_loo_matches_sklearn_ridgecv(reg):
    """scikit-learn's efficient LOO (``alpha = lam``; it stores squared errors = 2 x ours)."""
    X, y = reg
    lam = 1.7
    cv = linear_model.RidgeCV(alphas=[lam], store_cv_results=True).fit(X, y)
    ours = aloocv(Ridge(lam), (X, y)).loo_losses()
    np.testing.assert_allclose(2.0 * ours, cv.cv_results_[:, 0], rtol=1e-8)


def test_ridge_loo_matches_sklearn_brute_force(reg):
    X, y = reg
    n = len(y)
    errs = []
    for i in range(n):
        keep = np.arange(n) != i
        fit = linear_model.Ridge(alpha=0.9).fit(X[keep], y[keep])
        errs.append(0.5 * (y[i] - fit.predict(X[i:i + 1])[0]) ** 2)
    ours = aloocv(Ridge(0.9), (X, y)).loo_losses()
    np.testing.assert_allclose(ours, errs, rtol=1e-9)


def test_ridge_without_intercept(reg):
    X, y = reg
    model = Ridge(1.0, fit_intercept=False)
    params = model.fit((X, y))
    assert params.intercept.shape == (0,)
    ref = linear_model.Ridge(alpha=1.0, fit_intercept=False).fit(X, y)
    np.testing.assert_allclose(params.coef, ref.coef_, rtol=1e-10)
    res = acv.cross_validate(model, (X, y), acv.folds.leave_one_out(len(y)), method="ns",
                             params=params, progress=False)
    np.testing.assert_allclose(res.fold_loss, aloocv(model, (X, y), params).loo_losses(),
                               rtol=1e-10)


def test_heldout_is_zero_for_kept_samples(reg):
    X, y = reg
    model = Ridge(1.0)
    params = model.fit((X, y))
    w = np.ones(len(y))
    w[[3, 7]] = 0
    fold, points = model.heldout(params, (X, y), w)
    eta = X @ params.coef + params.intercept
    expected = 0.5 * (y[[3, 7]] - eta[[3, 7]]) ** 2
    np.testing.assert_allclose(model.heldout_loss(params, (X, y), w), expected, rtol=1e-12)
    assert np.count_nonzero(np.asarray(points)) == 2
    np.testing.assert_allclose(float(fold), expected.sum(), rtol=1e-12)


# -------------------------------------------------------- logistic / Poisson
def test_logistic_fit_matches_sklearn(reg):
    X, y = reg
    yb = (y > 0).astype(float)
    params = Logistic(2.0).fit((X, yb))
    ref = linear_model.LogisticRegression(C=1 / 2.0, tol=1e-12, max_iter=10_000).fit(X, yb)
    np.testing.assert_allclose(params.coef, ref.coef_[0], rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(params.intercept, ref.intercept_[0], rtol=1e-5, atol=1e-7)


def test_poisson_fit_matches_sklearn_and_exact_loo_refits():
    """sklearn minimises mean deviance / 2 + alpha/2 ||w||^2, so lam = n * alpha. Exact LOO
    (warm-started vmapped Newton) equals independent BFGS fits of the weighted objective,
    and ALOOCV is close to it."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(60, 3))
    y = rng.poisson(np.exp(0.5 + X @ [0.4, -0.3, 0.0])).astype(float)
    model = PoissonRegression(60 * 0.05)
    params = model.fit((X, y))
    ref = linear_model.PoissonRegressor(alpha=0.05, tol=1e-12, max_iter=10_000).fit(X, y)
    np.testing.assert_allclose(params.coef, ref.coef_, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(params.intercept, ref.intercept_, rtol=1e-6)
    exact, _, u, converged = exact_cv(model, (X, y), params)
    assert converged.all()
    data = model.prepare((X, y))[0]
    for i in (0, 7):
        fold, _ = model.fit_flat(data, model.lam_vector(), weights=np.arange(60) != i)
        np.testing.assert_allclose(u[i], fold, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(aloocv(model, (X, y), params).estimate, exact, rtol=0.01)


# ------------------------------------------------------------ elastic net
@pytest.fixture(scope="module")
def enet_data():
    return regression_data(n=30, p=8, seed=5)


def test_elastic_net_fit_matches_sklearn(enet_data):
    """sklearn: 1/(2n)||r||^2 + a rho |w|_1 + a (1-rho)/2 ||w||^2,
    so lam1 = n a rho and lam2 = n a (1 - rho)."""
    X, y = enet_data
    n, alpha, rho = len(y), 0.1, 0.7
    params = ElasticNet(n * alpha * rho, n * alpha * (1 - rho)).fit((X, y))
    ref = linear_model.ElasticNet(alpha=alpha, l1_ratio=rho, tol=1e-14,
                                  max_iter=100_000).fit(X, y)
    np.testing.assert_allclose(params.coef, ref.coef_, atol=1e-7)
    np.testing.assert_array_equal(params.coef != 0, np.abs(ref.coef_) > 1e-12)


def test_elastic_net_support_rule_is_exact_when_support_is_kept(enet_data):
    """On its support the elastic net is quadratic: ALOOCV equals exact LOO on every fold
    whose refit keeps the support and signs, and exactly the other folds are flagged."""
    X, y = enet_data
    model = ElasticNet(6.0, 1.0)
    params = model.fit((X, y))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        approx = aloocv(model, (X, y), params)
    _, points, u_exact, converged = exact_cv(model, (X, y), params)
    assert converged.all()
    p = X.shape[1]
    same = np.all(np.sign(u_exact[:, :p]) == np.sign(params.coef), axis=1)
    flagged = approx.diagnostics["support_change"]
    assert 0 < same.sum() < len(y)          # the data set exercises both cases
    np.testing.assert_array_equal(flagged, ~same)
    assert any(issubclass(w.category, SupportChangeWarning) for w in caught)
    np.testing.assert_allclose(approx.loo_losses()[same], np.diag(points)[same], rtol=1e-8)


def test_elastic_net_through_cross_validate_uses_support_surrogate(enet_data):
    """cross_validate(ElasticNet, "ns") differentiates the surrogate on the support: it equals
    cross_validate on ``on_support``'s model and the ALOOCV of ``aloocv``."""
    X, y = enet_data
    model = ElasticNet(3.0, 0.5)
    params = model.fit((X, y))
    loo = acv.folds.leave_one_out(len(y))
    res = acv.cross_validate(model, (X, y), loo, method="ns", params=params, progress=False)
    sub_model, sub_params = model.on_support(params)
    sub = acv.cross_validate(sub_model, (X, y), loo, method="ns", params=sub_params,
                             progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SupportChangeWarning)
        ours = aloocv(model, (X, y), params).loo_losses()
    np.testing.assert_allclose(res.fold_loss, ours, rtol=1e-9)
    np.testing.assert_allclose(sub.fold_loss, ours, rtol=1e-9)


# ------------------------------------------------------------- bad inputs
@pytest.mark.parametrize("model", [Ridge(1.0), Logistic(1.0), PoissonRegression(1.0),
                                   ElasticNet(1.0, 1.0)], ids=lambda m: type(m).__name__)
def test_bad_data_raise_named_errors(model):
    X = np.abs(np.random.default_rng(0).normal(size=(10, 3)))
    y = np.array([0, 1] * 5, dtype=float)
    with pytest.raises(InvalidDataError, match="`X` has 10 rows but `y` has 9"):
        model.prepare((X, y[:9]))
    bad = X.copy()
    bad[2, 1] = np.nan
    with pytest.raises(InvalidDataError, match="`X` contains 1 NaN"):
        model.prepare((bad, y))
    with pytest.raises(InvalidDataError, match="`y` contains"):
        model.prepare((X, np.where(np.arange(10) == 0, np.inf, y)))
    with pytest.raises(InvalidDataError, match="`X` must be 2-D"):
        model.prepare((X[:, 0], y))
    with pytest.raises(ArgumentTypeError, match="`data`"):
        model.prepare(X)
    with pytest.raises(InvalidArgumentError, match="`level`"):
        model.prepare((X, y), "structure")
    with pytest.raises(InvalidArgumentError, match="`weights`"):
        model.objective(model.params_type(np.zeros(3), np.zeros(())), (X, y), np.ones(4))


def test_logistic_rejects_non_binary_labels():
    X = np.random.default_rng(0).normal(size=(6, 2))
    with pytest.raises(InvalidDataError, match="binary"):
        Logistic(1.0).prepare((X, np.array([0, 1, 2, 0, 1, 0.0])))


def test_poisson_rejects_negative_or_fractional_counts():
    X = np.random.default_rng(0).normal(size=(4, 2))
    with pytest.raises(InvalidDataError, match="counts"):
        PoissonRegression(1.0).prepare((X, np.array([0, 1, -1, 2.0])))
    with pytest.raises(InvalidDataError, match="counts"):
        PoissonRegression(1.0).prepare((X, np.array([0, 1.5, 1, 2.0])))


def test_bad_penalty_weights_raise():
    with pytest.raises(InvalidArgumentError, match="`lam` must be >= 0"):
        Ridge(-1.0)
    with pytest.raises(InvalidArgumentError, match="`lam` must be >= 0"):
        Logistic([1.0, -0.1])
    with pytest.raises(InvalidArgumentError, match="`lam1` must be >= 0"):
        ElasticNet(-1.0, 0.0)
    with pytest.raises(InvalidArgumentError, match="finite"):
        Ridge(np.nan)
    X = np.random.default_rng(0).normal(size=(8, 3))
    with pytest.raises(InvalidArgumentError, match="`lam` has 2 entries but `X` has 3"):
        Ridge([1.0, 2.0]).prepare((X, X[:, 0]))


# ------------------------------------------------- through cross_validate
def test_cross_validate_ridge_kfold_all_methods_agree(reg):
    """Ridge is quadratic: NS (one Newton step) and exact k-fold CV coincide, and IJ differs
    from them only by the Hessian change, which the leave-q-out ALOOCV accounts for."""
    X, y = reg
    model = Ridge(1.3)
    params = model.fit((X, y))
    folds = acv.folds.kfold(len(y), 5, seed=0)
    res = {m: acv.cross_validate(model, (X, y), folds, method=m, params=params, progress=False)
           for m in ("ij", "ns", "exact")}
    np.testing.assert_allclose(res["ns"].fold_loss, res["exact"].fold_loss, rtol=1e-8)
    np.testing.assert_allclose(aloocv(model, (X, y), params, folds=folds).fold_loss,
                               res["exact"].fold_loss, rtol=1e-8)
    np.testing.assert_allclose(aloocv(model, (X, y), params, folds=folds, method="ij").fold_loss,
                               res["ij"].fold_loss, rtol=1e-10)
    assert not np.allclose(res["ij"].fold_loss, res["exact"].fold_loss, rtol=1e-3)
