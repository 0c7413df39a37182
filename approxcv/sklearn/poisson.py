"""``PoissonRegressorALO``: Poisson regression (log link) with ``alpha`` tuned by approximate
leave-one-out.

scikit-learn's ``PoissonRegressor`` minimises ``1/(2 sum s) sum_i s_i dev(y_i, mu_i) +
alpha/2 ||w||^2``; half the Poisson deviance is ``mu - y eta`` plus terms free of ``w``, so
the minimiser is approxcv's ``sum_i s_i (e^eta_i - y_i eta_i + log y_i!) + lam/2 ||w||^2``
with ``lam = alpha sum_i s_i``. ``alo_score_`` is the ALOOCV mean Poisson negative
log-likelihood (with ``log y!``).
"""
from __future__ import annotations

import numpy as np
from sklearn.base import RegressorMixin
from sklearn.metrics import d2_tweedie_score

from ..errors import InvalidDataError
from ._base import _ALOLinear

__all__ = ["PoissonRegressorALO"]


class PoissonRegressorALO(RegressorMixin, _ALOLinear):
    """Poisson regression with ``alpha`` (or one per group of features) tuned by ALOOCV.

    Args and attributes as :class:`~approxcv.sklearn.RidgeALO` (``alphas`` in
    ``PoissonRegressor``'s convention); ``alo_score_`` is the mean Poisson NLL.
    """

    def __init__(self, alphas=None, *, penalty_groups=None, fit_intercept=True, newton_steps=20,
                 refine=None):
        self.alphas = alphas
        self.penalty_groups = penalty_groups
        self.fit_intercept = fit_intercept
        self.newton_steps = newton_steps
        self.refine = refine

    @staticmethod
    def _to_lam(alpha, n_eff):
        return np.asarray(alpha, np.float64) * n_eff

    @staticmethod
    def _from_lam(lam, n_eff):
        return np.asarray(lam, np.float64) / n_eff

    def fit(self, X, y, sample_weight=None):
        """Tune ``alpha`` by ALOOCV and fit; returns ``self``."""
        X, y, sw = self._validate_fit(X, y, sample_weight, y_numeric=True)
        if np.any(y < 0) or np.sum(y) <= 0:
            raise InvalidDataError("Some value(s) of y are out of the valid range of the "
                                   "Poisson loss: y must be >= 0 with a positive sum")
        return self._fit_tuned("poisson", X, y, sw, self.alphas)

    def predict(self, X):
        """Predicted mean ``exp(X coef_ + intercept_)`` ``(n,)``."""
        return np.exp(self._linear(X))

    def score(self, X, y, sample_weight=None):
        """D^2, the fraction of Poisson deviance explained (as ``PoissonRegressor.score``)."""
        return d2_tweedie_score(y, self.predict(X), sample_weight=sample_weight, power=1)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.positive_only = True
        return tags
