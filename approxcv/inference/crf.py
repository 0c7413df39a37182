"""Linear-chain conditional random field: log-partition, marginals, clamped passes, Viterbi.

Pure kernels on scores and weights, no model imports (cf. :mod:`approxcv.inference.chain`).
Shapes: ``K`` labels, ``T`` (padded) positions; ``mask (T,)`` is 1 on the sentence and 0 on
padding, which comes after it. For labels ``z = (z_1, ..., z_T)`` the score is::

    s(z) = start[z_1] + sum_t unary[t, z_t] + sum_{t>1} trans[z_{t-1}, z_t] + stop[z_T]

and ``p(z | x) = exp(s(z)) / Z``, ``log Z = log sum_z exp(s(z))`` (forward algorithm).

**Clamped passes (partially labelled sentences).** With label factors
``m_t(k) = w_t [k = y_t] + (1 - w_t)`` for observed labels ``y`` and weights ``w_t`` in
[0, 1] (:func:`clamp_factors`)::

    log Z_c(w) = log sum_z exp(s(z)) prod_t m_t(z_t)

At ``w_t = 1`` position ``t`` is clamped to ``y_t``, at ``w_t = 0`` it is summed out, so
``log Z_c`` with binary weights is ``log sum_{z: z_kept = y_kept} exp(s(z))`` and
``-log p(y_kept | x) = log Z - log Z_c``. Weights in between mix "observed" and
"marginalised" (the seed's weighting scheme C, eq. 13, in probability space): ``log Z_c``
is smooth in ``w`` on all of [0, 1]^T, including at ``w = 1`` where the infinitesimal
jackknife differentiates it.

**Numerics.** The forward messages are kept normalised and linear, ``alpha_t (K,)`` summing
to one, with ``log Z`` accumulated from the normalisers; each step's sum over the previous
label is shifted by its largest term (:func:`_log_message`), so nothing overflows and
nothing underflows unless one label's transition scores span more than ~700 nats
(log-space accuracy). The label factors multiply the linear
messages: a recursion on ``log m_t`` would take ``log 0`` and give the weights' derivatives
``0 * inf`` at ``w_t = 1``, where they are finite. Marginals are the gradient of ``log Z``
in the unary scores (reverse mode is the backward pass): ``p(z_t = k) = d log Z / d
unary[t, k]``.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["CRFPosterior", "clamp_factors", "log_partition", "path_score", "posterior",
           "viterbi"]


class CRFPosterior(NamedTuple):
    """Output of :func:`posterior`: ``log_normalizer`` (scalar ``log Z`` or ``log Z_c``)
    and ``marginals (T, K)``: ``p(z_t = k | x[, clamped labels])``, 0 on padding."""
    log_normalizer: jax.Array
    marginals: jax.Array


def clamp_factors(labels, weights, num_labels: int):
    """Label factors ``m_t(k) = w_t [k = y_t] + (1 - w_t)``, shape ``(T, K)``.

    Args:
        labels: ``(T,)`` integer labels ``y_t`` (any value on padding).
        weights: ``(T,)`` weights in [0, 1]: 1 clamps ``z_t = y_t``, 0 sums ``z_t`` out.
        num_labels: ``K``.
    """
    onehot = jax.nn.one_hot(labels, num_labels, dtype=jnp.result_type(weights, float))
    return weights[:, None] * onehot + (1.0 - weights)[:, None]


def log_partition(unary, trans, start, stop, mask, factors=None):
    """``log Z`` (or ``log Z_c`` with ``factors``) of one padded sentence.

    Args:
        unary: ``(T, K)`` unary scores.
        trans: ``(K, K)`` transition scores ``trans[i, j]`` for ``z_{t-1} = i, z_t = j``.
        start, stop: ``(K,)`` scores of the first and last label (zeros: none).
        mask: ``(T,)`` 1 on the sentence, 0 on trailing padding (at least one 1).
        factors: optional ``(T, K)`` non-negative label factors ``m_t(k)``
            (:func:`clamp_factors`) multiplying the potentials.

    Returns:
        Scalar ``log sum_z exp(s(z)) prod_t m_t(z_t)`` over the unpadded positions.
    """
    unary, trans, start, stop = (jnp.asarray(a) for a in (unary, trans, start, stop))
    factors = jnp.ones_like(unary) if factors is None else factors
    alpha, log_z = _normalised(start + unary[0], factors[0])
    shift_a, pot_a = _row_shifted(trans)

    def step(carry, inputs):
        alpha, log_z = carry
        unary_t, factors_t, on = inputs
        new, log_norm = _normalised(_log_message(alpha, shift_a, pot_a) + unary_t, factors_t)
        return (jnp.where(on, new, alpha), log_z + jnp.where(on, log_norm, 0.0)), None

    (alpha, log_z), _ = lax.scan(step, (alpha, log_z), (unary[1:], factors[1:], mask[1:] > 0))
    return log_z + _log_message(alpha, *_row_shifted(stop[:, None]))[0]


#: largest exponent taken: a message entry below ``exp(-MAX_EXPONENT)`` of the largest
#: contributes nothing, so clipping there only avoids ``0 * inf``
MAX_EXPONENT = 600.0


def _row_shifted(scores):
    """``(r, exp(scores - r[:, None]))`` with ``r_i = max_j scores[i, j]`` (outside
    differentiation: it cancels in :func:`_log_message`), computed once per sentence."""
    r = lax.stop_gradient(jnp.max(scores, axis=1))
    return r, jnp.exp(scores - r[:, None])


def _log_message(alpha, r, pot):
    """``log sum_i alpha_i exp(scores[i, j])`` for linear ``alpha (K,)`` summing to one,
    from :func:`_row_shifted` ``(r, pot)`` of ``scores``.

    ``alpha_i exp(scores[i, j]) = beta_i pot[i, j] e^s`` with ``beta_i = alpha_i e^(r_i -
    s)`` and ``s = max_i (log alpha_i + r_i)`` (outside differentiation): the largest
    ``beta_i`` is 1 and its row of ``pot`` holds a 1, so nothing overflows and a column
    underflows only if a row of scores spans more than ~700 nats. ``K`` exponentials a
    step (the ``K x K`` ones are taken once); the sum stays linear in ``alpha``, whose zero
    entries (clamped-out labels) keep finite derivatives.
    """
    s = lax.stop_gradient(jnp.max(jnp.log(lax.stop_gradient(alpha)) + r))
    beta = alpha * jnp.exp(jnp.minimum(r - s, MAX_EXPONENT))
    return jnp.log(beta @ pot) + s


def _normalised(log_potential, factors_t):
    """``(alpha, log c)`` with ``alpha = exp(log_potential) * factors_t / c`` summing to 1."""
    top = lax.stop_gradient(jnp.max(log_potential))
    a = jnp.exp(log_potential - top) * factors_t
    norm = jnp.sum(a)
    return a / norm, jnp.log(norm) + top


def posterior(unary, trans, start, stop, mask, factors=None) -> CRFPosterior:
    """``log Z`` and the marginals ``p(z_t = k | x)`` (clamped by ``factors`` if given).

    The marginals are ``d log Z / d unary`` (reverse mode runs the backward pass).
    """
    log_z, marg = jax.value_and_grad(log_partition)(unary, trans, start, stop, mask, factors)
    return CRFPosterior(log_z, marg)


def path_score(unary, trans, start, stop, mask, labels):
    """Score ``s(y)`` of the labels ``y (T,)`` over the unpadded positions."""
    unary, trans, start, stop = (jnp.asarray(a) for a in (unary, trans, start, stop))
    on = jnp.asarray(mask) > 0
    num_t = labels.shape[0]
    last = jnp.maximum(jnp.sum(on) - 1, 0)
    u = jnp.sum(jnp.where(on, unary[jnp.arange(num_t), labels], 0.0))
    a = jnp.sum(jnp.where(on[1:], trans[labels[:-1], labels[1:]], 0.0))
    return start[labels[0]] + u + a + stop[labels[last]]


def viterbi(unary, trans, start, stop, mask):
    """Most probable labels ``argmax_z s(z)``, shape ``(T,)`` (``-1`` on padding).

    Max-product in log space with back-pointers; padded steps carry the scores unchanged.
    """
    unary, trans, start, stop = (jnp.asarray(a) for a in (unary, trans, start, stop))
    num_t, k = unary.shape
    delta0 = start + unary[0]

    def forward(delta, inputs):
        u_t, on = inputs
        cand = delta[:, None] + trans
        best = jnp.argmax(cand, axis=0)
        new = jnp.max(cand, axis=0) + u_t
        return jnp.where(on, new, delta), jnp.where(on, best, jnp.arange(k))

    delta, back = lax.scan(forward, delta0, (unary[1:], mask[1:] > 0))
    last = jnp.argmax(delta + stop)

    def backward(z, b_t):
        prev = b_t[z]
        return prev, z

    first, path = lax.scan(backward, last, back, reverse=True)
    path = jnp.concatenate([first[None], path])
    return jnp.where(mask > 0, path, -1)
