"""Chain kernels against brute-force enumeration over all K^T latent paths."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import logsumexp

from approxcv.inference import chain


def random_potentials(K, T, seed):
    rng = np.random.default_rng(seed)
    init = rng.dirichlet(np.ones(K))
    trans = rng.dirichlet(np.ones(K), size=K)
    log_lik = rng.normal(size=(T, K)) * 2.0
    return np.log(init), np.log(trans), log_lik


def enumerate_log_z(log_init, log_trans, log_lik, w, scheme):
    """log sum over all paths of the weighted joint (module docstring of chain.py)."""
    T, K = log_lik.shape
    terms = []
    for z in itertools.product(range(K), repeat=T):
        if scheme == "A":
            s = log_init[z[0]] + sum(log_trans[z[t - 1], z[t]] for t in range(1, T))
        else:
            s = w[0] * log_init[z[0]] + sum(w[t - 1] * w[t] * log_trans[z[t - 1], z[t]]
                                            for t in range(1, T))
        s += sum(w[t] * log_lik[t, z[t]] for t in range(T))
        terms.append(s)
    out = logsumexp(terms)
    if scheme == "B":
        out -= np.sum(1.0 - np.asarray(w)) * np.log(K)
    return out


def log_marginal_subset(log_init, log_trans, log_lik, keep):
    """log p(x_S) in the full model by enumeration (observations outside S marginalised)."""
    return enumerate_log_z(log_init, log_trans, log_lik, np.asarray(keep, float), "A")


@settings(max_examples=15, deadline=None, derandomize=True)
@given(K=st.integers(2, 3), T=st.integers(2, 6), seed=st.integers(0, 10_000),
       scheme=st.sampled_from(["A", "B"]))
def test_weighted_log_marginal_equals_enumeration(K, T, seed, scheme):
    pots = random_potentials(K, T, seed)
    w = np.random.default_rng(seed + 1).uniform(0, 1, T)
    w[np.random.default_rng(seed + 2).random(T) < 0.3] = 0.0
    # jitted: one program per shape, not dozens of eagerly compiled operations
    got = jax.jit(chain.weighted_log_marginal, static_argnums=4)(
        *map(jnp.asarray, pots), jnp.asarray(w), scheme)
    np.testing.assert_allclose(float(got), enumerate_log_z(*pots, w, scheme), rtol=1e-10,
                               atol=1e-12)


@pytest.mark.parametrize("K,T", [(2, 6), (3, 5)])
def test_posterior_marginals_equal_enumeration(K, T):
    log_init, log_trans, log_lik = random_potentials(K, T, 3)
    post = chain.posterior_marginals(log_init, log_trans, log_lik)
    paths = list(itertools.product(range(K), repeat=T))
    lj = np.array([log_init[z[0]] + sum(log_trans[z[t - 1], z[t]] for t in range(1, T))
                   + sum(log_lik[t, z[t]] for t in range(T)) for z in paths])
    probs = np.exp(lj - logsumexp(lj))
    marg = np.zeros((T, K))
    for p, z in zip(probs, paths):
        marg[np.arange(T), z] += p
    np.testing.assert_allclose(np.exp(post.log_smoothed_probs), marg, atol=1e-12)
    np.testing.assert_allclose(float(post.log_normalizer), logsumexp(lj), rtol=1e-12)


@pytest.mark.parametrize("out", [[2], [0, 3], [1, 2, 3], [4, 5], [0]])
def test_heldout_losses_equal_enumeration(out):
    K, T = 2, 6
    pots = random_potentials(K, T, 7)
    w = np.ones(T)
    w[out] = 0.0
    fold, points = chain.heldout_losses(*pots, jnp.asarray(w))
    log_all = log_marginal_subset(*pots, np.ones(T))
    log_kept = log_marginal_subset(*pots, w)
    np.testing.assert_allclose(float(fold), -(log_all - log_kept), rtol=1e-10)
    for t in range(T):
        if t in out:
            keep_t = w.copy()
            keep_t[t] = 1.0
            expected = -(log_marginal_subset(*pots, keep_t) - log_kept)
            np.testing.assert_allclose(float(points[t]), expected, rtol=1e-10)
        else:
            assert float(points[t]) == 0.0


def test_heldout_losses_do_not_depend_on_scheme_weights_only_on_kept_set():
    """Held-out losses are defined in the full model: fractional weights act as 0/1 masks."""
    pots = random_potentials(2, 6, 11)
    w = np.array([1.0, 0.0, 1.0, 1.0, 0.0, 1.0])
    a = chain.heldout_losses(*pots, jnp.asarray(w))
    b = chain.heldout_losses(*pots, jnp.asarray(np.where(w > 0, 0.7, 0.0)))
    np.testing.assert_allclose(np.asarray(a[1]), np.asarray(b[1]))


@pytest.mark.parametrize("start", [1, 3, 5])
def test_schemes_a_and_b_coincide_on_leave_future_out(start):
    pots = random_potentials(3, 6, 5)
    w = np.ones(6)
    w[start:] = 0.0
    a = chain.weighted_log_marginal(*pots, jnp.asarray(w), "A")
    b = chain.weighted_log_marginal(*pots, jnp.asarray(w), "B")
    np.testing.assert_allclose(float(a), float(b), rtol=1e-12)


def test_schemes_a_and_b_differ_on_interior_fold():
    pots = random_potentials(3, 6, 5)
    w = np.ones(6)
    w[2:4] = 0.0
    a = chain.weighted_log_marginal(*pots, jnp.asarray(w), "A")
    b = chain.weighted_log_marginal(*pots, jnp.asarray(w), "B")
    assert abs(float(a) - float(b)) > 1e-3


def test_time_varying_transitions_match_enumeration():
    K, T = 2, 5
    rng = np.random.default_rng(0)
    log_init, _, log_lik = random_potentials(K, T, 1)
    log_trans = np.log(rng.dirichlet(np.ones(K), size=(T - 1, K)))
    got = chain.log_normalizer(log_init, log_trans, log_lik)
    terms = [log_init[z[0]] + sum(log_trans[t - 1, z[t - 1], z[t]] for t in range(1, T))
             + sum(log_lik[t, z[t]] for t in range(T))
             for z in itertools.product(range(K), repeat=T)]
    np.testing.assert_allclose(float(got), logsumexp(terms), rtol=1e-12)


def test_unknown_scheme_is_rejected():
    pots = random_potentials(2, 4, 0)
    with pytest.raises(ValueError, match="scheme"):
        chain.weighted_potentials(*pots, jnp.ones(4), "C")


def test_window_heldout_losses_with_the_same_parameters_equal_the_full_pass():
    """With boundary messages of the same parameters a window is exact wherever it lies: at
    the chain's start, inside, at its end (windows of one length: one compiled program)."""
    rng = np.random.default_rng(3)
    T, K, L = 300, 3, 61
    log_init = jnp.log(jnp.array([0.5, 0.3, 0.2]))
    log_trans = jnp.log(0.7 * np.eye(K) + 0.3 * rng.dirichlet(np.ones(K), size=K))
    log_lik = jnp.asarray(2.0 * rng.normal(size=(T, K)))
    log_filtered, log_backward = jax.jit(chain.boundary_messages)(log_init, log_trans, log_lik)
    full_pass = jax.jit(chain.heldout_losses)
    window = jax.jit(chain.window_heldout_losses, static_argnums=6)
    for start, out in [(0, [3, 5, 20]), (120, [150, 152, 160]), (T - L, [250, 251, 290])]:
        w = np.ones(T)
        w[out] = 0.0
        fold, points = full_pass(log_init, log_trans, log_lik, jnp.asarray(w))
        stop = start + L
        wfold, wpoints = window(
            log_init, log_trans, log_lik[start:stop], jnp.asarray(w[start:stop]),
            log_filtered[max(start - 1, 0)], log_backward[stop - 1], start == 0)
        np.testing.assert_allclose(float(wfold), float(fold), rtol=1e-10)
        np.testing.assert_allclose(np.asarray(wpoints), np.asarray(points)[start:stop],
                                   rtol=1e-10, atol=1e-12)
