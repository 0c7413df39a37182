"""dynamax's objective as the prior of an approxcv HMM (``prior=`` of the Gaussian, Poisson
and categorical HMMs; built by :func:`approxcv.models.from_dynamax`).

dynamax fits an HMM by maximising ``log p(x; theta) + log p(theta)``, its
``marginal_log_prob`` summed over the sequences plus its ``log_prior(params)`` (``fit_em``:
E-step, then the mode of each conjugate posterior; ``fit_sgd``: the same function by
gradient steps). ``log p(theta)`` here is dynamax's, term by term, normalising constants
included, so the converted objective *equals* ``-(marginal_log_prob + log_prior)``:

* chain: ``log Dir(pi; alpha)`` (``initial_probs_concentration``) and ``sum_j log Dir(A_j;
  beta 1 + kappa e_j)`` (``transition_matrix_concentration`` ``beta``,
  ``transition_matrix_stickiness`` ``kappa``), with ``log Dir(p; a) = log Gamma(sum a) -
  sum log Gamma(a) + sum (a - 1) log p``;
* Gaussian, normal-inverse-gamma (:class:`DynamaxNIGPrior`: ``DiagonalGaussianHMM``; a
  one-feature ``GaussianHMM``, whose normal-inverse-Wishart ``NIW(mu0, kappa0, nu0, Psi0)``
  is ``NIG(mu0, kappa0, nu0 / 2, Psi0 / 2)`` in one dimension), for every state ``k`` and
  feature ``r``::

      log IG(s2; a, b) + log N(mu; m0, s2 / kappa0),
      log IG(s2; a, b) = a log b - log Gamma(a) - (a + 1) log s2 - b / s2,

  whose M-step (the posterior's mode, as dynamax's) is ``mu = (kappa0 m0 + sum r x) /
  (kappa0 + N)``, ``s2 = (b + kappa0 (mu - m0)^2 / 2 + sum r (x - mu)^2 / 2) / (a + 3/2 +
  N / 2)``;
* Gaussian, spherical with one feature (:class:`DynamaxSphericalPrior`): ``log N(mu; m0,
  v0) + log Ga(s2; a, b)``, ``log Ga(s2; a, b) = a log b - log Gamma(a) + (a - 1) log s2 -
  b s2`` (dynamax's M-step runs Adam on it; here one conditional-maximisation sweep: ``mu``
  given ``s2``, then the positive root in ``s2``);
* Poisson: ``log Ga(lambda; a, b)``, M-step ``lambda = (sum r x + a - 1) / (N + b)``;
* categorical: ``sum_k log Dir(B_k; gamma)``, M-step ``B_k ∝ counts + gamma - 1``.

A held entry of a simplex (:mod:`approxcv.models.hmm.dynamax`: fixed by the data or by
dynamax's ``trainable=False``) adds its term where it is positive and nothing at exactly 0
(a constant either way). Arrays are nested tuples (hashable; constants of the programs).
"""
from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from .. import constraints as C
from .._transforms import dirichlet_map


def dirichlet_log_density(probs, concentration):
    """``sum_rows [log Gamma(sum a) - sum log Gamma(a) + sum (a - 1) log p]`` over the last
    axis (an entry at exactly 0 adds nothing: a held constant)."""
    a = jnp.broadcast_to(jnp.asarray(concentration), jnp.shape(probs))
    safe = jnp.where(probs > 0, probs, 1.0)
    return jnp.sum(gammaln(jnp.sum(a, -1)) - jnp.sum(gammaln(a), -1)
                   + jnp.sum((a - 1.0) * jnp.log(safe), -1))


def gamma_log_density(x, shape, rate):
    """``sum [a log b - log Gamma(a) + (a - 1) log x - b x]``."""
    return jnp.sum(shape * jnp.log(rate) - gammaln(shape) + (shape - 1.0) * jnp.log(x)
                   - rate * x)


