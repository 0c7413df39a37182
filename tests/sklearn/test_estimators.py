"""The ALOOCV-tuned estimators: scikit-learn's estimator checks, pipelines, pandas, errors."""
import subprocess
import sys

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression, Ridge, RidgeCV
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.utils.estimator_checks import parametrize_with_checks

from approxcv.errors import InvalidArgumentError
from approxcv.sklearn import (ElasticNetALO, LogisticRegressionALO, PoissonRegressorALO,
                              RidgeALO, alo_score)

N, P = 30, 4

#: why a check cannot pass for an estimator that tunes its penalty by leave-one-out
TUNED = ("the penalty is chosen by leave-one-out: repeating a row (integer weights) and "
         "weighting it change the folds, so the chosen penalty differs (as for RidgeCV)")


def _expected_failed(estimator):
    return {"check_sample_weight_equivalence_on_dense_data": TUNED}


# cheap settings: three grid points, no Newton refinement (scikit-learn's checks fit ~100 times)
@parametrize_with_checks([RidgeALO(alphas=[0.1, 1.0, 10.0], newton_steps=0),
                          LogisticRegressionALO(Cs=[0.1, 1.0, 10.0], newton_steps=0),
                          PoissonRegressorALO(alphas=[0.01, 0.1, 1.0], newton_steps=0),
                          ElasticNetALO(n_alphas=3)],
                         expected_failed_checks=_expected_failed)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(N, P))
    eta = X @ [1.0, -0.5, 0.0, 0.3]
    # weak signal: the leave-one-out optimum of ridge is inside the grid (alpha ~ 17)
    return {"X": X, "reg": 0.3 * eta + rng.normal(size=N),
            "bin": (rng.random(N) < 1 / (1 + np.exp(-2 * eta))).astype(int)}


def test_ridge_alo_equals_ridgecv_loo_at_its_optimum(data):
    X, y = data["X"], data["reg"]
    est = RidgeALO().fit(X, y)
    assert est.alo_path_["stage"].iloc[-1] == "newton"
    rcv = RidgeCV(alphas=[est.alpha_], store_cv_results=True).fit(X, y)
    np.testing.assert_allclose(2 * est.cv_result_.fold_loss, rcv.cv_results_[:, 0],
                               rtol=1e-8, atol=1e-12)
    assert est.alo_score_ == pytest.approx(np.mean(rcv.cv_results_[:, 0]) / 2, rel=1e-8)
    # the optimum: nearby alphas have a larger LOO error
    for f in (0.9, 1.1):
        other = RidgeCV(alphas=[f * est.alpha_], store_cv_results=True).fit(X, y)
        assert np.mean(other.cv_results_) > np.mean(rcv.cv_results_)
    np.testing.assert_allclose(est.coef_, Ridge(alpha=est.alpha_).fit(X, y).coef_,
                               rtol=1e-9)


def test_ridge_alo_penalty_groups(data):
    X, y = data["X"], data["reg"]
    one = RidgeALO().fit(X, y)
    groups = RidgeALO(penalty_groups=[0, 0, 1, 1]).fit(X, y)
    assert groups.alpha_.shape == (2,)
    assert groups.alo_score_ <= one.alo_score_ + 1e-12
    with pytest.raises(InvalidArgumentError, match="penalty_groups"):
        RidgeALO(penalty_groups=[0, 1]).fit(X, y)


def test_logistic_alo_in_pipeline_gridsearch_and_clone(data):
    X, y = 3.0 * data["X"] + 1.0, data["bin"]
    pipe = make_pipeline(StandardScaler(), LogisticRegressionALO(newton_steps=0))
    gs = GridSearchCV(pipe, {"logisticregressionalo__Cs": [[0.1, 1.0], [1.0, 10.0]]},
                      cv=3).fit(X, y)
    best = gs.best_estimator_[-1]
    assert best.C_ > 0 and best.coef_.shape == (1, P)
    proba = gs.predict_proba(X)
    assert proba.shape == (N, 2) and np.allclose(proba.sum(axis=1), 1.0)
    # at its own C_ the estimator is scikit-learn's LogisticRegression
    Xs = StandardScaler().fit_transform(X)
    ref = LogisticRegression(C=best.C_, tol=1e-12, max_iter=10000,
                             fit_intercept=best.fit_intercept).fit(Xs, y)
    np.testing.assert_allclose(best.coef_, ref.coef_, rtol=1e-5, atol=1e-7)
    assert clone(best).get_params() == best.get_params()


