"""Fold sets padded to a few sizes (``approxcv.engine.fold_buckets``): the same numbers as
the folds alone, and another number of folds in the same bucket compiles nothing."""
import numpy as np
import pytest

import approxcv as acv
from approxcv import api
from approxcv._progress import counted, counting_first
from approxcv.engine.fold_buckets import bucketed, fold_bucket

from ..conftest import backend_compiles


def test_bucket_sizes():
    assert [fold_bucket(n) for n in (1, 5, 8, 9, 33, 64)] == [8, 8, 8, 16, 64, 64]
    assert [fold_bucket(n) for n in (65, 80, 81, 200, 1000, 1024)] == [
        80, 80, 96, 224, 1024, 1024]
    for n in range(65, 5000):
        assert n <= fold_bucket(n) < 1.25 * n


def test_padding_copies_the_widest_fold():
    folds = acv.folds.Folds([[0], [1, 2, 3], [4, 5]], 10, ids=[7, 8, 9])
    padded = bucketed(folds)
    assert len(padded) == 8 and padded.padded().shape == (8, 3)
    assert list(padded.ids) == [7, 8, 9, -1, -2, -3, -4, -5]
    assert all(np.array_equal(padded[i], [1, 2, 3]) for i in range(3, 8))
    sub = bucketed(folds, [2])
    assert list(sub.ids[:1]) == [9] and sub.padded().shape == (8, 3)


def test_bars_count_only_the_users_folds():
    assert counted(4, 4, 8) == 4                        # no padding: every fold
    with counting_first(5):
        assert [counted(0, 8, 8), counted(4, 4, 8), counted(6, 2, 8)] == [5, 1, 0]
    assert counted(6, 2, 8) == 2


@pytest.fixture(scope="module")
def hmm_fit():
    x = acv.datasets.load_calls(300)
    model = acv.models.PoissonHMM(2, n_init=2)
    return model, x, model.fit(x)


@pytest.mark.parametrize("method", ["ij", "ns"])
def test_padded_folds_give_the_numbers_of_the_folds_alone(hmm_fit, method, monkeypatch):
    """Every result and per-fold diagnostic of 5 folds run as 8 equals the run of the 5
    folds alone (the padding switched off)."""
    model, x, params = hmm_fit
    folds = acv.folds.contiguous(len(x), 0.05, 5, seed=1)
    padded = acv.cross_validate(model, x, folds, method, params=params, progress=False,
                                warn=False)
    monkeypatch.setattr(api, "_run_folds", lambda method, model, problem, folds, opts: folds)
    alone = acv.cross_validate(model, x, folds, method, params=params, progress=False,
                               warn=False)
    np.testing.assert_allclose(padded.fold_loss, alone.fold_loss, rtol=1e-10)
    np.testing.assert_allclose(padded.params_flat, alone.params_flat, rtol=1e-10, atol=1e-12)
    for a, b in zip(padded.point_loss, alone.point_loss):
        np.testing.assert_allclose(a, b, rtol=1e-10)
    assert padded.diagnostics.keys() == alone.diagnostics.keys()
    for key, value in alone.diagnostics.items():
        if isinstance(value, np.ndarray) and value.dtype.kind == "f":
            np.testing.assert_allclose(padded.diagnostics[key], value, rtol=1e-8, atol=1e-12,
                                       err_msg=key)
        elif isinstance(value, np.ndarray):
            np.testing.assert_array_equal(padded.diagnostics[key], value, err_msg=key)
    assert len(padded.folds) == 5 and list(padded.folds.ids) == list(range(5))


def test_another_fold_count_in_the_bucket_compiles_nothing(hmm_fit):
    model, x, params = hmm_fit
    runs = {}
    for n_folds in (5, 7):
        folds = acv.folds.contiguous(len(x), 0.04, n_folds, seed=2)
        with backend_compiles() as compiled:
            runs[n_folds] = acv.cross_validate(model, x, folds, "ij", params=params,
                                               progress=False, warn=False)
        runs[n_folds].compiled = compiled[0]
    assert runs[5].compiled > 0 and runs[7].compiled == 0
    assert len(runs[7].fold_loss) == 7 and np.all(np.isfinite(runs[7].fold_loss))
