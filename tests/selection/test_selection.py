"""``acv.select``: fits and cross-validation over a hyperparameter grid."""
import numpy as np
import pandas as pd
import pytest

import approxcv as acv
from approxcv.errors import ArgumentTypeError, FitError, GridEntryWarning, InvalidArgumentError

N = 40


@pytest.fixture(scope="module")
def ridge_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, 3))
    return X, X @ np.array([1.0, -1.0, 0.5]) + rng.normal(size=N)


def test_select_ranks_a_grid_as_cross_validate_by_hand(ridge_data):
    folds = acv.folds.kfold(N, 5)
    grid = [{"lam": 0.1}, {"lam": 30.0}]
    sel = acv.select(acv.models.Ridge, grid, ridge_data, folds, "ns", progress=False, warn=False)
    assert list(sel.results) == ["lam=0.1", "lam=30.0"]
    by_hand = {}
    for label, hp in zip(sel.results, grid):
        model = acv.models.Ridge(**hp)
        by_hand[label] = acv.cross_validate(model, ridge_data, folds, "ns",
                                            params=model.fit(ridge_data), progress=False,
                                            warn=False)
        np.testing.assert_allclose(sel.results[label].fold_loss, by_hand[label].fold_loss,
                                   rtol=1e-12)
        np.testing.assert_allclose(np.asarray(sel.params[label].coef),
                                   np.asarray(model.fit(ridge_data).coef), rtol=1e-12)
    table = acv.compare(by_hand)
    assert sel.best == table.index[0] == "lam=0.1"
    np.testing.assert_allclose(sel.table["elpd"], table["elpd"], rtol=1e-12)
    assert list(sel.table["lam"]) == [0.1, 30.0]       # hyperparameters as columns
    assert sel.table.attrs["unit"] == table.attrs["unit"]



def test_select_passes_weights_to_compare_and_refuses_them_early(ridge_data):
    folds = acv.folds.kfold(N, 5)
    sel = acv.select(acv.models.Ridge, [{"lam": 0.1}, {"lam": 30.0}], ridge_data, folds, "ns",
                     progress=False, warn=False, weights="stacking")
    table = acv.compare(sel.results, weights="stacking")
    np.testing.assert_allclose(sel.table.loc[table.index, "weight"], table["weight"],
                               rtol=0, atol=1e-12)
    assert sel.table.attrs["weights"] == "stacking"
    overlapping = acv.folds.iid(N, 0.2, 6, seed=0)
    with pytest.raises(InvalidArgumentError, match="overlapping folds"):     # before any fit
        acv.select(acv.models.Ridge, [{"lam": 0.1}], ridge_data, overlapping, weights="stacking")
    with pytest.raises(InvalidArgumentError, match="`weights`"):
        acv.select(acv.models.Ridge, [{"lam": 0.1}], ridge_data, folds, weights="bma")


def test_select_uses_each_models_default_method(ridge_data):
    """``method=None`` (the default) is the model's own ``default_method``, as in
    ``cross_validate``: ALOOCV ("ns") for ERM, not the IJ."""
    folds = acv.folds.kfold(N, 5)
    sel = acv.select(acv.models.Ridge, [{"lam": 0.1}], ridge_data, folds, progress=False,
                     warn=False)
    assert acv.models.Ridge.default_method == "ns"
    assert sel.results["lam=0.1"].method == "ns"

def test_select_refuses_bad_grids_factories_and_folds(ridge_data):
    folds = acv.folds.kfold(N, 4)
    with pytest.raises(InvalidArgumentError, match="`grid` is empty"):
        acv.select(acv.models.Ridge, [], ridge_data, folds)
    with pytest.raises(ArgumentTypeError, match="`grid` entry"):
        acv.select(acv.models.Ridge, [0.1], ridge_data, folds)
    with pytest.raises(InvalidArgumentError, match="twice"):
        acv.select(acv.models.Ridge, [{"lam": 1.0}, {"lam": 1.0}], ridge_data, folds)
    with pytest.raises(InvalidArgumentError, match="`model_factory` raised for grid entry "
                                                   "'lamda=1.0'"):
        acv.select(acv.models.Ridge, [{"lamda": 1.0}], ridge_data, folds)
    with pytest.raises(ArgumentTypeError, match="`model_factory` must be callable"):
        acv.select("Ridge", [{"lam": 1.0}], ridge_data, folds)
    with pytest.raises(InvalidArgumentError, match="`folds` were built for n=30.*'lam=1.0'"):
        acv.select(acv.models.Ridge, [{"lam": 1.0}], ridge_data, acv.folds.kfold(30, 3))
    with pytest.raises(ArgumentTypeError, match="unknown option.*'restart'"):
        acv.select(acv.models.Ridge, [{"lam": 1.0}], ridge_data, folds, restart=2)
    with pytest.raises(InvalidArgumentError, match="`params`"):
        acv.select(acv.models.Ridge, [{"lam": 1.0}], ridge_data, folds, params=None)


