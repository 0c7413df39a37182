"""Block cavities: the leave-``S``-out predictive of every point of a fold ``S`` from the
full-data Gaussian posterior ``q(f | D) = N(mu, Sigma)`` and its sites, without a refit.

A Gaussian latent posterior (Laplace or EP) is the prior times one Gaussian site
``t_i(f_i) = exp(-tau_i f_i^2 / 2 + nu_i f_i)`` per point (Laplace: ``tau = W``,
``nu = W f_hat + g`` with ``g = d log p(y | f) / df`` at the mode; EP: its sites). Leaving
the set ``S`` out divides its sites out of the joint marginal of ``f_S``::

    Lambda_S = Sigma_SS^-1 - diag(tau_S),      eta_S = Sigma_SS^-1 mu_S - nu_S

a Gaussian with covariance ``C = Lambda_S^-1 = (I - Sigma_SS T_S)^-1 Sigma_SS`` and mean
``m = C eta_S = (I - Sigma_SS T_S)^-1 (mu_S - Sigma_SS nu_S)`` (computed in these forms:
no inverse of ``Sigma_SS``). Each point's loss is ``-log int p(y_i | f) N(f | m_i, C_ii) df``
(the tilted normaliser, :func:`~approxcv.bayes.quadrature.tilted_moments`): the pointwise
``-log p(y_i | y_-S)`` that the ``loo`` package's K-fold elpd sums. For one point this is
LA-LOO's / EP-LOO's cavity (seed eq. 31, 36-37); for the Gaussian likelihood (sites exact)
it is the exact leave-``S``-out predictive, equal to refitting. The other sites stay as in
the full fit (the LA-/EP-LOO assumption, which the refits of :mod:`.refits` drop).

A fold is flagged (``bad``) when its cavity is not a proper Gaussian (``C`` not positive
definite), a point's cavity variance is wider than its prior ``k(x_i, x_i)`` (log-concave
likelihood: digits were lost) or a value is not finite.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from .._compile import jit
from .covariance import kernel_matrix
from .ep import ep_posterior
from .posterior import split_theta
from .quadrature import tilted_moments

__all__ = ["block_cavity_lpd"]

#: relative slack of the cavity-wider-than-prior test (round-off)
PRIOR_SLACK = 1e-6


@functools.partial(jit, static_argnames=("lik",))
def block_cavity_lpd(post, theta, X, y, index, *, lik):
    """``(lpd (F, m), bad (F,))`` of the folds ``index (F, m)`` (rows padded with ``n``,
    out of range; padded slots get 0) at hyperparameters ``theta`` from the posterior
    ``post`` (a :class:`~approxcv.bayes.posterior.Posterior` at ``theta``)."""
    n = y.shape[0]
    theta_k, phi = split_theta(theta, X.shape[1])
    K = kernel_matrix(theta_k, X) + post.jitter * jnp.eye(n)
    sigma = ep_posterior(K, post.tau, post.nu, lik.log_concave)[1]
    prior = jnp.diag(K)

    def _one(rows):
        """The block cavity of one fold."""
        ok = rows < n
        r = jnp.where(ok, rows, 0)
        m = rows.shape[0]
        both = ok[:, None] & ok[None, :]
        s = jnp.where(both, sigma[r][:, r], jnp.eye(m))
        tau = jnp.where(ok, post.tau[r], 0.0)
        mu = jnp.where(ok, post.mean[r], 0.0)
        nu = jnp.where(ok, post.nu[r], 0.0)
        a = jnp.eye(m) - s * tau[None, :]
        sol = jnp.linalg.solve(a, jnp.concatenate([s, (mu - s @ nu)[:, None]], 1))
        cov = 0.5 * (sol[:, :m] + sol[:, :m].T)
        mean = sol[:, m]
        var = jnp.diag(cov)
        proper = jnp.linalg.eigvalsh(cov)[0] > 0
        bad_pt = ~(jnp.isfinite(var) & (var > 0))
        if lik.log_concave:
            bad_pt = bad_pt | (var > prior[r] * (1.0 + PRIOR_SLACK))
        lpd = tilted_moments(lik, y[r], phi, jnp.where(bad_pt, 0.0, mean),
                             jnp.where(bad_pt, 1.0, var))[0]
        bad = ~proper | jnp.any(ok & (bad_pt | ~jnp.isfinite(lpd)))
        return jnp.where(ok, lpd, 0.0), bad
    return jax.vmap(_one)(jnp.asarray(index))
