"""``LogisticRegressionALO``: L2 logistic regression with ``C`` tuned by approximate
leave-one-out (ALOOCV).

scikit-learn's ``LogisticRegression`` minimises ``C sum_i s_i logloss_i + 1/2 ||w||^2``;
dividing by ``C`` gives approxcv's ``sum_i s_i logloss_i + lam/2 ||w||^2`` with
``lam = 1 / C``. Two classes: one model. More classes: one binary model per class against
the rest (one-vs-rest, each class its own ``C``, as ``LogisticRegressionCV.C_``), with
probabilities normalised over the classes — not scikit-learn's multinomial objective.
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit
from sklearn.base import ClassifierMixin
from sklearn.utils.multiclass import check_classification_targets

from ..errors import InvalidDataError
from ._base import _ALOLinear, check_groups, check_refine, fit_glm

__all__ = ["LogisticRegressionALO"]


class LogisticRegressionALO(ClassifierMixin, _ALOLinear):
    """Logistic regression with ``C`` (or one ``C`` per group of features) tuned by ALOOCV.

    Args:
        Cs: grid of ``C`` values searched first (default ``1 / (n * 10^{-6..2})``), the best
            refined by Newton steps on the ALOOCV log-loss.
        penalty_groups, fit_intercept, newton_steps, refine: as
            :class:`~approxcv.sklearn.RidgeALO` (``refine="exact"``: ``C_`` is exact
            leave-one-out's minimiser, within 0.1 %; each class's for one-vs-rest).

    Attributes:
        classes_; C_: chosen ``C`` (float for two classes; ``(n_classes,)`` one-vs-rest, or
        ``(m,)`` / ``(n_classes, m)`` with groups); coef_ ``(1, p)`` or ``(n_classes, p)``;
        intercept_ ``(1,)`` or ``(n_classes,)``; alo_score_: ALOOCV mean log-loss (per
        class for one-vs-rest); alo_path_, cv_result_, unreliable_ (lists per class for
        one-vs-rest); exact_loo_score_ (with ``refine="exact"``: exact leave-one-out
        log-loss at ``C_``, per class for one-vs-rest); n_features_in_, feature_names_in_.
    """

    _param_name = "C"

    def __init__(self, Cs=None, *, penalty_groups=None, fit_intercept=True, newton_steps=20,
                 refine=None):
        self.Cs = Cs
        self.penalty_groups = penalty_groups
        self.fit_intercept = fit_intercept
        self.newton_steps = newton_steps
        self.refine = refine

    @staticmethod
    def _to_lam(C, n_eff):
        return 1.0 / np.asarray(C, np.float64)

    @staticmethod
    def _from_lam(lam, n_eff):
        return 1.0 / np.asarray(lam, np.float64)

    def fit(self, X, y, sample_weight=None):
        """Tune ``C`` by ALOOCV and fit; returns ``self``."""
        X, y, sw = self._validate_fit(X, y, sample_weight)
        check_classification_targets(y)
        self.classes_ = np.unique(y)
        if self.classes_.size < 2:
            raise InvalidDataError(f"This solver needs samples of at least 2 classes in the "
                                   f"data, but the data contains only one class: "
                                   f"{self.classes_[0]!r}")
        groups = check_groups(self.penalty_groups, X.shape[1])
        refine = check_refine(self.refine, groups)
        n_eff = float(np.sum(sw))
        grid = self._grid(self.Cs, n_eff)
        targets = ([self.classes_[1]] if self.classes_.size == 2 else list(self.classes_))
        fits = [fit_glm("logistic", X, (y == c).astype(np.float64), sw, grid, groups,
                        self.fit_intercept, self.newton_steps, refine) for c in targets]
        self.coef_ = np.stack([f.coef for f in fits])
        self.intercept_ = np.array([f.intercept for f in fits])
        if len(fits) == 1:
            self._record(fits[0], n_eff)
        else:
            self.C_ = np.stack([self._from_lam(f.lam, n_eff) for f in fits]).squeeze(-1) \
                if groups is None else np.stack([self._from_lam(f.lam, n_eff) for f in fits])
            self.alo_score_ = np.array([f.acv for f in fits])
            self.__dict__.pop("exact_loo_score_", None)    # a previous fit's
            if refine == "exact" and all(f.exact_loo is not None for f in fits):
                self.exact_loo_score_ = np.array([f.exact_loo for f in fits])
            self.alo_path_ = [f.path for f in fits]
            self._alo_fits = fits
        return self

    def decision_function(self, X):
        """``X coef_^T + intercept_``: ``(n,)`` for two classes, else ``(n, n_classes)``."""
        scores = self._linear(X)
        return scores[:, 0] if scores.shape[1] == 1 else scores

    def predict_proba(self, X):
        """Class probabilities ``(n, n_classes)`` (one-vs-rest: normalised)."""
        scores = self.decision_function(X)
        if scores.ndim == 1:
            p1 = expit(scores)
            return np.stack([1.0 - p1, p1], axis=1)
        p = expit(scores)
        return p / p.sum(axis=1, keepdims=True)

    def predict_log_proba(self, X):
        """``log predict_proba(X)``."""
        return np.log(self.predict_proba(X))

    def predict(self, X):
        """The most probable class ``(n,)``."""
        scores = self.decision_function(X)
        idx = (scores > 0).astype(int) if scores.ndim == 1 else np.argmax(scores, axis=1)
        return self.classes_[idx]
