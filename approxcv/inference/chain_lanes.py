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

__all__ = ["LanePass", "lane_pass", "chunk_counts", "safe_block", "normaliser_floor"]

#: time steps per iteration of the compiled loops over a chunk
UNROLL = 1


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
    """``(B, n_chunks)`` left-out units of each fold in each chunk of ``chunk`` steps of
    the series padded at the front to whole chunks (padding ``>= n`` not counted). NumPy
    for a NumPy ``index`` (``bincount``), else JAX (traceable, ``int32``)."""
    import numpy as np
    xp = np if isinstance(index, np.ndarray) else jnp
    n_chunks = -(-n // chunk)
    rows = xp.broadcast_to(xp.arange(index.shape[0])[:, None], index.shape)
    cols = (xp.minimum(index, n - 1) + n_chunks * chunk - n) // chunk
    valid = index < n
    if xp is np:
        flat = (rows * n_chunks + cols)[valid]
        return np.bincount(flat, minlength=index.shape[0] * n_chunks).reshape(-1, n_chunks)
    return jnp.zeros((index.shape[0], n_chunks), jnp.int32).at[rows, cols].add(
        valid.astype(jnp.int32))


def _chunk_positions(index, ends, first_step, chunk: int, cap: int):
    """``(B, cap)`` step within the chunk starting at series step ``first_step`` of the last
    ``cap`` sorted units before ``ends`` (the fold's first unit after the chunk);
    ``chunk`` (out of range) where the unit lies outside the chunk."""
    cols = ends[:, None] - cap + jnp.arange(cap)[None, :]
    pos = jnp.take_along_axis(index, jnp.maximum(cols, 0), axis=1) - first_step
    return jnp.where((cols >= 0) & (pos >= 0) & (pos < chunk), pos, chunk)


def _kept(local, chunk: int, dtype):
    """``(C, B)`` 1 where a step is kept, 0 at the fold's units ``local`` ``(B, cap)``."""
    b = local.shape[0]
    flat = (local * b + jnp.arange(b)[:, None]).reshape(-1)
    return jnp.ones(chunk * b, dtype).at[flat].set(0.0, mode="drop").reshape(chunk, b)


def _at(values, local):
    """``values (C, B)`` at the steps ``local (B, cap)`` of each fold (``chunk``: 0)."""
    chunk, b = values.shape
    flat = jnp.minimum(local, chunk - 1) * b + jnp.arange(b)[:, None]
    return jnp.where(local < chunk, values.reshape(-1)[flat], 0.0)


def _sum_states(x):
    """``sum_k x[k]`` of ``x (K, ...)``, unrolled (elementwise over the lanes)."""
    return sum(x[k] for k in range(x.shape[0]))


def _predict(alpha, trans):
    """``(alpha A)_k = sum_j alpha_j A_jk`` for ``alpha (K, B)``, ``A (K, K, B)``."""
    k = alpha.shape[0]
    return jnp.stack([sum(alpha[j] * trans[j, i] for j in range(k)) for i in range(k)])


def _forward_chunk(alphas, init, trans, liks, first, keep: bool, block: int = 1):
    """Scaled forward recursions of the chains ``liks`` (a tuple of ``(C, K, B)``) over one
    chunk from ``alphas`` (a tuple of ``(K, B)``); ``first (C,)`` marks the chain's first
    step (``pi`` replaces the prediction and the sum of ``log c_t`` restarts). The
    normalisers of ``block`` steps (dividing ``C``) are multiplied before one ``log``: safe
    when ``c_t >= floor`` with ``floor ** block`` far above the smallest double
    (:func:`safe_block`). Returns ``(alphas_end, sums of log c_t (B,) each, alphas
    (C, K, B) of the first chain if keep)``."""
    def _step(carry, inputs):
        """``block`` steps: predict through the transition, condition, renormalise."""
        prev, log_cs = carry
        ls, is_first = inputs
        new, sums, kept = [], [], []
        for i, (a, log_c) in enumerate(zip(prev, log_cs)):
            prod = None
            for u in range(block):
                a = jnp.where(is_first[u], init, _predict(a, trans)) * ls[i][u]
                c = _sum_states(a)
                a = a * (1.0 / c)
                prod = c if prod is None else jnp.where(is_first[u], c, prod * c)
                if keep and i == 0:
                    kept.append(a)
            new.append(a)
            sums.append(jnp.where(jnp.any(is_first), 0.0, log_c) + jnp.log(prod))
        return (tuple(new), tuple(sums)), (jnp.stack(kept) if keep else None)
    chunk = first.shape[0]
    blocked = tuple(l.reshape((chunk // block, block) + l.shape[1:]) for l in liks)
    zero = tuple(jnp.zeros(a.shape[1:], a.dtype) for a in alphas)
    (alphas, log_cs), kept = lax.scan(_step, (tuple(alphas), zero),
                                      (blocked, first.reshape(-1, block)), unroll=UNROLL)
    return alphas, log_cs, (kept.reshape((chunk,) + kept.shape[2:]) if keep else None)


def safe_block(floor, block: int = 4) -> int:
    """Steps whose normalisers may be multiplied before a ``log``: ``block`` when every
    normaliser is at least ``floor`` (:func:`normaliser_floor`) and ``floor ** block``
    stays above 1e-250 with a margin for parameters that move a little (``floor >=
    1e-30``), else 1 (a ``log`` per step)."""
    return block if floor >= 1e-30 and floor ** block > 1e-250 else 1


def normaliser_floor(log_init, log_trans):
    """A lower bound of every normaliser ``c_t`` of the scaled forward recursion:
    ``min(min_k pi_k, min_jk A_jk)`` (``c_t = sum_k (alpha_{t-1} A)_k lik_t(k)`` with
    ``max_k lik_t(k) = 1`` and ``alpha_{t-1} A`` a mixture of the rows of ``A``)."""
    return jnp.exp(jnp.minimum(jnp.min(log_init), jnp.min(log_trans)))


def _backward_chunk(beta, trans, lik, alpha_prev, alphas, after_first):
    """Backward recursion over one chunk (reverse) with ``(K, B)`` messages. Returns
    ``(beta at the chunk's start, S (K, K, B), gammas (C, K, B))``: the pair marginals of
    the chunk sum to ``A * S``, ``S_jk = sum_t alpha_{t-1}(j) lik_t(k) beta_t(k) / n_t``,
    ``n_t = sum_jk alpha_{t-1}(j) A_jk lik_t(k) beta_t(k)`` (steps with ``after_first``)."""
    k = trans.shape[0]

    def _step(carry, inputs):
        """Smoothed marginal at ``t``, pair statistics, then the message to ``t - 1``."""
        b, acc = carry
        l, a_prev, a, weight = inputs
        g = a * b
        gamma = g * (1.0 / _sum_states(g))
        msg = l * b
        q = jnp.stack([sum(trans[j, i] * msg[i] for i in range(k)) for j in range(k)])
        w = msg * (weight / _sum_states(a_prev * q))
        acc = acc + a_prev[:, None, :] * w[None, :, :]
        return (q * (1.0 / _sum_states(q)), acc), gamma
    acc = jnp.zeros(trans.shape, trans.dtype)
    (beta, acc), gammas = lax.scan(_step, (beta, acc),
                                   (lik, alpha_prev, alphas, after_first), reverse=True,
                                   unroll=UNROLL)
    return beta, acc, gammas


def lane_pass(log_init, log_trans, emission: Callable, emission_params, x, index, ends,
              n: int, chunk: int, cap: int, *, full: bool = True, points: bool = True,
              grads: bool = True, block: int = 1) -> LanePass:
    """Fold losses, point losses and gradients of ``B`` folds in one pass (module docstring).

    Args:
        log_init: ``(B, K)``; log_trans: ``(B, K, K)`` each fold's log-potentials.
        emission: ``emission(params, x_chunk) -> (C, K)`` emission log-likelihoods of one
            fold's parameters on ``C`` steps (rows depend on their own step only).
        emission_params: pytree with a leading ``B`` axis.
        x: the series (an array or a pytree of arrays, e.g. steps and their mask), leading
            axis ``n_chunks * chunk >= n``, padded at the front (the padding is ignored).
        index: ``(B, m)`` int, each row sorted, padding ``n``.
        ends: ``(n_chunks, B)`` int: a fold's units before the end of each chunk
            (cumulative :func:`chunk_counts` of the front-padded series).
        n: series length; chunk: steps per chunk; cap: at least a fold's units in one chunk.
        full: compute ``log Z(all)``; points: the point losses; grads: the gradients.
        block: normalisers multiplied before one ``log`` (:func:`safe_block`; 1: a
            ``log`` per step).
    """
    dtype = log_trans.dtype
    n_chunks = jax.tree_util.tree_leaves(x)[0].shape[0] // chunk
    pad = n_chunks * chunk - n                  # steps before the series' first
    init = jnp.exp(log_init.T)
    trans = jnp.exp(jnp.moveaxis(log_trans, 0, -1))
    b = init.shape[1]
    xs = jax.tree_util.tree_map(lambda a: a.reshape((n_chunks, chunk) + a.shape[1:]), x)

    def lik_of(fn, c):
        """Emission log-likelihoods ``(C, K, B)`` of chunk ``c`` by ``fn`` (a function of
        the emission parameters), their maxima ``(C, B)`` and scaled exponentials."""
        xc = jax.tree_util.tree_map(lambda a: a[c], xs)
        out = fn(lambda p: jax.vmap(emission, (0, None), 2)(p, xc))
        ll = out[0] if isinstance(out, tuple) else out
        shift = lax.stop_gradient(jnp.max(ll, axis=1))
        return out, shift, jnp.exp(ll - shift[:, None, :])

    def steps(c):
        """Series steps (``< 0``: padding), kept mask ``(C, B)``, fold units of chunk ``c``."""
        t = c * chunk - pad + jnp.arange(chunk)
        local = _chunk_positions(index, ends[c], c * chunk - pad, chunk, cap)
        return t, _kept(local, chunk, dtype) * (t >= 0)[:, None], local

    def _fwd(carry, c):
        """Forward over chunk ``c`` for the kept (and full) chain; records its start."""
        alphas, log_c, shift_sum = carry
        _, shift, lik = lik_of(lambda f: f(emission_params), c)
        t, kept, _ = steps(c)
        liks = (jnp.where(kept[:, None, :] > 0, lik, 1.0),) + ((lik,) if full else ())
        alphas_end, lc, _ = _forward_chunk(alphas, init, trans, liks, t == 0, False, block)
        sums = (jnp.sum(shift * kept, 0),) + (
            (jnp.sum(jnp.where(t[:, None] >= 0, shift, 0.0), 0),) if full else ())
        return (alphas_end, tuple(a + d for a, d in zip(log_c, lc)),
                tuple(a + d for a, d in zip(shift_sum, sums))), alphas[0]

    s = 2 if full else 1
    uniform = jnp.ones(init.shape, dtype) / init.shape[0]
    zeros = tuple(jnp.zeros(b, dtype) for _ in range(s))
    (_, log_c, shift_sum), alpha_starts = lax.scan(_fwd, ((uniform,) * s, zeros, zeros),
                                                   jnp.arange(n_chunks))
    log_z = [a + d for a, d in zip(log_c, shift_sum)]
    m = index.shape[1]
    zeros_em = jax.tree_util.tree_map(jnp.zeros_like, emission_params)
    out = LanePass(log_z[0], log_z[1] if full else jnp.zeros(b, dtype),
                   jnp.zeros((b, m), dtype), jnp.zeros(log_init.shape, dtype),
                   jnp.zeros(log_trans.shape, dtype), zeros_em)
    if not (points or grads):
        return out

    def _bwd(carry, c):
        """Backward over chunk ``c``: smoothed marginals, pair statistics, point losses."""
        beta, acc, gamma0, em_grad, buf = carry
        (_, pull), shift, lik = lik_of(lambda f: jax.vjp(f, emission_params), c)
        t, kept, local = steps(c)
        lik_kept = jnp.where(kept[:, None, :] > 0, lik, 1.0)
        _, _, alphas = _forward_chunk((alpha_starts[c],), init, trans, (lik_kept,), t == 0,
                                      True, block)
        alpha_prev = jnp.concatenate([alpha_starts[c][None], alphas[:-1]])
        beta, acc_c, gammas = _backward_chunk(beta, trans, lik_kept, alpha_prev, alphas,
                                              (t > 0).astype(dtype))
        gamma0 = jnp.where(c == 0, gammas[pad], gamma0)
        if grads:
            em_grad = jax.tree_util.tree_map(jnp.add, em_grad,
                                             pull(gammas * kept[:, None, :])[0])
        if points:
            pred = sum(_at(gammas[:, i] * lik[:, i], local) for i in range(lik.shape[1]))
            vals = jnp.where(local < chunk, -(jnp.log(jnp.where(local < chunk, pred, 1.0))
                                              + _at(shift, local)), 0.0)
            buf = jax.vmap(lambda row, v, e: lax.dynamic_update_slice(row, v, (e,)))(
                buf, vals, ends[c])
        return (beta, acc + acc_c, gamma0, em_grad, buf), None

    carry = (uniform, jnp.zeros(trans.shape, dtype), jnp.zeros(init.shape, dtype), zeros_em,
             jnp.zeros((b, m + cap), dtype))
    (_, acc, gamma0, em_grad, buf), _ = lax.scan(_bwd, carry, jnp.arange(n_chunks),
                                                 reverse=True)
    return out._replace(points=buf[:, cap:] if points else out.points,
                        grad_init=gamma0.T, grad_trans=jnp.moveaxis(trans * acc, -1, 0),
                        grad_emission=em_grad)
