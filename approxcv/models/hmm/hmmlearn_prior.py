"""hmmlearn's objective as the prior of an approxcv HMM (``prior=`` of the Gaussian,
Poisson and categorical HMMs; built by :func:`approxcv.models.from_hmmlearn`).

hmmlearn fits by MAP-EM; its M-steps (``hmmlearn/base.py`` and ``hmmlearn/hmm.py``,
``_do_mstep``) are the exact maximisers of the expected complete-data log-likelihood plus the
log prior below (up to constants), so EM's fixed points are the stationary points of
``-log p(x; theta) - log p(theta)``, the objective the IJ expands around:

* chain: ``sum_k (startprob_prior_k - 1) log pi_k + sum_jk (transmat_prior_jk - 1) log
  A_jk`` (M-step ``pi ∝ max(alpha - 1 + E[counts], 0)``);
* Gaussian (``"diag"``; ``"spherical"`` and ``"full"`` with one feature are the same), for
  every state ``k`` and feature ``r``, with ``m0 = means_prior``, ``w0 = means_weight``,
  ``c0 = covars_prior``, ``c = max(covars_weight - 1, 0)``::

      -(c / 2) log sigma2 - (c0 + w0 (mu - m0)^2) / (2 sigma2),

  whose M-step is hmmlearn's ``mu = (w0 m0 + sum_t r_t x_t) / (w0 + N)``, ``sigma2 = (c0 +
  w0 (mu - m0)^2 + sum_t r_t (x_t - mu)^2) / (c + N)``;
* Poisson: hmmlearn's update ``lambda_k = (a + n ybar_k) / (b + n)`` (``a, b`` =
  ``lambdas_prior, lambdas_weight``, ``n`` the expected steps of *all* states, ``ybar_k``
  state ``k``'s weighted mean) is the M-step of the Gamma term ``a w_k log lambda_k - b w_k
  lambda_k`` with ``w_k = N_k / n`` the state's share of the steps — a prior that depends
  on the data; it is held at the shares of the fitted estimator (``shape_k - 1 = a w_k``,
  ``rate_k = b w_k``, :attr:`HmmlearnPoissonPrior.shape`, ``rate``), so hmmlearn's fit is
  its stationary point, and refits keep it. With hmmlearn's defaults ``a = b = 0`` it is
  the maximum likelihood, exactly;
* categorical: ``sum_kv (emissionprob_prior_kv - 1) log B_kv``.

Arrays are stored as nested tuples (:func:`~approxcv.models.constraints.nested_tuple`), so
a prior is hashable and its model compares by value; they are constants of the compiled
programs. ``held``: the parameters held fixed (:class:`~approxcv.models.constraints.Fixed`,
:class:`~approxcv.models.constraints.PartlyFixedSimplex`) by field name, with the reasons
in ``reasons`` (what :func:`~approxcv.models.from_hmmlearn` warns).
"""
from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np

from .. import constraints as C
from .._transforms import dirichlet_map


def _dirichlet_terms(probs, concentration, free):
    """``sum (alpha - 1) log p`` over the ``free`` entries (held entries, possibly exactly 0,
    are constants: their terms are left out, a constant of the objective)."""
    safe = jnp.where(free, probs, 1.0)
    return jnp.sum(jnp.where(free, (concentration - 1.0) * jnp.log(safe), 0.0))


