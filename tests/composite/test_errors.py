"""Bad inputs give clear errors that name the problem."""
import warnings

import numpy as np
import pytest

import approxcv as acv
import approxcv.composite as scl
from approxcv.errors import (ArgumentTypeError, InvalidArgumentError, InvalidDataError,
                             NonIdentifiableWarning, NotPositiveDefiniteError)


@pytest.fixture(scope="module")
def bm():
    return scl.BoltzmannMachine(4)


def test_data_must_be_binary_with_one_column_per_node(bm):
    pol = scl.Policy(scl.pseudo_likelihood(bm, 1))
    with pytest.raises(InvalidDataError, match="`X` must be binary"):
        scl.fit(bm, np.full((5, 4), 0.5), pol)
    with pytest.raises(InvalidDataError, match=r"`X` must be an \(n, 4\) array"):
        scl.fit(bm, np.zeros((5, 3)), pol)


def test_selection_probabilities_must_lie_in_0_1(bm):
    pl1 = scl.pseudo_likelihood(bm, 1)
    with pytest.raises(InvalidArgumentError, match="never selected"):
        scl.Policy([pl1, scl.pseudo_likelihood(bm, 2)], select=[1.0, 0.0])
    with pytest.raises(InvalidArgumentError, match=r"must lie in \(0, 1\]"):
        scl.Policy(pl1, select=1.5)
    with pytest.raises(InvalidArgumentError, match="sum to 1"):
        scl.Policy([pl1, scl.full_likelihood(bm)], select=[0.5, 0.6], kind="multinomial")
    with pytest.raises(InvalidArgumentError, match="`weight`"):
        scl.Policy(pl1, weight=-1.0)


def test_components_must_identify_every_parameter(bm):
    pol = scl.Policy([((0,), (1, 2, 3))])     # only node 0's conditional: misses 12, 13, 23
    with pytest.raises(InvalidArgumentError, match=r"do not identify.*theta_12"):
        scl.SCLModel(bm, pol)
    with pytest.raises(InvalidArgumentError, match="share nodes"):
        scl.SCLModel(bm, scl.Policy([((0, 1), (1, 2))]))
    with pytest.raises(InvalidArgumentError, match="A is empty"):
        scl.SCLModel(bm, scl.Policy([((), (1, 2))]))


def test_too_many_nodes_for_enumeration():
    with pytest.raises(InvalidArgumentError, match=r"`n_nodes` = 21 is too large"):
        scl.BoltzmannMachine(21)


def test_all_zero_weights_are_refused_and_zero_weight_components_identify_nothing(bm):
    pl1, fl = scl.pseudo_likelihood(bm, 1), scl.full_likelihood(bm)
    with pytest.raises(InvalidArgumentError, match="every component has weight 0"):
        scl.Policy(pl1, weight=0.0)
    # only node 0's conditional has a positive weight: theta_12, 13, 23 enter nothing
    only0 = scl.Policy([[((0,), (1, 2, 3))], fl], weight=[1.0, 0.0])
    with pytest.raises(InvalidArgumentError, match=r"positive weight.*theta_12"):
        scl.SCLModel(bm, only0)


def test_select_policy_refuses_empty_or_non_policies(bm):
    X = np.zeros((6, 4))
    folds = acv.folds.kfold(6, 3)
    with pytest.raises(InvalidArgumentError, match="`policies` is empty"):
        scl.select_policy(bm, X, [], folds)
    with pytest.raises(InvalidArgumentError, match="`policies` is empty"):
        scl.select_policy(bm, X, {}, folds)
    with pytest.raises(ArgumentTypeError, match=r"`policies\[0\]` must be"):
        scl.select_policy(bm, X, [scl.pseudo_likelihood(bm, 1)], folds)


def test_a_crf_where_its_components_are_meant_names_what_to_pass():
    crf = acv.models.LinearChainCRF(2)
    X = [(np.ones((3, 2)), np.array([0, 1, 0]))] * 3
    with pytest.raises(ArgumentTypeError, match=r"pass `approxcv.composite.CRFComponents"):
        scl.pseudo_likelihood(crf, 1)
    comps = scl.CRFComponents(crf)
    pol = scl.Policy(scl.full_likelihood(comps))
    with pytest.raises(ArgumentTypeError, match=r"`model`.*CRFComponents\(crf\)"):
        scl.fit(crf, X, pol)
    with pytest.raises(ArgumentTypeError, match="`base`"):
        scl.SCLModel(crf, pol)
    with pytest.raises(ArgumentTypeError, match="`crf` must be"):
        scl.CRFComponents(scl.BoltzmannMachine(3))
    with pytest.raises(ArgumentTypeError, match=r"`groups\[0\]`"):
        scl.Policy([("full",)])


def test_parameters_the_data_do_not_bound_are_flagged_not_converged():
    """Node 0 is never on: without a prior the couplings theta_01, theta_02 head to -inf
    (the SCL keeps decreasing along them), the fit stops there with a tiny gradient. It
    is flagged, not converged; its variance is a named error; a prior bounds them."""
    bm3 = scl.BoltzmannMachine(3)
    rng = np.random.default_rng(0)
    X = (rng.random((40, 3)) < 0.5).astype(float)
    X[:, 0] = 0.0
    pol = scl.Policy(scl.pseudo_likelihood(bm3, 1))
    with pytest.warns(NonIdentifiableWarning, match=r"theta_01, theta_02"):
        fit = scl.fit(bm3, X, pol)
    assert not fit.model.fit_result_["converged"]
    assert fit.model.fit_result_["unidentified"] == ["theta_01", "theta_02"]
    assert np.all(fit.theta[:2] < -10)
    with pytest.raises(NotPositiveDefiniteError, match="not identified"):
        fit.standard_errors()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        bounded = scl.fit(bm3, X, pol, prior_var=4.0)
    assert bounded.model.fit_result_["converged"]
    assert bounded.model.fit_result_["unidentified"] == []
    assert np.all(np.isfinite(bounded.standard_errors()))
    # the data of the same shape with node 0 sometimes on: nothing flagged
    X[:5, 0] = 1.0
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ok = scl.fit(bm3, X, pol)
    assert ok.model.fit_result_["unidentified"] == []
