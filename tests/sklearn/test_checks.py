"""alo_score's checks in the user's terms (issue 55): hyperparameters in scikit-learn's ranges
named as set (never approxcv's ``lam``), NumPy scalars as penalties, ``cv="loo"``, and a
Pipeline's steps given the input untouched (a ColumnTransformer selecting DataFrame columns
by name) with odd pandas columns refused naming the column."""
import numpy as np
import pandas as pd
import pytest
from sklearn.compose import make_column_transformer
from sklearn.linear_model import ElasticNet, LogisticRegression, PoissonRegressor, Ridge
from sklearn.model_selection import LeaveOneOut
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import OneHotEncoder, StandardScaler

from approxcv.errors import ArgumentTypeError, FitError, InvalidArgumentError, InvalidDataError
from approxcv.sklearn import alo_score, RidgeALO, LogisticRegressionALO, ElasticNetALO

N, P = 30, 4


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(N, P))
    eta = X @ [1.0, -0.5, 0.0, 0.3]
    return {"X": X, "reg": eta + rng.normal(size=N),
            "bin": (rng.random(N) < 1 / (1 + np.exp(-eta))).astype(int),
            "count": rng.poisson(np.exp(0.5 * eta)).astype(float)}


BAD = [
    (LogisticRegression(C=np.nan), "bin", r"`C` must be a number in \(0, inf\]"),
    (LogisticRegression(C=0), "bin", r"`C` must be a number in \(0, inf\]"),
    (LogisticRegression(C=-1.0), "bin", r"`C`"),
    (Ridge(alpha=np.nan), "reg", r"`alpha` must be a number in \[0, inf\)"),
    (Ridge(alpha=np.inf), "reg", r"`alpha`"),
    (Ridge(alpha=-1.0), "reg", r"`alpha`"),
    (PoissonRegressor(alpha=-0.1), "count", r"`alpha`"),
    (ElasticNet(alpha=np.inf), "reg", r"`alpha`"),
    (ElasticNet(l1_ratio=2.0), "reg", r"`l1_ratio` must be a number in \[0, 1\]"),
    (ElasticNet(l1_ratio=np.nan), "reg", r"`l1_ratio`"),
]


@pytest.mark.parametrize("est,target,match", BAD, ids=[repr(b[0]) for b in BAD])
def test_alo_score_refuses_hyperparameters_outside_sklearns_range(data, est, target, match):
    """C=nan scored the unpenalised model, C=0 raised a ZeroDivisionError, and the others
    named approxcv's lam, lam1, lam2."""
    with pytest.raises(InvalidArgumentError, match=match) as info:
        alo_score(est, data["X"], data[target])
    assert "lam" not in str(info.value) and type(est).__name__ in str(info.value)


def test_pipeline_names_the_parameter_as_set_params_does(data):
    pipe = make_pipeline(StandardScaler(), LogisticRegression(C=np.nan))
    with pytest.raises(InvalidArgumentError, match="`logisticregression__C`"):
        alo_score(pipe, data["X"], data["bin"])
    with pytest.raises(ArgumentTypeError, match="`alpha`"):
        alo_score(Ridge(alpha="big"), data["X"], data["reg"])


def test_c_inf_is_the_unpenalised_model_as_in_sklearn(data):
    """scikit-learn's range of C is (0, inf]: C=inf is no penalty, accepted."""
    out = alo_score(LogisticRegression(C=np.inf), data["X"], data["bin"])
    assert np.isfinite(out.mean_loss)


def test_a_fit_without_enough_penalty_names_alpha_not_lam():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(10, 20))
    with pytest.raises(FitError, match="`alpha` too small") as info:
        alo_score(Ridge(alpha=0.0), X, X[:, 0] + rng.normal(size=10))
    assert "lam" not in str(info.value)


@pytest.mark.parametrize("scalar", [np.float32, np.float64, np.array], ids=["f32", "f64", "0d"])
def test_numpy_scalar_penalties_are_numbers(data, scalar):
    X, y = data["X"], data["reg"]
    ref = alo_score(Ridge(alpha=0.01), X, y).mean_loss
    assert alo_score(Ridge(alpha=scalar(0.01)), X, y).mean_loss == pytest.approx(ref, rel=1e-6)
    assert np.isfinite(alo_score(ElasticNet(alpha=scalar(0.01), l1_ratio=scalar(0.5)), X,
                                 y).mean_loss)
    RidgeALO(alphas=np.asarray([0.1, 1.0], dtype=np.float32), newton_steps=0).fit(X, y)
    ElasticNetALO(l1_ratio=scalar(0.5), n_alphas=3).fit(X, y)


