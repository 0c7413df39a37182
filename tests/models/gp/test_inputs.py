"""A GP's inputs as a user gives them: too large for memory, text inputs and an executor
refused by name before any work; labels in either documented coding compared as one."""
import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import InvalidArgumentError, InvalidDataError, ProblemTooLargeError
from approxcv.models.gp.memory import MATRICES, check_gp_memory, gp_bytes

THETA = np.log([0.3, 0.1, 2.0, 0.8])


def at(theta):
    return acv.models.GPParams(np.asarray(theta, float)[None], np.zeros(1))


def _data(n=20, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 1))
    return X, (np.sin(2 * X[:, 0]) + 0.3 * rng.normal(size=n) > 0).astype(int)


def test_too_many_points_are_refused_before_anything_is_allocated():
    """n = 60,000 needs 16 x 28.8 GB: refused by name, with the largest n that fits, by the
    fit and by every method (before: XLA's RESOURCE_EXHAUSTED after 20 s)."""
    assert gp_bytes(60_000) == MATRICES * 8.0 * 60_000 ** 2
    with pytest.raises(ProblemTooLargeError, match=r"n=60,000 .* at most about n=3,535"):
        check_gp_memory(60_000, max_bytes=16 * 8.0 * 3535.5 ** 2)
    check_gp_memory(3_535, max_bytes=16 * 8.0 * 3535.5 ** 2)        # fits: no error
    X, y = _data()
    model = acv.models.GP("probit")
    model.max_bytes = gp_bytes(len(y)) / 2          # as if memory held half of what it needs
    with pytest.raises(ProblemTooLargeError, match="subsample"):
        model.fit((X, y))
    with pytest.raises(ProblemTooLargeError):
        acv.cross_validate(model, (X, y), acv.folds.kfold(len(y), 4), "la", params=at(THETA))
    assert issubclass(ProblemTooLargeError, MemoryError)


def test_text_inputs_are_refused_naming_the_fix():
    X, y = _data()
    words = np.array(["a", "b"] * 10)[:, None]
    with pytest.raises(InvalidDataError, match="`X` must be numbers.*encode"):
        acv.models.GP("probit").fit((words, y))


def test_an_executor_is_refused_by_methods_that_refit_nothing():
    """``la`` computes from the one fit: an ``executor`` would be silently ignored."""
    X, y = _data()
    with pytest.raises(InvalidArgumentError, match="`executor`.*method='exact' or 'auto'"):
        acv.cross_validate(acv.models.GP("probit"), (X, y), acv.folds.kfold(len(y), 4), "la",
                           params=at(THETA), executor=object())


def test_labels_in_either_coding_are_the_same_data():
    """-1/+1 and 0/1 are the same labels to a binary likelihood: equal values, equal
    fingerprints, and ``compare`` ranks them together (before: "different data"); counts
    of a Poisson GP are not recoded."""
    X, y = _data()
    folds = acv.folds.kfold(len(y), 4)
    model = acv.models.GP("probit")
    r01 = acv.cross_validate(model, (X, y), folds, "la", params=at(THETA), warn=False)
    rpm = acv.cross_validate(model, (X, 2 * y - 1), folds, "la", params=at(THETA), warn=False)
    np.testing.assert_allclose(r01.fold_loss, rpm.fold_loss, rtol=1e-12)
    assert r01.fingerprint == rpm.fingerprint
    assert len(acv.compare({"01": r01, "pm": rpm})) == 2
    counts = np.abs(2 * y - 1)          # all ones: not labels to a Poisson GP
    assert acv.models.GP("poisson").comparable_data((X, counts))[1] is counts
