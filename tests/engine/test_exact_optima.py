"""Which optimum an exact refit keeps (cross-fold starts), when it is flagged, refits free
of the parameters' units, and exact CV at parameters where the Hessian is indefinite."""
from types import SimpleNamespace

import jax.numpy as jnp
import numpy as np
import pytest

import approxcv as acv
from approxcv.engine.exact_optima import (OPTIMUM_GAP_NATS, best_of_starts,
                                          unreliable_optima)
from approxcv.errors import NotPositiveDefiniteError
from approxcv.models import constraints as C
from approxcv.models.base import Model, left_out
from tests.engine.test_engine import CountingExecutor
from tests.conftest import simulate_gaussian_hmm

#: unit 0 (fold A), 1 (fold B), 2 (fold D), the rest: the tilts below
TILTS = np.array([-2.0, -4.0, -1.0, 1.3, 1.3, 1.3, 1.3, 1.3])


class DoubleWell(Model):
    """``F(t, w) = 2 (t^2 - 1)^2 + sum_i w_i a_i t + t^2 / 200``: wells near ``t = +-1``,
    tilted by ``s = sum_i w_i a_i``; the ``+1`` well is a local minimum while
    ``s < 16 / (3 sqrt 3) = 3.08``. Full data: ``s = -0.5`` (the fit is in ``+1``). Fold A
    (``s = 1.5``): ``-1`` is 3 nats lower, but the warm refit stays in ``+1``; fold B
    (``s = 3.5``): the ``+1`` well is gone, its refit slides to ``-1``; fold D (``s = 0.5``):
    ``-1`` is 1 nat lower. Held-out loss ``(t - a_i)^2 / 2`` per left-out unit."""

    def prepare(self, data, level=None):
        return jnp.asarray(data, dtype=jnp.float64), "within", len(data)

    def objective(self, params, data, weights, scheme="A", level=None):
        t = params[0]
        return 2.0 * (t ** 2 - 1) ** 2 + jnp.sum(weights * data) * t + t ** 2 / 200

    def heldout_loss(self, params, data, weights, level=None):
        points = jnp.where(left_out(weights), 0.5 * (params[0] - data) ** 2, 0.0)
        return jnp.sum(points), points

    def init_params(self, data, level=None, n=1, seed=0):
        return [(np.asarray(v),) for v in np.linspace(-1.5, 1.5, n)]

    def param_constraints(self):
        return (C.Real(),)

    def fit(self, data, level=None):
        """The full-data minimum in the ``+1`` well (a root of ``F'``)."""
        s = float(np.sum(data))
        roots = np.roots([8.0, 0.0, -8.0 + 0.01, s])
        return (np.asarray(max(r.real for r in roots if abs(r.imag) < 1e-12)),)


def _grid_minimum(a, fold):
    """Brute force: ``(t, F)`` at the minimum of the fold objective on a fine grid."""
    t = np.linspace(-3, 3, 600_001)
    s = np.sum(np.delete(a, fold))
    f = 2.0 * (t ** 2 - 1) ** 2 + s * t + t ** 2 / 200
    return t[np.argmin(f)], f.min()


FOLDS = [[0], [1], [2], [3]]        # A, B, D and an ordinary fold


def _exact(**kw):
    model = DoubleWell()
    folds = acv.folds.Folds(FOLDS, len(TILTS))
    return acv.cross_validate(model, TILTS, folds, "exact", progress=False, restarts=0,
                              **{"warn": False, **kw})


def test_a_two_basin_fold_is_repaired_by_another_folds_optimum():
    res = _exact()
    d = res.diagnostics
    for k, fold in enumerate(FOLDS):        # every fold at its global minimum
        t, f = _grid_minimum(TILTS, fold)
        assert abs(res.params_flat[k, 0] - t) < 1e-4 and abs(d["exact_objective"][k] - f) < 1e-6
    assert res.params_flat[0, 0] < -0.9                       # fold A: the -1 well
    # the warm refit alone stopped in the worse +1 well, > OPTIMUM_GAP_NATS higher: fold B's
    # optimum repaired it, and (clearly worse) it is not a reason to flag the fold
    assert d["exact_warm_gap"][0] > OPTIMUM_GAP_NATS
    assert d["exact_competing_objective"][0] - d["exact_objective"][0] > OPTIMUM_GAP_NATS
    assert d["exact_improved_folds"].tolist() == [0, 2] and d["exact_cross_starts"] == 2
    assert 0 not in d["unreliable_folds"] and 3 not in d["unreliable_folds"]


