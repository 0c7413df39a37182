"""Scheme-A held-out passes of many folds of one long chain at once, folds in lanes.

Every i.i.d. fold of a long series needs passes over the whole series; run fold by fold
(:func:`approxcv.inference.chain.heldout_losses` under ``vmap``) each pass materialises
``(T, K)`` potentials and messages per fold. Here ``B`` folds share **one** scan over time:
messages are ``(K, B)`` arrays (folds in the minor axis, the vector lanes), emissions are
computed a chunk of ``C`` steps at a time from each fold's parameters, and which units a
fold leaves out is read from its sorted index a chunk at a time. Storage is
``O(B (C K + T K / C + m))``, never ``O(B T)``.

With ``l_t(k)`` the emission log-likelihoods of a fold, ``v_t = 1`` where ``x_t`` is kept,
the same scaled forward recursion as :func:`approxcv.inference.chain.log_normalizer`::

    alpha_t ∝ (alpha_{t-1} A) * exp(v_t (l_t - m_t)),   log Z(v) = sum_t log c_t + sum_t v_t m_t

(``alpha_{-1} A := pi``, ``c_t`` the normaliser, ``m_t = max_k l_t(k)``) gives the fold loss
``L_o = log Z(kept) - log Z(all)``. A backward pass over chunks (the forward messages of a
chunk recomputed from the one stored at its start) gives the smoothed marginals of the
kept model, ``gamma_t ∝ alpha_t * beta_t`` with ``beta_{t-1} ∝ A (exp(v_t (l_t - m_t)) *
beta_t)``, hence the point losses ``-log sum_k gamma_t(k) exp(l_t(k))`` of left-out steps,
and the gradient of ``log Z(kept)`` by its expected sufficient statistics::

    d log Z / d log pi = gamma_0,   d log Z / d log A = sum_{t>0} xi_t,   d log Z / d l_t = v_t gamma_t,
    xi_t(j, k) ∝ alpha_{t-1}(j) A(j, k) exp(v_t (l_t(k) - m_t)) beta_t(k).

The emission part is pulled back to the emission parameters chunk by chunk (one VJP of the
emission function per chunk), so nothing of size ``T`` per fold is kept.
"""
from __future__ import annotations

from typing import Callable, NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["LanePass", "lane_pass", "chunk_counts"]


class LanePass(NamedTuple):
    """Output of :func:`lane_pass` for ``B`` folds.

    log_z_kept, log_z_full: ``(B,)`` (``log_z_full`` zeros unless ``full``);
    points: ``(B, m)`` point losses at the sorted index (0 at padding; zeros unless
    ``points``); grad_init ``(B, K)``, grad_trans ``(B, K, K)``, grad_emission (a pytree
    like the emission parameters): ``d log Z(kept) / d`` (log pi, log A, emission
    parameters) (zeros unless ``grads``).
    """
    log_z_kept: jax.Array
    log_z_full: jax.Array
    points: jax.Array
    grad_init: jax.Array
    grad_trans: jax.Array
    grad_emission: object


