"""``alo_score``: approximate cross-validation of scikit-learn's own linear models.

For ``Ridge``, ``LogisticRegression`` (binary, L2), ``PoissonRegressor`` and ``ElasticNet``
(and a ``Pipeline`` ending in one) the estimator's objective at its own hyperparameters is
rewritten in approxcv's convention (``sum_i s_i phi_i + penalty``, see the estimator
modules), fitted by approxcv to round-off and cross-validated by ``method="ns"`` (ALOOCV:
one Newton step per fold; exact for ``Ridge``). What is *not* supported raises
:class:`~approxcv.errors.UnsupportedEstimatorError` naming the setting.

A fitted estimator's ``coef_`` is not reused: scikit-learn's solvers stop at ``tol``, and a
Newton step from a non-stationary point adds that error to every fold; approxcv refits the
same objective instead (the same minimiser). Pipeline preprocessing steps are fitted on all
the data and applied before cross-validation (a scaler's mean and scale are not refitted
per fold: an approximation of its own, usually negligible, stated here). ``X`` reaches those
steps as given (a ``ColumnTransformer`` may select DataFrame columns by name); only the
design reaching the final estimator is checked (:mod:`approxcv.sklearn._checks`), and the
estimator's ``C``/``alpha``/``l1_ratio`` first, in scikit-learn's ranges and names.
"""
from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
from sklearn.base import clone
from sklearn.linear_model import ElasticNet, LogisticRegression, PoissonRegressor, Ridge
from sklearn.utils.validation import check_X_y

from ..api import cross_validate
from ..errors import BadlyScaledDataError, FitError
from ..models.erm.elastic_net import ElasticNet as ACVElasticNet
from ..results import CVResult
from ._checks import (check_cv, check_hyperparameters, check_sample_weight, design_array,
                      resolve_folds, split_pipeline, unsupported)
from ._models import WeightedLogistic, WeightedPoisson, WeightedRidge, pack_response
from ._scoring import KINDS

__all__ = ["ALOScore", "alo_score", "approxcv_model"]

#: what ``ALOScore.mean_loss`` is, per estimator class
LOSS_NAMES = {Ridge: "squared error", LogisticRegression: "log-loss",
              PoissonRegressor: "Poisson negative log-likelihood (with log y!)",
              ElasticNet: "squared error"}

#: what to change when a fit's objective is not finite (too weak a penalty), per class
WEAK_PENALTY = {Ridge: ("alpha", "too small"), LogisticRegression: ("C", "too large"),
                PoissonRegressor: ("alpha", "too small"), ElasticNet: ("alpha", "too small")}


@dataclass
class ALOScore:
    """Approximate CV of a scikit-learn estimator.

    mean_loss: ``sum s_i l_i / sum s_i`` over the left-out samples of every fold (``loss`` names
    ``l``: squared error for ``Ridge``/``ElasticNet``, log-loss, Poisson NLL);
    loss: that name; n_unreliable: folds the approximation cannot vouch for (for the
    elastic net also folds whose support would change); cv_result: the approxcv
    :class:`~approxcv.results.CVResult` (its losses on approxcv's scale: *half* the squared
    error for the squared-loss models).
    """
    mean_loss: float
    loss: str
    n_unreliable: int
    cv_result: CVResult


@dataclass
class ALORun:
    """An :class:`ALOScore` with what :class:`~approxcv.sklearn.ALOSearchCV` reads from the
    run: per fold the held-out samples' linear predictors ``fold_eta``, responses
    ``fold_y`` (0/1 for a classifier) and sample weights ``fold_weight``, the summed
    held-out loss ``fold_loss`` (``l`` of :data:`LOSS_NAMES`, sample-weighted), the
    response ``kind`` (:data:`~approxcv.sklearn._scoring.KINDS`), and the seconds of the
    fit (the pipeline's steps and the full-data fit) and of the cross-validation."""
    score: ALOScore
    fold_eta: list
    fold_y: list
    fold_weight: list
    fold_loss: np.ndarray
    kind: str
    fit_seconds: float
    score_seconds: float


def approxcv_model(est, y, sample_weight):
    """``(model, data_y, scale)``: the approxcv model of ``est``'s objective, its response
    array and the factor from approxcv's loss to :data:`LOSS_NAMES`' loss. ``est``'s
    hyperparameters are checked first
    (:func:`~approxcv.sklearn._checks.check_hyperparameters`)."""
    check_hyperparameters(est)
    kind = type(est)
    n_eff = float(np.sum(sample_weight))
    if kind is Ridge:
        if est.positive:
            unsupported(est, "an array of alphas or positive=True")
        return (WeightedRidge(float(est.alpha), fit_intercept=est.fit_intercept),
                pack_response(y, sample_weight), 2.0)
    if kind is LogisticRegression:
        penalty = getattr(est, "penalty", "deprecated")
        l1 = getattr(est, "l1_ratio", None)
        if penalty not in ("deprecated", "l2", None) or (l1 not in (None, 0, 0.0)
                                                            and penalty != "l2"):
            unsupported(est, f"penalty={penalty!r}, l1_ratio={l1!r} (only the L2 penalty)")
        if est.class_weight is not None:
            unsupported(est, "class_weight (pass sample_weight instead)")
        if est.solver == "liblinear":
            unsupported(est, "solver='liblinear' (it penalises the intercept)")
        classes = np.unique(y)
        if classes.size != 2:
            unsupported(est, f"{classes.size} classes (binary only)")
        C = float(est.C)
        lam = 0.0 if (penalty is None or np.isinf(C)) else 1.0 / C
        return (WeightedLogistic(lam, fit_intercept=est.fit_intercept),
                pack_response((y == classes[1]).astype(np.float64), sample_weight), 1.0)
    if kind is PoissonRegressor:
        return (WeightedPoisson(float(est.alpha) * n_eff, fit_intercept=est.fit_intercept),
                pack_response(y, sample_weight), 1.0)
    if kind is ElasticNet:
        if est.positive:
            unsupported(est, "positive=True")
        if not np.allclose(sample_weight, 1.0):
            unsupported(est, "sample_weight")
        n, alpha, l1_ratio = len(y), float(est.alpha), float(est.l1_ratio)
        return (ACVElasticNet(n * alpha * l1_ratio, n * alpha * (1 - l1_ratio),
                              fit_intercept=est.fit_intercept),
                np.asarray(y, np.float64), 2.0)
    unsupported(est, "this class")


