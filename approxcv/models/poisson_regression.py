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

from ..errors import InvalidDataError
from .erm import ERM

__all__ = ["PoissonRegression", "PoissonRegressionParams"]


class PoissonRegressionParams(NamedTuple):
    """coef ``(p,)``; intercept ``()`` (shape ``(0,)`` when ``fit_intercept=False``)."""
    coef: jax.Array
    intercept: jax.Array


class PoissonRegression(ERM):
    """Poisson regression. Data: ``(X (n, p), y (n,))`` with non-negative integer counts ``y``.

    Args:
        lam: penalty weight ``>= 0``, a scalar or one per feature.
        fit_intercept: fit an unpenalised intercept.
        max_steps: BFGS step limit.
    """
    params_type = PoissonRegressionParams

    @staticmethod
    def loss(eta, y):
        """Poisson NLL ``exp(eta) - y eta + log y!``."""
        return jnp.exp(eta) - y * eta + gammaln(y + 1.0)

    def _validate_y(self, y):
        if np.any(y < 0) or np.any(y != np.round(y)):
            raise InvalidDataError(f"`y` must hold non-negative integer counts for "
                                   f"{type(self).__name__}; min {y.min():.3g}")
        return y

    def predict_mean(self, params, X):
        """``E[y | x] = exp(eta)`` ``(n,)``."""
        return np.asarray(jnp.exp(self.predict_linear(params, X)))
