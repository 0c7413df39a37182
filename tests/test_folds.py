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


# ------------------------------------------------------- folds that remove more than they score


def test_scored_folds_keep_their_scored_sets_through_subset_in_units_and_buckets():
    from approxcv.engine.fold_buckets import bucketed
    from approxcv.engine.fingerprint import folds_digest
    f = acv.folds.Folds([[4, 1, 2], [5, 6], [0, 7, 8, 9]], 10, ids=[10, 11, 12],
                        scored=[[2, 1], [5, 6], [8]])
    assert f.partial and list(f.scored_sizes) == [2, 2, 1]
    np.testing.assert_array_equal(f.scored[0], [1, 2])
    np.testing.assert_array_equal(f.padded(), [[1, 2, 4, 10], [5, 6, 10, 10], [0, 7, 8, 9]])
    np.testing.assert_array_equal(f.scored_mask(), [[1, 1, 0, 0], [1, 1, 0, 0], [0, 0, 1, 0]])
    # R \ S, padded with n; a fold scoring every unit it removes: a row of padding
    np.testing.assert_array_equal(f.unscored_padded(), [[4, 10, 10], [10, 10, 10], [0, 7, 9]])
    s = f.subset([2, 0])
    assert list(s.ids) == [12, 10] and s.partial
    np.testing.assert_array_equal(s.scored[0], [8])
    wide = f.in_units(16, width=8)
    assert wide.padded().shape == (3, 8) and wide.n == 16
    np.testing.assert_array_equal(wide.unscored_padded()[0], [4, 16, 16])
    b = bucketed(f)
    assert len(b) == 8 and b.partial
    np.testing.assert_array_equal(b.scored[1], [5, 6])
    np.testing.assert_array_equal(b.scored[7], f.scored[2])      # copies of the widest fold
    # every removed unit scored: today's folds, no extra pass
    same = acv.folds.Folds([[1, 2], [3]], 10, scored=[[1, 2], [3]])
    assert not same.partial and same.unscored_padded() is None
    plain = acv.folds.Folds([[1, 2], [3]], 10)
    assert folds_digest(same) == folds_digest(plain)
    assert folds_digest(acv.folds.Folds([[1, 2], [3]], 10, scored=[[1], [3]])) != \
        folds_digest(plain)
    assert "scored sizes 1..2" in repr(f)


@pytest.mark.parametrize("scored,err,match", [
    ([[1], [7]], acv.errors.ScoredNotRemovedError, "fold 1 scores unit 7, which it does not "
                                                   "remove"),
    ([[1], []], acv.errors.EmptyScoredError, "fold 1 of `scored` is empty"),
    ([[1, 1], [3]], DuplicateIndexError, "fold 0 of `scored` lists an index more than once"),
    ([[1]], InvalidArgumentError, "one index set per fold"),
    ([[1.5], [3]], FoldIndexError, "integer"),
    ("ab", ArgumentTypeError, "`scored` must be a sequence"),
])
def test_bad_scored_sets_are_refused_by_name(scored, err, match):
    with pytest.raises(err, match=match):
        acv.folds.Folds([[1, 2], [3, 4]], 10, scored=scored)
    assert issubclass(acv.errors.EmptyScoredError, EmptyFoldError)
    assert issubclass(acv.errors.ScoredNotRemovedError, InvalidFoldsError)


def test_leave_future_out_with_a_horizon():
    f = acv.folds.leave_future_out(10, [3, 7], horizon=2)
    np.testing.assert_array_equal(f[0], np.arange(3, 10))
    np.testing.assert_array_equal(f.scored[0], [3, 4])
    np.testing.assert_array_equal(f.scored[1], [7, 8])
    assert not acv.folds.leave_future_out(10, [3, 9], horizon=1).subset([1]).partial
    assert not acv.folds.leave_future_out(10, [3]).partial
    with pytest.raises(FoldIndexError, match="largest valid start for this horizon is 7, the "
                                             "largest valid horizon for these starts is 2"):
        acv.folds.leave_future_out(10, [3, 8], horizon=3)
    with pytest.raises(InvalidArgumentError, match="`horizon`"):
        acv.folds.leave_future_out(10, [3], horizon=0)


def test_hblock_removes_a_buffer_each_side_and_scores_the_block():
    f = acv.folds.hblock(10, 3, 2)
    assert [list(s) for s in f.scored] == [[0, 1, 2, 3], [4, 5, 6], [7, 8, 9]]
    assert [list(r) for r in f] == [[0, 1, 2, 3, 4, 5], [2, 3, 4, 5, 6, 7, 8],
                                    [5, 6, 7, 8, 9]]
    np.testing.assert_array_equal(np.concatenate(f.scored), np.arange(10))   # a partition
    assert not acv.folds.hblock(10, 5, 0).partial            # h = 0: k contiguous blocks
    with pytest.raises(FoldRemovesAllError, match="use more blocks"):
        acv.folds.hblock(10, 2, 5)
    with pytest.raises(InvalidArgumentError, match="`k`=11 exceeds"):
        acv.folds.hblock(10, 11, 0)
    with pytest.raises(InvalidArgumentError, match="`h` must be >= 0"):
        acv.folds.hblock(10, 2, -1)


def test_neighbourhood_with_a_buffer():
    ring = np.zeros((8, 8), dtype=int)
    for s in range(8):
        ring[s, (s + 1) % 8] = ring[(s + 1) % 8, s] = 1
    f = acv.folds.neighbourhood(ring, radius=1, centres=[0, 4], buffer=1)
    np.testing.assert_array_equal(f.scored[0], [0, 1, 7])
    np.testing.assert_array_equal(f[0], [0, 1, 2, 6, 7])
    np.testing.assert_array_equal(f[1], [2, 3, 4, 5, 6])
    assert not acv.folds.neighbourhood(ring, 1, buffer=0).partial
    with pytest.raises(FoldRemovesAllError, match="buffer of 3 removes every one of the 8 "
                                                  "sites"):
        acv.folds.neighbourhood(ring, radius=1, centres=[2], buffer=3)