@dataclass(frozen=True)
class HmmlearnPrior:
    """The chain part of hmmlearn's objective (module docstring) and the held parameters.

    startprob, transmat: Dirichlet concentrations ``(K,)``, ``(K, K)`` (nested tuples).
    held: ``((field, constraint), ...)``: fields of the parameters whose constraint is
        :class:`~approxcv.models.constraints.Fixed` or
        :class:`~approxcv.models.constraints.PartlyFixedSimplex` instead of the model's.
    reasons: ``(phrase, ...)``: why each was held (for the record and the warning).
    """
    startprob: tuple
    transmat: tuple
    held: tuple = ()
    reasons: tuple = ()
    #: the approxcv class whose emissions this prior describes
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
        pi, trans = params[0], params[1]
        return (_dirichlet_terms(pi, np.asarray(self.startprob),
                                 self.free("initial_probs", np.shape(pi)))
                + _dirichlet_terms(trans, np.asarray(self.transmat),
                                   self.free("transition_matrix", np.shape(trans))))

    def chain_m_step(self, e_init, e_trans):
        """``(pi, A)`` maximising the expected chain terms: hmmlearn's ``p ∝ max(alpha - 1 +
        counts, 0)``, floored at 1e-10 so free entries stay inside the simplex (held entries
        are restored by the constraints: the free entries' proportions are the
        conditional maximiser)."""
        return (dirichlet_map(e_init, np.asarray(self.startprob)),
                dirichlet_map(e_trans, np.asarray(self.transmat)))

    def log_prior(self, params):
        return self.chain_log_prior(params) + self.emission_log_prior(params)

    def emission_log_prior(self, params):
        raise NotImplementedError

    def emission_m_step(self, params, r, x):
        raise NotImplementedError


@dataclass(frozen=True)
class HmmlearnGaussianPrior(HmmlearnPrior):
    """hmmlearn's Gaussian terms (module docstring), every array ``(K, R)``: means_prior
    ``m0``, means_weight ``w0``, covars_prior ``c0``, dof ``c = max(covars_weight - 1, 0)``."""
    means_prior: tuple = ()
    means_weight: tuple = ()
    covars_prior: tuple = ()
    dof: tuple = ()
    family = "GaussianHMM"

    def emission_log_prior(self, params):
        m0, w0 = np.asarray(self.means_prior), np.asarray(self.means_weight)
        c0, c = np.asarray(self.covars_prior), np.asarray(self.dof)
        var = params.variances
        return jnp.sum(-0.5 * c * jnp.log(var)
                       - (c0 + w0 * (params.means - m0) ** 2) / (2.0 * var))

    def emission_m_step(self, params, r, x):
        """hmmlearn's ``_do_mstep`` for ``"diag"`` (its floor ``1e-5`` on the divisor)."""
        m0, w0 = np.asarray(self.means_prior), np.asarray(self.means_weight)
        c0, c = np.asarray(self.covars_prior), np.asarray(self.dof)
        nk = jnp.sum(r, 0)[:, None]
        sx, sxx = r.T @ x, r.T @ x ** 2
        mu = (w0 * m0 + sx) / (w0 + nk)
        ss = jnp.maximum(sxx - 2.0 * mu * sx + nk * mu ** 2, 0.0)
        var = (c0 + w0 * (mu - m0) ** 2 + ss) / jnp.maximum(c + nk, 1e-5)
        return params._replace(means=mu, variances=var)


@dataclass(frozen=True)
class HmmlearnPoissonPrior(HmmlearnPrior):
    """Gamma terms ``(shape_k - 1) log lambda_k - rate_k lambda_k`` (``(K,)`` each), at the
    fitted estimator's state shares (module docstring)."""
    shape: tuple = ()
    rate: tuple = ()
    family = "PoissonHMM"

    def emission_log_prior(self, params):
        a, b = np.asarray(self.shape), np.asarray(self.rate)
        return jnp.sum((a - 1.0) * jnp.log(params.rates) - b * params.rates)

    def emission_m_step(self, params, r, x):
        a, b = np.asarray(self.shape), np.asarray(self.rate)
        num = jnp.maximum(r.T @ x + a - 1.0, 1e-10)
        return params._replace(rates=num / jnp.maximum(jnp.sum(r, 0) + b, 1e-10))


@dataclass(frozen=True)
class HmmlearnCategoricalPrior(HmmlearnPrior):
    """Dirichlet terms on the emission rows, ``emissionprob_prior (K, V)``."""
    emissionprob: tuple = ()
    family = "CategoricalHMM"

    def emission_log_prior(self, params):
        probs = params.emission_probs
        return _dirichlet_terms(probs, np.asarray(self.emissionprob),
                                self.free("emission_probs", np.shape(probs)))

    def emission_m_step(self, params, r, x):
        v = np.shape(self.emissionprob)[-1]
        counts = r.T @ (x[:, None] == jnp.arange(v)).astype(r.dtype)
        return params._replace(emission_probs=dirichlet_map(counts,
                                                             np.asarray(self.emissionprob)))
