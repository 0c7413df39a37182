"""Shared tiny problems of the composite-likelihood tests: a 4-node Boltzmann machine."""
import itertools

import numpy as np
import pytest

import approxcv.composite as scl

#: 4-node couplings theta_01, theta_02, theta_03, theta_12, theta_13, theta_23
THETA4 = np.array([-0.8, 0.6, -0.4, 0.9, -0.7, 0.5])


def states(m):
    return np.array(list(itertools.product((0.0, 1.0), repeat=m)))


def suff_stats(X):
    """``T(x) = (x_i x_j)_{i<j}`` in lexicographic pair order, ``(n, D)`` (NumPy)."""
    i, j = np.triu_indices(X.shape[1], 1)
    return X[:, i] * X[:, j]


def log_probs_direct(theta, X):
    """``log p(x)`` of a bias-free Boltzmann machine by NumPy enumeration."""
    s = states(X.shape[1])
    log_z = np.logaddexp.reduce(suff_stats(s) @ theta)
    return suff_stats(X) @ theta - log_z


@pytest.fixture(scope="module")
def bm4():
    bm = scl.BoltzmannMachine(4)
    return bm, bm.sample(THETA4, 150, seed=3)
