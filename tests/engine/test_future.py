"""method="auto" on leave-future-out folds (approxcv/engine/future.py and the walk of
approxcv/engine/methods/auto.py): against exact LFO refits on a tiny PoissonHMM(2) series."""
import warnings

import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import InvalidArgumentError, UnreliableFoldWarning
from approxcv.folds import future_origins

STARTS = np.arange(60, 116, 6)         # 10 origins on T = 120


def series(T=120, seed=0):
    """Counts of a 2-state Poisson HMM (rates 3 and 12, moderately persistent)."""
    rng = np.random.default_rng(seed)
    trans = np.array([[0.9, 0.1], [0.15, 0.85]])
    z = np.zeros(T, int)
    for t in range(1, T):
        z[t] = rng.choice(2, p=trans[z[t - 1]])
    return rng.poisson(np.array([3.0, 12.0])[z]).astype(float)


def cv(model, x, folds, method, params, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return acv.cross_validate(model, x, folds, method, params=params, progress=False,
                                  **kw)


@pytest.fixture(scope="module")
def setup():
    x = series()
    model = acv.models.PoissonHMM(2)
    params = model.fit(x)
    out = {}
    for horizon in (1, 4):
        folds = acv.folds.leave_future_out(len(x), STARTS, horizon=horizon)
        out[horizon] = (folds, cv(model, x, folds, "exact", params))
    return model, x, params, out


def rel(res, ref):
    return np.abs(res.fold_loss - ref.fold_loss) / np.abs(ref.fold_loss)


@pytest.mark.parametrize("horizon", [1, 4])
def test_auto_lfo_within_one_percent_of_exact_or_flagged(setup, horizon):
    """Attained: at most 0.74 % (M = 4), 0.36 % (M = 1), no fold flagged; the plain IJ is
    up to 6.3 % off on the same folds."""
    model, x, params, out = setup
    folds, exact = out[horizon]
    res = cv(model, x, folds, "auto", params)
    flagged = np.isin(folds.ids, res.diagnostics.unreliable_folds)
    assert np.all((rel(res, exact) <= 0.01) | flagged)
    assert not flagged.all()
    d = res.diagnostics
    assert d["lfo_walk"] == "backward"
    assert np.array_equal(d["lfo_origins"], STARTS)
    assert set(d["fold_method"]) <= {"ij", "chord", "exact"}


def test_refit_every_refits_the_expected_origins(setup):
    """Walking backward, refit_every=3 refits the 3rd, 6th and 9th origin from the end
    (fold ids 7, 4, 1) and nothing else (a huge tol asks for no refit of its own); each
    refit is the expansion point of the next origins of the walk. After the walk the
    earliest origin (fold 0), which the walk did not refit, is refitted as the probe."""
    model, x, params, out = setup
    folds, exact = out[4]
    res = cv(model, x, folds, "auto", params, tol=1e6, refit_every=3)
    d = res.diagnostics
    assert list(d["refit_origins"]) == [7, 4, 1]
    assert list(d["lfo_probe"]) == [0]
    assert list(d["lfo_reference"]) == [0, 1, 4, 4, 4, 7, 7, 7, -1, -1]
    assert d["auto_counts"]["exact"] == 4
    assert list(np.flatnonzero(np.asarray(d["fold_method"]) == "exact")) == [0, 1, 4, 7]
    assert abs(res.fold_loss[0] - exact.fold_loss[0]) <= 1e-9


def test_a_fold_above_another_basin_a_refit_found_is_marked(setup, monkeypatch):
    """The walk's check against the optima its refits reached: with fold 3's exact refit
    standing in for an optimum of another basin (as the probe's runner-up would), fold 3
    — expanded from elsewhere, so above its own minimum — is marked ``other_basin``, and
    every marked fold is above a found optimum on its own objective."""
    from approxcv.engine import other_basins
    from approxcv.engine.methods import auto as auto_module
    model, x, params, out = setup
    folds, exact = out[4]
    seen = {}
    real = other_basins.other_basin_folds

    def with_fold3(problem, params_flat, index, others):
        others = np.concatenate([others, np.asarray(exact.params_flat[3])[None]])
        seen["result"] = real(problem, params_flat, index, others)
        return seen["result"]
    monkeypatch.setattr(auto_module, "other_basin_folds", with_fold3)
    res = cv(model, x, folds, "auto", params, tol=1e6)
    method = np.asarray(res.diagnostics["fold_method"])
    assert method[3] != "exact"
    marked = res.diagnostics.unreliable_causes.get("other_basin", [])
    assert 3 in marked
    local = np.flatnonzero(method != "exact")
    assert set(marked) == set(local[seen["result"]["mask"]])


def test_after_a_refit_the_expansion_point_is_that_refit(setup):
    """The refitted fold is the exact refit (its loss equal to 1e-9, attained 0); the next
    origin of the walk, expanded from it, is nearer exact than the plain IJ from the
    full-data fit (fold 6: attained 3.3e-4 against 1.0e-2). (Not necessarily nearer than
    the expansion from the full-data fit: on this series the refit at origin 102 is
    farther from fold 6's optimum, 0.24, than the full-data fit, 0.10.)"""
    model, x, params, out = setup
    folds, exact = out[4]
    walk = cv(model, x, folds, "auto", params, tol=1e6, refit_every=3)
    plain = cv(model, x, folds, "ij", params)
    for r in (7, 4, 1):
        assert abs(walk.fold_loss[r] - exact.fold_loss[r]) <= 1e-9
    for r in (7, 4):                # (after 1 comes fold 0, the probe: refitted itself)
        nxt = r - 1
        assert walk.diagnostics["lfo_reference"][nxt] == r
        assert rel(walk, exact)[nxt] < rel(plain, exact)[nxt]


def test_budget_and_tiny_tol(setup):
    """A tol hardly any estimate meets: the walk refits the first origin it cannot vouch
    for (fold 8: the last origin's estimate is 0 at M = 1) and, with max_exact=1, marks
    every other fold it cannot vouch for over budget, with the LFO advice."""
    model, x, params, out = setup
    folds, exact = out[1]
    with pytest.warns(UnreliableFoldWarning, match="refit_every=k"):
        res = acv.cross_validate(model, x, folds, "auto", params=params, progress=False,
                                 tol=1e-12, max_exact=1)
    d = res.diagnostics
    assert list(d["refit_origins"]) == [8]
    assert abs(res.fold_loss[8] - exact.fold_loss[8]) <= 1e-9
    assert sorted(d.unreliable_causes["over_budget"]) == list(range(8))


def test_ij_warning_on_lfo_folds_gives_the_lfo_advice(setup):
    model, x, params, out = setup
    folds, _ = out[4]
    with pytest.warns(UnreliableFoldWarning, match="walks the origins.*horizon"):
        acv.cross_validate(model, x, folds, "ij", params=params, progress=False, tol=1e-6)


def test_refit_every_is_checked(setup):
    model, x, params, out = setup
    folds, _ = out[1]
    with pytest.raises(InvalidArgumentError, match="refit_every"):
        acv.cross_validate(model, x, folds, "auto", params=params, refit_every=0)
    with pytest.raises(InvalidArgumentError, match="refit_every.*method='ij'"):
        acv.cross_validate(model, x, folds, "ij", params=params, refit_every=2)
    with pytest.raises(InvalidArgumentError, match="not leave-future-out"):
        acv.cross_validate(model, x, acv.folds.hblock(len(x), 5, 2), "auto",
                           params=params, refit_every=2)


def test_future_origins():
    assert np.array_equal(future_origins(acv.folds.leave_future_out(20, [5, 9, 12],
                                                                     horizon=2)), [5, 9, 12])
    assert np.array_equal(future_origins(acv.folds.leave_future_out(20, [12, 5])), [12, 5])
    assert np.array_equal(future_origins(acv.folds.leave_future_out(20, [5, 9]).in_units(24)),
                          [5, 9])
    assert future_origins(acv.folds.hblock(20, 4, 1)) is None
    assert future_origins(acv.folds.leave_future_out(20, [5])) is None
    assert future_origins(acv.folds.Folds([[5, 6], [3, 4, 5, 6], [0, 6]], 8)) is None
