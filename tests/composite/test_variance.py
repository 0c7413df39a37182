"""Sandwich variance and the exact asymptotic variance against direct NumPy computations."""
import numpy as np
import pytest

import approxcv.composite as scl

from .conftest import THETA4, states, suff_stats


def _moments(theta):
    """``(E T, Cov T)`` of the sufficient statistics under ``theta`` by enumeration."""
    S = suff_stats(states(4))
    logp = S @ theta
    p = np.exp(logp - np.logaddexp.reduce(logp))
    mean = p @ S
    return mean, (S - mean).T @ ((S - mean) * p[:, None])


def test_per_sample_scores_are_the_direct_scores_and_sum_to_the_gradient(bm4):
    bm, X = bm4
    model = scl.SCLModel(bm, scl.Policy(scl.full_likelihood(bm)))
    data = model.prepare(X)[0]
    out = scl.sandwich(model, data, scl.SCLParams(THETA4))       # away from the fit
    mean, cov = _moments(THETA4)
    direct = suff_stats(X) - mean                                # grad log p(x_i)
    np.testing.assert_allclose(out["scores"], direct, atol=1e-12)
    gradient = -(suff_stats(X).sum(0) - len(X) * mean)           # dF/dtheta, F = -sum log p
    np.testing.assert_allclose(-out["scores"].sum(0), gradient, atol=1e-10)
    np.testing.assert_allclose(out["hessian"], len(X) * cov, rtol=1e-10)


def test_sandwich_of_the_mle_is_built_from_the_observed_information(bm4):
    bm, X = bm4
    fit = scl.fit(bm, X, scl.Policy(scl.full_likelihood(bm)))
    _, cov = _moments(fit.theta)
    T = suff_stats(X)
    centred = T - T.mean(0)
    h_inv = np.linalg.inv(len(X) * cov)
    np.testing.assert_allclose(fit.variance(), h_inv @ centred.T @ centred @ h_inv,
                               rtol=1e-8)
    # lambda = 1: no selection noise, both forms agree
    np.testing.assert_allclose(fit.variance("paper"), fit.variance(), rtol=1e-12)


def test_exact_asymptotic_variance_of_the_mle_is_the_inverse_fisher_information():
    bm = scl.BoltzmannMachine(4)
    _, fisher = _moments(THETA4)
    v = scl.asymptotic_variance(bm, scl.Policy(scl.full_likelihood(bm)), THETA4)
    np.testing.assert_allclose(v, np.linalg.inv(fisher), rtol=1e-10)


@pytest.mark.parametrize("lam", [0.3, 1.0])
def test_exact_variance_of_subsampled_pl_adds_the_selection_noise(lam):
    """PL1 with every component selected w.p. lambda: Upsilon^{-1} = lambda sum_j E g_j g_j^T,
    Sigma = lambda^2 E[G G^T] + lambda (1 - lambda) sum_j E g_j g_j^T (corrected), or
    lambda^2 E[G G^T] (printed eq. 17), with the analytic PL1 scores g_j and G = sum_j g_j."""
    bm = scl.BoltzmannMachine(4)
    s = states(4)
    logp = suff_stats(s) @ THETA4
    p = np.exp(logp - np.logaddexp.reduce(logp))
    W = np.zeros((4, 4))
    W[np.triu_indices(4, 1)] = THETA4
    W = W + W.T
    resid = s - 1 / (1 + np.exp(-(s @ W)))                      # x_j - sigma(a_j)
    pairs = list(zip(*np.triu_indices(4, 1)))
    g = np.zeros((16, 4, 6))                                     # (state, j, pair)
    for d, (k, l) in enumerate(pairs):
        g[:, k, d] = resid[:, k] * s[:, l]
        g[:, l, d] = resid[:, l] * s[:, k]
    own = np.einsum("s,sjd,sje->de", p, g, g)
    G = g.sum(1)
    both = np.einsum("s,sd,se->de", p, G, G)
    u = np.linalg.inv(lam * own)
    pol = scl.Policy(scl.pseudo_likelihood(bm, 1), select=lam)
    np.testing.assert_allclose(scl.asymptotic_variance(bm, pol, THETA4),
                               u @ (lam ** 2 * both + lam * (1 - lam) * own) @ u, rtol=1e-9)
    np.testing.assert_allclose(scl.asymptotic_variance(bm, pol, THETA4, "paper"),
                               u @ (lam ** 2 * both) @ u, rtol=1e-9)


def test_cost_is_n_sum_lambda_c():
    bm = scl.BoltzmannMachine(5)
    pol = scl.Policy([scl.full_likelihood(bm), scl.pseudo_likelihood(bm, 1)],
                     select=[0.25, 1.0])
    # FL: 4 T (2^5 + 1); PL1: 4 T (2 + 1) per component, T = 10 energy terms
    want = 14 * (0.25 * 40 * 33 + 5 * 40 * 3)
    assert scl.expected_cost(bm, pol, 14) == pytest.approx(want, rel=1e-12)
