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


def test_an_em_fit_at_a_poorer_optimum_is_warned_and_every_fold_marked():
    """Three regimes (N(0, 1), N(0, 9), N(4, 1)) and two states: hmmlearn's EM from means
    (0, 4) and variances (1, 9) stops at the variance split, a local optimum ~11 nats above
    the mean split that approxcv's own fit of hmmlearn's objective finds. ``from_hmmlearn``
    warns (``LocalOptimumWarning``, the gap named) and records the check, every IJ fold at
    hmmlearn's point is marked; at the better fit nothing is; ``check_optimum=False`` skips
    the check."""
    rng = np.random.default_rng(0)
    z = np.repeat(rng.integers(0, 3, 12), 10)
    X = (np.array([0.0, 0.0, 4.0])[z]
         + np.array([1.0, 3.0, 1.0])[z] * rng.standard_normal(len(z)))[:, None]
    est = hmm.GaussianHMM(2, "diag", init_params="st", n_iter=5000, tol=1e-12,
                          random_state=0, startprob_prior=2.0, transmat_prior=2.0)
    est.means_, est.covars_ = np.array([[0.0], [4.0]]), np.array([[1.0], [9.0]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        est.fit(X)
    with pytest.warns(acv.errors.LocalOptimumWarning, match="nats above"):
        model, params = acv.models.from_hmmlearn(est, X)
    check = model.fit_result_["optimum_check"]
    assert model.fit_result_["stationary"] and check["poorer"] and check["gap"] > 1.0
    assert "poorer_local_optimum" in model.fit_concerns(params, X)
    folds = acv.folds.contiguous(len(X), 0.1, 4, seed=0)
    ij = acv.cross_validate(model, X, folds, "ij", params=params, progress=False, warn=False)
    assert ij.unreliable.all()
    assert "fit_may_not_be_optimum" in ij.diagnostics["unreliable_causes"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best = model.fit(X)
    assert model.fit_concerns(best, X) == {}
    others = model.known_optima(best, X)               # hmmlearn's point: another basin
    assert any(np.allclose(o.means, params.means) for o in others)
    assert float(model.objective(best, X, np.ones(len(X)))) < check["objective"] - 1.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        unchecked, _ = acv.models.from_hmmlearn(est, X, check_optimum=False)
    assert not any(w.category is acv.errors.LocalOptimumWarning for w in caught)
    assert "optimum_check" not in unchecked.fit_result_
