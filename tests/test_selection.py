"""``acv.select``: fits and cross-validation over a hyperparameter grid."""
import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import ArgumentTypeError, InvalidArgumentError

N = 40


@pytest.fixture(scope="module")
def ridge_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, 3))
    return X, X @ np.array([1.0, -1.0, 0.5]) + rng.normal(size=N)


def test_select_ranks_a_grid_as_cross_validate_by_hand(ridge_data):
    folds = acv.folds.kfold(N, 5)
    grid = [{"lam": 0.1}, {"lam": 30.0}]
    sel = acv.select(acv.models.Ridge, grid, ridge_data, folds, "ns", progress=False, warn=False)
    assert list(sel.results) == ["lam=0.1", "lam=30.0"]
    by_hand = {}
    for label, hp in zip(sel.results, grid):
        model = acv.models.Ridge(**hp)
        by_hand[label] = acv.cross_validate(model, ridge_data, folds, "ns",
                                            params=model.fit(ridge_data), progress=False,
                                            warn=False)
        np.testing.assert_allclose(sel.results[label].fold_loss, by_hand[label].fold_loss,
                                   rtol=1e-12)
        np.testing.assert_allclose(np.asarray(sel.params[label].coef),
                                   np.asarray(model.fit(ridge_data).coef), rtol=1e-12)
    table = acv.compare_models(by_hand)
    assert sel.best == table.index[0] == "lam=0.1"
    np.testing.assert_allclose(sel.table["elpd"], table["elpd"], rtol=1e-12)
    assert list(sel.table["lam"]) == [0.1, 30.0]       # hyperparameters as columns
    assert sel.table.attrs["unit"] == table.attrs["unit"]


def test_select_refuses_bad_grids_factories_and_folds(ridge_data):
    folds = acv.folds.kfold(N, 4)
    with pytest.raises(InvalidArgumentError, match="`grid` is empty"):
        acv.select(acv.models.Ridge, [], ridge_data, folds)
    with pytest.raises(ArgumentTypeError, match="`grid` entry"):
        acv.select(acv.models.Ridge, [0.1], ridge_data, folds)
    with pytest.raises(InvalidArgumentError, match="twice"):
        acv.select(acv.models.Ridge, [{"lam": 1.0}, {"lam": 1.0}], ridge_data, folds)
    with pytest.raises(InvalidArgumentError, match="`model_factory` raised for grid entry "
                                                   "'lamda=1.0'"):
        acv.select(acv.models.Ridge, [{"lamda": 1.0}], ridge_data, folds)
    with pytest.raises(ArgumentTypeError, match="`model_factory` must be callable"):
        acv.select("Ridge", [{"lam": 1.0}], ridge_data, folds)
    with pytest.raises(InvalidArgumentError, match="`folds` were built for n=30.*'lam=1.0'"):
        acv.select(acv.models.Ridge, [{"lam": 1.0}], ridge_data, acv.folds.kfold(30, 3))
    with pytest.raises(ArgumentTypeError, match="unknown option.*'restart'"):
        acv.select(acv.models.Ridge, [{"lam": 1.0}], ridge_data, folds, restart=2)
    with pytest.raises(InvalidArgumentError, match="`params`"):
        acv.select(acv.models.Ridge, [{"lam": 1.0}], ridge_data, folds, params=None)