def test_estimator_grids_name_their_parameter(data):
    X = data["X"]
    with pytest.raises(InvalidArgumentError, match="`Cs`"):
        LogisticRegressionALO(Cs=[1.0, 0.0]).fit(X, data["bin"])
    with pytest.raises(InvalidArgumentError, match="`alphas`"):
        RidgeALO(alphas=[np.nan]).fit(X, data["reg"])
    with pytest.raises(InvalidArgumentError, match="`l1_ratio`"):
        ElasticNetALO(l1_ratio=np.float32(1.5)).fit(X, data["reg"])


def test_cv_loo_is_leave_one_out(data):
    X, y = data["X"], data["reg"]
    loo = alo_score(Ridge(alpha=1.0), X, y, cv="loo")
    assert loo.mean_loss == pytest.approx(alo_score(Ridge(alpha=1.0), X, y).mean_loss,
                                          rel=1e-12)
    assert loo.mean_loss == pytest.approx(
        alo_score(Ridge(alpha=1.0), X, y, cv=LeaveOneOut()).mean_loss, rel=1e-12)
    assert len(loo.cv_result.fold_loss) == N


@pytest.mark.parametrize("cv", ["kfold", 1, True, 2.5, {"n_splits": 3}], ids=repr)
def test_other_cv_values_are_refused_saying_what_is_supported(data, cv):
    with pytest.raises(InvalidArgumentError, match="'loo'") as info:
        alo_score(Ridge(), data["X"], data["reg"], cv=cv)
    assert "splitter" in str(info.value)


@pytest.fixture(scope="module")
def frame():
    rng = np.random.default_rng(2)
    df = pd.DataFrame({"a": rng.normal(size=N), "b": rng.normal(size=N),
                       "town": rng.choice(["x", "y", "z"], N),
                       "count": pd.array(rng.integers(0, 5, N), dtype="Int64"),
                       "day": pd.date_range("2024-01-01", periods=N),
                       "kind": pd.Categorical(rng.choice(["u", "v"], N))})
    y = 2.0 * df["a"] - df["b"] + (df["town"] == "x") + rng.normal(size=N)
    return df, y


def test_pipeline_with_a_column_transformer_by_name_on_a_dataframe(frame):
    """scikit-learn's "Specifying the columns using strings is only supported for
    dataframes": check_array(X) ran before the pipeline's first step."""
    df, y = frame
    ct = make_column_transformer((StandardScaler(), ["a", "b"]),
                                 (OneHotEncoder(sparse_output=False), ["town"]))
    out = alo_score(make_pipeline(ct, Ridge(alpha=1.0)), df, y)
    design = ct.fit_transform(df)
    assert out.mean_loss == pytest.approx(alo_score(Ridge(alpha=1.0), design, y).mean_loss,
                                          rel=1e-10)
    sparse_ct = make_column_transformer((StandardScaler(), ["a", "b"]), (OneHotEncoder(),
                                                                         ["town"]),
                                        sparse_threshold=1.0)
    assert alo_score(make_pipeline(sparse_ct, Ridge(alpha=1.0)), df, y).mean_loss == \
        pytest.approx(out.mean_loss, rel=1e-10)


@pytest.mark.parametrize("column,match", [("kind", "categorical"), ("day", "dates or times"),
                                          ("count", "missing value"),
                                          ("town", "not numeric")])
def test_odd_pandas_columns_reaching_the_estimator_are_named(frame, column, match):
    df, y = frame
    df = df.copy()
    df.loc[3, "count"] = pd.NA
    passthrough = make_column_transformer(("passthrough", ["a", column]))
    pipe = make_pipeline(passthrough.set_output(transform="pandas"), Ridge())
    with pytest.raises(InvalidDataError, match=match) as info:
        alo_score(pipe, df, y)
    assert f"passthrough__{column}" in str(info.value)
    with pytest.raises(InvalidDataError, match=f"'{column}'"):
        alo_score(Ridge(), df[["a", column]], y)


@pytest.mark.parametrize("bad", [-3, 2.5, "2", None])
def test_newton_steps_must_be_a_non_negative_integer(bad):
    from approxcv.sklearn import RidgeALO
    X, y = np.random.default_rng(0).standard_normal((12, 2)), np.arange(12.0)
    with pytest.raises(InvalidArgumentError, match="newton_steps"):
        RidgeALO(newton_steps=bad).fit(X, y)


@pytest.mark.parametrize("bad, match", [(np.ones(3), "shape"), ([1.0] * 11 + [np.nan], "finite"),
                                        ([1.0] * 11 + [-1.0], ">= 0"), (np.zeros(12), "is zero")])
def test_sample_weight_checked_by_name(bad, match):
    from approxcv.sklearn import RidgeALO
    X, y = np.random.default_rng(0).standard_normal((12, 2)), np.arange(12.0)
    with pytest.raises(InvalidArgumentError, match=match):
        RidgeALO().fit(X, y, sample_weight=bad)
