"""Held-out losses and IJ error estimates of short folds in windows of a long series equal
the full passes (windows forced on a small series by lowering WINDOW_MIN_WORK)."""
import cloudpickle
import numpy as np
import pytest

import approxcv as acv
from approxcv.engine import batching, heldout, windows
from approxcv.problem import make_problem


@pytest.fixture(scope="module")
def long_series():
    x = acv.datasets.load_calls(1200)
    model = acv.models.PoissonHMM(2)
    return model, x, model.fit(x)


def test_windowed_heldout_losses_equal_the_full_pass(long_series, monkeypatch):
    model, x, params = long_series
    problem = make_problem(model, x, params)
    folds = acv.folds.contiguous(len(x), 0.005, 40, seed=0)
    rng = np.random.default_rng(0)       # parameters near the fit, as a fold's would be
    u = np.asarray(problem.u_full) + 1e-3 * rng.normal(size=(len(folds),
                                                             problem.u_full.size))
    full = heldout.heldout_losses(problem, u, folds.padded())
    monkeypatch.setattr(windows, "WINDOW_MIN_WORK", 0)
    info = {}
    win = heldout.heldout_losses(problem, u, folds.padded(), info=info)
    assert info["heldout_windows"]["half_widths"] and \
        info["heldout_windows"]["full_pass_folds"] == 0
    np.testing.assert_allclose(win[0], full[0], rtol=1e-8)
    np.testing.assert_allclose(win[1], full[1], rtol=1e-8, atol=1e-10)
    # a problem with windows still travels to worker processes
    shipped = cloudpickle.loads(cloudpickle.dumps(problem))
    np.testing.assert_array_equal(np.asarray(shipped.windows().context[0]),
                                  np.asarray(problem.windows().context[0]))


def test_leave_one_out_ij_in_windows_equals_the_full_passes(long_series, monkeypatch):
    """Fold losses to round-off; error estimates (third-order expansion of F(., 1) plus the
    fold loss in its window) to well within what decides reliability."""
    model, x, params = long_series
    folds = acv.folds.Folds([np.array([t]) for t in range(0, len(x), 7)], len(x))
    full = acv.cross_validate(model, x, folds, method="ij", params=params, warn=False)
    monkeypatch.setattr(windows, "WINDOW_MIN_WORK", 0)
    win = acv.cross_validate(model, x, folds, method="ij", params=params, warn=False)
    checked = win.diagnostics["error_estimate_windows"]
    # folds that moved far from the fit take the full passes; the rest the expansion
    assert checked["accepted"] and checked["full_pass_folds"] < len(folds)
    assert "heldout_windows" in win.diagnostics
    np.testing.assert_allclose(win.fold_loss, full.fold_loss, rtol=1e-8)
    np.testing.assert_allclose(win.error_estimate, full.error_estimate,
                               rtol=0.05, atol=1e-6)