def _exact_loo_logloss(X, y, C):
    """Mean leave-one-out log-loss of scikit-learn's own LogisticRegression refits."""
    loss = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        m = LogisticRegression(C=C, tol=1e-12, max_iter=100000).fit(X[keep], y[keep])
        p = m.predict_proba(X[i:i + 1])[0, y[i]]
        loss.append(-np.log(p))
    return np.mean(loss)


def test_logistic_refine_exact_minimises_exact_loo(data):
    """``refine="exact"``: ``C_`` is exact leave-one-out's minimiser (scikit-learn refits:
    larger 0.5 % either side), ``exact_loo_score_`` its value there, and ALOOCV's own
    choice is elsewhere (its minimiser is not exact LOO's)."""
    X, y = data["X"], data["bin"]
    alo = LogisticRegressionALO().fit(X, y)
    est = LogisticRegressionALO(refine="exact").fit(X, y)
    best = _exact_loo_logloss(X, y, est.C_)
    assert est.exact_loo_score_ == pytest.approx(best, rel=1e-7)
    for f in (0.995, 1.005):
        assert _exact_loo_logloss(X, y, f * est.C_) > best
    assert abs(alo.C_ / est.C_ - 1) > 0.01
    assert _exact_loo_logloss(X, y, alo.C_) > best
    assert (est.alo_path_["stage"] == "exact").sum() >= 3
    assert est.alo_score_ == pytest.approx(np.mean(est.cv_result_.fold_loss), rel=1e-12)
    with pytest.raises(InvalidArgumentError, match="penalty_groups"):
        LogisticRegressionALO(refine="exact", penalty_groups=[0, 0, 1, 1]).fit(X, y)
    with pytest.raises(InvalidArgumentError, match="refine"):
        RidgeALO(refine="yes").fit(X, data["reg"])


def test_ridge_refine_exact_stays_at_the_loo_minimiser(data):
    """For ridge ALOOCV is exact leave-one-out: the refinement's refits give the same loss
    at the same weight, and it stays at the Newton search's weight (within its 0.1 %)."""
    X, y = data["X"], data["reg"]
    est = RidgeALO().fit(X, y)
    ref = RidgeALO(refine="exact").fit(X, y)
    assert ref.alpha_ == pytest.approx(est.alpha_, rel=2e-3)
    assert ref.exact_loo_score_ == pytest.approx(ref.alo_score_, rel=1e-8)
    assert ref.alo_score_ <= est.alo_score_ * (1 + 1e-6)
    assert not hasattr(est, "exact_loo_score_")


def test_alo_score_of_estimator_equals_its_alo_score(data):
    X, y = data["X"], data["bin"]
    est = LogisticRegressionALO(newton_steps=5).fit(X, y)
    out = alo_score(LogisticRegression(C=est.C_), X, y)
    assert out.mean_loss == pytest.approx(est.alo_score_, rel=1e-6)


def test_pandas_feature_names_kept(data):
    df = pd.DataFrame(data["X"], columns=list("abcd"))
    est = RidgeALO(newton_steps=0).fit(df, data["reg"])
    assert list(est.feature_names_in_) == list("abcd")
    with pytest.warns(UserWarning, match="feature names"):
        est.predict(data["X"])


def test_bad_input(data):
    X = data["X"].copy()
    X[0, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        RidgeALO().fit(X, data["reg"])
    with pytest.raises(ValueError, match="class"):
        LogisticRegressionALO().fit(data["X"], np.ones(N))
    with pytest.raises(ValueError):
        RidgeALO().fit(data["X"], data["reg"][:-1])
    est = RidgeALO(newton_steps=0).fit(data["X"], data["reg"])
    with pytest.raises(ValueError, match="features"):
        est.predict(data["X"][:, :2])
    with pytest.raises(ValueError, match="Poisson"):
        PoissonRegressorALO().fit(data["X"], -np.ones(N))


def test_import_approxcv_does_not_load_sklearn():
    code = "import sys, approxcv; print('sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True)
    assert out.stdout.strip() == "False"
