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

from ..errors import InvalidDataError
from .erm import ERM

__all__ = ["Logistic", "LogisticParams"]


class LogisticParams(NamedTuple):
    """coef ``(p,)``; intercept ``()`` (shape ``(0,)`` when ``fit_intercept=False``)."""
    coef: jax.Array
    intercept: jax.Array


class Logistic(ERM):
    """Logistic regression with an L2 penalty. Data: ``(X (n, p), y (n,))``, ``y`` in {0, 1}.

    Args:
        lam: penalty weight ``>= 0``, a scalar or one per feature.
        fit_intercept: fit an unpenalised intercept.
        max_steps: BFGS step limit.
    """
    params_type = LogisticParams

    @staticmethod
    def loss(eta, y):
        """Log-loss ``log(1 + e^eta) - y eta``."""
        return jax.nn.softplus(eta) - y * eta

    def _validate_y(self, y):
        bad = ~np.isin(y, (0.0, 1.0))
        if np.any(bad):
            raise InvalidDataError(f"`y` must hold binary labels 0/1 for {type(self).__name__}; "
                                   f"found value {y[np.argmax(bad)]!r}")
        return y

    def predict_proba(self, params, X):
        """``P(y = 1 | x)`` ``(n,)``."""
        return np.asarray(jax.nn.sigmoid(self.predict_linear(params, X)))
