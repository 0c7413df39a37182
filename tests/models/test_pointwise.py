"""``acv.models.Pointwise``: a model from a per-unit log-likelihood, through the whole
protocol, against SciPy's MAP and exact refits; and a user's subclassed model without traps
(the default fit, ``prepare`` that sees only the user's data)."""
import jax.numpy as jnp
import jax.scipy.stats as st
import numpy as np
import pandas as pd
import pytest
import scipy.optimize

import approxcv as acv
from approxcv.errors import InvalidArgumentError, InvalidDataError
from approxcv.models import constraints as C
from approxcv.models.base import Model, check_weights, left_out

T = 120


@pytest.fixture(scope="module")
def series():
    rng = np.random.default_rng(0)
    x = np.zeros(T + 1)
    for t in range(1, T + 1):
        x[t] = 0.3 + 0.6 * x[t - 1] + 0.8 * rng.standard_t(4)
    return x


def loglik(p, u):
    """AR(1) with Student-t noise: one step given its lag."""
    return st.t.logpdf(u["y"], p["nu"], p["c"] + p["phi"] * u["lag"], p["sigma"])


def _model():
    return acv.models.Pointwise(loglik, init={"c": 0.0, "phi": 0.0, "sigma": 1.0, "nu": 5.0},
                                constraints={"sigma": "positive", "nu": "positive"})


def test_fit_is_scipys_map_and_ij_tracks_exact_refits(series):
    x = series
    data = {"y": x[1:], "lag": x[:-1]}
    model = _model()
    params = model.fit(data)

    def nll(v):
        c, phi, log_s, log_nu = v
        return -np.sum(st.t.logpdf(x[1:], np.exp(log_nu), c + phi * x[:-1], np.exp(log_s)))
    ref = scipy.optimize.minimize(nll, [0.0, 0.0, 0.0, np.log(5.0)], method="BFGS",
                                  options={"gtol": 1e-10})
    np.testing.assert_allclose([params["c"], params["phi"], np.log(params["sigma"]),
                                np.log(params["nu"])], ref.x, atol=1e-5)
    assert set(params) == {"c", "phi", "sigma", "nu"} and np.ndim(params["c"]) == 0
    folds = acv.folds.leave_future_out(T, np.arange(60, T, 10))
    ij = acv.cross_validate(model, data, folds, "ij", params=params, progress=False,
                            warn=False)
    ex = acv.cross_validate(model, data, folds, "exact", params=params, progress=False)
    err = np.abs(ij.fold_loss - ex.fold_loss) / np.abs(ex.fold_loss)
    # right or flagged: every fold within tol (1 %) or listed unreliable, and the late
    # origins (short removed futures) within it
    assert np.all((err <= 0.01) | ij.unreliable)
    assert np.all(err[-3:] <= 0.01) and not ij.unreliable[-3:].any()
    est = ij.diagnostics["error_estimate"]        # tracks the true error in size
    assert np.all((est > 0.1 * err) | (err < 1e-3))
    gauss = acv.models.Pointwise(
        lambda p, u: st.norm.logpdf(u["y"], p["c"] + p["phi"] * u["lag"], p["sigma"]),
        init={"c": 0.0, "phi": 0.0, "sigma": 1.0}, constraints={"sigma": "positive"})
    g = acv.cross_validate(gauss, data, folds, "ij", progress=False)
    table = acv.compare({"t": ij, "normal": g})
    assert set(table.index) == {"t", "normal"}