def inverse_gamma_log_density(x, shape, scale):
    """``sum [a log b - log Gamma(a) - (a + 1) log x - b / x]``."""
    return jnp.sum(shape * jnp.log(scale) - gammaln(shape) - (shape + 1.0) * jnp.log(x)
                   - scale / x)


def normal_log_density(x, loc, var):
    """``sum [-log(2 pi var) / 2 - (x - loc)^2 / (2 var)]``."""
    return jnp.sum(-0.5 * jnp.log(2.0 * jnp.pi * var) - 0.5 * (x - loc) ** 2 / var)


@dataclass(frozen=True)
class DynamaxPrior:
    """The chain part of dynamax's log prior (module docstring) and the held parameters.

    initial: ``(K,)`` Dirichlet concentration of the initial distribution.
    transition: ``(K, K)``: row ``j``'s Dirichlet concentration ``beta + kappa [j = k]``.
    held: ``((field, constraint), ...)``: fields whose constraint is
        :class:`~approxcv.models.constraints.Fixed` or
        :class:`~approxcv.models.constraints.PartlyFixedSimplex` instead of the model's.
    reasons: ``(phrase, ...)``: why each was held.
    """
    initial: tuple
    transition: tuple
    held: tuple = ()
    reasons: tuple = ()
    family = "HMM"

    def constraint(self, field: str, default):
        """The constraint of ``field``: the held one, else ``default``."""
        return dict(self.held).get(field, default)

    def free(self, field: str, shape) -> np.ndarray:
        """``bool`` array of the entries of ``field`` that move."""
        c = dict(self.held).get(field)
        if isinstance(c, C.Fixed):
            return np.zeros(shape, bool)
        if isinstance(c, C.PartlyFixedSimplex):
            return np.asarray(c.free, bool)
        return np.ones(shape, bool)

    def chain_log_prior(self, params):
        return (dirichlet_log_density(params[0], np.asarray(self.initial))
                + dirichlet_log_density(params[1], np.asarray(self.transition)))

    def chain_m_step(self, e_init, e_trans):
        """``(pi, A)``: the Dirichlet posterior modes ``p ∝ counts + a - 1`` (dynamax's), floored
        at 1e-10 (held entries are restored by the constraints: the free entries'
        proportions are the conditional maximiser)."""
        return (dirichlet_map(e_init, np.asarray(self.initial)),
                dirichlet_map(e_trans, np.asarray(self.transition)))

    def log_prior(self, params):
        """dynamax's ``log_prior(params)`` of the same parameters."""
        return self.chain_log_prior(params) + self.emission_log_prior(params)

    def emission_log_prior(self, params):
        raise NotImplementedError

    def emission_m_step(self, params, r, x):
        raise NotImplementedError


@dataclass(frozen=True)
class DynamaxNIGPrior(DynamaxPrior):
    """Normal-inverse-gamma terms of every state and feature (module docstring), arrays
    ``(K, R)``: ``loc`` ``m0``, ``mean_concentration`` ``kappa0``, ``shape`` ``a``,
    ``scale`` ``b``."""
    loc: tuple = ()
    mean_concentration: tuple = ()
    shape: tuple = ()
    scale: tuple = ()
    family = "GaussianHMM"

    def emission_log_prior(self, params):
        m0, k0 = np.asarray(self.loc), np.asarray(self.mean_concentration)
        a, b = np.asarray(self.shape), np.asarray(self.scale)
        var = params.variances
        return (inverse_gamma_log_density(var, a, b)
                + normal_log_density(params.means, m0, var / k0))

    def emission_m_step(self, params, r, x):
        """The posterior mode (dynamax's ``nig_posterior_update(...).mode()``); a held
        ``means`` field stays, and ``s2`` is its conditional maximiser."""
        m0, k0 = np.asarray(self.loc), np.asarray(self.mean_concentration)
        a, b = np.asarray(self.shape), np.asarray(self.scale)
        nk = jnp.sum(r, 0)[:, None]
        sx, sxx = r.T @ x, r.T @ x ** 2
        mu = jnp.where(self.free("means", m0.shape), (k0 * m0 + sx) / (k0 + nk), params.means)
        ss = jnp.maximum(sxx - 2.0 * mu * sx + nk * mu ** 2, 0.0)
        var = (b + 0.5 * k0 * (mu - m0) ** 2 + 0.5 * ss) / (a + 1.5 + 0.5 * nk)
        return params._replace(means=mu, variances=var)