def test_a_close_optimum_with_another_heldout_loss_is_flagged_a_clearly_worse_one_not():
    d = _exact().diagnostics
    # fold D: the +1 optimum is 1 nat above the -1 one (within the gap) and predicts the
    # left-out a = -1 far worse; fold A's competing optimum is 3 nats above: not flagged
    gap = d["exact_competing_objective"] - d["exact_objective"]
    assert gap[2] < OPTIMUM_GAP_NATS < gap[0]
    assert {k: v.tolist() for k, v in d["unreliable_causes"].items()} == {
        "restart_disagreement": [2]}
    assert d["restart_disagreement_folds"].tolist() == [2]
    assert d["exact_competing_loss"][2] > 1.0 and np.isnan(d["exact_competing_loss"][0])


def test_copies_of_one_optimum_and_clearly_worse_ones_are_not_flagged_a_lower_failed_start_is():
    """Three starts per fold: fold 0 reaches one optimum twice (a relabelled copy) and a
    far worse one; fold 1's lowest start did not converge (a lower point exists)."""
    out = {"converged": np.array([True, True, True, True, True, False]),
           "objective": np.array([10.0, 10.0, 15.0, 10.0, 10.5, 9.0]),
           "u": np.arange(12.0).reshape(6, 2)}
    rec = best_of_starts(out, n_folds=2, n_starts=3, scale=1.0)
    np.testing.assert_array_equal(rec["alt_objective"], [15.0, 10.5])
    np.testing.assert_array_equal(rec["lowest_objective"], [10.0, 9.0])
    problem = SimpleNamespace(scale=1.0, n_units=4)     # no held-out loss is needed
    fold0 = {k: v[:1] for k, v in rec.items()}
    flags = unreliable_optima(problem, np.array([[0]]), fold0)
    assert not flags["worse_optimum"].any() and not flags["restart_disagreement"].any()
    flags = unreliable_optima(problem, np.array([[0], [1]]),
                              {**rec, "alt_objective": np.array([15.0, np.inf])})
    assert flags["worse_optimum"].tolist() == [False, True]


def test_cross_fold_repairs_are_checkpointed_and_resume_without_refits(tmp_path):
    path = str(tmp_path / "ck")
    first = _exact(checkpoint=path)
    calls = []
    again = _exact(checkpoint=path, executor=CountingExecutor(calls))
    assert calls == []               # the repaired records were loaded, nothing refitted
    np.testing.assert_array_equal(again.params_flat, first.params_flat)
    assert again.params_flat[0, 0] < -0.9


def test_exact_accepts_params_where_the_hessian_is_indefinite():
    """At t = 0.2 (between the wells) H = -7: IJ cannot use it, exact CV never solves with
    it — it records its state and refits from there."""
    model, folds = DoubleWell(), acv.folds.Folds(FOLDS, len(TILTS))
    params = (np.asarray(0.2),)
    with pytest.raises(NotPositiveDefiniteError):
        acv.cross_validate(model, TILTS, folds, "ij", params=params, progress=False,
                           warn=False)
    res = _exact(params=params)
    d = res.diagnostics
    assert d["hessian_min_eig"] < -7.0 and d["hessian_pd"] is False
    assert d["exact_precondition"] == "repaired" and d["exact_precondition_floored"] == 1
    assert d["exact_converged"].all()
    for k, fold in enumerate(FOLDS):
        assert abs(res.params_flat[k, 0] - _grid_minimum(TILTS, fold)[0]) < 1e-4


