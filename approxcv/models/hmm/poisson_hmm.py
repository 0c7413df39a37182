"""Hidden Markov model with Poisson emissions.

``x_t | z_t = k ~ Poisson(lambda_k)``; priors ``lambda_k ~ Gamma(a, b)``, Dirichlet on the
initial distribution and on each transition row. Unconstrained: ``log lambda`` and logits.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ..._validate import check_positive
from .. import constraints as C
from .._transforms import gamma_log_prior
from .base import HMM, as_column_vector, check_counts


class PoissonHMMParams(NamedTuple):
    """initial_probs (K,), transition_matrix (K, K), rates (K,)."""
    initial_probs: jax.Array
    transition_matrix: jax.Array
    rates: jax.Array


class PoissonHMM(HMM):
    """Poisson HMM. Data: ``(T,)`` non-negative integer counts, or a list of them.

    Args:
        n_states: number of hidden states ``K``.
        rate_shape, rate_rate: Gamma prior on each rate (default 1.1, 1e-3: weak for
            counts of order 1-1000).
        **kwargs: see :class:`~approxcv.models.hmm.HMM` (priors on the chain, ``n_init``,
            ``seed``, ``max_steps``).

    Example:
        >>> import approxcv as acv
        >>> x = acv.datasets.load_calls(500)
        >>> model = acv.models.PoissonHMM(2)
        >>> params = model.fit(x)
        >>> folds = acv.folds.iid(len(x), 0.1, n_folds=20)
        >>> res = acv.cross_validate(model, x, folds, method="ij", params=params)
    """
    params_type = PoissonHMMParams
    numeric_hyperparameters = HMM.numeric_hyperparameters + ("rate_shape", "rate_rate")

    def __init__(self, n_states: int, *, rate_shape: float = 1.1, rate_rate: float = 1e-3,
                 **kwargs):
        super().__init__(n_states, **kwargs)
        self.rate_shape = check_positive("rate_shape", rate_shape)
        self.rate_rate = check_positive("rate_rate", rate_rate)

    def _validate_sequence(self, x, name):
        """Counts ``(T,)``; a column ``(T, 1)`` (hmmlearn's layout) is read as ``(T,)``."""
        return check_counts(as_column_vector(x, name), name)

    #: one observation per emission row (windows of the series: HMM.supports_windows)
    rowwise_emissions = True

    def _emission_log_lik(self, params, x):
        """``log p(x_t | z_t = k) = x_t log lambda_k - lambda_k - log x_t!``, shape ``(T, K)``."""
        rates = params.rates
        return x[:, None] * jnp.log(rates)[None] - rates[None] - gammaln(x + 1.0)[:, None]

    def _emission_log_prior(self, params):
        return gamma_log_prior(jnp.log(params.rates), self.rate_shape, self.rate_rate)

    def _emission_constraints(self):
        return (C.Positive(),)

    def closed_form_m_step(self) -> bool:
        return True

    def _emission_m_step(self, params, r, x, data):
        """``lambda_k = (sum_t r_tk x_t + a - 1) / (sum_t r_tk + b)`` (Gamma(a, b) MAP)."""
        num = jnp.maximum(r.T @ x + self.rate_shape - 1.0, 1e-10)
        return params._replace(rates=num / (jnp.sum(r, 0) + self.rate_rate))

    def _state_emission_means(self, params):
        """``E[x | z = k] = lambda_k``, ``(K,)``."""
        return params.rates

    def _sample_emissions(self, params, z, key):
        """``x_t ~ Poisson(lambda_{z_t})``, ``(T,)`` ints."""
        return jax.random.poisson(key, params.rates[z])

    def _initial_emissions(self, x, rng, i):
        """Rates at jittered quantiles of the counts (plain quantiles for the first start)."""
        k = self.n_states
        qs = (np.arange(k) + 0.5) / k
        if i > 0:
            qs = np.sort(np.clip(qs + rng.uniform(-0.5, 0.5, k) / k, 0.01, 0.99))
        return (np.maximum(np.quantile(x, qs), 0.1) * (1.0 + 1e-3 * np.arange(k)),)
