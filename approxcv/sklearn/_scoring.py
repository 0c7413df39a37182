"""The ``scoring=`` of :class:`~approxcv.sklearn.ALOSearchCV`: scikit-learn scorers that are
means of per-sample losses of the held-out prediction.

ALOOCV gives every held-out sample its prediction from the fold's parameters (the linear
predictor ``eta_i`` of the left-out fit, one Newton step from the full fit; exact for
ridge), not a fitted estimator per split. So a scorer is supported when its value on a split
is the mean of a loss of each sample's own prediction: the squared and absolute errors, the
Poisson deviance, the log-loss, the Brier score and the accuracy. Scorers that are not such
means (``r2``, ``neg_root_mean_squared_error``, ``roc_auc``, ...), callables and
multi-metric scoring need a fitted model per split and are refused naming the supported
names.

A split's score is the sample-weighted mean over its held-out samples (scikit-learn's sign:
greater is better); ``mean_test_score`` is the mean over all held-out samples, which is the
mean of the split scores weighted by the splits' sample weights, and ``std_test_score`` the
standard deviation of the split scores with the same weights. For leave-one-out without
sample weights these are what ``GridSearchCV(cv=LeaveOneOut())`` reports: a split is one
sample, the mean is over samples, the standard deviation is that of the samples' scores.
"""
from __future__ import annotations

import numpy as np
from scipy.special import expit, xlogy
from sklearn.linear_model import ElasticNet, LogisticRegression, PoissonRegressor, Ridge

from ..errors import InvalidArgumentError

__all__ = ["KINDS", "SCORERS", "check_scoring", "split_scores", "weighted_mean_std"]

#: the response of each estimator class: its prediction from the linear predictor ``eta``
KINDS = {Ridge: "gaussian", ElasticNet: "gaussian", PoissonRegressor: "poisson",
         LogisticRegression: "binary"}


def _mean_response(kind: str, eta):
    """The predicted mean: ``eta`` (squared loss), ``exp(eta)`` (Poisson), ``P(y = 1)``."""
    return {"gaussian": eta, "poisson": np.exp(eta), "binary": expit(eta)}[kind]


def _squared(kind, eta, y):
    return (y - _mean_response(kind, eta)) ** 2


def _absolute(kind, eta, y):
    return np.abs(y - _mean_response(kind, eta))


def _poisson_deviance(kind, eta, y):
    return 2.0 * (xlogy(y, y) - y * eta - y + np.exp(eta))


def _log_loss(kind, eta, y):
    return np.logaddexp(0.0, eta) - y * eta


def _brier(kind, eta, y):
    return (expit(eta) - y) ** 2


def _correct(kind, eta, y):
    return ((eta > 0) == (y > 0.5)).astype(np.float64)


#: scoring name -> (estimator kinds it applies to, per-sample loss (kind, eta, y), sign of
#: the score: -1 for a loss, the ``neg_`` scorers; +1 for the accuracy)
SCORERS = {
    "neg_mean_squared_error": (("gaussian", "poisson"), _squared, -1.0),
    "neg_mean_absolute_error": (("gaussian", "poisson"), _absolute, -1.0),
    "neg_mean_poisson_deviance": (("poisson",), _poisson_deviance, -1.0),
    "neg_log_loss": (("binary",), _log_loss, -1.0),
    "neg_brier_score": (("binary",), _brier, -1.0),
    "accuracy": (("binary",), _correct, 1.0),
}


def check_scoring(scoring, estimator):
    """``scoring`` (``None``: the estimator's own loss, negated) if ALOSearchCV can compute
    it for ``estimator`` (a final estimator of :data:`KINDS`), else
    :class:`~approxcv.errors.InvalidArgumentError` listing the names it supports."""
    if scoring is None:
        return None
    kind = KINDS[type(estimator)]
    names = [name for name, (kinds, _, _) in SCORERS.items() if kind in kinds]
    supported = (f"for {type(estimator).__name__} ALOSearchCV supports scoring=None (its own "
                 f"loss, negated) or one of {names}: means of per-sample losses of the "
                 "held-out prediction, which ALOOCV gives without a fitted model per split")
    if not isinstance(scoring, str):
        raise InvalidArgumentError(f"`scoring` must be a scorer name, got "
                                   f"{type(scoring).__name__} {scoring!r}; {supported}")
    if scoring not in names:
        raise InvalidArgumentError(f"`scoring={scoring!r}` is not supported; {supported}")
    return scoring


def split_scores(scoring, kind, fold_eta, fold_y, fold_weight) -> np.ndarray:
    """``(n_folds,)``: each split's sample-weighted mean score of ``scoring`` (a name of
    :data:`SCORERS`) from its held-out linear predictors ``fold_eta``, responses ``fold_y``
    (0/1 for a classifier) and sample weights ``fold_weight`` (lists per fold)."""
    _, loss, sign = SCORERS[scoring]
    out = []
    for eta, y, s in zip(fold_eta, fold_y, fold_weight):
        total = float(np.sum(s))
        out.append(sign * float(np.sum(s * loss(kind, eta, y))) / total if total > 0
                   else np.nan)
    return np.asarray(out, np.float64)


def weighted_mean_std(scores, weights) -> tuple[float, float]:
    """``(mean, std)`` of the split ``scores`` weighted by the splits' ``weights`` (their
    sample weights; as ``GridSearchCV``'s ``std_test_score``, ``ddof=0``); a split of no
    weight (its score NaN) counts for nothing."""
    scores, weights = np.asarray(scores, np.float64), np.asarray(weights, np.float64)
    keep = weights > 0
    scores, weights = scores[keep], weights[keep]
    mean = float(np.sum(weights * scores) / np.sum(weights))
    return mean, float(np.sqrt(np.sum(weights * (scores - mean) ** 2) / np.sum(weights)))