def _fit(model, data, est, prefix):
    """``model.fit(data)``, a fit whose objective is not finite reported in the estimator's
    terms (its ``alpha`` or ``C``, not approxcv's ``lam``)."""
    try:
        return model.fit(data)
    except BadlyScaledDataError:
        raise
    except FitError:
        name, which = WEAK_PENALTY[type(est)]
        raise FitError(f"{type(est).__name__}: the fit's objective or coefficients are not "
                       f"finite; is `{prefix}{name}` {which} (too weak a penalty) for "
                       "separable or collinear data?") from None


def _fold_predictions(res, X, folds, y, sw):
    """Per fold, the held-out samples' linear predictors at the fold's parameters, their
    responses and sample weights."""
    U = np.asarray(res.params_flat, np.float64)
    p = X.shape[1]
    idx = [np.asarray(i) for i in folds]
    eta = [X[i] @ U[k, :p] + float(np.sum(U[k, p:])) for k, i in enumerate(idx)]
    return eta, [y[i] for i in idx], [sw[i] for i in idx]


def _feature_names(step):
    """A fitted step's ``get_feature_names_out()``, or ``None`` where it has none."""
    try:
        return np.asarray(step.get_feature_names_out())
    except Exception:                      # noqa: BLE001 - not every transformer names them
        return None


def run_alo(estimator, X, y, cv=None, sample_weight=None) -> ALORun:
    """:func:`alo_score`'s run, with the held-out predictions and times of :class:`ALORun`."""
    t0 = time.perf_counter()
    steps, last, prefix = split_pipeline(estimator)
    check_hyperparameters(estimator)
    cv = check_cv(cv)
    names = None
    for step in steps:            # X as given: a ColumnTransformer selects columns by name
        fitted = clone(step)
        X = fitted.fit_transform(X, y)
        names = _feature_names(fitted)
    X, y = check_X_y(design_array(X, names), y, dtype=np.float64,
                     y_numeric=not isinstance(last, LogisticRegression))
    sw = check_sample_weight(sample_weight, X.shape[0])
    model, data_y, scale = approxcv_model(last, y, sw)
    data = (X, data_y)
    n = X.shape[0]
    folds = resolve_folds(cv, X, y, n)
    params = _fit(model, data, last, prefix)
    t1 = time.perf_counter()
    res = cross_validate(model, data, folds, "ns", params=params, progress=False, warn=False)
    bad = np.asarray(res.unreliable)
    if "support_change" in res.diagnostics:
        bad = bad | np.asarray(res.diagnostics["support_change"])
    response = data_y[:, 0] if data_y.ndim == 2 else data_y
    eta, fold_y, fold_w = _fold_predictions(res, X, folds, response, sw)
    fold_loss = scale * np.asarray(res.fold_loss, np.float64)
    mean = float(np.sum(fold_loss)) / sum(float(np.sum(w)) for w in fold_w)
    score = ALOScore(mean, LOSS_NAMES[type(last)], int(bad.sum()), res)
    return ALORun(score, eta, fold_y, fold_w, fold_loss, KINDS[type(last)], t1 - t0,
                  time.perf_counter() - t1)


def alo_score(estimator, X, y, cv=None, *, sample_weight=None) -> ALOScore:
    """Approximate CV of ``estimator``'s own objective at its own hyperparameters.

    Args:
        estimator: ``Ridge``, ``LogisticRegression``, ``PoissonRegressor``, ``ElasticNet``
            (fitted or not), or a ``Pipeline`` whose last step is one (the other steps are
            fitted on all of ``X`` and applied; ``X`` reaches them as given, so a
            ``ColumnTransformer`` may select DataFrame columns by name).
        X: ``(n, p)`` (an array or a DataFrame); y: ``(n,)``.
        cv: ``None`` or ``"loo"`` (leave-one-out), an int ``k >= 2`` (``KFold(k)``), a
            scikit-learn splitter or an iterable of ``(train, test)`` index pairs, or
            approxcv :class:`Folds`.
        sample_weight: ``(n,)`` or ``None``.

    Returns:
        :class:`ALOScore`.

    Raises:
        UnsupportedEstimatorError: another estimator or an unsupported setting.
        InvalidArgumentError: ``C``, ``alpha`` or ``l1_ratio`` outside scikit-learn's range
            (named as set: ``C``, or ``logisticregression__C`` in a ``Pipeline``), or a
            ``cv`` it cannot read.
        InvalidDataError: a column of the final design (after the pipeline's steps) that is
            categorical, holds dates or times, is not numeric or holds missing values.
    """
    return run_alo(estimator, X, y, cv, sample_weight).score
