"""Folds whose optimum may lie in another basin (``approxcv.engine.other_basins``): a fold is
marked ``"other_basin"`` where a known local optimum is lower on the fold's objective than
the fold's estimate; the gap is the objective's own arithmetic; relabelled copies of the fit
(states permuted) are the same optimum, not another."""
import warnings

import numpy as np
import pytest

import approxcv as acv

T = 60


@pytest.fixture(scope="module")
def fitted():
    rng = np.random.default_rng(0)
    z = np.cumsum(rng.random(T) < 0.1) % 2
    x = rng.poisson(np.where(z == 0, 1.5, 5.0)).astype(float)
    model = acv.models.PoissonHMM(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params = model.fit(x)
    folds = acv.folds.contiguous(T, 0.1, 6, seed=0)
    exact = acv.cross_validate(model, x, folds, "exact", params=params, progress=False,
                               warn=False)
    return model, params, x, folds, exact


def _fold_objective(model, params, x, folds, i):
    w = np.ones(T)
    w[np.asarray(folds[i])] = 0.0
    return float(model.objective(params, x, w))


def test_a_relabelled_fit_is_not_another_optimum(fitted):
    model, params, x, folds, _ = fitted
    ends = model.fit_result_["start_optima"]          # where the fit's starts ended
    assert len(ends) >= 1 and all(isinstance(p, type(params)) for p in ends)
    swapped = type(params)(params.initial_probs[::-1],
                           params.transition_matrix[::-1, ::-1], params.rates[::-1])
    fresh = acv.models.PoissonHMM(2)
    fresh.mark_poorer_fit(swapped, "the fit with its states swapped")
    assert fresh.known_optima(params, x) == []


def test_a_fold_whose_refit_is_a_known_optimum_is_marked_with_the_objectives_gap(fitted):
    model, params, x, folds, exact = fitted
    fresh = acv.models.PoissonHMM(2)              # no fit of its own: only the marked point
    refit = exact.fold_params(2)                  # fold 2's own minimum
    fresh.mark_poorer_fit(refit, "fold 2's refit")
    assert len(fresh.known_optima(params, x)) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ij = acv.cross_validate(fresh, x, folds, "ij", params=params, progress=False,
                                warn=False)
    gap = ij.diagnostics["other_basin_gap"]
    for i in range(len(folds)):
        want = (_fold_objective(fresh, refit, x, folds, i)
                - _fold_objective(fresh, ij.fold_params(i), x, folds, i))
        assert abs(gap[i] - want) <= 1e-8 * (1 + abs(want))
    assert gap[2] < 0                              # the refit is below the IJ's estimate
    assert 2 in ij.diagnostics["unreliable_causes"]["other_basin"]
    assert set(ij.diagnostics["unreliable_causes"]["other_basin"]) == set(
        np.flatnonzero(gap < 0))


def test_without_known_optima_nothing_is_computed(fitted):
    model, params, x, folds, exact = fitted
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ij = acv.cross_validate(acv.models.PoissonHMM(2), x, folds, "ij", params=params,
                                progress=False, warn=False)
    assert "other_basin_gap" not in ij.diagnostics
    assert "other_basins" not in ij.stage_seconds


def test_auto_refits_a_fold_above_a_known_optimum(fitted):
    """``auto`` with a tol that asks for no refit of its own: the one fold whose own refit
    is a known optimum (so its estimate lies above it) is refitted — from it, landing on
    exact's refit — and no other fold is."""
    model, params, x, folds, exact = fitted
    fresh = acv.models.PoissonHMM(2)
    fresh.mark_poorer_fit(exact.fold_params(2), "fold 2's refit")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = acv.cross_validate(fresh, x, folds, "auto", params=params, tol=1e6,
                                 progress=False, warn=False)
    method = np.asarray(res.diagnostics["fold_method"])
    assert method[2] == "exact"
    assert list(np.flatnonzero(method == "exact")) == [2]
    assert abs(res.fold_loss[2] - exact.fold_loss[2]) <= 1e-6 * abs(exact.fold_loss[2])
    assert "other_basin" not in res.diagnostics.unreliable_causes
