"""``RidgeALO``: ridge regression whose penalty is chosen by leave-one-out (exact for ridge).

scikit-learn's ``Ridge`` minimises ``sum_i s_i (y_i - x_i^T w - b)^2 + alpha ||w||^2``, the same
minimiser as approxcv's ``1/2 sum_i s_i (y_i - eta_i)^2 + lam/2 ||w||^2`` with ``lam = alpha``.
For a quadratic loss ALOOCV is exact leave-one-out (the PRESS residuals), so ``alo_score_`` is
half the leave-one-out mean squared error, and ``alpha_`` is the exact LOO minimiser (to the
tuning's gradient tolerance). On a wide design (more features than samples, one ``alpha``)
the search runs in the ``n x n`` dual form (:mod:`approxcv.sklearn._ridge_dual`).
"""
from __future__ import annotations

import numpy as np
from sklearn.base import RegressorMixin

from ._base import _ALOLinear

__all__ = ["RidgeALO"]


class RidgeALO(RegressorMixin, _ALOLinear):
    """Ridge regression with ``alpha`` (or one ``alpha`` per group of features) tuned by
    leave-one-out.

    Args:
        alphas: grid of ``alpha`` values searched first (default: ``n * 10^{-6..2}``); the
            best grid point is refined by Newton steps on the leave-one-out loss.
        penalty_groups: ``None`` (one ``alpha``) or one integer group index per feature
            (``0 .. m-1``): one ``alpha`` per group, tuned jointly.
        fit_intercept: fit an unpenalised intercept.
        newton_steps: at most this many Newton steps after the grid (0: grid only).
        refine: ``None``, or ``"exact"``: go on from the chosen weight to exact
            leave-one-out's minimiser by refits (one weight only; for ridge ALOOCV is
            already exact, so this costs refits for nothing; for logistic and Poisson
            regression it moves the weight by a few per cent at about 1 s per evaluation:
            ``approxcv.sklearn._exact_refinement``).

    Attributes:
        alpha_: chosen ``alpha`` (float, or ``(m,)`` with groups); coef_ ``(p,)``;
        intercept_: float; alo_score_: ``1/n sum_i s_i (y_i - yhat_{-i})^2 / 2`` at
        ``alpha_``; alo_path_: DataFrame of the search (``alpha``, ``acv``, ``stage``);
        cv_result_: approxcv :class:`~approxcv.results.CVResult` (leave-one-out, ``"ns"``);
        unreliable_: indices of samples whose estimate cannot be vouched for;
        exact_loo_score_: with ``refine="exact"``, exact leave-one-out at ``alpha_``;
        n_features_in_, feature_names_in_: as scikit-learn.
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
        return np.asarray(alpha, np.float64)

    @staticmethod
    def _from_lam(lam, n_eff):
        return np.asarray(lam, np.float64)

    def fit(self, X, y, sample_weight=None):
        """Tune ``alpha`` by leave-one-out and fit; returns ``self``."""
        X, y, sw = self._validate_fit(X, y, sample_weight, y_numeric=True)
        return self._fit_tuned("ridge", X, y, sw, self.alphas)

    def predict(self, X):
        """``X coef_ + intercept_`` ``(n,)``."""
        return self._linear(X)
