"""ALOOCV over a grid of penalty weights in one program equals the estimate point by point."""
import numpy as np

from approxcv.models.erm.logistic import Logistic
from approxcv.models.erm.poisson_regression import PoissonRegression
from approxcv.models.erm.ridge import Ridge
from approxcv.selection.tuning_gradient import aloocv_gradient, grid_aloocv


def _data(kind, n=40, p=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    eta = X @ np.linspace(-1.0, 1.0, p)
    if kind == "ridge":
        return X, eta + rng.normal(size=n)
    if kind == "logistic":
        return X, (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(float)
    return X, rng.poisson(np.exp(0.5 * eta)).astype(float)


def test_grid_aloocv_equals_the_estimate_at_each_point():
    grid = np.array([0.01, 0.3, 3.0, 30.0])
    for model, kind in [(Ridge(1.0), "ridge"), (Logistic(1.0), "logistic"),
                        (PoissonRegression(1.0), "poisson")]:
        data = _data(kind)
        u, acv = grid_aloocv(model, data, grid[:, None])
        one = [aloocv_gradient(model.with_lam([lam]), data)[0] for lam in grid]
        # both fits end at round-off-level gradients (measured agreement ~1e-12)
        np.testing.assert_allclose(acv, one, rtol=1e-8, err_msg=kind)
        assert u.shape == (len(grid), data[0].shape[1] + 1)


def test_grid_aloocv_is_inf_where_the_fit_did_not_converge():
    """One Newton step cannot fit a logistic model from zero: every row is reported as
    inf, not as the estimate at an unconverged point; with the default limit all rows are
    finite."""
    data = _data("logistic")
    grid = np.array([[0.1], [1.0], [10.0]])
    _, acv = grid_aloocv(Logistic(1.0), data, grid, max_steps=1)
    assert np.all(acv == np.inf)
    assert np.all(np.isfinite(grid_aloocv(Logistic(1.0), data, grid)[1]))
