"""Coinciding states of an HMM fit (approxcv.models.hmm._collapse): detected, left by split
starts where a better optimum exists, and marked in cross-validation where it is not left."""
import warnings

import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import LocalOptimumWarning
from approxcv.models.hmm._collapse import coinciding_states, split_starts

#: London cyclist deaths per fortnight, 2005-2012 (T = 208; R package vcdExtra,
#: ``CyclingDeaths``; source: Transport for London). Not shipped with the package: the
#: series on which PoissonHMM(2)'s default starts stopped at a symmetric point (both rates
#: 0.568, every transition 0.5, objective 204.08) 1.55 nats above the alternating-chain MAP.
CYCLING_DEATHS = np.array([int(c) for c in (
    "1000111020103112001000302010100110101100300311101101100030111000100002001000210101"
    "0101100010010011010202011000020110020000100110101011020110100011000000000010100111"
    "20111002000011101010000120010002110000011110")])


def _collapsed(model, rate=0.5683):
    return model.params_type(np.full(2, 0.5), np.full((2, 2), 0.5), np.full(2, rate))


def test_coinciding_states_are_found_by_their_emissions():
    model = acv.models.PoissonHMM(3)
    p = model.params_type(np.full(3, 1 / 3), np.full((3, 3), 1 / 3),
                          np.array([2.0, 0.5, 2.0 * (1 + 1e-7)]))
    assert coinciding_states(model, p) == [(0, 2)]
    assert coinciding_states(model, p._replace(rates=np.array([2.0, 0.5, 2.1]))) == []
    g = acv.models.GaussianHMM(2)
    q = g.params_template(np.linspace(-1, 1, 40)[:, None])
    q = q._replace(means=np.zeros((2, 1)), variances=np.ones((2, 1)))
    assert coinciding_states(g, q) == [(0, 1)]
    assert coinciding_states(g, q._replace(variances=np.array([[1.0], [2.0]]))) == []


def test_split_starts_move_the_states_apart_and_stay_valid():
    model = acv.models.PoissonHMM(2)
    own = model.init_params(CYCLING_DEATHS, n=4)
    starts = split_starts(model, _collapsed(model), [(0, 1)], own)
    assert len(starts) == 4
    for s in starts:
        assert s.rates[0] < 0.5683 < s.rates[1]
        np.testing.assert_allclose(s.transition_matrix.sum(1), 1.0, atol=1e-12)
    assert {round(float(s.transition_matrix[0, 0]), 6) for s in starts} == {0.9, 0.1}


def test_a_collapsed_fit_is_left_for_the_better_optimum():
    """The default fit of PoissonHMM(2) on the cyclist deaths stopped at the symmetric
    point; the split starts reach the alternating chain (objective 202.53, found before by
    n_init=20 alone), recorded in fit_result_."""
    model = acv.models.PoissonHMM(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", LocalOptimumWarning)
        params = model.fit(CYCLING_DEATHS)
    rec = model.fit_result_
    assert rec["split_restart"]["kept"] and rec["coinciding_states"] == []
    assert rec["split_restart"]["objective_before"] > rec["final_objective"] + 1.0
    np.testing.assert_allclose(rec["final_objective"], 202.532055, atol=1e-4)
    assert coinciding_states(model, params) == []
    assert abs(params.rates[0] - params.rates[1]) > 0.2
    assert model.fit_concerns(params, CYCLING_DEATHS) == {}


def test_cross_validation_at_a_collapsed_fit_marks_every_approximate_fold():
    model = acv.models.PoissonHMM(2)
    folds = acv.folds.iid(len(CYCLING_DEATHS), 0.1, n_folds=6, seed=0)
    with pytest.warns(acv.errors.UnreliableFoldWarning, match="fit that may not be the "
                      "optimum.*To fix: .*n_init"):
        res = acv.cross_validate(model, CYCLING_DEATHS, folds, "ij",
                                 params=_collapsed(model))
    assert "coinciding_states" in res.diagnostics["fit_concerns"]
    assert list(res.diagnostics["unreliable_causes"]["fit_may_not_be_optimum"]) == list(
        range(6))


def test_auto_notices_refits_below_the_fit():
    """At the symmetric point, exact refits of auto (forced by a tiny tol) land in the
    better basin: their full-data objective is below the fit's, so no estimate derived
    from the fit stands (every fold auto did not refit is marked), and auto warns."""
    model = acv.models.PoissonHMM(2)
    folds = acv.folds.iid(len(CYCLING_DEATHS), 0.1, n_folds=4, seed=0)
    with pytest.warns(LocalOptimumWarning, match="lower at the exact refits"):
        res = acv.cross_validate(model, CYCLING_DEATHS, folds, "auto",
                                 params=_collapsed(model), tol=1e-300, max_exact=2,
                                 warn=True)
    d = res.diagnostics
    assert len(d["better_optimum_folds"]) > 0 and d["better_optimum_gap"] > 1.0
    local = np.flatnonzero(d["fold_method"] != "exact")
    assert local.size and set(local) <= set(d["unreliable_causes"]["fit_not_best_optimum"])
