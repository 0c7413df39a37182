"""``acv.models.from_hmmlearn``: hmmlearn models cross-validated at hmmlearn's own fitted
parameters (no refit): decoding equal to hmmlearn's, the objective stationary there, the IJ
within 1 % of exact refits of that objective or flagged, and bad input refused by name."""
import warnings

import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import UnfittedEstimatorError, UnsupportedEstimatorError

hmm = pytest.importorskip("hmmlearn.hmm")


@pytest.fixture(scope="module")
def gaussian():
    """A fitted 2-state diagonal GaussianHMM on a simulated sticky series (T = 150)."""
    rng = np.random.default_rng(0)
    z = np.cumsum(rng.random(150) < 0.06) % 2
    X = np.c_[np.where(z == 0, -1.0, 1.5), np.where(z == 0, 0.5, -0.5)]
    X = X + rng.standard_normal((150, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # hmmlearn's "not converging" at tol 1e-8
        est = hmm.GaussianHMM(2, "diag", n_iter=300, tol=1e-8, random_state=0).fit(X)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", acv.errors.HeldFixedWarning)
        model, params = acv.models.from_hmmlearn(est)
    return est, X, model, params


def test_decoding_and_score_equal_hmmlearn(gaussian):
    est, X, model, params = gaussian
    np.testing.assert_array_equal(model.predict(params, X), est.predict(X))
    np.testing.assert_allclose(model.predict_proba(params, X), est.predict_proba(X),
                               rtol=0, atol=1e-8)
    assert abs(model.score(params, X) - est.score(X)) < 1e-8


def test_ij_at_hmmlearns_fit_is_right_or_flagged(gaussian):
    est, X, model, params = gaussian
    folds = acv.folds.contiguous(len(X), 0.05, 5, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ij = acv.cross_validate(model, X, folds, "ij", params=params, progress=False,
                                warn=False)
        ex = acv.cross_validate(model, X, folds, "exact", params=params, progress=False)
    # hmmlearn's point is (close to) the optimum of the objective approxcv expands around
    assert ij.diagnostics["grad_norm"] < 1e-2 * len(X)
    err = np.abs(ij.fold_loss - ex.fold_loss) / np.abs(ex.fold_loss)
    assert np.all((err <= 0.01) | ij.unreliable)
    assert np.sum(~ij.unreliable) >= 2


def test_bad_estimators_are_refused_by_name():
    with pytest.raises(UnfittedEstimatorError, match="fit"):
        acv.models.from_hmmlearn(hmm.GaussianHMM(2))
    rng = np.random.default_rng(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tied = hmm.GaussianHMM(2, "tied", n_iter=5, random_state=0).fit(
            rng.standard_normal((40, 2)))
    with pytest.raises(UnsupportedEstimatorError, match="tied"):
        acv.models.from_hmmlearn(tied)
    with pytest.raises(UnsupportedEstimatorError):
        acv.models.from_hmmlearn(object())
