"""LinearChainCRF: weighted objectives at both levels and held-out losses against
enumeration over label paths; bad input gets named errors."""
import itertools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp

import approxcv as acv
from approxcv.errors import (BadlyScaledDataError, ConvergenceWarning, InvalidArgumentError,
                             InvalidDataError)

K, F = 3, 2


def corpus(n=6, seed=0, lengths=(1, 4)):
    rng = np.random.default_rng(seed)
    w = rng.normal(size=(F, K)) * 2
    out = []
    for _ in range(n):
        t = int(rng.integers(lengths[0], lengths[1] + 1))
        x = rng.normal(size=(t, F))
        out.append((x, np.argmax(x @ w + rng.gumbel(size=(t, K)), 1)))
    return out


def params_for(model, data, seed=1):
    rng = np.random.default_rng(seed)
    return model.params_template(data)._replace(**{
        f: rng.normal(size=np.shape(getattr(model.params_template(data), f)))
        for f in acv.models.LinearChainCRFParams._fields})


def brute_log_probs(model, params, x, y):
    """log p(z | x) of every path z (by enumeration) and the paths."""
    # one jitted program per sentence length, not dozens of eagerly compiled operations
    unary, trans, start, stop = (np.asarray(a) for a in jax.jit(model.scores)(params,
                                                                              jnp.asarray(x)))
    t = len(y)
    paths = np.array(list(itertools.product(range(K), repeat=t)))
    s = (start[paths[:, 0]] + unary[np.arange(t), paths].sum(1)
         + trans[paths[:, :-1], paths[:, 1:]].sum(1) + stop[paths[:, -1]])
    return s - logsumexp(s), paths


@pytest.mark.parametrize("start_stop", [True, False])
def test_objectives_and_heldout_equal_enumeration(start_stop):
    model = acv.models.LinearChainCRF(K, start_stop=start_stop)
    data = corpus()
    params = params_for(model, data)
    prior = -float(model.log_prior(params))
    nll = [-brute_log_probs(model, params, x, y)[0][
        np.flatnonzero(np.all(brute_log_probs(model, params, x, y)[1] == y, axis=1))[0]]
        for x, y in data]
    # the model's objective and held-out loss as the engine calls them (problem.fun and
    # problem.heldout: jitted, one program each instead of dozens of eager operations)
    at = {level: acv.make_problem(model, data, params, level=level)
          for level in ("structure", "within")}

    def objective(w, level):
        return float(at[level].fun(at[level].u_full, jnp.asarray(w), at[level].data))

    def heldout_loss(w, level):
        return at[level].heldout(at[level].u_full, jnp.asarray(w), at[level].data)
    # structure level: weighted sum of -log p(y_n | x_n)
    w = np.linspace(0.0, 1.0, len(data))
    np.testing.assert_allclose(objective(w, "structure"), np.dot(w, nll) + prior, rtol=1e-10)
    # within: all weights 1 is the ordinary likelihood, all 0 leaves the prior
    n_tok = sum(len(y) for _, y in data)
    np.testing.assert_allclose(objective(np.ones(n_tok), "within"), sum(nll) + prior,
                               rtol=1e-10)
    np.testing.assert_allclose(objective(np.zeros(n_tok), "within"), prior, rtol=1e-10)
    # within held-out: -log p(y_o | x, y_kept) and -log p(y_t | x, y_kept) by enumeration
    w = np.ones(n_tok)
    w[[1, 2, 4, n_tok - 1]] = 0.0
    fold, points = heldout_loss(w, "within")
    want_fold, want_points, start = 0.0, np.zeros(n_tok), 0
    for x, y in data:
        lp, paths = brute_log_probs(model, params, x, y)
        kept = w[start:start + len(y)] == 1
        consistent = np.all(paths[:, kept] == y[kept], axis=1)
        log_kept = logsumexp(lp[consistent])
        want_fold += log_kept - lp[np.all(paths == y, axis=1)][0]
        for t in np.flatnonzero(~kept):
            want_points[start + t] = log_kept - logsumexp(lp[consistent & (paths[:, t] == y[t])])
        start += len(y)
    np.testing.assert_allclose(fold, want_fold, rtol=1e-10)
    np.testing.assert_allclose(points, want_points, rtol=1e-10, atol=1e-12)
    # structure held-out: -log p(y_n | x_n) of the left-out sentences
    w = np.ones(len(data))
    w[[0, 3]] = 0.0
    fold, points = heldout_loss(w, "structure")
    np.testing.assert_allclose(points, np.where(w == 0, nll, 0.0), rtol=1e-10)