class _FailingRidge(acv.models.Ridge):
    """A Ridge whose fit raises (a grid entry that cannot be fitted)."""

    def fit(self, data, **kwargs):
        raise FitError("no start converged (test)")


class _NaNRidge(acv.models.Ridge):
    """A Ridge whose fit returns NaN coefficients (cross-validation refuses them)."""

    def fit(self, data, **kwargs):
        params = super().fit(data, **kwargs)
        return params._replace(coef=np.full(np.shape(params.coef), np.nan))


class _InexactRidge(acv.models.Ridge):
    """A Ridge whose fit stops away from the optimum (an unconverged fit)."""

    def fit(self, data, **kwargs):
        params = super().fit(data, **kwargs)
        return params._replace(coef=np.asarray(params.coef) + 0.5)


class _DegenerateRidge(acv.models.Ridge):
    """A Ridge whose fit warns that it is degenerate (as an HMM with empty states does)."""

    def fit(self, data, **kwargs):
        import warnings
        warnings.warn("states 1, 2 carry (almost) no data (test)", acv.errors.EmptyStateWarning)
        return super().fit(data, **kwargs)


def _factory(lam, kind="ok"):
    return {"ok": acv.models.Ridge, "fail": _FailingRidge, "nan": _NaNRidge,
            "inexact": _InexactRidge, "degenerate": _DegenerateRidge}[kind](lam)


GRID = {"good": {"lam": 0.1}, "fails": {"lam": 1.0, "kind": "fail"},
        "nan": {"lam": 1.0, "kind": "nan"}, "strong": {"lam": 30.0}}


def _check_failures_recorded(sel, ridge_data, folds):
    """The two failing entries are recorded in their rows, last; the others ranked as
    select without them."""
    assert list(sel.table.index) == ["good", "strong", "fails", "nan"]
    assert sel.table.loc["fails", "error"] == "FitError in fit: no start converged (test)"
    assert sel.table.loc["nan", "error"].startswith("InvalidArgumentError in cross_validate")
    assert sel.table.loc["good", "error"] == "" and pd.isna(sel.table.loc["fails", "elpd"])
    assert list(sel.table["flag"]) == ["", "", "", ""]
    assert list(sel.table["lam"]) == [0.1, 30.0, 1.0, 1.0]
    assert set(sel.failures) == {"fails", "nan"} and set(sel.results) == {"good", "strong"}
    alone = acv.select(acv.models.Ridge, {k: GRID[k] for k in ("good", "strong")}, ridge_data,
                       folds, "ns", progress=False, warn=False)
    np.testing.assert_allclose(sel.table["elpd"].iloc[:2], alone.table["elpd"], rtol=1e-12)
    assert sel.table["rank"].iloc[:2].tolist() == [0, 1]


def test_a_failing_entry_is_recorded_in_its_row_and_the_others_are_ranked(ridge_data):
    folds = acv.folds.kfold(N, 4)
    with pytest.warns(GridEntryWarning, match=r"2 of 4 grid entries failed.*'fails': FitError"):
        sel = acv.select(_factory, GRID, ridge_data, folds, "ns", progress=False, warn=False)
    _check_failures_recorded(sel, ridge_data, folds)
    with pytest.raises(FitError, match=r"every grid entry failed: 'fails': FitError.*'nan'"):
        acv.select(_factory, {k: GRID[k] for k in ("fails", "nan")}, ridge_data, folds, "ns",
                   progress=False, warn=False)
    # an option every entry's cross_validate refuses keeps its error class
    with pytest.raises(InvalidArgumentError, match=r"every grid entry failed: 'good': "
                                                   r"InvalidArgumentError in cross_validate"):
        acv.select(_factory, {k: GRID[k] for k in ("good", "strong")}, ridge_data, folds,
                   "ns", progress=False, warn=False, tol=-1.0)


