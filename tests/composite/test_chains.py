"""Boltzmann chain and CRF components against brute-force enumeration of short sentences."""
import itertools

import numpy as np

import approxcv.composite as scl
from approxcv.composite.chains import BoltzmannChain, CRFComponents
from approxcv.composite.model import SCLModel
from approxcv.models import LinearChainCRF


def _joint_table(start, A, B, T):
    """``log p(x, y)`` of every (tokens, labels) sequence of length ``T`` (dict)."""
    K, V = B.shape
    out = {}
    for y in itertools.product(range(K), repeat=T):
        for x in itertools.product(range(V), repeat=T):
            out[(x, y)] = (start[y[0]] + sum(A[y[t - 1], y[t]] for t in range(1, T))
                           + sum(B[y[t], x[t]] for t in range(T)))
    log_z = np.logaddexp.reduce(list(out.values()))
    return {k: v - log_z for k, v in out.items()}


def _conditional(table, x, y, window, T):
    """``log p(x_W, y_W | y_{W-1}, y_{W+k})`` by summing the joint table."""
    keep = [t for t in (window[0] - 1, window[-1] + 1) if 0 <= t < T]

    def agree(k, ts_x, ts_y):
        return all(k[0][t] == x[t] for t in ts_x) and all(k[1][t] == y[t] for t in ts_y)
    # every other token and label is summed out on both sides
    num = [v for k, v in table.items() if agree(k, window, list(window) + keep)]
    den = [v for k, v in table.items() if agree(k, [], keep)]
    return np.logaddexp.reduce(num) - np.logaddexp.reduce(den)


def test_boltzmann_chain_components_match_enumeration():
    rng = np.random.default_rng(0)
    chain = BoltzmannChain(2, 3)
    theta = rng.normal(size=chain.n_params)
    sents = [(np.array([0, 2, 1]), np.array([1, 0, 1])), (np.array([2, 2, 0]),
                                                           np.array([0, 0, 1]))]
    model = SCLModel(chain, scl.Policy([scl.full_likelihood(chain),
                                        scl.pseudo_likelihood(chain, 1),
                                        scl.pseudo_likelihood(chain, 2)]))
    samples = chain.prepare_samples(sents)
    got = model.component_table(theta, samples)
    start, A, B = (np.asarray(a) for a in chain.split(theta))
    table = _joint_table(start, A, B, 3)
    for i, (x, y) in enumerate(sents):
        key = (tuple(x), tuple(y))
        want = [table[key],
                sum(_conditional(table, key[0], key[1], [t], 3) for t in range(3)),
                sum(_conditional(table, key[0], key[1], [t, t + 1], 3) for t in range(2))]
        np.testing.assert_allclose(got[i], want, rtol=1e-10)


def test_crf_components_match_enumeration_and_the_crf_likelihood():
    rng = np.random.default_rng(1)
    crf = LinearChainCRF(3)
    comp = CRFComponents(crf)
    sents = [(rng.normal(size=(4, 2)), np.array([0, 2, 2, 1])),
             (rng.normal(size=(3, 2)), np.array([1, 1, 0]))]
    model = SCLModel(comp, scl.Policy([scl.full_likelihood(comp),
                                       scl.pseudo_likelihood(comp, 1),
                                       scl.pseudo_likelihood(comp, 2)]))
    samples = comp.prepare_samples(sents)
    theta = rng.normal(size=comp.n_params)
    got = model.component_table(theta, samples)
    params = comp.split(theta)
    for i, (x, y) in enumerate(sents):
        unary, trans, start, stop = (np.asarray(a) for a in crf.scores(params, x))
        T = len(y)
        score = {z: start[z[0]] + stop[z[-1]] + sum(unary[t, z[t]] for t in range(T))
                 + sum(trans[z[t - 1], z[t]] for t in range(1, T))
                 for z in itertools.product(range(3), repeat=T)}
        log_z = np.logaddexp.reduce(list(score.values()))

        def cond(window):
            # given all other labels (by the Markov property, the same as given the
            # window's neighbours): sum over the window's labels only
            keep = [t for t in range(T) if t not in window]
            den = [v for z, v in score.items() if all(z[t] == y[t] for t in keep)]
            return score[tuple(y)] - np.logaddexp.reduce(den)

        want = [score[tuple(y)] - log_z, sum(cond([t]) for t in range(T)),
                sum(cond([t, t + 1]) for t in range(T - 1))]
        np.testing.assert_allclose(got[i], want, rtol=1e-10)
