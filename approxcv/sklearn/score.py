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
per fold: an approximation of its own, usually negligible, stated here).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.base import clone
from sklearn.linear_model import ElasticNet, LogisticRegression, PoissonRegressor, Ridge
from sklearn.model_selection import check_cv
from sklearn.pipeline import Pipeline
from sklearn.utils.validation import _check_sample_weight, check_array, check_X_y

from ..api import cross_validate
from ..errors import UnsupportedEstimatorError
from ..folds import Folds, leave_one_out
from ..models.erm.elastic_net import ElasticNet as ACVElasticNet
from ..results import CVResult
from ._models import WeightedLogistic, WeightedPoisson, WeightedRidge, pack_response

__all__ = ["ALOScore", "alo_score", "approxcv_model"]

#: what ``ALOScore.mean_loss`` is, per estimator class
LOSS_NAMES = {Ridge: "squared error", LogisticRegression: "log-loss",
              PoissonRegressor: "Poisson negative log-likelihood (with log y!)",
              ElasticNet: "squared error"}


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


def _unsupported(est, what):
    raise UnsupportedEstimatorError(
        f"alo_score cannot cross-validate {type(est).__name__} with {what}; supported: "
        "Ridge (one target, positive=False), LogisticRegression (two classes, L2 penalty "
        "(l1_ratio=0), class_weight=None, a solver other than liblinear), PoissonRegressor, "
        "ElasticNet (positive=False, no sample_weight)")


def approxcv_model(est, y, sample_weight):
    """``(model, data_y, scale)``: the approxcv model of ``est``'s objective, its response
    array and the factor from approxcv's loss to :data:`LOSS_NAMES`' loss."""
    kind = type(est)
    n_eff = float(np.sum(sample_weight))
    if kind is Ridge:
        alpha = np.asarray(est.alpha, dtype=np.float64)
        if alpha.ndim > 0 or est.positive:
            _unsupported(est, "an array of alphas or positive=True")
        return (WeightedRidge(float(alpha), fit_intercept=est.fit_intercept),
                pack_response(y, sample_weight), 2.0)
    if kind is LogisticRegression:
        penalty = getattr(est, "penalty", "deprecated")
        l1 = getattr(est, "l1_ratio", None)
        if penalty not in ("deprecated", "l2", None) or (l1 not in (None, 0, 0.0)
                                                            and penalty != "l2"):
            _unsupported(est, f"penalty={penalty!r}, l1_ratio={l1!r} (only the L2 penalty)")
        if est.class_weight is not None:
            _unsupported(est, "class_weight (pass sample_weight instead)")
        if est.solver == "liblinear":
            _unsupported(est, "solver='liblinear' (it penalises the intercept)")
        classes = np.unique(y)
        if classes.size != 2:
            _unsupported(est, f"{classes.size} classes (binary only)")
        lam = 0.0 if (penalty is None or not np.isfinite(est.C)) else 1.0 / est.C
        return (WeightedLogistic(lam, fit_intercept=est.fit_intercept),
                pack_response((y == classes[1]).astype(np.float64), sample_weight), 1.0)
    if kind is PoissonRegressor:
        return (WeightedPoisson(est.alpha * n_eff, fit_intercept=est.fit_intercept),
                pack_response(y, sample_weight), 1.0)
    if kind is ElasticNet:
        if est.positive:
            _unsupported(est, "positive=True")
        if not np.allclose(sample_weight, 1.0):
            _unsupported(est, "sample_weight")
        n = len(y)
        return (ACVElasticNet(n * est.alpha * est.l1_ratio, n * est.alpha * (1 - est.l1_ratio),
                              fit_intercept=est.fit_intercept),
                np.asarray(y, np.float64), 2.0)
    _unsupported(est, "this class")


def _folds(cv, X, y, n) -> Folds:
    if cv is None:
        return leave_one_out(n)
    if isinstance(cv, Folds):
        return cv
    if isinstance(cv, (int, np.integer)):
        cv = check_cv(int(cv))
    if hasattr(cv, "split"):
        return Folds([np.asarray(test) for _, test in cv.split(X, y)], n)
    return Folds([np.asarray(test) for _, test in cv], n)


def alo_score(estimator, X, y, cv=None, *, sample_weight=None) -> ALOScore:
    """Approximate CV of ``estimator``'s own objective at its own hyperparameters.

    Args:
        estimator: ``Ridge``, ``LogisticRegression``, ``PoissonRegressor``, ``ElasticNet``
            (fitted or not), or a ``Pipeline`` whose last step is one (the other steps are
            fitted on all of ``X`` and applied).
        X: ``(n, p)``; y: ``(n,)``.
        cv: ``None`` (leave-one-out), an int (``KFold``), a scikit-learn splitter or an
            iterable of ``(train, test)`` index pairs, or approxcv :class:`Folds`.
        sample_weight: ``(n,)`` or ``None``.

    Returns:
        :class:`ALOScore`.

    Raises:
        UnsupportedEstimatorError: another estimator or an unsupported setting.
    """
    if isinstance(estimator, Pipeline):
        *pre, (_, last) = estimator.steps
        X = check_array(X, dtype=None, ensure_all_finite=False)
        for _, step in pre:
            if step is None or step == "passthrough":
                continue
            X = clone(step).fit_transform(X, y)
        estimator = last
    if type(estimator) not in LOSS_NAMES:
        _unsupported(estimator, "this class")
    X, y = check_X_y(X, y, dtype=np.float64, y_numeric=not isinstance(estimator,
                                                                       LogisticRegression))
    sw = _check_sample_weight(sample_weight, X, dtype=np.float64)
    model, data_y, scale = approxcv_model(estimator, y, sw)
    data = (X, data_y)
    n = X.shape[0]
    folds = _folds(cv, X, y, n)
    params = model.fit(data)
    res = cross_validate(model, data, folds, "ns", params=params, progress=False, warn=False)
    bad = np.asarray(res.unreliable)
    if "support_change" in res.diagnostics:
        bad = bad | np.asarray(res.diagnostics["support_change"])
    held_out_weight = sum(float(np.sum(sw[np.asarray(idx)])) for idx in folds)
    mean = scale * float(np.sum(res.fold_loss)) / held_out_weight
    return ALOScore(mean, LOSS_NAMES[type(estimator)], int(bad.sum()), res)