@dataclass(frozen=True)
class DynamaxSphericalPrior(DynamaxPrior):
    """One feature: ``N(mu; loc, mean_var)`` and ``Ga(s2; shape, rate)``, arrays ``(K, 1)``."""
    loc: tuple = ()
    mean_var: tuple = ()
    shape: tuple = ()
    rate: tuple = ()
    family = "GaussianHMM"

    def emission_log_prior(self, params):
        m0, v0 = np.asarray(self.loc), np.asarray(self.mean_var)
        a, b = np.asarray(self.shape), np.asarray(self.rate)
        return (normal_log_density(params.means, m0, v0)
                + gamma_log_density(params.variances, a, b))

    def emission_m_step(self, params, r, x):
        """One conditional-maximisation sweep: ``mu = (sum r x / s2 + m0 / v0) / (N / s2 + 1 /
        v0)`` at the current ``s2``, then ``s2 = 2 S / (c + sqrt(c^2 + 8 b S))``, the
        positive root of ``2 b s2^2 + c s2 - S = 0`` (``S = sum r (x - mu)^2``, ``c = N - 2 (a
        - 1)``), where the objective's derivative in ``s2`` vanishes."""
        m0, v0 = np.asarray(self.loc), np.asarray(self.mean_var)
        a, b = np.asarray(self.shape), np.asarray(self.rate)
        nk = jnp.sum(r, 0)[:, None]
        sx, sxx = r.T @ x, r.T @ x ** 2
        var = params.variances
        mu = jnp.where(self.free("means", m0.shape),
                       (sx / var + m0 / v0) / (nk / var + 1.0 / v0), params.means)
        ss = jnp.maximum(sxx - 2.0 * mu * sx + nk * mu ** 2, 0.0)
        c = nk - 2.0 * (a - 1.0)
        var = 2.0 * ss / jnp.maximum(c + jnp.sqrt(c ** 2 + 8.0 * b * ss), 1e-300)
        return params._replace(means=mu, variances=jnp.maximum(var, 1e-300))


@dataclass(frozen=True)
class DynamaxPoissonPrior(DynamaxPrior):
    """Gamma terms ``log Ga(lambda_k; shape, rate)``, ``(K,)`` each."""
    shape: tuple = ()
    rate: tuple = ()
    family = "PoissonHMM"

    def emission_log_prior(self, params):
        return gamma_log_density(params.rates, np.asarray(self.shape), np.asarray(self.rate))

    def emission_m_step(self, params, r, x):
        a, b = np.asarray(self.shape), np.asarray(self.rate)
        num = jnp.maximum(r.T @ x + a - 1.0, 1e-10)
        return params._replace(rates=num / jnp.maximum(jnp.sum(r, 0) + b, 1e-10))


@dataclass(frozen=True)
class DynamaxCategoricalPrior(DynamaxPrior):
    """Dirichlet terms on the emission rows, ``concentration (K, V)``."""
    concentration: tuple = ()
    family = "CategoricalHMM"

    def emission_log_prior(self, params):
        return dirichlet_log_density(params.emission_probs, np.asarray(self.concentration))

    def emission_m_step(self, params, r, x):
        v = np.shape(self.concentration)[-1]
        counts = r.T @ (x[:, None] == jnp.arange(v)).astype(r.dtype)
        return params._replace(emission_probs=dirichlet_map(
            counts, np.asarray(self.concentration)))
