"""Linear-chain CRF kernels against brute-force enumeration over all label paths."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import logsumexp

from approxcv.inference import crf

K, T = 3, 5


def _scores(seed, with_start_stop):
    rng = np.random.default_rng(seed)
    unary = rng.normal(scale=2.0, size=(T, K))
    trans = rng.normal(scale=2.0, size=(K, K))
    start, stop = ((rng.normal(size=K), rng.normal(size=K)) if with_start_stop
                   else (np.zeros(K), np.zeros(K)))
    return unary, trans, start, stop


def _paths(length):
    return np.array(list(itertools.product(range(K), repeat=length)))


def _brute(unary, trans, start, stop, length, factors=None):
    """log Z, marginals (length, K) and every path's score by enumeration."""
    paths = _paths(length)
    s = (start[paths[:, 0]] + unary[np.arange(length), paths].sum(1)
         + trans[paths[:, :-1], paths[:, 1:]].sum(1) + stop[paths[:, -1]])
    if factors is not None:
        with np.errstate(divide="ignore"):
            s = s + np.log(factors[np.arange(length), paths]).sum(1)
    log_z = logsumexp(s)
    p = np.exp(s - log_z)
    marg = np.stack([np.bincount(paths[:, t], weights=p, minlength=K) for t in range(length)])
    return float(log_z), marg, s, paths


@pytest.mark.parametrize("with_start_stop", [False, True])
def test_log_partition_and_marginals_equal_enumeration_with_padding(with_start_stop):
    unary, trans, start, stop = _scores(0, with_start_stop)
    length = 4                                   # one padded step at the end
    mask = (np.arange(T) < length).astype(float)
    post = crf.posterior(jnp.asarray(unary), trans, start, stop, mask)
    log_z, marg, s, paths = _brute(unary, trans, start, stop, length)
    np.testing.assert_allclose(post.log_normalizer, log_z, rtol=1e-12)
    np.testing.assert_allclose(post.marginals[:length], marg, atol=1e-12)
    np.testing.assert_array_equal(post.marginals[length:], 0.0)
    labels = np.concatenate([paths[7], [0]])
    np.testing.assert_allclose(crf.path_score(unary, trans, start, stop, mask, labels),
                               s[7], rtol=1e-12)
    best = crf.viterbi(unary, trans, start, stop, mask)
    np.testing.assert_array_equal(best[:length], paths[np.argmax(s)])
    assert best[length] == -1


@pytest.mark.parametrize("with_start_stop", [False, True])
def test_clamped_pass_equals_enumeration_over_consistent_paths(with_start_stop):
    unary, trans, start, stop = _scores(1, with_start_stop)
    mask = np.ones(T)
    labels = np.array([2, 0, 1, 1, 0])
    kept = np.array([1.0, 0.0, 1.0, 0.0, 0.0])
    post = crf.posterior(unary, trans, start, stop, mask,
                         crf.clamp_factors(labels, jnp.asarray(kept), K))
    _, _, s, paths = _brute(unary, trans, start, stop, T)
    consistent = np.all((paths == labels) | (kept == 0), axis=1)
    log_zc = logsumexp(s[consistent])
    np.testing.assert_allclose(post.log_normalizer, log_zc, rtol=1e-12)
    p = np.exp(s[consistent] - log_zc)
    marg = np.stack([np.bincount(paths[consistent, t], weights=p, minlength=K)
                     for t in range(T)])
    np.testing.assert_allclose(post.marginals, marg, atol=1e-12)
    # all clamped: log Z_c is the path's score; none: log Z
    ones = crf.log_partition(unary, trans, start, stop, mask,
                             crf.clamp_factors(labels, jnp.ones(T), K))
    np.testing.assert_allclose(ones, crf.path_score(unary, trans, start, stop, mask, labels),
                               rtol=1e-12)
    zeros = crf.log_partition(unary, trans, start, stop, mask,
                              crf.clamp_factors(labels, jnp.zeros(T), K))
    np.testing.assert_allclose(zeros, logsumexp(s), rtol=1e-12)


def test_soft_weights_are_a_mixture_and_differentiable_at_one():
    """Fractional weights mix clamped and summed-out labels; the derivative at w = 1 is
    finite and equals the enumerated one."""
    unary, trans, start, stop = _scores(2, True)
    mask, labels = np.ones(T), np.array([0, 1, 2, 0, 1])
    w = np.array([1.0, 0.3, 1.0, 0.0, 0.8])
    f = crf.clamp_factors(labels, jnp.asarray(w), K)
    log_zc, _, _, _ = _brute(unary, trans, start, stop, T, np.asarray(f))
    np.testing.assert_allclose(crf.log_partition(unary, trans, start, stop, mask, f), log_zc,
                               rtol=1e-12)

    def lzc(w):
        return crf.log_partition(unary, trans, start, stop, mask,
                                 crf.clamp_factors(labels, w, K))
    g = jax.grad(lzc)(jnp.ones(T))
    assert np.all(np.isfinite(g))
    _, _, s, paths = _brute(unary, trans, start, stop, T)
    # d log Z_c / d w_t at w = 1: Z_c = a_y + (1 - w_t) sum_{k != y} a_k (others clamped)
    for t in range(T):
        others = np.all(paths[:, np.arange(T) != t] == labels[np.arange(T) != t], axis=1)
        a = np.exp(s[others] - s[others].max())
        a_y = a[paths[others, t] == labels[t]].sum()
        np.testing.assert_allclose(g[t], -(a.sum() - a_y) / a_y, rtol=1e-9)


def test_large_scores_do_not_overflow():
    unary, trans, start, stop = _scores(3, True)
    mask = np.ones(T)
    big = crf.log_partition(unary * 300 + 800, trans * 100, start, stop, mask)
    ref, _, _, _ = _brute(unary * 300 + 800, trans * 100, start, stop, T)
    np.testing.assert_allclose(big, ref, rtol=1e-12)
