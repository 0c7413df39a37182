"""Bijections to unconstrained space and conjugate-style log priors (up to constants).

Simplex vectors use ``K - 1`` free logits with the last fixed at 0, so the map is a
bijection and the Hessian in unconstrained space is not singular by construction.
"""
from __future__ import annotations

import jax.numpy as jnp
from jax.nn import log_softmax


def logits_to_log_simplex(logits):
    """Inverse of ``eta_k = log p_k - log p_K`` (:class:`~approxcv.models.constraints.Simplex`)
    in log space: ``(..., K-1) -> (..., K)`` log-probs."""
    zeros = jnp.zeros(logits.shape[:-1] + (1,), logits.dtype)
    return log_softmax(jnp.concatenate([logits, zeros], axis=-1), axis=-1)


def dirichlet_log_prior(log_probs, concentration):
    """``sum (alpha - 1) log p`` (Dirichlet log density without its normaliser)."""
    return jnp.sum((concentration - 1.0) * log_probs)


def dirichlet_map(counts, concentration):
    """MAP of probabilities (last axis) under a Dirichlet prior given expected counts:
    ``p_k ∝ counts_k + alpha - 1`` (floored at 1e-10 for ``alpha < 1``; EM then rejects the
    step if it raises the objective)."""
    num = jnp.maximum(counts + concentration - 1.0, 1e-10)
    return num / jnp.sum(num, axis=-1, keepdims=True)


def gamma_log_prior(log_x, shape, rate):
    """``sum (a - 1) log x - b x`` for ``x = exp(log_x)`` (Gamma(a, b) without normaliser)."""
    return jnp.sum((shape - 1.0) * log_x - rate * jnp.exp(log_x))


def inverse_gamma_log_prior(log_x, shape, scale):
    """``sum -(a + 1) log x - b / x`` (Inverse-Gamma(a, b) without normaliser)."""
    return jnp.sum(-(shape + 1.0) * log_x - scale * jnp.exp(-log_x))


def normal_log_prior(x, mean, variance):
    """``sum -(x - m)^2 / (2 v)`` (Normal(m, v) without normaliser)."""
    return -0.5 * jnp.sum((x - mean) ** 2) / variance