def test_buckets_change_nothing_but_padding(monkeypatch):
    data = corpus(n=8, seed=2, lengths=(1, 5))
    one = acv.models.LinearChainCRF(K)
    assert len(one.prepare(data)[0].buckets) == 1          # a small corpus: one bucket
    monkeypatch.setattr("approxcv.models.crf.data.MIN_PADDING_CELLS", 0)
    many = acv.models.LinearChainCRF(K, max_padding=0.0)
    many_data = many.prepare(data)[0]
    assert len(many_data.buckets) > 2
    monkeypatch.undo()
    params = params_for(one, data)
    n_tok = sum(len(y) for _, y in data)
    w = np.random.default_rng(3).uniform(size=n_tok)
    for level, ww in (("structure", w[:8]), ("within", w)):
        # the objectives as the engine calls them (jitted: one program per bucket layout)
        a, b = (acv.make_problem(m, d, params, level=level)
                for m, d in ((one, one.prepare(data)[0]), (many, many_data)))
        np.testing.assert_allclose(float(a.fun(a.u_full, jnp.asarray(ww), a.data)),
                                   float(b.fun(b.u_full, jnp.asarray(ww), b.data)), rtol=1e-12)
    pred = one.predict(params, [x for x, _ in data])
    lp, paths = brute_log_probs(one, params, *data[5])
    np.testing.assert_array_equal(pred[5], paths[np.argmax(lp)])


@pytest.mark.parametrize("bad,match", [
    (lambda d: [(d[0][0], d[0][1] + K)] + d[1:], "must lie in"),
    (lambda d: [(np.ones((3, F + 1)), np.zeros(3, int))] + d[1:], "features per token"),
    (lambda d: [(np.ones((0, F)), np.zeros(0, int))] + d[1:], "empty sentence"),
    (lambda d: [(np.full((2, F), np.nan), np.zeros(2, int))] + d[1:], "NaN"),
    (lambda d: [(np.ones((2, F)), np.zeros(3, int))] + d[1:], "labels must have shape"),
])
def test_bad_input_gets_a_named_error(bad, match):
    with pytest.raises(InvalidDataError, match=match):
        acv.models.LinearChainCRF(K).prepare(bad(corpus()))


def test_predict_refuses_the_params_that_cross_validate_refuses():
    """One parameter check: all-NaN parameters gave Viterbi labels [0, 0, 0] from predict
    while cross_validate refused them (issue 37, case 6)."""
    model, data = acv.models.LinearChainCRF(K), corpus(n=3)
    params = params_for(model, data)
    nan = params._replace(transitions=np.full((K, K), np.nan))
    with pytest.raises(InvalidArgumentError, match=r"`params.transitions` has NaN") as refused:
        acv.cross_validate(model, data, [[0]], params=nan, progress=False)
    with pytest.raises(InvalidArgumentError) as predicted:
        model.predict(nan, [x for x, _ in data])
    assert str(predicted.value) == str(refused.value)
    # and shapes of another model (2 labels), named by leaf with both shapes
    other = params_for(acv.models.LinearChainCRF(2), [(x, y * 0) for x, y in data])
    with pytest.raises(InvalidArgumentError, match=r"`params.weights` has shape \(2, 2\) but "
                                                   r".* needs \(2, 3\)"):
        model.predict(other, [x for x, _ in data])
    # a valid call still decodes
    assert [len(p) for p in model.predict(params, [x for x, _ in data])] == [
        len(y) for _, y in data]


def test_feature_width_is_checked_in_one_place_for_every_entry_point():
    """Features of another width: a raw dot_general TypeError from predict (issue 37,
    case 12); now a named error with the expected and the given width."""
    model, data = acv.models.LinearChainCRF(K), corpus(n=3)
    params = params_for(model, data)                      # fitted on F = 2 features
    wide = [(np.ones((3, F + 1)), np.zeros(3, int)), (np.ones((2, F + 1)), np.zeros(2, int))]
    with pytest.raises(InvalidDataError, match=rf"features\[0\] has {F + 1} features per "
                                               rf"token, but the parameters were fitted on {F}"):
        model.predict(params, [x for x, _ in wide])
    with pytest.raises(InvalidDataError, match=r"features\[1\] has 3 .* fitted on 2"):
        model.predict(params, [data[0][0], np.ones((2, 3))])
    with pytest.raises(InvalidArgumentError, match="must be a list"):
        model.predict(params, data[0][0])
    for call in (lambda: model.objective(params, wide, np.ones(2)),
                 lambda: model.heldout_loss(params, wide, np.ones(5), level="within"),
                 lambda: acv.cross_validate(model, wide, [[0]], params=params,
                                            progress=False)):
        with pytest.raises(InvalidArgumentError,
                           match=rf"`params.weights` has shape \({F}, {K}\) but .* needs "
                                 rf"\({F + 1}, {K}\)"):
            call()


