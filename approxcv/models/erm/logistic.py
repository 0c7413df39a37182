"""L2-regularised logistic regression.

``F(theta, b; w) = sum_i w_i [log(1 + exp(eta_i)) - y_i eta_i] + lam^T r(theta)`` with
``eta_i = x_i^T theta + b``, ``y_i in {0, 1}`` and ``r`` the ridge regularisers (one weight or
one per coefficient; intercept unpenalised). The held-out loss is the log-loss
``-log p(y_i | x_i)``.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

from ._glm import GLM

__all__ = ["Logistic", "LogisticParams"]


class LogisticParams(NamedTuple):
    """coef ``(p,)``; intercept ``()`` (shape ``(0,)`` when ``fit_intercept=False``)."""
    coef: jax.Array
    intercept: jax.Array


class Logistic(GLM):
    """Logistic regression with an L2 penalty. Data: ``(X (n, p), y (n,))``, ``y`` in {0, 1}.

    Same minimiser as scikit-learn's ``LogisticRegression(C=1/lam)`` (scalar ``lam``).
    Arguments as :class:`~approxcv.models.erm._glm.GLM`.
    """
    params_type = LogisticParams
    response = "binary labels 0/1"
    mean = staticmethod(jax.nn.sigmoid)

    @staticmethod
    def loss(eta, y):
        """Log-loss ``log(1 + e^eta) - y eta = log(1 + e^{(1 - 2y) eta})`` for ``y in {0, 1}``
        (the second form keeps its relative accuracy for confidently right points, where
        the first cancels to 0)."""
        return jax.nn.softplus((1.0 - 2.0 * y) * eta)

    @staticmethod
    def valid_response(y):
        """``y in {0, 1}``."""
        return np.isin(y, (0.0, 1.0))

    def predict_proba(self, params, X):
        """``P(y = 1 | x)`` ``(n,)``."""
        return self.predict_mean(params, X)
