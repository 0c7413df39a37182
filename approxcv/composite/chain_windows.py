"""Window likelihood objects of a chain MRF (seed §8.3): pure kernels on scores.

A chain over labels ``y_1..y_T`` (and, for the Boltzmann chain, tokens) has the score

    s(y) = start[y_1] + sum_t e_t(y_t) + sum_{t>1} A[y_{t-1}, y_t] + stop[y_T],

where the emission ``e_t(k)`` is what the observed position contributes with label ``k``.
The order-``k`` window at ``t`` (positions ``W = t..t+k-1``) conditioned on its neighbours
``y_{t-1}`` and ``y_{t+k}`` (the seed's ``P(X2, Y2 | Y1, Y3)`` and ``P(X2, X3, Y2, Y3 | Y1,
Y4)`` for the Boltzmann chain, ``P(Y2 | Y1, Y3, X2)``, ``P(Y2, Y3 | Y1, Y4, X)`` for the CRF)
has the log-probability

    log p(W | neighbours) = s_W(y_W) - log sum_{c in K^k} exp s'_W(c),

``s_W`` collecting every term touching ``W`` (the left transition, or ``start`` at the first
position; the window's transitions; the right transition, or ``stop`` at the last; the
emissions ``e_t(y_t)``) and ``s'_W`` the same with the candidate labels ``c`` and the
partition emissions ``e'_t(c)`` (for a CRF ``e' = e``; for a generative chain the
emission summed over every token, ``log sum_v exp B[c, v]``). A pseudo-likelihood
component is the sum of the windows over all positions of a sentence; the ``K^k`` candidate
labellings are enumerated.
"""
from __future__ import annotations

import itertools

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

__all__ = ["window_log_prob_sum", "label_configs"]


def label_configs(num_labels: int, order: int) -> np.ndarray:
    """All ``K^k`` labellings of a window, ``(K^k, k)`` integers."""
    return np.array(list(itertools.product(range(num_labels), repeat=order)), dtype=np.int32)


def window_log_prob_sum(emit, emit_all, trans, start, stop, mask, labels, configs):
    """``sum_t log p(y_W(t) [, x_W(t)] | y_{t-1}, y_{t+k})`` over the windows of one padded
    sentence (module docstring).

    Args:
        emit: ``(T, K)`` emission scores ``e_t(k)`` of the observed positions.
        emit_all: ``(T, K)`` partition emissions ``e'_t(k)``.
        trans: ``(K, K)``; start, stop: ``(K,)`` (zeros: none).
        mask: ``(T,)`` 1 on the sentence, 0 on trailing padding.
        labels: ``(T,)`` observed labels.
        configs: ``(K^k, k)`` window labellings (:func:`label_configs`); ``k`` is the order.
    """
    num_t, order = labels.shape[0], configs.shape[1]
    length = jnp.sum(mask > 0)
    offsets = jnp.arange(order)

    def window(t):
        """``log p(W | neighbours)`` of the window starting at ``t`` (0 if it overruns)."""
        pos = jnp.minimum(t + offsets, num_t - 1)
        left = jnp.maximum(t - 1, 0)
        right = jnp.minimum(t + order, num_t - 1)
        first, last = t == 0, t + order == length

        def score(lab, em):
            """Every term touching the window for labelling ``lab (k,)``."""
            s = jnp.sum(em[pos, lab])
            s = s + jnp.sum(trans[lab[:-1], lab[1:]])
            s = s + jnp.where(first, start[lab[0]], trans[labels[left], lab[0]])
            return s + jnp.where(last, stop[lab[-1]], trans[lab[-1], labels[right]])

        observed = score(labels[pos], emit)
        cands = jax.vmap(lambda c: score(c, emit_all))(configs)
        valid = t + order <= length
        return jnp.where(valid, observed - logsumexp(cands), 0.0)

    return jnp.sum(jax.vmap(window)(jnp.arange(num_t)))
