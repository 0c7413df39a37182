"""Selection draws: reproducible per sample, independent of folds, with the right moments."""
import jax
import numpy as np
import pytest

import approxcv as acv
import approxcv.composite as scl

from .conftest import THETA4


@pytest.fixture(scope="module")
def bm():
    return scl.BoltzmannMachine(4)


def test_draws_are_reproducible_and_depend_only_on_seed_and_sample_index(bm):
    pol = scl.Policy([scl.pseudo_likelihood(bm, 1), scl.pseudo_likelihood(bm, 2)],
                     select=[0.6, 0.3])
    z50 = scl.draw_selection(pol, 50, seed=7)
    np.testing.assert_array_equal(z50, scl.draw_selection(pol, 50, seed=7))
    np.testing.assert_array_equal(z50[:30], scl.draw_selection(pol, 30, seed=7))
    assert not np.array_equal(z50, scl.draw_selection(pol, 50, seed=8))
    model = scl.SCLModel(bm, pol, seed=7)
    X = bm.sample(np.zeros(6), 50, seed=0)
    np.testing.assert_array_equal(np.asarray(model.prepare(X)[0].coef), z50 * pol.beta)


@pytest.mark.parametrize("kind, select", [
    ("bernoulli", [0.2, [0.9, 0.5, 0.5, 0.1, 0.3, 0.7]]),
    ("multinomial", [0.3, 0.7]),
    ("product", [[0.1, 0.2, 0.3, 0.4], None])])
def test_selection_frequencies_and_covariance_match_the_policy(bm, kind, select):
    groups = [scl.pseudo_likelihood(bm, 1), scl.pseudo_likelihood(bm, 2)]
    if select[1] is None:
        select = [select[0], 1 / 6]
    pol = scl.Policy(groups, select=select, kind=kind)
    n = 20000
    Z = scl.draw_selection(pol, n, seed=1)
    lam, cov = scl.selection_moments(pol)
    # 5 standard errors of a mean of 0/1 draws
    assert np.all(np.abs(Z.mean(0) - lam) < 5 * np.sqrt(lam * (1 - lam) / n)), Z.mean(0)
    assert np.all(np.abs(np.cov(Z.T) - cov) < 5 / np.sqrt(n))
    if kind == "multinomial":       # one group per sample, all its components
        assert np.all(Z[:, :4].all(1) ^ Z[:, 4:].all(1)) and np.all(Z.sum(1) % 2 == 0)
    if kind == "product":           # one component of each group per sample
        assert np.all(Z[:, :4].sum(1) == 1) and np.all(Z[:, 4:].sum(1) == 1)


def test_a_left_out_sample_takes_its_draw_with_it(bm4):
    """F(theta, 1) - F(theta, w_(3)) = -sum_j Z_3j log p(x_j | x_-j), the direct PL1 terms
    of sample 3's own draws."""
    bm, X = bm4
    model = scl.SCLModel(bm, scl.Policy(scl.pseudo_likelihood(bm, 1), select=0.5), seed=1)
    problem = acv.make_problem(model, X, scl.SCLParams(THETA4))
    w = np.ones(len(X))
    w[3] = 0
    fun = jax.jit(problem.fun)
    drop = fun(problem.u_full, np.ones(len(X)), problem.data) - fun(problem.u_full, w,
                                                                     problem.data)
    W = np.zeros((4, 4))
    W[np.triu_indices(4, 1)] = THETA4
    a = X[3] @ (W + W.T)
    own = model.selections(len(X))[3] @ (X[3] * a - np.logaddexp(0.0, a))
    np.testing.assert_allclose(float(drop), -own, rtol=1e-12)


def test_labels_tell_policies_apart(bm):
    pl1 = scl.pseudo_likelihood(bm, 1)
    vec = [0.2, 0.5, 0.7, 0.9]
    labels = [scl.Policy(pl1, select=v).label() for v in (0.3, 0.30001, [vec], [vec[::-1]])]
    assert len(set(labels)) == 4
    assert labels[0] == "PL1(lam=0.3, beta=1)"
    assert labels[1] == "PL1(lam=0.30001, beta=1)"
    assert labels[2].startswith("PL1(lam=vec(0.2..0.9)#") and labels[2] != labels[3]
    # the label is a function of the values: equal policies, equal labels
    assert scl.Policy(pl1, select=[vec]).label() == labels[2]
