"""RidgeALO on a wide design (p > n) searches in the n x n dual form (issue 55: 30 x 2,000
gave no answer in 20 minutes): the same ALOOCV and fit as the primal search, exact
leave-one-out of scikit-learn's Ridge refits."""
import numpy as np
import pytest
from sklearn.linear_model import Ridge
from sklearn.model_selection import LeaveOneOut

from approxcv.sklearn import RidgeALO
from approxcv.sklearn import _base
from approxcv.sklearn._ridge_dual import _acv_derivatives, dual_acv, ridge_dual

GRID = [0.3, 3.0, 30.0, 300.0]


@pytest.fixture(scope="module")
def wide():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(15, 40))
    return X, X[:, :3] @ [1.0, -1.0, 0.5] + rng.normal(size=15), rng.uniform(0.5, 2.0, 15)


def _primal(monkeypatch, est, X, y, **kw):
    with monkeypatch.context() as m:
        m.setattr(_base, "uses_dual", lambda *a: False)
        return est.fit(X, y, **kw)


@pytest.mark.parametrize("fit_intercept", [True, False])
@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_dual_equals_the_primal_search(wide, monkeypatch, fit_intercept, weighted):
    X, y, sw = wide
    kw = {"sample_weight": sw} if weighted else {}
    assert _base.uses_dual("ridge", X, None) and not _base.uses_dual("ridge", X, (0,) * 40)
    dual = RidgeALO(alphas=GRID, fit_intercept=fit_intercept, newton_steps=0).fit(X, y, **kw)
    primal = _primal(monkeypatch, RidgeALO(alphas=GRID, fit_intercept=fit_intercept,
                                           newton_steps=0), X, y, **kw)
    np.testing.assert_allclose(dual.alo_path_["acv"], primal.alo_path_["acv"], rtol=1e-8)
    assert dual.alpha_ == primal.alpha_
    np.testing.assert_allclose(dual.coef_, primal.coef_, rtol=1e-8, atol=1e-10)
    assert dual.intercept_ == pytest.approx(primal.intercept_, rel=1e-8, abs=1e-10)
    # the recorded leave-one-out result is approxcv's own at the chosen alpha
    assert np.mean(dual.cv_result_.fold_loss) == pytest.approx(dual.alo_score_, rel=1e-8)


def test_dual_newton_reaches_the_primal_optimum(wide, monkeypatch):
    X, y, _ = wide
    dual = RidgeALO().fit(X, y)
    primal = _primal(monkeypatch, RidgeALO(), X, y)
    assert dual.alo_path_["stage"].iloc[-1] == "newton"
    assert dual.alpha_ == pytest.approx(primal.alpha_, rel=5e-3)      # both stop at XTOL
    assert dual.alo_score_ <= primal.alo_score_ * (1 + 1e-6)


def test_dual_derivatives_match_finite_differences(wide):
    X, y, sw = wide
    dual = ridge_dual(X, y, sw, True)
    for rho in (-1.0, 1.5, 4.0):
        f, g, h = _acv_derivatives(dual, rho, 15)
        assert f == pytest.approx(dual_acv(dual, [np.exp(rho)], 15)[0], rel=1e-12)
        e = 1e-5
        (fp, gp, _), (fm, gm, _) = (_acv_derivatives(dual, rho + s, 15) for s in (e, -e))
        assert g == pytest.approx((fp - fm) / (2 * e), rel=1e-6, abs=1e-10)
        assert h == pytest.approx((gp - gm) / (2 * e), rel=1e-5, abs=1e-9)


@pytest.mark.parametrize("weighted", [False, True], ids=["unweighted", "weighted"])
def test_dual_alo_score_is_exact_loo_of_sklearn_refits(weighted):
    rng = np.random.default_rng(8)
    X = rng.normal(size=(8, 20))
    y = X[:, 0] - X[:, 1] + 0.5 * rng.normal(size=8)
    sw = rng.uniform(0.5, 2.0, 8) if weighted else np.ones(8)
    est = RidgeALO().fit(X, y, sample_weight=sw if weighted else None)
    loss = [sw[te[0]] * (Ridge(alpha=est.alpha_).fit(X[tr], y[tr], sample_weight=sw[tr])
                         .predict(X[te])[0] - y[te[0]]) ** 2
            for tr, te in LeaveOneOut().split(X)]
    assert est.alo_score_ == pytest.approx(np.mean(loss) / 2, rel=1e-8)
    np.testing.assert_allclose(est.coef_, Ridge(alpha=est.alpha_).fit(
        X, y, sample_weight=sw).coef_, rtol=1e-8, atol=1e-12)
    assert RidgeALO(refine="exact").fit(X, y).exact_loo_score_ == pytest.approx(
        RidgeALO().fit(X, y).alo_score_, rel=1e-12)


def test_wide_ridge_alo_never_runs_the_primal_search(monkeypatch):
    """30 x 2,000, three alphas: more than 20 minutes in the primal search (its Hessians
    are 2,001 square); the dual search takes about 0.02 s (benchmarks/sklearn_alo.py,
    ``ridge_wide``)."""
    def primal(*args, **kwargs):
        raise AssertionError("the primal search ran on a wide design")
    monkeypatch.setattr(_base, "search_penalty", primal)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2000))
    y = X[:, :5] @ np.ones(5) + rng.normal(size=30)
    est = RidgeALO(alphas=[0.1, 1.0, 10.0]).fit(X, y)
    assert est.coef_.shape == (2000,) and np.isfinite(est.alo_score_)