def test_exact_refits_do_not_depend_on_the_units_of_the_data():
    """GaussianHMM(3) on x and on x / 100: the same fit in other units (means / 100,
    variances / 1e4). Refits whitened by the Hessian at the fit take the same path, so the
    fold losses agree up to the Jacobian |o| R log 100 and the fold parameters map back.
    (Identity-scaled BFGS from the model's own starts reached optima up to 3.9 nats apart.)"""
    x = simulate_gaussian_hmm(60, R=2, seed=3)
    model = acv.models.GaussianHMM(3, n_init=1)
    params = model.fit(x)
    scaled = params._replace(means=params.means / 100, variances=params.variances / 1e4)
    folds = acv.folds.contiguous(60, 0.1, 4, seed=0)[2:]
    kw = dict(progress=False, restarts=1, warn=False)
    a = acv.cross_validate(model, x, folds, "exact", params=params, **kw)
    b = acv.cross_validate(model, x / 100, folds, "exact", params=scaled, **kw)
    assert a.diagnostics["exact_precondition"] == "hessian"
    jacobian = folds.sizes * 2 * np.log(100.0)
    np.testing.assert_allclose(b.fold_loss + jacobian, a.fold_loss, rtol=0, atol=1e-6)
    np.testing.assert_allclose(100 * np.asarray(b.params.means), np.asarray(a.params.means),
                               rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(1e4 * np.asarray(b.params.variances),
                               np.asarray(a.params.variances), rtol=1e-6)
    np.testing.assert_allclose(np.asarray(b.params.transition_matrix),
                               np.asarray(a.params.transition_matrix), atol=1e-7)


def test_auto_refits_a_fold_whose_local_estimate_sits_in_the_worse_basin():
    """Folds A and D have local estimates in the +1 well that their error estimates vouch
    for (A: the chord stage's point, D: the IJ's), but fold B's exact refit (its +1 well is
    gone) lies in the lower -1 well of their objectives: auto refits both there. Every fold
    ends at its global minimum."""
    folds = acv.folds.Folds(FOLDS, len(TILTS))
    res = acv.cross_validate(DoubleWell(), TILTS, folds, "auto", progress=False, restarts=0,
                             warn=False)
    d = res.diagnostics
    assert list(d["other_optimum_folds"]) == [0, 2]
    assert list(d["fold_method"][:3]) == ["exact"] * 3 and d["auto_counts"]["chord"] == 2
    for k, fold in enumerate(FOLDS):
        t, _ = _grid_minimum(TILTS, fold)
        assert abs(res.params_flat[k, 0] - t) < 1e-3, (k, res.params_flat[k, 0], t)
    assert res.params_flat[2, 0] < -0.9


class TiltedValley(DoubleWell):
    """``F(t, v, w) = 2 (t^2 - 1)^2 + (sum_i w_i a_i) t + t^2 / 200 + sum_i w_i (v - b_i)^2 / 2``
    on units ``(a_i, b_i)``: the double well of :class:`DoubleWell` beside a quadratic
    valley in ``v`` centred on the kept units' mean of ``b``. Held-out loss
    ``((t - a_i)^2 + (v - b_i)^2) / 2`` per left-out unit."""

    def prepare(self, data, level=None):
        return jnp.asarray(data, dtype=jnp.float64), "within", len(data)

    def objective(self, params, data, weights, scheme="A", level=None):
        t, v = params
        a, b = data[:, 0], data[:, 1]
        return (2.0 * (t ** 2 - 1) ** 2 + jnp.sum(weights * a) * t + t ** 2 / 200
                + 0.5 * jnp.sum(weights * (v - b) ** 2))

    def heldout_loss(self, params, data, weights, level=None):
        t, v = params
        points = 0.5 * ((t - data[:, 0]) ** 2 + (v - data[:, 1]) ** 2)
        points = jnp.where(left_out(weights), points, 0.0)
        return jnp.sum(points), points

    def init_params(self, data, level=None, n=1, seed=0):
        return [(np.asarray(t), np.asarray(0.0)) for t in np.linspace(-1.5, 1.5, n)]

    def param_constraints(self):
        return (C.Real(), C.Real())

    def fit(self, data, level=None):
        """The stationary point in the ``+1`` well, ``v`` at the mean of ``b``."""
        return (DoubleWell.fit(self, data[:, 0])[0], np.asarray(np.mean(data[:, 1])))


def test_a_fit_beaten_on_the_full_data_sends_every_fold_to_the_best_basin():
    """Full data: ``s = 0.5``, so the ``-1`` well is 1 nat lower and the fit (``+1``) is a
    local optimum. Fold B (``s = 3.5``) loses the ``+1`` well and lands in ``-1``, below the
    fit on the full data. Fold A (``s = 1.5``, ``-1`` 3 nats lower) stays in ``+1`` when
    refitted warm, and its objective at fold B's optimum is 29 nats higher (the ``v``
    valleys of A and B are 2.9 apart): no candidate reveals the better basin, but a basin
    start from fold B's refit reaches it. Every fold ends at its brute-force minimum."""
    a = np.array([-1.0, -3.0] + [0.75] * 6)
    b = np.array([20.0] + [0.0] * 7)
    data = np.stack([a, b], 1)
    folds = [[0], [1], [2], [3]]
    res = acv.cross_validate(TiltedValley(), data, acv.folds.Folds(folds, len(a)), "exact",
                             progress=False, restarts=0, warn=False)
    d = res.diagnostics
    t = np.linspace(-3, 3, 600_001)
    for k, fold in enumerate(folds):
        keep = np.delete(np.arange(len(a)), fold)
        s, q = a[keep].sum(), b[keep].mean()
        f = 2.0 * (t ** 2 - 1) ** 2 + s * t + t ** 2 / 200 + 0.5 * np.sum((q - b[keep]) ** 2)
        assert abs(res.params_flat[k, 0] - t[np.argmin(f)]) < 1e-4
        assert abs(res.params_flat[k, 1] - q) < 1e-6
        assert abs(d["exact_objective"][k] - f.min()) < 1e-6
    assert res.params_flat[0, 0] < -0.9 and res.params_flat[1, 0] < -0.9   # A and B: -1
    assert res.params_flat[2, 0] > 0.9                                      # C stays at +1
    assert d["exact_improved_folds"].tolist() == [0] and d["better_optimum_folds"].tolist() == [1]
    assert d["unreliable_folds"].size == 0
