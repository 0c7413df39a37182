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
    # the full passes' two-step estimate on every fold (the default screens where the
    # objective splits; windows take the expansion's two steps)
    full = acv.cross_validate(model, x, folds, method="ij", params=params, warn=False,
                              error_estimate="full")
    monkeypatch.setattr(windows, "WINDOW_MIN_WORK", 0)
    win = acv.cross_validate(model, x, folds, method="ij", params=params, warn=False)
    checked = win.diagnostics["error_estimate_windows"]
    # folds that moved far from the fit take the full passes; the rest the expansion
    assert checked["accepted"] and checked["full_pass_folds"] < len(folds)
    assert "heldout_windows" in win.diagnostics
    np.testing.assert_allclose(win.fold_loss, full.fold_loss, rtol=1e-8)
    np.testing.assert_allclose(win.error_estimate, full.error_estimate,
                               rtol=0.05, atol=1e-6)


def _expansion_case(off):
    """100 folds with steps ``moved`` 0.01..1 (``M = I``); the expanded corrections are the
    full passes' times ``1 + off(moved)``."""
    moved = np.linspace(0.01, 1.0, 100)
    exact = np.stack([moved, np.zeros(100)], axis=1)
    taylor = exact * (1.0 + off(moved))[:, None]
    rate = np.zeros(100)

    def exact_steps(rows):
        return exact[rows], rate[rows] + 0.5
    return moved, exact, taylor, rate, exact_steps


def test_expansion_checks_shrink_the_step_bound_below_the_folds_it_misses():
    """The expansion is 20 % off beyond a step of 0.5: the checks find it at the farthest
    folds, and the bound ends below every failing step; the checked folds keep their full
    passes."""
    moved, exact, taylor, rate, exact_steps = _expansion_case(lambda m: 0.2 * (m > 0.5))
    step = taylor.copy()
    bound, checked, diffs, ok = windows.verify_expansion(
        exact_steps, step, rate, np.arange(100), moved, lambda x: np.linalg.norm(x, axis=-1),
        np.random.default_rng(0))
    assert ok and bound < 0.5 and checked.size >= 2 * windows.TAYLOR_CHECK_FOLDS // 2
    assert np.max(diffs) > 0.05 * 0.5                      # the first round failed
    np.testing.assert_array_equal(step[checked], exact[checked])
    np.testing.assert_array_equal(rate[checked], 0.5)
    assert moved[checked].max() == 1.0                      # the farthest fold was checked
    kept = np.setdiff1d(np.flatnonzero(moved <= bound), checked)
    np.testing.assert_allclose(step[kept], exact[kept], rtol=1e-15)   # all within the bound


def test_expansion_checks_that_never_settle_send_every_fold_to_the_full_passes():
    moved, exact, taylor, rate, exact_steps = _expansion_case(lambda m: 0.2 + 0 * m)
    step = taylor.copy()
    bound, checked, diffs, ok = windows.verify_expansion(
        exact_steps, step, rate, np.arange(100), moved, lambda x: np.linalg.norm(x, axis=-1),
        np.random.default_rng(0))
    # either the rounds ran out or the bound fell below every step: no fold keeps the
    # expansion, and the checked ones have their full passes
    assert (not ok) or bound < moved.min()
    assert checked.size <= windows.TAYLOR_CHECK_ROUNDS * windows.TAYLOR_CHECK_FOLDS
    np.testing.assert_array_equal(step[checked], exact[checked])


def test_third_derivative_by_differenced_hessians_equals_forward_mode(long_series):
    """``T_1`` of the expansion, by central differences of exact Hessians, against the
    third derivative by forward mode over the Hessian (measured 1.1e-7 relative)."""
    import jax
    import jax.numpy as jnp
    model, x, params = long_series
    problem = make_problem(model, x, params)
    n = problem.n_units
    _, _, hess, third = windows._third_order_terms(problem.fun, problem.u_full, n,
                                                  problem.data, 3)

    def f(v):
        return problem.fun(v, jnp.ones(n), problem.data)
    want = jax.jacfwd(jax.hessian(f))(problem.u_full)
    np.testing.assert_allclose(hess, np.transpose(hess), atol=1e-12 * np.max(np.abs(hess)))
    np.testing.assert_allclose(third, want, rtol=0, atol=1e-6 * np.max(np.abs(want)))
    np.testing.assert_allclose(third, np.transpose(third, (2, 0, 1)), rtol=1e-12)


def test_folds_that_remove_more_than_they_score_in_windows_equal_the_full_pass(
        long_series, monkeypatch):
    """Short h-block folds of a long series: both terms of ``-log p(x_S | x_K)`` in windows,
    and a fold whose unscored set is empty (no second term)."""
    model, x, params = long_series
    problem = make_problem(model, x, params)
    blocks = acv.folds.hblock(len(x), 100, 2)
    pick = np.arange(0, 100, 5)
    folds = acv.folds.Folds([blocks[i] for i in pick] + [blocks.scored[7]], len(x),
                            scored=[blocks.scored[i] for i in pick] + [blocks.scored[7]]
                            ).in_units(problem.n_units)     # padding past the null units
    rng = np.random.default_rng(1)
    u = np.asarray(problem.u_full) + 1e-3 * rng.normal(size=(len(folds),
                                                             problem.u_full.size))
    full = heldout.heldout_losses(problem, u, folds.padded(),
                                  unscored=folds.unscored_padded())
    monkeypatch.setattr(windows, "WINDOW_MIN_WORK", 0)
    assert windows.use_windows(problem, folds.padded())
    info = {}
    win = heldout.heldout_losses(problem, u, folds.padded(), info=info,
                                 unscored=folds.unscored_padded())
    assert info["heldout_windows"]["half_widths"]
    np.testing.assert_allclose(win[0], full[0], rtol=1e-8)
    np.testing.assert_allclose(win[1], full[1], rtol=1e-8, atol=1e-10)
    # the difference of the two joint losses, each in its own pass
    removed = heldout.heldout_losses(problem, u, folds.padded())[0]
    rest = heldout.unscored_losses(problem, u, folds.unscored_padded())
    assert rest[-1] == 0.0 and np.all(rest[:-1] > 0)
    np.testing.assert_allclose(full[0], removed - rest, rtol=1e-12)