def test_a_failing_entry_on_dask_is_recorded_in_its_row(ridge_data):
    distributed = pytest.importorskip("distributed")
    folds = acv.folds.kfold(N, 4)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        with pytest.warns(GridEntryWarning, match="2 of 4 grid entries failed"):
            sel = acv.select(_factory, GRID, ridge_data, folds, "ns", executor=client,
                             progress=False, warn=False)
    _check_failures_recorded(sel, ridge_data, folds)


def test_over_parameterised_and_unconverged_fits_are_flagged(ridge_data):
    """Ridge with an intercept on 8 points of 8 features has 9 parameters: flagged (the
    entries of ridge_data, 4 parameters on 40 points, are not: above). A fit that stops
    away from the optimum is flagged as not converged."""
    rng = np.random.default_rng(2)
    wide = (rng.normal(size=(8, 8)), rng.normal(size=8))
    with pytest.warns(GridEntryWarning, match=r"'lam=1.0': over-parameterised \(9 param"):
        sel = acv.select(acv.models.Ridge, [{"lam": 1.0}], wide, acv.folds.kfold(8, 4), "ns",
                         progress=False, warn=False)
    assert sel.table.loc["lam=1.0", "flag"] == "over-parameterised (9 parameters >= 8 units)"
    assert sel.table.loc["lam=1.0", "n_params"] == 9
    with pytest.warns(GridEntryWarning, match="'inexact': fit not converged"):
        sel = acv.select(_factory, {"ok": {"lam": 1.0}, "inexact": {"lam": 1.0,
                                                                     "kind": "inexact"}},
                         ridge_data, acv.folds.kfold(N, 4), "ns", progress=False, warn=False)
    assert sel.table.loc["inexact", "flag"] == "fit not converged"
    assert sel.table.loc["ok", "flag"] == ""


def test_a_degenerate_fit_is_flagged_and_ranked_below_the_others(ridge_data):
    """An entry whose fit warned of empty states (PoissonHMM(40) on 60 counts ranked 231
    nats ahead of K = 2 with 34 empty states) is demoted: the others are ranked, it follows
    without a rank, paired against the best of them — even where it scores higher."""
    folds = acv.folds.kfold(N, 5)
    grid = {"strong": {"lam": 30.0}, "degenerate": {"lam": 0.1, "kind": "degenerate"}}
    with pytest.warns(GridEntryWarning, match="'degenerate': degenerate fit "
                      r"\(EmptyStateWarning\)"), \
            pytest.warns(acv.errors.EmptyStateWarning):      # the fit's own, still seen
        sel = acv.select(_factory, grid, ridge_data, folds, "ns", progress=False, warn=False)
    t = sel.table
    assert sel.best == "strong" and list(t.index) == ["strong", "degenerate"]
    assert t.loc["strong", "rank"] == 0 and pd.isna(t.loc["degenerate", "rank"])
    plain = acv.compare(sel.results)          # unflagged, the degenerate entry would win
    assert plain.index[0] == "degenerate"
    np.testing.assert_allclose(t.loc["degenerate", "elpd_diff"],
                               -plain.loc["strong", "elpd_diff"], rtol=1e-12)
    np.testing.assert_allclose(t.loc["degenerate", "dse"], plain.loc["strong", "dse"],
                               rtol=1e-12)


def test_warnings_inside_select_point_at_the_users_call(ridge_data):
    """An unreliable-fold warning raised by cross_validate inside select's task points at
    the line that called select (it pointed at selection/grid.py), and says what to do."""
    folds = acv.folds.kfold(N, 4)
    with pytest.warns(acv.errors.UnreliableFoldWarning, match="To fix: method='auto'") as rec:
        acv.select(acv.models.Ridge, [{"lam": 0.01}], ridge_data, folds, "ij", tol=1e-14,
                   progress=False)
    assert {w.filename for w in rec if w.category is acv.errors.UnreliableFoldWarning} == {
        __file__}
