"""ALOSearchCV with GridSearchCV's interface (issue 55): scoring, n_jobs, verbose, cv="loo",
GridSearchCV's cv_results_ keys, and bad candidates refused before any is scored."""
import numpy as np
import pandas as pd
import pytest
from sklearn.compose import make_column_transformer
from sklearn.linear_model import LogisticRegression, PoissonRegressor, Ridge
from sklearn.model_selection import GridSearchCV, KFold, LeaveOneOut
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from approxcv.errors import InvalidArgumentError
from approxcv.sklearn import ALOSearchCV, alo_score

N, P = 24, 3


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(N, P))
    eta = X @ [1.0, -0.5, 0.3]
    return {"X": X, "reg": eta + rng.normal(size=N),
            "bin": (rng.random(N) < 1 / (1 + np.exp(-eta))).astype(int),
            "count": rng.poisson(np.exp(0.5 * eta)).astype(float)}


GRID = {"alpha": [0.1, 3.0, 100.0]}


def test_cv_results_read_by_code_written_for_gridsearchcv(data):
    """Ridge's ALOOCV is exact leave-one-out, so every key equals GridSearchCV's with
    LeaveOneOut (the split scores to round-off; times aside)."""
    X, y = data["X"], data["reg"]
    search = ALOSearchCV(Ridge(), GRID, scoring="neg_mean_squared_error").fit(X, y)
    gs = GridSearchCV(Ridge(), GRID, cv=LeaveOneOut(),
                      scoring="neg_mean_squared_error").fit(X, y)
    cols = ["params", "mean_test_score", "std_test_score", "rank_test_score"]
    ours, theirs = pd.DataFrame(search.cv_results_), pd.DataFrame(gs.cv_results_)
    assert set(gs.cv_results_) <= set(search.cv_results_)
    assert list(ours[cols]["params"]) == list(theirs[cols]["params"])
    for c in cols[1:] + [f"split{k}_test_score" for k in range(N)]:
        np.testing.assert_allclose(ours[c].to_numpy(np.float64), theirs[c].to_numpy(np.float64),
                                   rtol=1e-8, atol=1e-12)
    assert list(search.cv_results_["param_alpha"]) == GRID["alpha"]
    assert search.best_params_ == gs.best_params_ and search.n_splits_ == N
    assert search.best_score_ == pytest.approx(gs.best_score_, rel=1e-8)
    for key in ("mean_fit_time", "std_fit_time", "mean_score_time", "std_score_time"):
        assert search.cv_results_[key].shape == (3,) and np.all(search.cv_results_[key] >= 0)


def test_kfold_splits_and_the_default_scoring(data):
    X, y = data["X"], data["reg"]
    cv = KFold(4, shuffle=True, random_state=0)
    search = ALOSearchCV(Ridge(), GRID, cv=cv).fit(X, y)
    gs = GridSearchCV(Ridge(), GRID, cv=cv, scoring="neg_mean_squared_error").fit(X, y)
    for k in range(4):
        np.testing.assert_allclose(search.cv_results_[f"split{k}_test_score"],
                                   gs.cv_results_[f"split{k}_test_score"], rtol=1e-8)
    np.testing.assert_allclose(search.cv_results_["mean_test_score"],
                               gs.cv_results_["mean_test_score"], rtol=1e-8)
    assert search.best_score_ == pytest.approx(
        -alo_score(Ridge(**search.best_params_), X, y, cv=cv).mean_loss, rel=1e-12)


