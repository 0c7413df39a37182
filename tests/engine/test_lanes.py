"""Folds in lanes (approxcv.engine.lanes, approxcv.inference.chain_lanes) equal the
fold-by-fold passes: the kernel against chain.heldout_losses and autodiff, in probability
space and against a log-space recursion where emissions differ by thousands of nats, and
LWCV by cross_validate with and without a small memory budget and against the fold-by-fold
passes, PoissonHMM and GaussianHMM (lanes forced on a small
series by lowering LANES_MIN_WORK and LANES_CHUNK)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp

import approxcv as acv
from approxcv.engine import lanes
from approxcv.inference import chain, chain_lanes
from approxcv.problem import make_problem


@pytest.fixture(scope="module")
def series():
    x = acv.datasets.load_calls(600)
    model = acv.models.PoissonHMM(2)
    return model, x, model.fit(x)


def _lane_pass(model, stack, x, index, chunk, block=1):
    """:func:`chain_lanes.lane_pass` of the folds ``index`` at the parameters ``stack``."""
    n = len(x)
    n_chunks = -(-n // chunk)
    pad = n_chunks * chunk - n
    index = np.sort(index, axis=1)
    counts = chain_lanes.chunk_counts(index, n, chunk)
    xs = jnp.concatenate([jnp.full(pad, float(x[0])), jnp.asarray(x, float)])
    run = jax.jit(lambda s, x_, i, e: chain_lanes.lane_pass(
        jnp.log(s[0]), jnp.log(s[1]), model._emission_log_lik, s, x_, i, e, n, chunk,
        int(counts.max()), block=block))
    return run(stack, xs, jnp.asarray(index, jnp.int32),
               jnp.asarray(np.cumsum(counts, axis=1).T, jnp.int32))


def _log_space_log_z(log_init, log_trans, log_lik):
    """``log Z`` by the forward recursion in log space (logsumexp at every step)."""
    def step(a, ll):
        a = logsumexp(a[:, None] + log_trans, axis=0) + ll
        return a, None
    a, _ = jax.lax.scan(step, log_init + log_lik[0], log_lik[1:])
    return logsumexp(a)


@pytest.mark.parametrize("rates, block", [(None, 1), (None, 4), ((1.0, 1000.0), 4)])
def test_lane_pass_equals_the_fold_by_fold_passes(series, rates, block):
    model, x, params = series
    if rates is not None:      # emissions thousands of nats apart: log space as reference
        params = params._replace(rates=jnp.asarray(rates))
    rng = np.random.default_rng(0)
    folds = acv.folds.iid(len(x), 0.1, 4, seed=1)
    per_fold = [params._replace(rates=params.rates * np.exp(0.01 * rng.normal(size=2)))
                for _ in range(len(folds))]
    stack = jax.tree_util.tree_map(lambda *a: jnp.stack(a), *per_fold)
    # 600 steps = 9 chunks + 40; normalisers multiplied ``block`` steps at a time
    assert chain_lanes.safe_block(float(chain_lanes.normaliser_floor(
        jnp.log(stack[0]), jnp.log(stack[1])))) == 4
    out = _lane_pass(model, stack, x, folds.padded(), chunk=64, block=block)
    xs = jnp.asarray(x, float)

    @jax.jit
    def reference(p, w):
        """Fold-by-fold: held-out losses, log-space ``log Z(kept)`` and the gradients of
        ``log Z(kept)`` in the emission parameters and the log-potentials."""
        pots = model.log_potentials(p, xs, jnp.ones(len(x)))
        fold_loss, points = chain.heldout_losses(*pots, w)
        log_z = _log_space_log_z(pots[0], pots[1], pots[2] * w[:, None])
        grad = jax.grad(lambda q: chain.weighted_log_marginal(
            *model.log_potentials(q, xs, jnp.ones(len(x))), w))(p)
        by_pots = jax.grad(lambda a, t: chain.weighted_log_marginal(a, t, pots[2], w),
                           argnums=(0, 1))(pots[0], pots[1])
        return fold_loss, points, log_z, grad, by_pots

    for b, p in enumerate(per_fold):
        w = jnp.asarray(acv.folds.Folds([folds[b]], len(x)).weights()[0])
        fold_loss, points, log_z, grad, by_pots = reference(p, w)
        np.testing.assert_allclose(out.log_z_kept[b], log_z, rtol=1e-13)
        np.testing.assert_allclose(out.log_z_kept[b] - out.log_z_full[b], fold_loss,
                                   rtol=1e-12)
        np.testing.assert_allclose(out.points[b][:folds.sizes[b]],
                                   np.asarray(points)[np.sort(folds[b])], rtol=1e-12)
        np.testing.assert_allclose(out.grad_emission.rates[b], grad.rates, rtol=1e-9,
                                   atol=1e-9)
        np.testing.assert_allclose(out.grad_init[b], by_pots[0], atol=1e-12)
        np.testing.assert_allclose(out.grad_trans[b], by_pots[1], rtol=1e-11, atol=1e-9)


def test_a_log_per_step_where_normalisers_may_underflow():
    assert chain_lanes.safe_block(1e-3) == 4
    assert chain_lanes.safe_block(1e-40) == 1            # floor ** 4 near the smallest double
    floor = chain_lanes.normaliser_floor(jnp.log(jnp.array([[0.5, 0.5]])),
                                         jnp.log(jnp.array([[[0.9, 0.1], [1e-50, 1.0]]])))
    np.testing.assert_allclose(floor, 1e-50)


def _ij(model, x, params, folds):
    res = acv.cross_validate(model, x, folds, "ij", params=params, progress=False,
                             warn=False)
    return res.fold_loss, np.concatenate(res.point_loss), res.diagnostics


@pytest.fixture
def in_lanes(monkeypatch):
    """Lanes on a small series: any amount of work, chunks of 64 steps."""
    monkeypatch.setattr(lanes, "LANES_MIN_WORK", 0)
    monkeypatch.setattr(lanes, "LANES_CHUNK", 64)
    return monkeypatch


def test_lwcv_with_a_small_memory_budget_gives_the_same_fold_losses_as_without(
        series, in_lanes):
    model, x, params = series
    folds = acv.folds.iid(len(x), 0.1, 6, seed=0)
    assert lanes.use_lanes(make_problem(model, x, params), folds.padded())
    without = _ij(model, x, params, folds)
    in_lanes.setattr(lanes, "LANES_MEMORY", 1)          # one fold per batch
    assert lanes.lane_batch_size(len(x), 60, 2, 20, len(folds), 1) == 1
    small = _ij(model, x, params, folds)
    np.testing.assert_allclose(small[0], without[0], rtol=1e-13)
    np.testing.assert_allclose(small[1], without[1], rtol=1e-13)
    np.testing.assert_allclose(small[2]["error_estimate"], without[2]["error_estimate"],
                               rtol=1e-9, atol=1e-15)


def _lanes_against_fold_by_fold(model, x, params, folds, in_lanes):
    """IJ in lanes and fold by fold: fold and point losses to 1e-12, error estimates to
    1e-6 (relative differences of nearly equal losses); returns both runs."""
    in_lanes.setattr(lanes, "LANES_MIN_WORK", 10 ** 18)
    per_fold = _ij(model, x, params, folds)
    in_lanes.setattr(lanes, "LANES_MIN_WORK", 0)
    got = _ij(model, x, params, folds)
    np.testing.assert_allclose(got[0], per_fold[0], rtol=1e-12)
    np.testing.assert_allclose(got[1], per_fold[1], rtol=1e-12)
    np.testing.assert_allclose(got[2]["error_estimate"], per_fold[2]["error_estimate"],
                               rtol=1e-6, atol=1e-14)
    return got, per_fold


def test_lwcv_in_lanes_equals_the_fold_by_fold_passes(series, in_lanes):
    model, x, params = series
    folds = acv.folds.iid(len(x), 0.1, 6, seed=0)
    got, per_fold = _lanes_against_fold_by_fold(model, x, params, folds, in_lanes)
    np.testing.assert_allclose(got[2]["chord_rate"], per_fold[2]["chord_rate"], rtol=1e-8)


def test_gaussian_hmm_lwcv_in_lanes_equals_the_fold_by_fold_passes(in_lanes):
    rng = np.random.default_rng(0)
    z = np.cumsum(rng.random(300) < 0.05) % 2
    x = rng.normal(np.where(z[:, None] > 0, 2.0, -1.0), 1.0, (300, 2))
    model = acv.models.GaussianHMM(2)
    params = model.fit(x)
    folds = acv.folds.iid(len(x), 0.1, 4, seed=0)
    _lanes_against_fold_by_fold(model, x, params, folds, in_lanes)


def test_folds_that_remove_more_than_they_score_in_lanes_equal_the_fold_by_fold_passes(
        series, in_lanes, scheme="A"):
    """h-block folds in lanes: the lanes' own held-out pass less the unscored units' term
    (:func:`approxcv.engine.heldout.heldout_losses` with ``removed=``) and the error
    estimate at the refined point equal the fold-by-fold passes."""
    model, x, params = series
    folds = acv.folds.hblock(len(x), 6, 5)
    in_lanes.setattr(lanes, "LANES_MIN_WORK", 10 ** 18)
    per_fold = acv.cross_validate(model, x, folds, "ij", params=params, scheme=scheme,
                                  progress=False, warn=False)
    in_lanes.setattr(lanes, "LANES_MIN_WORK", 0)
    assert lanes.use_lanes(make_problem(model, x, params, scheme=scheme), folds.padded())
    got = acv.cross_validate(model, x, folds, "ij", params=params, scheme=scheme,
                             progress=False, warn=False)
    np.testing.assert_allclose(got.fold_loss, per_fold.fold_loss, rtol=1e-12)
    np.testing.assert_allclose(np.concatenate(got.point_loss),
                               np.concatenate(per_fold.point_loss), rtol=1e-12)
    np.testing.assert_allclose(got.error_estimate, per_fold.error_estimate, rtol=1e-6,
                               atol=1e-14)
    assert [len(p) for p in got.point_loss] == [len(s) for s in folds.scored]
