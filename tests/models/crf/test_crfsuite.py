"""``acv.models.from_crfsuite``: a fitted sklearn-crfsuite CRF cross-validated at its own
weights (no refit): the features CRFsuite created and no others, its objective stationary
there, Viterbi labels and marginals equal to CRFsuite's, the IJ within 1 % of exact refits
or flagged, and bad input refused by name."""
import warnings

import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import (InexactFitWarning, InvalidDataError, ProblemTooLargeError,
                             UnfittedEstimatorError, UnsupportedEstimatorError)
from approxcv.models.crf.crfsuite import crfsuite_items

sklearn_crfsuite = pytest.importorskip("sklearn_crfsuite")
pycrfsuite = pytest.importorskip("pycrfsuite")

WORDS = ("the", "a", "dog", "cat", "runs", "sees", "fast")
TAGS = {"the": "D", "a": "D", "dog": "N", "cat": "N", "runs": "V", "sees": "V", "fast": "V"}
#: CRFsuite's L-BFGS run to round-off
TIGHT = {"epsilon": 1e-10, "delta": 1e-12, "max_iterations": 10000}


def corpus(n=40, seed=0):
    """``n`` short tagged sentences, each token an item of every kind CRFsuite reads: a
    string value (one-hot ``w:the``), a float that may be negative, a bool, a constant, a
    nested dict and a nested list (``ctx:BOS``)."""
    rng = np.random.default_rng(seed)
    X, y = [], []
    for _ in range(n):
        xs, ys = [], []
        for t in range(int(rng.integers(2, 7))):
            w = WORDS[rng.integers(len(WORDS))]
            tag = TAGS[w] if rng.random() < 0.8 else "DNV"[rng.integers(3)]
            item = {"w": w, "x": float(rng.normal()), "up": bool(rng.random() < 0.3),
                    "bias": 1.0, "suffix": {"1": w[-1:]}}
            if t == 0:
                item["ctx"] = ["BOS"]
            xs.append(item)
            ys.append(tag)
        X.append(xs)
        y.append(ys)
    return X, y


def fitted(X, y, **kw):
    return sklearn_crfsuite.CRF(algorithm="lbfgs", **{**TIGHT, **kw}).fit(X, y)


