"""Series padded to a size bucket (``HMM.padded_units``, :mod:`approxcv._runtime.sizes`): every
number is that of the series alone, and another length in the same bucket compiles nothing."""
import jax
import numpy as np
import pytest

import approxcv as acv
from approxcv._runtime.sizes import length_bucket
from approxcv.engine import lanes
from approxcv.errors import FoldIndexError
from approxcv.models.hmm import base as hmm_base
from approxcv.problem import make_problem

from ...conftest import backend_compiles, simulate_poisson_hmm


def test_length_buckets():
    assert [length_bucket(n) for n in (1, 15, 16, 17, 37, 300, 2000, 2030, 2100)] == [
        1, 15, 16, 18, 40, 320, 2048, 2048, 2304]
    for n in range(1, 20_000):
        bucket = length_bucket(n)
        assert n <= bucket < 1.125 * n and length_bucket(bucket) == bucket


@pytest.fixture
def unpadded(monkeypatch):
    """Call to switch the padding off: HMMs keep the lengths of their series."""
    return lambda: monkeypatch.setattr(hmm_base, "length_bucket", lambda n: n)


@pytest.fixture(scope="module")
def poisson_fit():
    x = simulate_poisson_hmm(37, seed=3)                 # padded to 40 steps
    model = acv.models.PoissonHMM(2, n_init=2)
    return model, x, model.fit(x)


def test_fit_pads_the_series_and_fold_indices_stay_the_datas(poisson_fit):
    model, x, params = poisson_fit
    problem = make_problem(model, x, params)
    assert problem.n_units == 40 and problem.scale == 37.0
    assert np.array_equal(np.asarray(problem.data.data.mask[0]), np.r_[np.ones(37), np.zeros(3)])
    with pytest.raises(FoldIndexError):
        acv.cross_validate(model, x, [[3], [38]], "ij", params=params)


@pytest.mark.parametrize("scheme", ["A", "B"])
def test_padded_objective_is_the_series_objective(poisson_fit, unpadded, scheme):
    """Values and gradients of ``F(u, w)`` on the padded series equal those on the series,
    for a fold that leaves out its last steps (scheme B's latents next to the padding)."""
    model, x, params = poisson_fit
    padded = make_problem(model, x, params, scheme=scheme)
    unpadded()
    alone = make_problem(model, x, params, scheme=scheme)
    w = np.ones(37)
    w[[0, 5, 35, 36]] = 0.0
    u = np.asarray(alone.u_full) + 0.05
    value, grad = jax.value_and_grad(alone.fun)(u, w, alone.data)
    value_pad, grad_pad = jax.value_and_grad(padded.fun)(u, np.r_[w, np.ones(3)], padded.data)
    np.testing.assert_allclose(value_pad, value, rtol=1e-12)
    np.testing.assert_allclose(grad_pad, grad, rtol=1e-9, atol=1e-11)
    loss, points = alone.heldout(u, w, alone.data)
    loss_pad, points_pad = padded.heldout(u, np.r_[w, np.ones(3)], padded.data)
    np.testing.assert_allclose(loss_pad, loss, rtol=1e-12)
    np.testing.assert_allclose(points_pad, np.r_[points, np.zeros(3)], rtol=1e-12, atol=1e-14)


def _assert_same_cv(padded, alone, rtol):
    np.testing.assert_allclose(padded.fold_loss, alone.fold_loss, rtol=rtol)
    np.testing.assert_allclose(padded.params_flat, alone.params_flat, rtol=rtol, atol=1e-8)
    for a, b in zip(padded.point_loss, alone.point_loss):
        np.testing.assert_allclose(a, b, rtol=rtol)
    if alone.error_estimate is not None:
        np.testing.assert_allclose(padded.error_estimate, alone.error_estimate, rtol=1e-6,
                                   atol=1e-9)