@pytest.mark.parametrize("scoring", ["accuracy", "neg_brier_score", "neg_log_loss"])
def test_classifier_scorers_are_means_of_held_out_predictions(data, scoring):
    """Each split's score is the scorer on its held-out sample's ALOOCV prediction: for
    leave-one-out the same labels as GridSearchCV's refits here; the probabilities within
    ALOOCV's accuracy (about 1 %)."""
    X, y = data["X"], data["bin"]
    grid = {"C": [0.1, 1.0, 10.0]}
    search = ALOSearchCV(LogisticRegression(), grid, scoring=scoring, cv="loo").fit(X, y)
    res = search.cv_results_
    if scoring == "neg_log_loss":          # scikit-learn's log_loss needs two labels a split
        alo = alo_score(LogisticRegression(C=10.0), X, y)
        assert res["mean_test_score"][2] == pytest.approx(-alo.mean_loss, rel=1e-10)
        return
    gs = GridSearchCV(LogisticRegression(tol=1e-10), grid, cv=LeaveOneOut(),
                      scoring=scoring).fit(X, y)
    rtol = 0 if scoring == "accuracy" else 0.02
    np.testing.assert_allclose(res["mean_test_score"], gs.cv_results_["mean_test_score"],
                               rtol=rtol)
    np.testing.assert_allclose(res["std_test_score"], gs.cv_results_["std_test_score"],
                               rtol=max(rtol, 1e-12) * 3)


def test_poisson_deviance_scoring(data):
    X, y = data["X"], data["count"]
    search = ALOSearchCV(PoissonRegressor(), {"alpha": [0.01, 0.1]},
                         scoring="neg_mean_poisson_deviance").fit(X, y)
    assert np.all(search.cv_results_["mean_test_score"] < 0)


@pytest.mark.parametrize("scoring", ["r2", "neg_root_mean_squared_error", "accuracy",
                                     ["neg_mean_squared_error"], lambda e, X, y: 0.0])
def test_unsupported_scoring_is_refused_naming_the_supported(data, scoring):
    with pytest.raises(InvalidArgumentError, match="neg_mean_squared_error"):
        ALOSearchCV(Ridge(), GRID, scoring=scoring).fit(data["X"], data["reg"])


def test_n_jobs_and_verbose_are_accepted(data, capsys):
    search = ALOSearchCV(Ridge(), GRID, n_jobs=-1, verbose=2).fit(data["X"], data["reg"])
    out = capsys.readouterr().out
    assert "3 candidates" in out and "[ALOSearchCV 3/3]" in out
    assert search.get_params()["n_jobs"] == -1
    for bad in ({"n_jobs": 0}, {"n_jobs": "all"}, {"verbose": -1}):
        with pytest.raises(InvalidArgumentError, match=next(iter(bad))):
            ALOSearchCV(Ridge(), GRID, **bad).fit(data["X"], data["reg"])


def test_bad_candidates_are_refused_before_any_is_scored(data, monkeypatch):
    """A C=nan candidate was ranked (scored as the unpenalised model)."""
    from approxcv.sklearn import search as search_module
    calls = []
    monkeypatch.setattr(search_module, "run_alo", lambda *a, **k: calls.append(a))
    pipe = make_pipeline(StandardScaler(), LogisticRegression())
    grid = {"logisticregression__C": [1.0, np.nan]}
    with pytest.raises(InvalidArgumentError,
                       match=r"candidate 1 .*nan.*`logisticregression__C`"):
        ALOSearchCV(pipe, grid).fit(data["X"], data["bin"])
    with pytest.raises(InvalidArgumentError, match=r"candidate 0 .*`C`"):
        ALOSearchCV(LogisticRegression(), [{"C": [0.0]}, {"C": [1.0]}]).fit(data["X"],
                                                                           data["bin"])
    assert calls == []


def test_search_over_a_column_transformer_pipeline_on_a_dataframe(data):
    rng = np.random.default_rng(1)
    df = pd.DataFrame(data["X"], columns=["a", "b", "c"]).assign(
        town=rng.choice(["x", "y"], N))
    ct = make_column_transformer((StandardScaler(), ["a", "b", "c"]),
                                 (OneHotEncoder(sparse_output=False), ["town"]))
    pipe = make_pipeline(ct, Ridge())
    search = ALOSearchCV(pipe, {"ridge__alpha": [0.1, 10.0]}, cv="loo").fit(df, data["reg"])
    assert search.predict(df.iloc[:2]).shape == (2,)
    assert np.all(np.isfinite(search.cv_results_["mean_test_score"]))