@pytest.fixture(scope="module")
def converted():
    """CRFsuite's default penalty (c2 = 1) fitted to round-off, converted."""
    X, y = corpus()
    crf = fitted(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", InexactFitWarning)
        model, params, data = acv.models.from_crfsuite(crf, X, y)
    return crf, X, y, model, params, data


def test_items_are_pycrfsuites_attributes():
    X, _ = corpus(5)
    for xseq in X:
        ours = [dict(item) for item in crfsuite_items(xseq)]
        assert ours == pycrfsuite.ItemSequence(xseq).items()
    # an attribute named twice is two occurrences: CRFsuite adds both scores
    assert crfsuite_items([["g", "g"], {"k": b"v"}]) == [[("g", 1.0), ("g", 1.0)],
                                                         [("k:v", 1.0)]]


def test_parameters_are_the_features_crfsuite_created(converted):
    crf, X, y, model, params, data = converted
    free_w = np.asarray(model.free.weights)
    free_a = np.asarray(model.free.transitions)
    # every feature CRFsuite created has a (nonzero, L2-fitted) weight in its model
    assert free_w.sum() == len(crf.state_features_)
    assert free_a.sum() == len(crf.transition_features_)
    assert np.all(params.weights[~free_w] == 0)
    # a negative attribute summing below min_freq = 0 on a label makes no feature there
    j = model.crfsuite_["attributes"].index("x")
    assert not free_w[j].all()
    assert model.prior_variance == 0.5             # c2 = 1 = 1 / (2 prior_variance)
    labels = model.crfsuite_["labels"]
    assert labels == tuple(crf.classes_)
    for (a, lab), w in crf.state_features_.items():   # printed to 6 decimals
        assert abs(params.weights[model.crfsuite_["attributes"].index(a),
                                  labels.index(lab)] - w) <= 5e-7 + 1e-12


@pytest.mark.parametrize("settings", [
    {"all_possible_states": True, "all_possible_transitions": True},
    {"min_freq": 2.0}])
def test_possible_states_transitions_and_min_freq(settings):
    X, y = corpus(20, seed=1)
    crf = fitted(X, y, **settings)
    model, params, _ = acv.models.from_crfsuite(crf, X, y)
    free_w = np.asarray(model.free.weights)
    free_a = np.asarray(model.free.transitions)
    assert free_w.sum() == len(crf.state_features_)
    assert free_a.sum() == len(crf.transition_features_)
    if "all_possible_states" in settings:
        # every pair but those whose values sum below min_freq = 0 (the negative x)
        x = model.crfsuite_["attributes"].index("x")
        assert np.delete(free_w, x, axis=0).all() and free_a.all()
        assert not free_w[x].all()
    assert model.fit_result_["stationary"]


def test_objective_is_stationary_at_crfsuites_fit(converted):
    *_, model, params, data = converted
    fr = model.fit_result_
    assert fr["stationary"] and fr["weights_exact"]
    problem = acv.make_problem(model, data, params)
    assert fr["newton_step_norm"] < 1e-5 * (1 + np.linalg.norm(problem.u_full))
    # approxcv's fit of the converted objective lands on CRFsuite's weights
    refit = model.fit(data)
    np.testing.assert_allclose(refit.weights, params.weights, rtol=0, atol=1e-5)
    np.testing.assert_allclose(refit.transitions, params.transitions, rtol=0, atol=1e-5)


def test_viterbi_and_marginals_equal_crfsuites(converted):
    crf, X, y, model, params, data = converted
    labels = model.crfsuite_["labels"]
    new_X, _ = corpus(10, seed=7)
    new_X[0][0]["unseen"] = 3.0                       # unknown attributes are ignored
    for sentences in (X, new_X):
        feats = acv.models.crfsuite_data(model, sentences)
        paths = model.predict(params, feats)
        assert [[labels[k] for k in p] for p in paths] == [list(p) for p in
                                                            crf.predict(sentences)]
        marg = model.predict_marginals(params, feats)
        theirs = crf.predict_marginals(sentences)
        for m, s in zip(marg, theirs):
            np.testing.assert_allclose(m, [[d[lab] for lab in labels] for d in s],
                                       rtol=0, atol=1e-6)


def test_leave_sentence_out_ij_is_right_or_flagged(converted):
    *_, model, params, data = converted
    folds = acv.folds.leave_one_out(len(data))
    ij = acv.cross_validate(model, data, folds, "ij", params=params, level="structure",
                            progress=False, warn=False)
    ex = acv.cross_validate(model, data, folds, "exact", params=params, level="structure",
                            progress=False)
    err = np.abs(ij.fold_loss - ex.fold_loss) / np.abs(ex.fold_loss)
    assert np.all((err <= 0.01) | ij.unreliable)
    assert np.sum(~ij.unreliable) >= 5


def test_a_loose_fit_warns_with_the_fix():
    X, y = corpus(20, seed=2)
    crf = sklearn_crfsuite.CRF(algorithm="lbfgs", max_iterations=3).fit(X, y)
    with pytest.warns(InexactFitWarning, match=r"epsilon=1e-10.*max_iterations=10000"):
        model, _, _ = acv.models.from_crfsuite(crf, X, y)
    assert not model.fit_result_["stationary"]


def test_bad_estimators_and_data_are_refused_by_name():
    X, y = corpus(12, seed=3)
    with pytest.raises(UnsupportedEstimatorError, match=r"c1=0.1.*L1"):
        acv.models.from_crfsuite(fitted(X, y, c1=0.1), X, y)
    with pytest.raises(UnsupportedEstimatorError, match=r"algorithm='l2sgd'"):
        acv.models.from_crfsuite(sklearn_crfsuite.CRF(algorithm="l2sgd",
                                                      max_iterations=5).fit(X, y), X, y)
    with pytest.raises(UnsupportedEstimatorError, match=r"c2=0"):
        acv.models.from_crfsuite(fitted(X, y, c2=0.0), X, y)
    with pytest.raises(UnfittedEstimatorError, match=r"crf.fit\(X, y\)"):
        acv.models.from_crfsuite(sklearn_crfsuite.CRF(), X, y)
    with pytest.raises(UnsupportedEstimatorError, match="sklearn_crfsuite.CRF"):
        acv.models.from_crfsuite(object(), X, y)
    crf = fitted(X, y)
    with pytest.raises(ProblemTooLargeError, match=r"3 labels .* F K \+ K\^2 = \d+ .*"
                                                   r"max_dim = 10"):
        acv.models.from_crfsuite(crf, X, y, max_dim=10)
    with pytest.raises(InvalidDataError, match="does not have"):
        acv.models.from_crfsuite(crf, X, [["Z"] * len(s) for s in y])
    other_X, other_y = corpus(12, seed=4)
    with pytest.raises(InvalidDataError, match="as given to crf.fit"):
        acv.models.from_crfsuite(crf, other_X, other_y)
