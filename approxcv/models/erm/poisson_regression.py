"""Poisson regression (log link) with an L2 penalty.

``F(theta, b; w) = sum_i w_i [exp(eta_i) - y_i eta_i + log y_i!] + lam^T r(theta)`` with
``eta_i = x_i^T theta + b``: the weighted Poisson negative log-likelihood plus ridge
regularisers (intercept unpenalised). The held-out loss is the Poisson NLL
``-log p(y_i | x_i)`` (including ``log y_i!``).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln

from ._glm import GLM

__all__ = ["PoissonRegression", "PoissonRegressionParams"]


class PoissonRegressionParams(NamedTuple):
    """coef ``(p,)``; intercept ``()`` (shape ``(0,)`` when ``fit_intercept=False``)."""
    coef: jax.Array
    intercept: jax.Array


class PoissonRegression(GLM):
    """Poisson regression. Data: ``(X (n, p), y (n,))`` with non-negative integer counts ``y``.

    Same minimiser as scikit-learn's ``PoissonRegressor(alpha=lam / n)`` (scalar ``lam``).
    Arguments as :class:`~approxcv.models.erm._glm.GLM`.
    """
    params_type = PoissonRegressionParams
    response = "non-negative integer counts"
    mean = staticmethod(jnp.exp)

    @staticmethod
    def loss(eta, y):
        """Poisson NLL ``exp(eta) - y eta + log y!``."""
        return jnp.exp(eta) - y * eta + gammaln(y + 1.0)

    @staticmethod
    def valid_response(y):
        """``y in {0, 1, 2, ...}``."""
        return (y >= 0) & (y == np.round(y))
