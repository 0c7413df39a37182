"""Shared body of the penalised generalised linear models (canonical link).

A GLM here is an :class:`~approxcv.models.erm.ERM` whose elementwise loss is a negative
log-likelihood ``phi(eta, y) = -log p(y | eta)`` with mean ``E[y | x] = mu(eta)``. A concrete
model states only ``phi`` (:meth:`ERM.loss`), the inverse link ``mu`` (:meth:`GLM.mean`) and
which responses are valid (:meth:`GLM.valid_response`, described by :attr:`GLM.response`).
"""
from __future__ import annotations

import numpy as np

from ...errors import InvalidDataError
from .base import ERM

__all__ = ["GLM"]


class GLM(ERM):
    """Penalised GLM: ``F = sum_i w_i phi(x_i^T theta + b, y_i) + lam^T r(theta)``.

    Args (as :class:`~approxcv.models.erm.ERM`):
        lam: penalty weight ``>= 0``, a scalar or one per feature.
        fit_intercept: fit an unpenalised intercept.
        max_steps: BFGS step limit.
    """
    response: str = "valid responses"

    @staticmethod
    def mean(eta):
        """Inverse link ``mu(eta) = E[y | eta]``."""
        raise NotImplementedError

    @staticmethod
    def valid_response(y: np.ndarray) -> np.ndarray:
        """``(n,)`` bool: which responses the likelihood admits."""
        raise NotImplementedError

    def _validate_y(self, y):
        bad = ~self.valid_response(y)
        if np.any(bad):
            raise InvalidDataError(f"`y` must hold {self.response} for {type(self).__name__}; "
                                   f"found value {y[np.argmax(bad)]!r}")
        return y

    def predict_mean(self, params, X):
        """``E[y | x] = mu(x^T theta + b)`` ``(n,)``."""
        return np.asarray(self.mean(self.predict_linear(params, X)))
