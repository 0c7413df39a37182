"""fit_glm's padding: zero-weight rows and zero feature columns change neither the search's
ALOOCV nor the chosen fit."""
import numpy as np
import pytest

from approxcv.selection.tuning_gradient import grid_aloocv
from approxcv.sklearn._base import fit_glm, padded_columns, padded_rows
from approxcv.sklearn._models import WeightedLogistic, pack_response


def test_padded_columns_and_rows_buckets():
    assert [padded_columns(p) for p in (1, 8, 9, 30, 64, 65)] == [8, 8, 16, 32, 64, 65]
    assert ([padded_rows(n) for n in (1, 17, 64, 65, 100, 256, 257, 569, 640, 641, 1025)]
            == [16, 32, 64, 128, 128, 256, 288, 576, 640, 704, 1152])
    for n in range(257, 5000):      # at most 12.5 % more rows above 256
        assert n <= padded_rows(n) <= 1.125 * n


@pytest.mark.parametrize("groups", [None, (0, 1, 1)])
def test_padded_search_equals_the_unpadded_model(groups):
    rng = np.random.default_rng(3)
    X = rng.normal(size=(21, 3))
    y = (X @ [1.0, -1.0, 0.5] + rng.logistic(size=21) > 0).astype(float)
    sw = rng.uniform(0.5, 2.0, size=21)
    grid = np.array([0.3, 3.0, 30.0])
    fit = fit_glm("logistic", X, y, sw, grid, groups, True, 0)
    m = 1 if groups is None else 2
    model = WeightedLogistic(1.0 if groups is None else (1.0, 1.0), groups)
    data = (X, pack_response(y, sw))
    u, acv = grid_aloocv(model, data, np.repeat(grid[:, None], m, axis=1))
    np.testing.assert_allclose(fit.path["acv"].to_numpy(), acv, rtol=1e-9)
    best = int(np.argmin(acv))
    np.testing.assert_allclose(fit.u, u[best], rtol=1e-7, atol=1e-9)
    assert fit.coef.shape == (3,)
    assert fit.cv_result.fold_loss.shape == (21,)
    assert np.mean(fit.cv_result.fold_loss) == pytest.approx(acv[best], rel=1e-6)