@pytest.mark.parametrize("method, scheme, rtol", [("ij", "B", 1e-9), ("exact", "A", 1e-6)])
def test_cross_validation_on_the_padded_series(poisson_fit, unpadded, method, scheme, rtol):
    """Fold losses, point losses, fold parameters and error estimates on the padded series
    equal those on the series alone (exact refits: to their convergence tolerance)."""
    model, x, params = poisson_fit
    folds = [[0, 1], [17], [30, 35, 36], [36]]
    kw = dict(params=params, scheme=scheme, progress=False, warn=False)
    padded = acv.cross_validate(model, x, folds, method, **kw)
    unpadded()
    alone = acv.cross_validate(model, x, folds, method, **kw)
    _assert_same_cv(padded, alone, rtol)
    assert padded.folds.n == 37 and len(padded.point_loss[2]) == 3


def test_lanes_skip_the_padding(poisson_fit, unpadded, monkeypatch):
    """Held-out passes and chord steps with folds in lanes (i.i.d. folds of a long series,
    forced here on 37 steps in chunks of 16) on the padded series give the numbers of the
    series alone: the lanes mask the padded steps' emissions. (Windows of short folds on a
    padded series equal the full passes: ``tests/engine/test_windows.py``, on 1,200 steps
    run as 1,280.)"""
    monkeypatch.setattr(lanes, "LANES_MIN_WORK", 0)
    monkeypatch.setattr(lanes, "LANES_CHUNK", 16)
    model, x, params = poisson_fit
    spread = acv.folds.iid(37, 0.1, 6, seed=0)
    problem = make_problem(model, x, params)
    assert problem.n_units == 40 and lanes.use_lanes(problem, spread.padded())
    kw = dict(params=params, progress=False, warn=False)
    padded = acv.cross_validate(model, x, spread, "ij", **kw)
    unpadded()
    monkeypatch.setattr(lanes, "LANES_MIN_WORK", 10 ** 9)      # the plain per-fold passes
    _assert_same_cv(padded, acv.cross_validate(model, x, spread, "ij", **kw), 1e-9)


def test_structure_level_pads_the_time_axis(unpadded):
    seqs = [simulate_poisson_hmm(t, seed=t) for t in (20, 33, 25)]   # 33 steps -> 36
    model = acv.models.PoissonHMM(2, n_init=1)
    params = model.fit(seqs)
    problem = make_problem(model, seqs, params)
    assert problem.n_units == 3 and problem.data.data.x.shape == (3, 36)
    padded = acv.cross_validate(model, seqs, [[0], [2]], "ij", params=params, warn=False)
    unpadded()
    alone = acv.cross_validate(model, seqs, [[0], [2]], "ij", params=params, warn=False)
    _assert_same_cv(padded, alone, 1e-9)


def test_time_varying_poisson_pads_its_counts(unpadded):
    x = simulate_poisson_hmm(45, seed=5)                 # 45 steps -> 48
    model = acv.models.TimeVaryingPoisson(slots_per_day=5, days_per_week=1)
    params = model.params_template(x)
    padded = make_problem(model, x, params)
    assert padded.n_units == 48
    unpadded()
    alone = make_problem(model, x, params)
    w = np.ones(45)
    w[[2, 44]] = 0.0
    np.testing.assert_allclose(padded.fun(padded.u_full, np.r_[w, np.ones(3)], padded.data),
                               alone.fun(alone.u_full, w, alone.data), rtol=1e-12)


def test_another_length_in_the_bucket_compiles_nothing():
    """A fit, the IJ and exact CV of a series of 37 steps, then of one of 39 (both padded to
    40, their folds' rows to 4): the second compiles no program."""
    compiled = []
    for steps in (37, 39):
        x = simulate_poisson_hmm(steps, seed=6)
        model = acv.models.PoissonHMM(2, n_init=2)
        folds = acv.folds.contiguous(steps, 0.1, 3, seed=0)
        with backend_compiles() as n:
            params = model.fit(x)
            acv.cross_validate(model, x, folds, "ij", params=params, warn=False)
            acv.cross_validate(model, x, folds[:2], "exact", params=params, warn=False)
        compiled.append(n[0])
    assert compiled[0] > 0 and compiled[1] == 0