def test_bad_input_is_named():
    data = {"y": np.arange(5.0), "lag": np.arange(5.0)}
    vector = acv.models.Pointwise(lambda p, u: jnp.stack([u["y"], u["lag"]]) * p["a"],
                                  init={"a": 1.0})
    with pytest.raises(InvalidArgumentError, match="must return a scalar.*shape \\(2,\\)"):
        vector.fit(data)
    nan = acv.models.Pointwise(lambda p, u: jnp.log(u["y"] - 2.0) * p["a"], init={"a": 1.0})
    with pytest.raises(InvalidArgumentError, match="not finite at `init` on 3 unit.*unit 0"):
        nan.fit(data)
    with pytest.raises(InvalidArgumentError, match="names \\['scale'\\], which `init` does "
                       "not have"):
        acv.models.Pointwise(loglik, init={"a": 1.0}, constraints={"scale": "positive"})
    with pytest.raises(InvalidArgumentError, match="unknown constraint 'postive'"):
        acv.models.Pointwise(loglik, init={"a": 1.0}, constraints={"a": "postive"})
    with pytest.raises(InvalidArgumentError, match="`init\\['a'\\]` must be > 0"):
        acv.models.Pointwise(loglik, init={"a": -1.0}, constraints={"a": "positive"})
    with pytest.raises(InvalidDataError, match="leading sizes differ: \\[4, 5\\]"):
        _model().prepare({"y": np.arange(5.0), "lag": np.arange(4.0)})


def test_unit_constraint_round_trips():
    c = C.by_name("unit")
    u = np.array([-3.0, 0.0, 2.0])
    np.testing.assert_allclose(c.inverse(c.forward(u)), u, rtol=1e-12)
    assert c.check(np.array([0.5])) is None and c.check(np.array([1.0])) == "must lie in (0, 1)"


class DataFrameRegression(Model):
    """A user's model as docs/guide.md describes it: Gaussian linear regression read from a
    DataFrame, fitted by the default fit. Its ``prepare`` accepts only a DataFrame: the
    engine must never hand it its own output."""
    n_init = 2

    def prepare(self, data, level=None):
        if not isinstance(data, pd.DataFrame):
            raise TypeError(f"expected a DataFrame, got {type(data).__name__}")
        return ({"x": data["x"].to_numpy(float), "y": data["y"].to_numpy(float)},
                "within", len(data))

    def objective(self, params, data, weights, scheme="A", level=None):
        w = check_weights(weights, data["y"].shape[0])
        b, log_s = params
        r = (data["y"] - b[0] - b[1] * data["x"]) / jnp.exp(log_s)
        return jnp.sum(w * (0.5 * r ** 2 + log_s)) + 0.5 * jnp.sum(b ** 2) / 100.0

    def heldout_loss(self, params, data, weights, level=None):
        b, log_s = params
        r = (data["y"] - b[0] - b[1] * data["x"]) / jnp.exp(log_s)
        points = jnp.where(left_out(weights), 0.5 * r ** 2 + log_s + 0.5 * jnp.log(2 * jnp.pi),
                           0.0)
        return jnp.sum(points), points

    def init_params(self, data, level=None, n=1, seed=0):
        rng = np.random.default_rng(seed)
        return [(rng.normal(size=2) * (i > 0), np.asarray(0.0)) for i in range(n)]

    def param_constraints(self):
        return (C.Real(), C.Real())


def test_a_subclassed_model_needs_no_fit_and_sees_only_its_data():
    rng = np.random.default_rng(1)
    x = rng.normal(size=30)
    df = pd.DataFrame({"x": x, "y": 1.0 + 2.0 * x + 0.5 * rng.normal(size=30)})
    model = DataFrameRegression()
    folds = acv.folds.kfold(30, 5)
    ij = acv.cross_validate(model, df, folds, "ij", progress=False, warn=False)
    ex = acv.cross_validate(model, df, folds, "exact", params=model.fit(df), progress=False)
    err = np.abs(ij.fold_loss - ex.fold_loss) / np.abs(ex.fold_loss)
    assert np.all((err <= 0.01) | ij.unreliable)          # right or flagged
    b = model.fit(df)[0]
    design = np.column_stack([np.ones(30), x])
    ridge = np.linalg.solve(design.T @ design + np.var(df["y"] - design @ b, ddof=0) / 100.0
                            * np.eye(2), design.T @ df["y"])
    np.testing.assert_allclose(b, ridge, rtol=1e-6)
    assert model.fit_result_["final_grad_norm"] < 1e-6
