"""The latent posterior at one hyperparameter vector, for either inference method, as one
record the LOO estimators read (:class:`Posterior`).

``theta`` (unconstrained) is ``[kernel logs (3 + d), likelihood phi]``
(:mod:`approxcv.inference.latent_gaussian.covariance`). ``weights`` (``(n,)``, 0/1) switch points off;
``warm`` starts the iteration (Laplace: ``a``; EP: ``(tau, nu)`` stacked as ``(2, n)``).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from ..._runtime import jit
from .covariance import kernel_matrix, n_kernel_params
from .ep import ep_fit, ep_log_marginal
from .laplace import (jittered_kernel, laplace_log_marginal, laplace_mode,
                      posterior_variance)

__all__ = ["Posterior", "latent_posterior", "log_marginal", "split_theta", "cold_start",
           "posteriors_at", "INFERENCES"]

INFERENCES = ("laplace", "ep")


class Posterior(NamedTuple):
    """mean, var: ``q(f_i | D) = N(mean_i, var_i)`` (Laplace: the mode); tau, nu: site
    natural parameters (Laplace: ``tau = W``, ``nu = W f_hat + g``, eq. 14/16); g: Laplace's
    ``d log p / df`` at the mode (EP: zeros); log_z: EP's tilted log normalisers (eq. 36;
    Laplace: NaN); log_marginal: ``log q(y | theta)``; converged; iterations; warm: the state
    a later run can start from; jitter: added to ``diag K`` where ``K`` (repeated inputs)
    had no Cholesky factor (Laplace with a likelihood that is not log-concave, the one
    inference that factors ``K`` itself; 0 otherwise)."""
    mean: jax.Array
    var: jax.Array
    tau: jax.Array
    nu: jax.Array
    g: jax.Array
    log_z: jax.Array
    log_marginal: jax.Array
    converged: jax.Array
    iterations: jax.Array
    warm: jax.Array
    jitter: jax.Array


def split_theta(theta, d: int):
    """``(kernel logs, likelihood phi)``."""
    k = n_kernel_params(d)
    return theta[:k], theta[k:]


def _laplace(K, y, lik, phi, weights, warm, marginal):
    jitter = jnp.array(0.0)
    if not lik.log_concave:
        K, jitter = jittered_kernel(K)
    s = laplace_mode(K, y, lik, phi, weights, warm)
    var = posterior_variance(K, s.W, lik.log_concave)
    lm = laplace_log_marginal(K, y, lik, phi, weights, s.a) if marginal else jnp.nan
    nan = jnp.full_like(s.f, jnp.nan)
    # a local maximum: a proper Gaussian, a finite log marginal where one is computed
    converged = s.converged & jnp.all(var > 0) & jnp.all(jnp.isfinite(var))
    converged = converged & jnp.isfinite(lm) if marginal else converged
    return Posterior(s.f, var, s.W, s.W * s.f + s.g, s.g, nan, lm, converged, s.iterations,
                     s.a, jitter)


def _ep(K, y, lik, phi, weights, warm, damping, marginal, ep_tol, eta):
    s = ep_fit(K, y, lik, phi, weights, warm[0], warm[1], damping, tol=ep_tol, eta=eta)
    lm = ep_log_marginal(K, y, lik, phi, weights, s.tau, s.nu) if marginal else jnp.nan
    converged = s.converged & jnp.isfinite(lm) if marginal else s.converged
    return Posterior(s.mu, s.var, s.tau, s.nu, jnp.zeros_like(s.mu), s.log_z, lm, converged,
                     s.iterations, jnp.stack([s.tau, s.nu]), jnp.array(0.0))


@functools.partial(jit, static_argnames=("lik", "inference", "damping", "marginal",
                                             "ep_tol", "eta"))
def latent_posterior(theta, X, y, weights, warm, *, lik, inference: str, damping: float = 0.5,
                     marginal: bool = True, ep_tol: float = 1e-9, eta: float = 1.0):
    """The :class:`Posterior` of ``inference`` ("laplace" or "ep") at ``theta``
    (``marginal=False``: ``log_marginal`` is NaN, not computed — brute force needs none;
    ``ep_tol``: EP's convergence tolerance on the site parameters; ``eta``: power EP's
    fraction, :func:`~approxcv.inference.latent_gaussian.ep.ep_fit`; ``log_marginal`` is then the EP formula at
    those sites, not power EP's own energy)."""
    theta_k, phi = split_theta(theta, X.shape[1])
    K = kernel_matrix(theta_k, X)
    if inference == "laplace":
        return _laplace(K, y, lik, phi, weights, warm, marginal)
    return _ep(K, y, lik, phi, weights, warm, damping, marginal, ep_tol, eta)


def cold_start(n: int, inference: str):
    """The starting state of a fresh run: zero ``a`` or zero sites."""
    return jnp.zeros(n) if inference == "laplace" else jnp.zeros((2, n))


@functools.partial(jit, static_argnames=("lik", "inference", "damping", "eta"))
def posteriors_at(points, X, y, lik, inference, damping, weights=None, eta: float = 1.0):
    """The :class:`Posterior` at every row of ``points (S, p)`` (stacked along a leading
    axis), each from a cold start. One compiled program (an eager ``vmap`` would compile
    the batched :func:`latent_posterior` outside approxcv's options and program cache)."""
    n = y.shape[0]
    weights = jnp.ones(n) if weights is None else weights
    warm = cold_start(n, inference)

    def one(theta):
        return latent_posterior(theta, X, y, weights, warm, lik=lik, inference=inference,
                                damping=damping, eta=eta)
    return jax.vmap(one)(jnp.asarray(points))


def log_marginal(theta, X, y, weights=None, *, lik, inference: str, damping: float = 0.5):
    """``log q(y_w | theta)`` with the posterior recomputed from a cold start (``weights``
    ``(n,)`` 0/1, default all ones, switch points off); differentiable in ``theta``
    (implicit mode derivative for Laplace, fixed sites for EP)."""
    n = y.shape[0]
    weights = jnp.ones(n) if weights is None else weights
    post = latent_posterior(jax.lax.stop_gradient(theta), X, y, weights,
                            cold_start(n, inference), lik=lik,
                            inference=inference, damping=damping)
    theta_k, phi = split_theta(theta, X.shape[1])
    K = kernel_matrix(theta_k, X) + post.jitter * jnp.eye(n)
    if inference == "laplace":
        return laplace_log_marginal(K, y, lik, phi, weights, post.warm)
    return ep_log_marginal(K, y, lik, phi, weights, post.tau, post.nu)
