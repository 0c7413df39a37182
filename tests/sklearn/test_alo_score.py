"""alo_score and ALOSearchCV against brute-force scikit-learn refits (tiny data)."""
import numpy as np
import pytest
from scipy.special import gammaln
from sklearn.base import clone
from sklearn.linear_model import (ElasticNet, Lasso, LogisticRegression, PoissonRegressor,
                                  Ridge, RidgeCV)
from sklearn.model_selection import GridSearchCV, KFold, LeaveOneOut
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from approxcv.errors import UnsupportedEstimatorError
from approxcv.sklearn import ALOSearchCV, alo_score

N, P = 30, 4


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, P))
    eta = X @ [1.0, -0.5, 0.0, 0.3]
    return {"X": X, "reg": eta + rng.normal(size=N),
            "bin": (rng.random(N) < 1 / (1 + np.exp(-eta))).astype(int),
            "count": rng.poisson(np.exp(0.5 * eta))}


def _sq(e, x, y):
    return float((e.predict(x)[0] - y[0]) ** 2)


def _logloss(e, x, y):
    return float(-np.log(e.predict_proba(x)[0, y[0]]))


def _poisson_nll(e, x, y):
    mu = e.predict(x)[0]
    return float(mu - y[0] * np.log(mu) + gammaln(y[0] + 1.0))


def _brute_loo(est, X, y, loss):
    """Per-sample exact LOO losses of scikit-learn refits. ElasticNet and PoissonRegressor
    normalise their loss by the number (weight) of samples, so a refit on ``n - 1`` samples
    at ``alpha`` has another penalty per sample; approxcv keeps the full fit's penalty
    (``lam = n alpha``) in every fold, which the refit at ``alpha n / (n - 1)`` matches."""
    n = len(y)
    if isinstance(est, (ElasticNet, PoissonRegressor)):
        est = clone(est).set_params(alpha=est.alpha * n / (n - 1))
    return np.array([loss(clone(est).fit(X[tr], y[tr]), X[te], y[te])
                     for tr, te in LeaveOneOut().split(X)])


# measured here: ridge and the elastic net's reliable samples (support unchanged) equal the
# refits to 6e-13 (quadratic on the support: exact); the mean over all samples has relative
# error: logistic 2.7e-3, Poisson 5.9e-4 (tolerances 10x those); the elastic net's mean is
# off by 12 % because 12 of 30 samples change the support: those are flagged, not checked
CASES = [
    (Ridge(alpha=2.0), "reg", _sq, 1e-8, 1e-8),
    (ElasticNet(alpha=0.05, l1_ratio=0.5, tol=1e-14, max_iter=10 ** 6), "reg", _sq, None, 1e-8),
    (LogisticRegression(C=1.0, tol=1e-12, max_iter=10000), "bin", _logloss, 0.027, None),
    (PoissonRegressor(alpha=0.05, tol=1e-12, max_iter=10000), "count", _poisson_nll, 0.006,
     None),
]


@pytest.mark.parametrize("est,target,loss,rtol_mean,rtol_reliable", CASES,
                         ids=[type(c[0]).__name__ for c in CASES])
def test_alo_score_matches_brute_force_loo(data, est, target, loss, rtol_mean,
                                           rtol_reliable):
    X, y = data["X"], data[target]
    out = alo_score(est, X, y)
    exact = _brute_loo(est, X, y, loss)
    if rtol_mean is not None:
        assert abs(out.mean_loss - exact.mean()) <= rtol_mean * exact.mean()
    res = out.cv_result
    assert res.fold_loss.shape == (N,)
    if rtol_reliable is not None:      # quadratic losses: exact where the support holds
        flagged = np.asarray(res.unreliable) | res.diagnostics.get("support_change", False)
        assert out.n_unreliable == int(np.sum(flagged))
        np.testing.assert_allclose(2 * res.fold_loss[~flagged], exact[~flagged],
                                   rtol=rtol_reliable)


def test_alo_score_of_ridge_equals_ridgecv_loo_values(data):
    X, y = data["X"], data["reg"]
    out = alo_score(Ridge(alpha=3.0), X, y)
    rcv = RidgeCV(alphas=[3.0], store_cv_results=True).fit(X, y)
    np.testing.assert_allclose(2 * out.cv_result.fold_loss, rcv.cv_results_[:, 0],
                               rtol=1e-8, atol=1e-12)