def test_badly_scaled_features_raise_rescale_not_the_starting_point():
    """Features times 1e200 returned the start with a ConvergenceWarning (issue 37, weak):
    overflow is refused before the fit, and a fit that stalls on large features names the
    scale and says to standardise."""
    data = corpus(n=3)
    with pytest.raises(BadlyScaledDataError, match=r"\|x\| = .*e\+200.*standardise"):
        acv.models.LinearChainCRF(K).fit([(x * 1e200, y) for x, y in data])
    short = acv.models.LinearChainCRF(K, max_steps=3)
    with pytest.raises(BadlyScaledDataError, match="did not converge .* standardise"):
        short.fit([(x * 1e9, y) for x, y in data])
    with pytest.warns(ConvergenceWarning):                # unit scale: only the warning
        short.fit(data)
    with warnings.catch_warnings():
        warnings.simplefilter("error")                    # a well-scaled fit: no complaint
        acv.models.LinearChainCRF(K).fit([(x * 1e3, y) for x, y in data])


def _masked(seed=3):
    """A model holding a random third of W and two transitions at 0, its full twin."""
    rng = np.random.default_rng(seed)
    free_w = rng.random((F, K)) > 0.33
    free_a = np.ones((K, K), bool)
    free_a[0, 2] = free_a[2, 1] = False
    full = acv.models.LinearChainCRF(K, prior_variance=2.0)
    masked = acv.models.LinearChainCRF(K, prior_variance=2.0, free=acv.models.LinearChainCRFParams(
        free_w, None, free_a, None, None))
    return full, masked, free_w, free_a


def test_entries_held_at_zero_are_not_parameters():
    """``free=``: the masked model's u, gradient and Hessian are the full model's restricted
    to the free entries (the same objective at parameters with zeros there), and its fit
    and starts keep the held entries at 0."""
    data = corpus(8, seed=2)
    full, masked, free_w, free_a = _masked()
    params = params_for(full, data)
    params = params._replace(weights=np.where(free_w, params.weights, 0.0),
                             transitions=np.where(free_a, params.transitions, 0.0))
    p_full = acv.make_problem(full, data, params)
    p_mask = acv.make_problem(masked, data, params)
    keep = np.concatenate([m.ravel() for m in (free_w, np.ones(K, bool), free_a,
                                               np.ones(K, bool), np.ones(K, bool))])
    assert p_mask.u_full.shape[0] == keep.sum() < p_full.u_full.shape[0]
    ones = np.ones(p_full.n_units)
    g_full = jax.grad(p_full.fun)(p_full.u_full, ones, p_full.data)
    g_mask = jax.grad(p_mask.fun)(p_mask.u_full, ones, p_mask.data)
    h_full = jax.hessian(p_full.fun)(p_full.u_full, ones, p_full.data)
    h_mask = jax.hessian(p_mask.fun)(p_mask.u_full, ones, p_mask.data)
    np.testing.assert_allclose(g_mask, np.asarray(g_full)[keep], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(h_mask, np.asarray(h_full)[np.ix_(keep, keep)], rtol=1e-12,
                               atol=1e-12)
    fitted = masked.fit(data)
    assert np.all(fitted.weights[~free_w] == 0) and np.all(fitted.transitions[~free_a] == 0)
    assert np.any(fitted.weights[free_w] != 0)
    for start in masked.init_params(data, n=3, seed=0):
        assert np.all(start.weights[~free_w] == 0)
    assert "free entries" not in repr(full) and "masked entries free" in repr(masked)


def test_a_held_entry_off_zero_or_a_bad_mask_is_refused():
    data = corpus(4)
    _, masked, free_w, _ = _masked()
    params = masked.fit(data)
    bad = params._replace(weights=np.where(free_w, params.weights, 0.5))
    with pytest.raises(InvalidArgumentError, match="held at 0"):
        masked.check_params(bad, data)
    with pytest.raises(InvalidArgumentError, match=r"free.weights"):
        acv.models.LinearChainCRF(K, free=acv.models.LinearChainCRFParams(
            np.ones((F, K + 1), bool), None, None, None, None))
    with pytest.raises(InvalidArgumentError, match=r"free.transitions"):
        acv.models.LinearChainCRF(K, free=acv.models.LinearChainCRFParams(
            np.ones((F, K), bool), None, np.ones((K, K)), None, None))
    wide = [(np.c_[x, x[:, :1]], y) for x, y in data]
    with pytest.raises(InvalidDataError, match="features per token"):
        masked.prepare(wide)


def test_marginals_equal_enumeration():
    data = corpus(4, seed=5)
    model = acv.models.LinearChainCRF(K)
    params = params_for(model, data)
    for (x, y), marg in zip(data, model.predict_marginals(params, [x for x, _ in data])):
        logp, paths = brute_log_probs(model, params, x, y)
        want = np.stack([np.bincount(paths[:, t], np.exp(logp), K) for t in range(len(y))])
        np.testing.assert_allclose(marg, want, rtol=0, atol=1e-12)
