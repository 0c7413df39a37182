import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import (ArgumentTypeError, DuplicateFoldIdError, DuplicateIndexError,
                             EmptyFoldError, FoldIndexError, FoldRemovesAllError,
                             InvalidArgumentError, InvalidFoldsError)


def test_iid_contiguous_sizes_and_weights():
    f = acv.folds.iid(100, 0.1, 7, seed=3)
    assert len(f) == 7 and all(len(f[i]) == 10 for i in range(7))
    W = f.weights()
    assert W.shape == (7, 100) and np.all(W.sum(1) == 90)
    c = acv.folds.contiguous(100, 0.05, 20, seed=1)
    for i in range(len(c)):
        assert len(c[i]) == 5 and np.all(np.diff(c[i]) == 1) and 0 <= c[i][0] and c[i][-1] < 100
    # blocks end uniformly in [L, n]: both edges are reachable
    ends = {int(c2[-1]) + 1 for c2 in acv.folds.contiguous(20, 0.5, 400, seed=0)}
    assert ends == set(range(10, 21))


def test_leave_future_out_leave_one_out_kfold():
    f = acv.folds.leave_future_out(10, [3, 8])
    np.testing.assert_array_equal(f[0], np.arange(3, 10))
    assert len(acv.folds.leave_one_out(5)) == 5
    k = acv.folds.kfold(10, 3, seed=0)
    np.testing.assert_array_equal(np.sort(np.concatenate(list(k))), np.arange(10))


def test_subset_keeps_ids():
    f = acv.folds.iid(50, 0.1, 10)
    s = f.subset([2, 5])
    assert list(s.ids) == [2, 5]
    np.testing.assert_array_equal(s[1], f[5])
    assert list(f[:3].ids) == [0, 1, 2]


@pytest.mark.parametrize("folds,err,match", [
    ([[]], EmptyFoldError, "empty"),
    ([], EmptyFoldError, "empty"),
    ([[0, 10]], FoldIndexError, "outside"),
    ([[-1]], FoldIndexError, "outside"),
    ([[1.5]], FoldIndexError, "non-integer"),
    ([[1, 1]], DuplicateIndexError, "more than once"),
    ([list(range(10))], FoldRemovesAllError, "all 10"),
    ("abc", ArgumentTypeError, "sequence"),
    ([[0, 1], [[2, 3], [4]]], FoldIndexError, "fold 1 of `folds` is ragged"),
    ([[0, [1, [2]]]], FoldIndexError, "fold 0 of `folds` is ragged"),
])
def test_bad_folds(folds, err, match):
    with pytest.raises(err, match=match):
        acv.folds.Folds(folds, 10)


@pytest.mark.parametrize("call,err,match", [
    (lambda: acv.folds.iid(10, 0.0, 3), InvalidArgumentError, "frac"),
    (lambda: acv.folds.iid(10, 1.0, 3), InvalidArgumentError, "frac"),
    (lambda: acv.folds.iid(10, 0.05, 3), InvalidArgumentError, "fewer than one"),
    (lambda: acv.folds.contiguous(10, 0.2, 0), InvalidArgumentError, "n_folds"),
    (lambda: acv.folds.leave_future_out(10, [0]), FoldRemovesAllError, "every unit"),
    (lambda: acv.folds.leave_future_out(10, [10]), FoldIndexError, "outside"),
    (lambda: acv.folds.leave_future_out(10, []), EmptyFoldError, "starts"),
    (lambda: acv.folds.kfold(3, 5), InvalidArgumentError, "`k`"),
])
def test_bad_fold_arguments(call, err, match):
    with pytest.raises(err, match=match):
        call()


def test_errors_are_value_errors():
    with pytest.raises(ValueError):
        acv.folds.Folds([[0, 0]], 3)


def test_fold_ids_are_distinct_integers():
    with pytest.raises(DuplicateFoldIdError, match="`ids` lists fold id 0 more than once"):
        acv.folds.Folds([[0], [1]], 10, ids=[0, 0])
    assert issubclass(DuplicateFoldIdError, InvalidFoldsError)
    with pytest.raises(InvalidArgumentError, match="`ids` must be integers"):
        acv.folds.Folds([[0], [1]], 10, ids=["a", "b"])
    with pytest.raises(InvalidArgumentError, match="`which` lists a fold more than once"):
        acv.folds.iid(10, 0.2, 3).subset([1, -2])
    assert list(acv.folds.Folds([[0], [1]], 10, ids=[7.0, 3]).ids) == [7, 3]


def test_neighbourhood_blocks_and_bad_graphs():
    from approxcv.errors import InvalidGraphError
    ring = np.zeros((6, 6), dtype=int)
    for s in range(6):
        ring[s, (s + 1) % 6] = ring[(s + 1) % 6, s] = 1
    f = acv.folds.neighbourhood(ring, radius=1)
    assert len(f) == 6 and f.n == 6
    np.testing.assert_array_equal(f[0], [0, 1, 5])
    np.testing.assert_array_equal(acv.folds.neighbourhood(ring, 2, centres=[3])[0],
                                  [1, 2, 3, 4, 5])
    np.testing.assert_array_equal(acv.folds.neighbourhood(ring, 0)[4], [4])
    lopsided = ring.copy()
    lopsided[0, 3] = 1
    with pytest.raises(InvalidGraphError, match="not symmetric"):
        acv.folds.neighbourhood(lopsided)
    with pytest.raises(acv.errors.FoldIndexError):
        acv.folds.neighbourhood(ring, 1, centres=[6])