def chunk_counts(index, n: int, chunk: int):
    """``(B, n_chunks)`` left-out units of each fold in each chunk of ``chunk`` steps
    (NumPy; padding ``>= n`` not counted)."""
    import numpy as np
    index = np.asarray(index)
    n_chunks = -(-n // chunk)
    valid = index < n
    rows = np.broadcast_to(np.arange(index.shape[0])[:, None], index.shape)
    flat = (rows * n_chunks + np.minimum(index, n - 1) // chunk)[valid]
    return np.bincount(flat, minlength=index.shape[0] * n_chunks).reshape(-1, n_chunks)


def _chunk_positions(index, ends, c, chunk: int, cap: int):
    """``(B, cap)`` step within chunk ``c`` of the last ``cap`` sorted units before
    ``ends`` (the fold's first unit after the chunk); ``chunk`` (out of range) where the
    unit lies outside the chunk."""
    cols = ends[:, None] - cap + jnp.arange(cap)[None, :]
    pos = jnp.take_along_axis(index, jnp.maximum(cols, 0), axis=1) - c * chunk
    return jnp.where((cols >= 0) & (pos >= 0) & (pos < chunk), pos, chunk)


def _kept(local, chunk: int, dtype):
    """``(C, B)`` 1 where a step is kept, 0 at the fold's units ``local`` ``(B, cap)``."""
    b = local.shape[0]
    flat = (local * b + jnp.arange(b)[:, None]).reshape(-1)
    return jnp.ones(chunk * b, dtype).at[flat].set(0.0, mode="drop").reshape(chunk, b)


def _predict(alpha, trans):
    """``(alpha A)_k = sum_j alpha_j A_jk`` for ``alpha (..., K, B)``, ``A (K, K, B)``."""
    return jnp.sum(alpha[..., :, None, :] * trans, axis=-3)


def _forward_chunk(alpha, init, trans, lik, first, valid):
    """Scaled forward recursion over one chunk: ``lik (C, S, K, B)``, ``alpha (S, K, B)``
    for ``S`` chains, ``first``/``valid`` ``(C,)`` flags (the chain's first step; a real,
    not padding, step). Returns ``(alpha_end, sum_t log c_t (S, B), alphas (C, S, K, B))``."""
    def _step(carry, inputs):
        """Predict through the transition (``pi`` at the first step), condition, renormalise."""
        a, log_c = carry
        l, is_first, ok = inputs
        new = jnp.where(is_first, init, _predict(a, trans)) * l
        c = jnp.sum(new, axis=-2)
        new = jnp.where(ok, new / c[..., None, :], a)
        return (new, log_c + jnp.where(ok, jnp.log(c), 0.0)), new
    zero = jnp.zeros(alpha.shape[:-2] + alpha.shape[-1:], alpha.dtype)
    (alpha, log_c), alphas = lax.scan(_step, (alpha, zero), (lik, first, valid), unroll=4)
    return alpha, log_c, alphas


def _backward_chunk(beta, trans, lik, alpha_prev, alphas, first, valid):
    """Backward recursion over one chunk (reverse), ``(K, B)`` messages. Returns
    ``(beta_start, xi_sum (K, K, B), gammas (C, K, B))``."""
    def _step(carry, inputs):
        """Smoothed marginal and pair marginal at ``t``, then the message to ``t - 1``."""
        b, xi_sum = carry
        l, a_prev, a, is_first, ok = inputs
        msg = l * b
        gamma = a * b
        gamma = gamma / jnp.sum(gamma, axis=0)
        xi = a_prev[:, None, :] * trans * msg[None, :, :]
        xi = xi / jnp.sum(xi, axis=(0, 1))
        xi_sum = xi_sum + jnp.where(ok & ~is_first, xi, 0.0)
        new = jnp.sum(trans * msg[None, :, :], axis=1)
        new = jnp.where(ok, new / jnp.sum(new, axis=0), b)
        return (new, xi_sum), gamma
    xi0 = jnp.zeros(trans.shape, trans.dtype)
    (beta, xi_sum), gammas = lax.scan(_step, (beta, xi0),
                                      (lik, alpha_prev, alphas, first, valid),
                                      reverse=True, unroll=4)
    return beta, xi_sum, gammas


def lane_pass(log_init, log_trans, emission: Callable, emission_params, x, index, ends,
              n: int, chunk: int, cap: int, *, full: bool = True, points: bool = True,
              grads: bool = True) -> LanePass:
    """Fold losses, point losses and gradients of ``B`` folds in one pass (module docstring).

    Args:
        log_init: ``(B, K)``; log_trans: ``(B, K, K)`` each fold's log-potentials.
        emission: ``emission(params, x_chunk) -> (C, K)`` emission log-likelihoods of one
            fold's parameters on ``C`` steps (rows depend on their own step only).
        emission_params: pytree with a leading ``B`` axis.
        x: the series, leading axis ``n_chunks * chunk >= n`` (padded; padding ignored).
        index: ``(B, m)`` int, each row sorted, padding ``n``.
        ends: ``(n_chunks, B)`` int: a fold's units before the end of each chunk
            (cumulative :func:`chunk_counts`).
        n: series length; chunk: steps per chunk; cap: at least a fold's units in one chunk.
        full: compute ``log Z(all)``; points: the point losses; grads: the gradients.
    """
    dtype = log_trans.dtype
    n_chunks = x.shape[0] // chunk
    init = log_init.T.astype(dtype)
    init = jnp.exp(init)
    trans = jnp.exp(jnp.moveaxis(log_trans, 0, -1))
    b = init.shape[1]
    xs = x.reshape((n_chunks, chunk) + x.shape[1:])

    def emissions(c):
        """``(ll (C, K, B), pullback)`` of chunk ``c``."""
        xc = xs[c]
        ll, pull = jax.vjp(lambda p: jax.vmap(emission, in_axes=(0, None))(p, xc),
                           emission_params)
        return jnp.transpose(ll, (1, 2, 0)), pull

    def chunk_inputs(c):
        """Emissions, step-wise maxima, kept mask, first/valid flags, positions of chunk ``c``."""
        ll, pull = emissions(c)
        shift = jnp.max(ll, axis=1)
        t = c * chunk + jnp.arange(chunk)
        local = _chunk_positions(index, ends[c], c, chunk, cap)
        kept = _kept(local, chunk, dtype) * (t < n)[:, None]
        return ll, shift, kept, t, local, pull

    def _fwd(carry, c):
        """Forward over chunk ``c`` for the kept (and full) chain; records its start."""
        alpha, log_c, shift_sum = carry
        ll, shift, kept, t, _, _ = chunk_inputs(c)
        lik = jnp.exp(ll - shift[:, None, :])
        liks = [jnp.where(kept[:, None, :] > 0, lik, 1.0)] + ([lik] if full else [])
        alpha_end, lc, _ = _forward_chunk(alpha, init, trans, jnp.stack(liks, 1), t == 0,
                                          t < n)
        shifts = [jnp.sum(shift * kept, 0)] + (
            [jnp.sum(jnp.where(t[:, None] < n, shift, 0.0), 0)] if full else [])
        return (alpha_end, log_c + lc, shift_sum + jnp.stack(shifts)), alpha[0]

    s = 2 if full else 1
    start = (jnp.ones((s,) + init.shape, dtype) / init.shape[0],
             jnp.zeros((s, b), dtype), jnp.zeros((s, b), dtype))
    (_, log_c, shift_sum), alpha_starts = lax.scan(_fwd, start, jnp.arange(n_chunks))
    log_z = log_c + shift_sum
    m = index.shape[1]
    zeros_em = jax.tree_util.tree_map(jnp.zeros_like, emission_params)
    out = LanePass(log_z[0], log_z[1] if full else jnp.zeros(b, dtype),
                   jnp.zeros((b, m), dtype), jnp.zeros(log_init.shape, dtype),
                   jnp.zeros(log_trans.shape, dtype), zeros_em)
    if not (points or grads):
        return out

    def _bwd(carry, c):
        """Backward over chunk ``c``: smoothed marginals, pair marginals, point losses."""
        beta, xi_sum, gamma0, em_grad, buf = carry
        ll, shift, kept, t, local, pull = chunk_inputs(c)
        lik = jnp.where(kept[:, None, :] > 0, jnp.exp(ll - shift[:, None, :]), 1.0)
        first, valid = t == 0, t < n
        _, _, alphas = _forward_chunk(alpha_starts[c][None], init, trans, lik[:, None],
                                      first, valid)
        alphas = alphas[:, 0]
        alpha_prev = jnp.concatenate([alpha_starts[c][None], alphas[:-1]])
        beta, xi_c, gammas = _backward_chunk(beta, trans, lik, alpha_prev, alphas, first,
                                             valid)
        gamma0 = jnp.where(c == 0, gammas[0], gamma0)
        if grads:
            cot = jnp.transpose(gammas * kept[:, None, :], (2, 0, 1))
            em_grad = jax.tree_util.tree_map(jnp.add, em_grad, pull(cot)[0])
        if points:
            pred = jnp.sum(gammas * jnp.exp(ll - shift[:, None, :]), axis=1)
            loss = -(jnp.log(pred) + shift)                                    # (C, B)
            vals = jnp.take_along_axis(loss, jnp.minimum(local, chunk - 1).T, axis=0).T
            vals = jnp.where(local < chunk, vals, 0.0)
            buf = jax.vmap(lambda row, v, e: lax.dynamic_update_slice(row, v, (e,)))(
                buf, vals, ends[c])
        return (beta, xi_sum + xi_c, gamma0, em_grad, buf), None

    beta = jnp.ones(init.shape, dtype) / init.shape[0]
    carry = (beta, jnp.zeros(trans.shape, dtype), jnp.zeros(init.shape, dtype), zeros_em,
             jnp.zeros((b, m + cap), dtype))
    (_, xi_sum, gamma0, em_grad, buf), _ = lax.scan(_bwd, carry, jnp.arange(n_chunks),
                                                    reverse=True)
    return out._replace(points=buf[:, cap:] if points else out.points,
                        grad_init=gamma0.T, grad_trans=jnp.moveaxis(xi_sum, -1, 0),
                        grad_emission=em_grad)
