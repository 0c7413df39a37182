"""The event emission of :mod:`approxcv.models.hmm.time_varying_poisson`: a Delaporte likelihood.

``p(x | z = 1) = sum_{e=0}^{x} Poisson(x - e; lambda_t) NB(e; a, p)`` over the fixed grid
``e = 0..cap`` with the terms ``e > x_t`` masked, vectorised over time, evaluated as a
polynomial in ``lambda_t`` by Horner's rule (all coefficients non-negative: stable, and no
exponentials of a ``T x cap`` array). First and second derivatives are posterior moments of
``e`` (the same Horner sums with ``e``, ``e^2``, ``psi(e + a)``, ... in the coefficients),
supplied through ``jax.custom_jvp`` so Hessians and cross-Jacobians never push ``D`` tangents
through the ``T x cap`` sum.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.nn import log_sigmoid
from jax.scipy.special import digamma, polygamma

__all__ = ["event_log_likelihood"]

#: above this background rate the Horner coefficients are rescaled (e^lambda would overflow)
_RESCALE_RATE = 600.0
#: floor of the Horner sum (keeps log finite where the event state is ~impossible)
_TINY = 1e-300


def _delaporte_sums(lam, log_a, log_b, counts, grid, moments: bool):
    """Horner sums of the convolution and, optionally, of its excess moments.

    With ``c_e = NB(e; a, p) e^{sigma}`` returns ``(sums (M, T), shift (T,))`` where
    ``sums[m, t] = sum_{j=0}^{x_t} lam_t^j / j! c_{x_t - j} g_m(x_t - j) e^{-kappa_t}`` and
    ``log p(x_t | z_t = 1) = log sums[0, t] - lam_t + shift_t``; ``g`` is ``1`` (``M = 1``) or,
    with ``moments``, ``(1, e, e^2, psi, psi^2, e psi, psi')`` (``M = 7``, ``psi =
    digamma(e + a)``). One ``lax.scan`` over the grid from ``j = cap`` down to 0 (Horner's
    rule ``acc <- c + acc lam / (j + 1)``), vectorised over ``t`` without gathers: the NB
    coefficients (and ``psi``, ``psi'``) follow their own recursions in ``e``, started at
    ``e = 0`` where ``j = x_t``. Rescaling: ``kappa_t = max(lam_t - 600, 0)`` keeps the sum
    below ``e^600``; ``sigma = max(-a log p - 300, 0)`` keeps ``c_0 = p^a e^sigma`` from
    underflowing (``p^a >= e^{-a/b}``), so rates and excess means up to about 1,000 are safe.
    """
    a = jnp.exp(log_a)
    q = jax.nn.sigmoid(-log_b)                       # 1 - p
    log_c0 = a * log_sigmoid(log_b)
    sigma = jnp.maximum(-log_c0 - 300.0, 0.0)
    c0 = jnp.exp(log_c0 + sigma)
    kappa = jnp.maximum(lam - _RESCALE_RATE, 0.0)
    scale = jnp.exp(-kappa)
    psi0, psi1_0 = digamma(a), polygamma(1, a)
    num_steps = grid.shape[-1]  # cap + 1 Horner steps
    num = 7 if moments else 1

    def _step(carry, j):
        """Next coefficient by its recursion in ``e = x_t - j``, then one Horner step."""
        acc, c, psi, psi1 = carry if moments else (carry[0], carry[1], None, None)
        e = counts - j
        start = e <= 0                                    # e < 0: coefficient 0
        prev = jnp.where(start, 1.0, e - 1.0 + a)         # (e - 1) + a
        c = jnp.where(start, c0, c * prev * q / jnp.maximum(e, 1.0))
        c = jnp.where(e >= 0, c, 0.0)
        if moments:
            psi = jnp.where(start, psi0, psi + 1.0 / prev)
            psi1 = jnp.where(start, psi1_0, psi1 - 1.0 / prev ** 2)
            ee = jnp.maximum(e, 0.0)
            rows = jnp.stack([c, c * ee, c * ee ** 2, c * psi, c * psi ** 2, c * ee * psi,
                              c * psi1])
        else:
            rows = c[None]
        acc = rows * scale + acc * (lam / (j + 1.0))
        return ((acc, c, psi, psi1) if moments else (acc, c)), None

    zeros = jnp.zeros_like(lam)
    init = (jnp.zeros((num,) + lam.shape, lam.dtype), zeros)
    if moments:
        init = init + (zeros + psi0, zeros + psi1_0)
    out, _ = lax.scan(_step, init,
                      jnp.arange(num_steps - 1, -1, -1, dtype=lam.dtype), unroll=4)
    return out[0], kappa - sigma


@jax.custom_jvp
def event_log_likelihood(log_rate, log_a, log_b, counts, grid):
    """``log p(x_t | z_t = 1) = log sum_{e=0}^{x_t} Poisson(x_t - e; lambda_t) NB(e; a, p)``.

    Args:
        log_rate: ``(T,)`` ``log lambda_t``.
        log_a, log_b: scalars ``log a``, ``log b`` (``p = b / (1 + b)``).
        counts: ``(T,)`` counts (float holding integers), each ``<= cap``.
        grid: ``(cap + 1,)`` the excess grid ``0..cap``.

    Returns:
        ``(T,)`` log-probabilities. Derivatives in ``log_rate``, ``log_a``, ``log_b`` (first
        and second order) are posterior moments of the excess, see :func:`_event_moments`.
    """
    lam = jnp.exp(log_rate)
    sums, shift = _delaporte_sums(lam, log_a, log_b, counts, grid, False)
    return jnp.log(jnp.maximum(sums[0], _TINY)) - lam + shift


def _event_moments(log_rate, log_a, log_b, counts, grid):
    """Posterior moments of the excess ``e`` given ``x_t`` in the event state.

    Returns ``(lam, a, sig, Ee, Var e, E psi, Var psi, Cov(e, psi), E psi')`` with
    ``psi = digamma(e + a)``, ``psi' = trigamma(e + a)``, ``sig = p = sigmoid(log b)``;
    arrays are ``(T,)``.
    """
    lam = jnp.exp(log_rate)
    sums, _ = _delaporte_sums(lam, log_a, log_b, counts, grid, True)
    m = sums[1:] / jnp.maximum(sums[0], _TINY)
    e1, e2, p1, p2, ep, q1 = m
    return (lam, jnp.exp(log_a), jax.nn.sigmoid(log_b), e1, e2 - e1 ** 2, p1, p2 - p1 ** 2,
            ep - e1 * p1, q1)


@jax.custom_jvp
def _event_gradients(log_rate, log_a, log_b, counts, grid):
    """``(d l / d log_rate, d l / d log_a, d l / d log_b)``, each ``(T,)``, with
    ``l = event_log_likelihood``: expectations of the complete-data scores under
    ``p(e | x_t, z_t = 1)``."""
    lam, a, sig, e1, _, p1, _, _, _ = _event_moments(log_rate, log_a, log_b, counts, grid)
    d_rate = counts - lam - e1
    d_a = a * (p1 - digamma(a) + log_sigmoid(log_b))
    d_b = a * (1.0 - sig) - sig * e1
    return d_rate, d_a, d_b


def _event_hessian(log_rate, log_a, log_b, counts, grid):
    """Second derivatives ``(H_rr, H_ra, H_rb, H_aa, H_ab, H_bb)``, each ``(T,)``: expected
    complete-data Hessian plus the posterior covariance of the complete-data scores."""
    lam, a, sig, e1, ve, p1, vp, cep, q1 = _event_moments(log_rate, log_a, log_b, counts,
                                                           grid)
    d_a = a * (p1 - digamma(a) + log_sigmoid(log_b))
    h_rr = -lam + ve
    h_ra = -a * cep
    h_rb = sig * ve
    h_aa = d_a + a ** 2 * (q1 - polygamma(1, a)) + a ** 2 * vp
    h_ab = a * (1.0 - sig) - a * sig * cep
    h_bb = -sig * (1.0 - sig) * (a + e1) + sig ** 2 * ve
    return h_rr, h_ra, h_rb, h_aa, h_ab, h_bb


@event_log_likelihood.defjvp
def _event_log_likelihood_jvp(primals, tangents):
    """``dl = d_rate * d log_rate + d_a * d log_a + d_b * d log_b`` (counts, grid: data)."""
    t_rate, t_a, t_b = tangents[:3]
    out = event_log_likelihood(*primals)
    d_rate, d_a, d_b = _event_gradients(*primals)
    return out, d_rate * t_rate + d_a * t_a + d_b * t_b


@_event_gradients.defjvp
def _event_gradients_jvp(primals, tangents):
    """Tangents of the three gradients from :func:`_event_hessian`."""
    t_rate, t_a, t_b = tangents[:3]
    out = _event_gradients(*primals)
    h_rr, h_ra, h_rb, h_aa, h_ab, h_bb = _event_hessian(*primals)
    return out, (h_rr * t_rate + h_ra * t_a + h_rb * t_b,
                 h_ra * t_rate + h_aa * t_a + h_ab * t_b,
                 h_rb * t_rate + h_ab * t_a + h_bb * t_b)


# ---------------------------------------------------------------------- the model
