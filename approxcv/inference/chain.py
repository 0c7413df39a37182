"""Weighted forward-backward on a chain (hidden Markov model) in log space.

The kernels take log-potentials and weights, never model objects (cf. dynamax
``hidden_markov_model/inference.py``). Shapes: ``K`` states, ``T`` time steps.

Weighted marginal likelihood (Ghosh et al. 2020, Appendix D). With emission log-likelihoods
``l_t(k) = log p(x_t | z_t = k)``, initial ``log pi`` and transition ``log A``:

* scheme **A** keeps every latent and weights only the emissions::

      log Z_A(w) = log sum_z pi(z_1) prod_t A(z_{t-1}, z_t) prod_t p(x_t | z_t)^{w_t}

* scheme **B** drops ``x_t`` *and* ``z_t``: every factor is raised to the product of the
  weights of the variables it touches::

      log Z_B(w) = log sum_z pi(z_1)^{w_1} prod_t A(z_{t-1}, z_t)^{w_{t-1} w_t}
                   prod_t p(x_t | z_t)^{w_t}  -  sum_t (1 - w_t) log K

  The last, theta-independent term removes the factor ``K`` that a latent with no
  remaining factor would contribute, so ``Z_A = Z_B`` exactly on leave-future-out folds.

Held-out losses are always computed in the full (unweighted) model with the left-out
observations marginalised out: ``-log p(x_o | x_kept) = log Z(kept) - log Z(all)`` and
``-log p(x_t | x_kept) = -log sum_k p(z_t = k | x_kept) p(x_t | z_t = k)``.

For a fitted model (:class:`approxcv.models.hmm.HMM`'s ``predict``, ``forecast`` and
``sample``): the filtered marginals ``p(z_t | x_{1..t})`` (:func:`filtered_marginals`), the
most probable path (:func:`viterbi`, the max-product recursion of
:func:`approxcv.inference.crf.viterbi`), the state distribution ``h`` steps ahead
(:func:`propagate_states`) and ancestral draws of the chain (:func:`sample_states`).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax
from jax.scipy.special import logsumexp

from . import crf

__all__ = ["weighted_potentials", "log_normalizer", "weighted_log_marginal",
           "posterior_marginals", "heldout_losses", "ChainPosterior", "boundary_messages",
           "window_heldout_losses", "filtered_marginals", "viterbi", "propagate_states",
           "sample_states"]


class ChainPosterior(NamedTuple):
    """Output of :func:`posterior_marginals`.

    log_normalizer: scalar ``log Z``; log_smoothed_probs: ``(T, K)`` with ``log p(z_t | x)``.
    """
    log_normalizer: jax.Array
    log_smoothed_probs: jax.Array


def _as_time_varying(log_trans, num_timesteps):
    """Broadcast a ``(K, K)`` transition matrix to ``(T-1, K, K)``."""
    if log_trans.ndim == 2:
        return jnp.broadcast_to(log_trans, (num_timesteps - 1,) + log_trans.shape)
    return log_trans


def _scaled_potentials(log_init, log_trans, log_lik):
    """Exponentiate outside the scan: ``init = exp(log_init)``, ``trans = exp(log_trans)`` and
    ``lik_t = exp(log_lik_t - m_t)`` with ``m_t = max_k log_lik_t(k)``, so ``max_k lik_t = 1``.
    ``m_t`` is a constant to the derivatives (every result adds it back), as in
    ``logsumexp``: differentiating the max would add a tie count per step to every
    derivative program, and a 0/0 where a recomputed ``log_lik`` differs from the one the
    max saw in the last bit."""
    shift = lax.stop_gradient(jnp.max(log_lik, axis=1))
    return jnp.exp(log_init), jnp.exp(log_trans), jnp.exp(log_lik - shift[:, None]), shift


def weighted_potentials(log_init, log_trans, log_lik, weights, scheme: str):
    """Raise each factor to its weight for scheme ``"A"`` or ``"B"``.

    Args:
        log_init: ``(K,)`` log initial probabilities.
        log_trans: ``(K, K)`` or ``(T-1, K, K)`` log transition matrix.
        log_lik: ``(T, K)`` emission log-likelihoods.
        weights: ``(T,)`` weights ``w_t``.
        scheme: ``"A"`` (weight emissions) or ``"B"`` (weight emissions by ``w_t``,
            transitions by ``w_{t-1} w_t``, the initial factor by ``w_1``).

    Returns:
        ``(log_init, log_trans, log_lik)`` weighted log-potentials (``log_trans`` becomes
        time-varying ``(T-1, K, K)`` under scheme B).
    """
    log_lik_w = log_lik * weights[:, None]
    if scheme == "A":
        return log_init, log_trans, log_lik_w
    log_trans = _as_time_varying(log_trans, log_lik.shape[0])
    if scheme == "B":
        pair_w = weights[:-1] * weights[1:]
        return log_init * weights[0], log_trans * pair_w[:, None, None], log_lik_w
    raise ValueError(f"`scheme` must be 'A' or 'B', got {scheme!r}")


def log_normalizer(log_init, log_trans, log_lik):
    """Return ``log sum_z exp(log_init[z_1] + sum_t log_trans[t-1, z_{t-1}, z_t] + sum_t log_lik[t, z_t])``.

    The scaled forward algorithm (Rabiner 1989): ``alpha_t = (alpha_{t-1} A_t) * lik_t / c_t``
    with ``c_t`` the normaliser, so ``log Z = sum_t log c_t + sum_t m_t`` (``m_t`` the
    per-step shift of :func:`_scaled_potentials`). One ``lax.scan`` over time; ``log_trans``
    may be ``(K, K)`` or time-varying ``(T-1, K, K)``.
    """
    init, trans, lik, shift = _scaled_potentials(log_init, log_trans, log_lik)
    return _forward(init, trans, lik)[0] + jnp.sum(shift)


def _forward(init, trans, lik):
    """Scaled forward pass: ``(sum_t log c_t, alphas (T, K))``; ``trans`` (K, K) or (T-1, K, K)."""
    alpha0 = init * lik[0]
    c0 = jnp.sum(alpha0)
    time_varying = trans.ndim == 3

    def _step(carry, inputs):
        """Predict through the transition, condition on the emission, renormalise."""
        alpha, log_c = carry
        a, l = inputs if time_varying else (trans, inputs)
        new = (alpha @ a) * l
        c = jnp.sum(new)
        return (new / c, log_c + jnp.log(c)), new / c

    xs = (trans, lik[1:]) if time_varying else lik[1:]
    (_, log_c), alphas = lax.scan(_step, (alpha0 / c0, jnp.log(c0)), xs)
    return log_c, jnp.concatenate([(alpha0 / c0)[None], alphas])


def _backward(trans, lik, beta_last=None):
    """Scaled backward pass: ``beta_{t-1} ∝ A_t (lik_t * beta_t)``, each normalised to sum 1,
    from ``beta_last`` (default uniform: nothing observed after the last step)."""
    num_states = lik.shape[1]
    time_varying = trans.ndim == 3

    def _step(beta, inputs):
        """One backward message, renormalised."""
        a, l = inputs if time_varying else (trans, inputs)
        new = a @ (l * beta)
        new = new / jnp.sum(new)
        return new, new

    if beta_last is None:
        beta_last = jnp.ones(num_states, lik.dtype) / num_states
    xs = (trans, lik[1:]) if time_varying else lik[1:]
    _, betas = lax.scan(_step, beta_last, xs, reverse=True)
    return jnp.concatenate([betas, beta_last[None]])


def posterior_marginals(log_init, log_trans, log_lik) -> ChainPosterior:
    """Forward-backward: ``log Z`` and smoothed ``log p(z_t | x)`` of shape ``(T, K)``.

    ``gamma_t ∝ alpha_t * beta_t`` from the scaled passes :func:`_forward`, :func:`_backward`.
    """
    init, trans, lik, shift = _scaled_potentials(log_init, log_trans, log_lik)
    log_c, alphas = _forward(init, trans, lik)
    betas = _backward(trans, lik)
    gamma = alphas * betas
    log_gamma = jnp.log(gamma) - jnp.log(jnp.sum(gamma, axis=1, keepdims=True))
    return ChainPosterior(log_c + jnp.sum(shift), log_gamma)


def weighted_log_marginal(log_init, log_trans, log_lik, weights, scheme: str = "A"):
    """Return the weighted log marginal likelihood ``log Z_scheme(w)`` (see module docstring)."""
    wi, wa, wl = weighted_potentials(log_init, log_trans, log_lik, weights, scheme)
    log_z = log_normalizer(wi, wa, wl)
    if scheme == "B":
        log_z = log_z - jnp.sum(1.0 - weights) * jnp.log(log_lik.shape[1])
    return log_z


def heldout_losses(log_init, log_trans, log_lik, weights):
    """Held-out losses of the units with ``weights == 0`` in the full model.

    Args:
        log_init, log_trans, log_lik: log-potentials of the *unweighted* model.
        weights: ``(T,)`` 0/1 weights; zeros mark the left-out observations.

    Returns:
        ``(fold_loss, point_losses)``: the scalar ``-log p(x_o | x_kept)`` and the ``(T,)``
        array ``-log p(x_t | x_kept)`` (meaningful where ``weights == 0``; zero elsewhere).
    """
    kept = (weights > 0).astype(log_lik.dtype)
    init, trans, lik, shift = _scaled_potentials(log_init, log_trans, log_lik)
    # scaled likelihoods of the kept-only model: 1 for a marginalised observation
    lik_kept = jnp.where(kept[:, None] > 0, lik, 1.0)
    shift_kept = jnp.sum(shift * kept)
    # the forward passes of the full and the kept-only model share one (batched) scan
    log_cs, alphas = jax.vmap(_forward, in_axes=(None, None, 0))(
        init, trans, jnp.stack([lik, lik_kept]))
    fold_loss = (log_cs[1] + shift_kept) - (log_cs[0] + jnp.sum(shift))
    gamma = alphas[1] * _backward(trans, lik_kept)
    log_gamma = jnp.log(gamma) - jnp.log(jnp.sum(gamma, axis=1, keepdims=True))
    log_pred = logsumexp(log_gamma + log_lik, axis=1)
    point_losses = jnp.where(kept > 0, 0.0, -log_pred)
    return fold_loss, point_losses


def boundary_messages(log_init, log_trans, log_lik):
    """The messages a window of the chain needs from outside it (:func:`window_heldout_losses`).

    Returns:
        ``(log_filtered (T, K), log_backward (T, K))``: ``log p(z_t | x_{1..t})`` and
        ``log beta_t = log p(x_{t+1..T} | z_t) + c_t`` (each normalised to sum 1 over
        ``k``; the constant cancels in held-out losses).
    """
    init, trans, lik, _ = _scaled_potentials(log_init, log_trans, log_lik)
    _, alphas = _forward(init, trans, lik)
    return jnp.log(alphas), jnp.log(_backward(trans, lik))


def window_heldout_losses(log_init, log_trans, log_lik, weights, log_filtered_before,
                          log_backward_end, at_start):
    """Held-out losses of units left out inside a window ``[s, e]`` of a long chain, with
    the rest of the chain summarised by two boundary messages.

    For a fold ``o`` inside the window, everything outside it is kept, so with
    ``p_s(k) = sum_j p(z_{s-1} = j | x_{<s}) A(j, k)`` (``pi`` if ``s`` is the first step) and
    ``beta_e(k) ∝ p(x_{>e} | z_e = k)``::

        -log p(x_o | x_kept) = log Z_w(kept) - log Z_w(all),
        Z_w(v) = sum_z p_s(z_s) prod_{t=s+1..e} A(z_{t-1}, z_t)
                 prod_{t=s..e} p(x_t | z_t)^{v_t} beta_e(z_e)

    and ``-log p(x_t | x_kept)`` from the window's smoothed marginals. This is exact when the
    boundary messages are those of the same parameters; with messages of nearby parameters
    (the full fit, for a fold's parameters) the error decays geometrically with the distance
    from the fold to the window's ends (the filter forgets), which the caller measures by
    doubling the window.

    Args:
        log_init: ``(K,)``; log_trans: ``(K, K)``; log_lik: ``(L, K)`` of the window.
        weights: ``(L,)`` 0/1; zeros mark the left-out units.
        log_filtered_before: ``(K,)`` ``log p(z_{s-1} | x_{<s})`` (ignored ``at_start``).
        log_backward_end: ``(K,)`` ``log beta_e``.
        at_start: the window starts at the chain's first step.

    Returns:
        ``(fold_loss, point_losses (L,))`` as :func:`heldout_losses` for the window.
    """
    kept = (weights > 0).astype(log_lik.dtype)
    log_prior = jnp.where(at_start, log_init,
                          logsumexp(log_filtered_before[:, None] + log_trans, axis=0))
    prior, trans, lik, shift = _scaled_potentials(log_prior, log_trans, log_lik)
    lik_kept = jnp.where(kept[:, None] > 0, lik, 1.0)
    log_cs, alphas = jax.vmap(_forward, in_axes=(None, None, 0))(
        prior, trans, jnp.stack([lik, lik_kept]))
    beta_end = jnp.exp(log_backward_end - lax.stop_gradient(jnp.max(log_backward_end)))
    log_end = jnp.log(alphas[:, -1] @ beta_end)
    fold_loss = (log_cs[1] + log_end[1] + jnp.sum(shift * kept)
                 - log_cs[0] - log_end[0] - jnp.sum(shift))
    gamma = alphas[1] * _backward(trans, lik_kept, beta_end / jnp.sum(beta_end))
    log_gamma = jnp.log(gamma) - jnp.log(jnp.sum(gamma, axis=1, keepdims=True))
    log_pred = logsumexp(log_gamma + log_lik, axis=1)
    return fold_loss, jnp.where(kept > 0, 0.0, -log_pred)


def filtered_marginals(log_init, log_trans, log_lik):
    """Filtered marginals ``log p(z_t = k | x_{1..t})``, shape ``(T, K)``: the normalised
    messages ``alpha_t`` of the scaled forward pass (:func:`log_normalizer`), alone (no
    backward pass). A step with ``log_lik_t = 0`` (a masked, padded step) is a prediction:
    ``alpha_t = alpha_{t-1} A``."""
    init, trans, lik, _ = _scaled_potentials(log_init, log_trans, log_lik)
    return jnp.log(_forward(init, trans, lik)[1])


def viterbi(log_init, log_trans, log_lik, mask=None):
    """Most probable state path ``argmax_z [log pi(z_1) + sum_t log A(z_{t-1}, z_t) +
    sum_t log p(x_t | z_t)]``, shape ``(T,)`` ints (``-1`` where ``mask`` is 0).

    Max-product in log space with back-pointers (Viterbi 1967): ``delta_1 = log pi +
    l_1``, ``delta_t(k) = max_j [delta_{t-1}(j) + log A(j, k)] + l_t(k)``, then back from
    ``argmax_k delta_T(k)``; the recursion of :func:`approxcv.inference.crf.viterbi` with
    the initial log-probabilities as start scores and no stop scores. Steps where ``mask``
    is 0 (padding at the end of a sequence) carry ``delta`` unchanged, so they do not move
    the path of the observed steps (a padded step's transition would: ``max_k log A(j,
    k)`` differs between ``j``). Ties go to the lowest state index.

    Args:
        log_init: ``(K,)``; log_trans: ``(K, K)``; log_lik: ``(T, K)``.
        mask: ``(T,)`` 1 at observed steps (default: every step).
    """
    if mask is None:
        mask = jnp.ones(log_lik.shape[:1], log_lik.dtype)
    return crf.viterbi(log_lik, log_trans, log_init, jnp.zeros_like(log_init), mask)


def propagate_states(probs, trans, horizon: int):
    """The state distribution ``h = 1..horizon`` steps after one with distribution ``probs
    (K,)``: ``p_h = p_{h-1} A`` (``p_0 = probs``), shape ``(horizon, K)``; one ``lax.scan``.
    From the filtered ``p(z_T | x_{1..T})`` this is ``p(z_{T+h} | x_{1..T})``."""
    def step(p, _):
        p = p @ trans
        return p, p
    return lax.scan(step, probs, None, length=horizon)[1]


def sample_states(key, log_init, log_trans, num_timesteps: int):
    """Ancestral draws of the chain: ``z_1 ~ pi``, ``z_t | z_{t-1} ~ A(z_{t-1}, .)``, shape
    ``(num_timesteps,)`` ints, from the JAX PRNG ``key`` (one ``lax.scan`` over time)."""
    k0, rest = jax.random.split(key)
    z0 = jax.random.categorical(k0, log_init)

    def step(z, k):
        z = jax.random.categorical(k, log_trans[z])
        return z, z

    _, zs = lax.scan(step, z0, jax.random.split(rest, num_timesteps - 1))
    return jnp.concatenate([z0[None], zs])
