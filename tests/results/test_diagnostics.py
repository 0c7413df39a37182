"""The typed diagnostics record every result carries (approxcv/results/diagnostics.py)."""
import pickle
import warnings

import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import InvalidArgumentError
from approxcv.results import COMMON_FIELDS, Diagnostics


def _result(method):
    X = np.random.default_rng(0).normal(size=(30, 2))
    y = X @ np.array([1.0, -1.0]) + np.random.default_rng(1).normal(size=30)
    folds = acv.folds.kfold(30, 5, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return acv.cross_validate(acv.models.Ridge(1.0), (X, y), folds, method,
                                  progress=False)


@pytest.mark.parametrize("method", ["ns", "exact"])
def test_every_method_has_the_common_fields_typed(method):
    d = _result(method).diagnostics
    assert isinstance(d, Diagnostics)
    assert d.unreliable_folds.dtype.kind == "i"
    assert isinstance(d.unreliable_causes, dict)
    assert isinstance(d.num_params, int) and d.num_params == 3
    if method == "ns":
        assert d.error_estimate.shape == (5,) and d.tol == 0.01
    else:
        assert d.error_estimate is None and d.tol is None
    assert not set(d.extras) & set(COMMON_FIELDS)
    assert set(d.extras) | {k for k in COMMON_FIELDS if k in d} == set(d)


def test_round_trips_through_save_and_pickle(tmp_path):
    res = _result("ns")
    res.save(tmp_path / "r")
    back = acv.load_result(tmp_path / "r")
    assert isinstance(back.diagnostics, Diagnostics)
    np.testing.assert_array_equal(back.diagnostics.error_estimate,
                                  res.diagnostics.error_estimate)
    assert sorted(back.diagnostics.extras) == sorted(res.diagnostics.extras)
    again = pickle.loads(pickle.dumps(res.diagnostics))
    assert isinstance(again, Diagnostics) and again.num_params == 3


def test_a_per_fold_field_of_another_length_is_refused():
    with pytest.raises(InvalidArgumentError, match="one value per fold"):
        Diagnostics({"error_estimate": np.zeros(4)}, n_folds=5)
    with pytest.raises(InvalidArgumentError, match="fold ids"):
        Diagnostics({"unreliable_folds": np.array([0.5])})
