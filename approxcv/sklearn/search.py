"""``ALOSearchCV``: a grid search whose candidates are scored by approximate leave-one-out
(:func:`~approxcv.sklearn.score.alo_score`) instead of refits per fold.

scikit-learn's ``GridSearchCV`` refits every candidate on every training split and scores it
on the test split; neither its ``cv=`` (which yields index splits) nor its ``scoring=`` (which
sees one fitted model and one test split) can carry a leave-one-out estimate from one fit.
So the approximate search is a meta-estimator of its own with ``GridSearchCV``'s interface
(``param_grid``, ``best_params_``, ``best_score_``, ``best_estimator_``, ``cv_results_``,
``predict``/``score`` of the refitted best), usable wherever ``GridSearchCV`` is — inside a
``Pipeline``, or wrapping one (``"step__param"`` names).
"""
from __future__ import annotations

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.model_selection import ParameterGrid
from sklearn.utils.validation import check_is_fitted

from .score import alo_score

__all__ = ["ALOSearchCV"]


class ALOSearchCV(MetaEstimatorMixin, BaseEstimator):
    """Exhaustive search over ``param_grid`` scored by approximate CV.

    Args:
        estimator: a supported scikit-learn linear model or a ``Pipeline`` ending in one
            (:func:`~approxcv.sklearn.alo_score`).
        param_grid: dict or list of dicts, as ``GridSearchCV``.
        cv: ``None`` (leave-one-out) or any ``cv`` of :func:`alo_score`.
        refit: refit the best candidate on all data (``best_estimator_``).

    Attributes:
        cv_results_: dict of arrays: ``params``, ``param_<name>``, ``mean_test_score``
            (``-mean_loss``: greater is better, as scikit-learn's ``neg_*`` scorers),
            ``rank_test_score``, ``n_unreliable``; best_index_, best_params_, best_score_,
            best_estimator_ (when ``refit``), best_alo_ (the best's
            :class:`~approxcv.sklearn.score.ALOScore`).
    """

    def __init__(self, estimator, param_grid, *, cv=None, refit=True):
        self.estimator = estimator
        self.param_grid = param_grid
        self.cv = cv
        self.refit = refit

    def fit(self, X, y, sample_weight=None):
        """Score every candidate by :func:`alo_score`, then refit the best; returns self."""
        candidates = list(ParameterGrid(self.param_grid))
        scores, unreliable, alos = [], [], []
        for params in candidates:
            est = clone(self.estimator).set_params(**params)
            alo = alo_score(est, X, y, self.cv, sample_weight=sample_weight)
            alos.append(alo)
            scores.append(-alo.mean_loss)
            unreliable.append(alo.n_unreliable)
        scores = np.asarray(scores)
        order = np.argsort(-scores, kind="stable")
        rank = np.empty(len(scores), dtype=np.int32)
        rank[order] = np.arange(1, len(scores) + 1)
        results = {"params": candidates, "mean_test_score": scores,
                   "rank_test_score": rank, "n_unreliable": np.asarray(unreliable)}
        for name in sorted({k for p in candidates for k in p}):
            results[f"param_{name}"] = np.ma.masked_array(
                [p.get(name) for p in candidates], mask=[name not in p for p in candidates],
                dtype=object)
        self.cv_results_ = results
        self.best_index_ = int(order[0])
        self.best_params_ = candidates[self.best_index_]
        self.best_score_ = float(scores[self.best_index_])
        self.best_alo_ = alos[self.best_index_]
        if self.refit:
            best = clone(self.estimator).set_params(**self.best_params_)
            kw = {} if sample_weight is None else {"sample_weight": sample_weight}
            self.best_estimator_ = best.fit(X, y, **kw)
        return self

    def _best(self):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_

    def predict(self, X):
        """``best_estimator_.predict(X)``."""
        return self._best().predict(X)

    def predict_proba(self, X):
        """``best_estimator_.predict_proba(X)``."""
        return self._best().predict_proba(X)

    def decision_function(self, X):
        """``best_estimator_.decision_function(X)``."""
        return self._best().decision_function(X)

    def score(self, X, y, sample_weight=None):
        """``best_estimator_.score(X, y)``."""
        return self._best().score(X, y, sample_weight=sample_weight)
