"""Boltzmann machine likelihood objects against brute-force enumeration and a generic
optimiser (scipy)."""
import jax
import numpy as np
import scipy.optimize

import approxcv as acv
import approxcv.composite as scl
from approxcv.composite.model import SCLModel

from .conftest import THETA4, log_probs_direct, states, suff_stats


def _brute_conditional(theta, biases, x, a, b):
    """``log p(x_A | x_B)`` by summing the joint over all 2^m states (NumPy)."""
    m = len(x)
    s = states(m)
    i, j = np.triu_indices(m, 1)
    logp = s[:, i] * s[:, j] @ theta[:len(i)] + s @ biases
    agree = lambda idx: np.all(s[:, idx] == x[idx], axis=1)
    num = np.logaddexp.reduce(logp[agree(list(a) + list(b))])
    den = np.logaddexp.reduce(logp[agree(list(b))]) if b else np.logaddexp.reduce(logp)
    return num - den


def test_likelihood_objects_match_brute_force_enumeration():
    """Order-1 and order-2 PL, a marginal component (C non-empty) and B empty, with biases."""
    rng = np.random.default_rng(0)
    bm = scl.BoltzmannMachine(4, biases=True)
    theta = rng.normal(size=bm.n_params)
    X = rng.integers(0, 2, size=(7, 4)).astype(float)
    items = (((1,), (0, 2, 3)), ((0, 3), (1, 2)), ((0,), (2,)), ((1, 2), ()), ((2,), (1, 3)))
    model = SCLModel(bm, scl.Policy([scl.pseudo_likelihood(bm, 1), list(items)]))
    got = model.component_table(theta, bm.prepare_samples(X))
    want = np.array([[_brute_conditional(theta[:6], theta[6:], x, a, b)
                      for a, b in model.policy.items] for x in X])
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_order1_pl_objective_is_the_direct_pseudo_likelihood():
    """sum_i sum_j [x_j a_j - log(1 + e^{a_j})], a_j = sum_k theta_jk x_k + b_j (seed eq. 7)."""
    rng = np.random.default_rng(1)
    bm = scl.BoltzmannMachine(4, biases=True)
    theta = rng.normal(size=bm.n_params)
    X = rng.integers(0, 2, size=(9, 4)).astype(float)
    W = np.zeros((4, 4))
    W[np.triu_indices(4, 1)] = theta[:6]
    W = W + W.T
    a = X @ W + theta[6:]
    direct = np.sum(X * a - np.logaddexp(0.0, a))
    model = SCLModel(bm, scl.Policy(scl.pseudo_likelihood(bm, 1)))
    problem = acv.make_problem(model, X, scl.SCLParams(theta))
    value = jax.jit(problem.fun)(problem.u_full, np.ones(9), problem.data)
    np.testing.assert_allclose(float(value), -direct, rtol=1e-12)


def test_order_m_pl_equals_the_full_likelihood_and_log_prob(bm4):
    bm, X = bm4
    full = SCLModel(bm, scl.Policy(scl.full_likelihood(bm)))
    order4 = SCLModel(bm, scl.Policy(scl.pseudo_likelihood(bm, 4)))
    samples = bm.prepare_samples(X)
    a = full.component_table(THETA4, samples)[:, 0]
    b = order4.component_table(THETA4, samples)[:, 0]
    np.testing.assert_allclose(a, log_probs_direct(THETA4, X), rtol=1e-12)
    np.testing.assert_allclose(b, a, rtol=1e-12)
    np.testing.assert_allclose(bm.log_prob(THETA4, X), a, rtol=1e-12)


def test_full_likelihood_fit_is_the_mle_of_a_generic_optimiser(bm4):
    """lambda = 1 with the one full component: the MLE of scipy's BFGS on the NumPy NLL."""
    bm, X = bm4
    fit = scl.fit(bm, X, scl.Policy(scl.full_likelihood(bm)))
    T = suff_stats(X)
    S = suff_stats(states(4))

    def nll(th):
        log_z = np.logaddexp.reduce(S @ th)
        p = np.exp(S @ th - log_z)
        return -(T @ th).sum() + len(X) * log_z, -T.sum(0) + len(X) * (p @ S)

    ref = scipy.optimize.minimize(nll, np.zeros(6), jac=True, method="BFGS",
                                  options={"gtol": 1e-10})
    np.testing.assert_allclose(fit.theta, ref.x, atol=1e-6)
    assert fit.model.fit_result_["converged"]


def test_pseudo_likelihood_fit_is_the_direct_maximiser(bm4):
    bm, X = bm4
    fit = scl.fit(bm, X, scl.Policy(scl.pseudo_likelihood(bm, 1)))

    def neg_pl(th):
        W = np.zeros((4, 4))
        W[np.triu_indices(4, 1)] = th
        a = X @ (W + W.T)
        return -np.sum(X * a - np.logaddexp(0.0, a))

    ref = scipy.optimize.minimize(neg_pl, np.zeros(6), method="BFGS", options={"gtol": 1e-9})
    np.testing.assert_allclose(fit.theta, ref.x, atol=1e-5)


def test_exact_sampler_matches_the_state_probabilities():
    bm = scl.BoltzmannMachine(3)
    theta = np.array([1.0, -1.0, 0.5])
    X = bm.sample(theta, 20000, seed=0)
    s, p = bm.state_probabilities(theta)
    freq = np.array([np.mean(np.all(X == row, axis=1)) for row in s])
    assert abs(p.sum() - 1) < 1e-12
    # 5 binomial standard errors per state
    assert np.all(np.abs(freq - p) < 5 * np.sqrt(p * (1 - p) / len(X)))
    np.testing.assert_array_equal(bm.sample(theta, 5, seed=4), bm.sample(theta, 5, seed=4))