def test_alo_score_kfold_ridge_equals_refits(data):
    X, y = data["X"], data["reg"]
    cv = KFold(5, shuffle=True, random_state=0)
    out = alo_score(Ridge(alpha=1.0), X, y, cv=cv)
    sq = [np.sum((Ridge(alpha=1.0).fit(X[tr], y[tr]).predict(X[te]) - y[te]) ** 2)
          for tr, te in cv.split(X)]
    assert out.mean_loss == pytest.approx(np.sum(sq) / N, rel=1e-10)


def test_alo_score_pipeline_applies_preprocessing(data):
    X, y = 5.0 * data["X"] + 3.0, data["reg"]
    pipe = make_pipeline(StandardScaler(), Ridge(alpha=2.0))
    Xs = StandardScaler().fit_transform(X)
    assert alo_score(pipe, X, y).mean_loss == pytest.approx(
        alo_score(Ridge(alpha=2.0), Xs, y).mean_loss, rel=1e-12)


@pytest.mark.parametrize("est,target", [
    (LogisticRegression(class_weight="balanced"), "bin"),
    (LogisticRegression(l1_ratio=1.0, solver="saga"), "bin"),
    (LogisticRegression(solver="liblinear"), "bin"),
    (LogisticRegression(), "multi"),
    (ElasticNet(positive=True), "reg"),
    (Lasso(), "reg"),
])
def test_alo_score_names_unsupported_settings(data, est, target):
    y = np.arange(N) % 3 if target == "multi" else data[target]
    with pytest.raises(UnsupportedEstimatorError, match=type(est).__name__):
        alo_score(est, data["X"], y)


def test_alo_score_bad_input(data):
    X = data["X"].copy()
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        alo_score(Ridge(), X, data["reg"])
    with pytest.raises(ValueError):
        alo_score(Ridge(), data["X"], data["reg"][:-1])


def test_alo_search_matches_gridsearch_loo_choice(data):
    X, y = data["X"], data["reg"]
    grid = {"ridge__alpha": [0.01, 1.0, 30.0, 1000.0]}
    pipe = make_pipeline(StandardScaler(), Ridge())
    search = ALOSearchCV(pipe, grid).fit(X, y)
    gs = GridSearchCV(pipe, grid, cv=LeaveOneOut(), scoring="neg_mean_squared_error").fit(X, y)
    assert search.best_params_ == gs.best_params_
    assert search.cv_results_["rank_test_score"][search.best_index_] == 1
    np.testing.assert_allclose(search.predict(X), gs.predict(X), rtol=1e-8)


@pytest.fixture(scope="module")
def data37():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(39, P))
    eta = X @ [1.0, -0.5, 0.0, 0.3]
    return {"X": X, "reg": eta + rng.normal(size=39),
            "bin": (rng.random(39) < 1 / (1 + np.exp(-eta))).astype(int)}


@pytest.mark.parametrize("est, target", [(Ridge(alpha=2.0), "reg"),
                                         (LogisticRegression(C=1.0), "bin")])
def test_alo_score_on_rows_padded_to_a_bucket_equals_the_unpadded(data37, est, target,
                                                                   monkeypatch):
    """37 samples run as 64 (rows of sample weight 0, null units): the same fold losses and
    fit as with the padding switched off (leave-one-out; a splitter's folds for ridge)."""
    from approxcv.sklearn import _models
    X, y = data37["X"][:37], data37[target][:37]
    sw = np.linspace(0.5, 1.5, 37)
    splits = (None, 4) if isinstance(est, Ridge) else (None,)
    padded = [alo_score(est, X, y, cv, sample_weight=sw) for cv in splits]
    assert padded[0].cv_result.diagnostics["num_params"] == P + 1
    monkeypatch.setattr(_models, "padded_rows", lambda n: n)
    alone = [alo_score(est, X, y, cv, sample_weight=sw) for cv in splits]
    for a, b in zip(padded, alone):
        np.testing.assert_allclose(a.cv_result.fold_loss, b.cv_result.fold_loss, rtol=1e-8)
        np.testing.assert_allclose(a.cv_result.params_flat, b.cv_result.params_flat,
                                   rtol=1e-8, atol=1e-10)
        assert a.mean_loss == pytest.approx(b.mean_loss, rel=1e-9)
        assert a.cv_result.folds.n == 37


def test_alo_score_of_another_size_in_the_bucket_compiles_nothing(data37):
    from ..conftest import backend_compiles
    compiled = []
    for n in (37, 39):          # both run as 64 rows; 3 features: programs of their own
        with backend_compiles() as count:
            alo_score(LogisticRegression(C=0.3), data37["X"][:n, :3], data37["bin"][:n])
        compiled.append(count[0])
    assert compiled[0] > 0 and compiled[1] == 0
