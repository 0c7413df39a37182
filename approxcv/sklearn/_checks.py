"""The checks of :func:`~approxcv.sklearn.alo_score` and
:class:`~approxcv.sklearn.ALOSearchCV` on what the user gives, in the user's terms.

* **Hyperparameters** (:func:`check_hyperparameters`): the scikit-learn estimator's own
  ``C``, ``alpha`` and ``l1_ratio``, in scikit-learn's valid ranges (its estimators'
  ``_parameter_constraints``), named as the user sets them (``C``, or
  ``logisticregression__C`` inside a ``Pipeline``), never approxcv's ``lam``, ``lam1``,
  ``lam2``. A NaN ``C`` used to score the unpenalised model, ``C=0`` to raise a bare
  ``ZeroDivisionError``.
* **cv** (:func:`check_cv`, :func:`resolve_folds`): ``None`` or ``"loo"`` (leave-one-out,
  what ALOOCV approximates), an int ``k >= 2`` (``KFold(k)``), a scikit-learn splitter, an
  iterable of ``(train, test)`` pairs or approxcv ``Folds``.
* **The final design** (:func:`design_array`): what reaches the final estimator after a
  ``Pipeline``'s steps, as a float64 array; a pandas column that is categorical, holds dates
  or times, is not numeric or holds missing values is refused naming the column. The input
  ``X`` itself is given to the pipeline's steps untouched (a ``ColumnTransformer`` selects
  its columns by name in a DataFrame).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import sparse
from sklearn.linear_model import ElasticNet, LogisticRegression, PoissonRegressor, Ridge
from sklearn.model_selection import KFold
from sklearn.pipeline import Pipeline

from .._validate import check_in_range, check_positive_int
from ..errors import (ArgumentTypeError, InvalidArgumentError, InvalidDataError,
                      UnsupportedEstimatorError)
from ..folds import Folds, leave_one_out

__all__ = ["SUPPORTED", "split_pipeline", "check_hyperparameters", "check_cv",
           "resolve_folds", "design_array", "unsupported", "check_sample_weight",
           "n_samples", "check_newton_steps"]

#: the estimator classes alo_score cross-validates
SUPPORTED = (Ridge, LogisticRegression, PoissonRegressor, ElasticNet)

#: scikit-learn's valid range of each hyperparameter alo_score reads:
#: ``(name, low, high, closed, what)`` (``closed`` as scikit-learn's ``Interval``)
RANGES = {
    Ridge: [("alpha", 0.0, np.inf, "left", "")],
    LogisticRegression: [("C", 0.0, np.inf, "right", " (inf: no penalty)")],
    PoissonRegressor: [("alpha", 0.0, np.inf, "left", "")],
    ElasticNet: [("alpha", 0.0, np.inf, "left", ""), ("l1_ratio", 0.0, 1.0, "both", "")],
}


def unsupported(est, what):
    """Raise :class:`~approxcv.errors.UnsupportedEstimatorError` naming ``est`` and the
    setting ``what``, with what is supported."""
    raise UnsupportedEstimatorError(
        f"alo_score cannot cross-validate {type(est).__name__} with {what}; supported: "
        "Ridge (one target, positive=False), LogisticRegression (two classes, L2 penalty "
        "(l1_ratio=0), class_weight=None, a solver other than liblinear), PoissonRegressor, "
        "ElasticNet (positive=False, no sample_weight)")


def split_pipeline(estimator):
    """``(steps, final, prefix)``: a ``Pipeline``'s steps before the last (``None`` and
    ``"passthrough"`` dropped), its final estimator and the prefix of that estimator's
    parameter names (``"logisticregression__"``); ``([], estimator, "")`` otherwise."""
    if not isinstance(estimator, Pipeline):
        return [], estimator, ""
    *pre, (name, last) = estimator.steps
    steps = [step for _, step in pre if step is not None and not (
        isinstance(step, str) and step == "passthrough")]
    return steps, last, f"{name}__"


def check_hyperparameters(estimator):
    """The final estimator of ``estimator`` (itself, or a ``Pipeline``'s last step) after
    checking that alo_score supports its class and that its ``C``/``alpha``/``l1_ratio``
    lie in scikit-learn's ranges.

    Raises:
        UnsupportedEstimatorError: another class, or an array of Ridge alphas.
        InvalidArgumentError: a value out of range (NaN, inf, negative, ``C <= 0``), naming
            the parameter as the user sets it.
        ArgumentTypeError: a value that is not one number.
    """
    _, last, prefix = split_pipeline(estimator)
    kind = type(last)
    if kind not in RANGES:
        unsupported(last, "this class")
    if kind is Ridge and np.ndim(last.alpha) > 0:
        unsupported(last, "an array of alphas or positive=True")
    for name, low, high, closed, what in RANGES[kind]:
        try:
            check_in_range(prefix + name, getattr(last, name), low, high, closed, what)
        except (InvalidArgumentError, ArgumentTypeError) as exc:
            raise type(exc)(f"{kind.__name__}: {exc}") from None
    return last


def check_cv(cv):
    """``cv`` if alo_score can read it: ``None``/``"loo"`` (leave-one-out), an int ``>= 2``,
    an object with ``split`` (a scikit-learn splitter), approxcv ``Folds`` or an iterable
    of ``(train, test)`` pairs; ``"loo"`` is returned as ``None``. Raises
    :class:`~approxcv.errors.InvalidArgumentError` saying what is supported."""
    supported = ("supported: None or 'loo' (leave-one-out, what ALOOCV approximates), an "
                 "int k >= 2 (KFold(k)), a scikit-learn splitter, an iterable of "
                 "(train, test) index pairs, or approxcv Folds")
    if isinstance(cv, str):               # before `split`: a string has a split method
        if cv.lower() == "loo":
            return None
        raise InvalidArgumentError(f"`cv` got the string {cv!r}; {supported}")
    if cv is None or isinstance(cv, Folds) or hasattr(cv, "split"):
        return cv
    if isinstance(cv, (bool, np.bool_)):
        raise InvalidArgumentError(f"`cv` must not be a boolean, got {cv!r}; {supported}")
    if isinstance(cv, (int, np.integer)):
        if cv < 2:
            raise InvalidArgumentError(f"`cv` as a number of folds must be >= 2, got {cv}; "
                                       f"{supported}")
        return int(cv)
    if hasattr(cv, "__iter__") and not isinstance(cv, (dict, bytes)):
        return cv
    raise InvalidArgumentError(f"`cv` got {type(cv).__name__} {cv!r}; {supported}")


def resolve_folds(cv, X, y, n: int) -> Folds:
    """The test folds of ``cv`` (:func:`check_cv`) over ``n`` samples; a splitter splits
    ``X`` (as given: a DataFrame stays one) and ``y``."""
    cv = check_cv(cv)
    if cv is None:
        return leave_one_out(n)
    if isinstance(cv, Folds):
        return cv
    if isinstance(cv, int):
        if cv > n:
            raise InvalidArgumentError(f"`cv={cv}` folds need at least {cv} samples, got {n}")
        cv = KFold(cv)
    pairs = cv.split(X, y) if hasattr(cv, "split") else cv
    return Folds([np.asarray(test) for _, test in pairs], n)


def _check_column(name, column: pd.Series):
    """Raise :class:`~approxcv.errors.InvalidDataError` naming column ``name`` of the final
    design unless it holds finite numbers (NumPy or pandas nullable numeric, no NA)."""
    dtype = column.dtype
    where = f"column {name!r} of the data reaching the final estimator"
    if isinstance(dtype, pd.CategoricalDtype):
        raise InvalidDataError(f"{where} is categorical: encode it first (e.g. OneHotEncoder "
                               "in a ColumnTransformer) or drop it")
    if (pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype)
            or isinstance(dtype, pd.PeriodDtype)):
        raise InvalidDataError(f"{where} holds dates or times (dtype {dtype}): convert them to "
                               "numbers first (e.g. days since a date) or drop it")
    if not (pd.api.types.is_numeric_dtype(dtype) or pd.api.types.is_bool_dtype(dtype)):
        raise InvalidDataError(f"{where} is not numeric (dtype {dtype}): encode it first "
                               "(e.g. OneHotEncoder in a ColumnTransformer) or drop it")
    missing = int(column.isna().sum())
    if missing:
        raise InvalidDataError(f"{where} holds {missing} missing value(s) (NaN or NA; dtype "
                               f"{dtype}): impute them first (e.g. SimpleImputer) or drop "
                               "those rows")
    values = column.to_numpy(dtype=np.float64)
    if not np.all(np.isfinite(values)):
        raise InvalidDataError(f"{where} holds {int(np.sum(~np.isfinite(values)))} infinite "
                               "value(s)")


def design_array(X, names=None):
    """The final estimator's design ``X`` (after a pipeline's steps) as a 2-D float64
    array: a DataFrame's columns checked one by one (:func:`_check_column`), a sparse
    matrix made dense (ALOOCV works on dense designs), a numeric array's first column with
    NaN or inf named (``names``: the last step's ``get_feature_names_out()``, else its
    index), anything else as given (scikit-learn's ``check_X_y`` checks it next)."""
    if sparse.issparse(X):
        X = X.toarray()
    if isinstance(X, pd.DataFrame):
        for j in range(X.shape[1]):
            _check_column(X.columns[j], X.iloc[:, j])
        return X.to_numpy(dtype=np.float64)
    if isinstance(X, np.ndarray) and X.ndim == 2 and X.dtype.kind == "f":
        bad = np.flatnonzero(~np.all(np.isfinite(X), axis=0))
        if bad.size:
            j = int(bad[0])
            name = (repr(str(names[j])) if names is not None and len(names) == X.shape[1]
                    else str(j))
            count = int(np.sum(~np.isfinite(X[:, j])))
            raise InvalidDataError(f"column {name} of the data reaching the final estimator "
                                   f"holds {count} NaN or infinite value(s) ({bad.size} "
                                   "column(s) do): impute them first (e.g. SimpleImputer) or "
                                   "drop those rows")
    return X


def n_samples(X) -> int:
    """The number of samples (rows) of ``X``: an array, a sparse matrix, a DataFrame or a
    sequence of rows."""
    shape = getattr(X, "shape", None)
    if shape is not None and len(shape) >= 1:
        return int(shape[0])
    try:
        return len(X)
    except TypeError:
        raise ArgumentTypeError(f"`X` must be an array-like of samples, got "
                                f"{type(X).__name__}") from None


def check_sample_weight(sample_weight, n: int) -> np.ndarray:
    """``sample_weight`` as a float64 ``(n,)`` array: ``None`` is all ones, a number is
    that weight for every sample (scikit-learn's convention); finite and non-negative, with
    a positive sum.

    Raises:
        InvalidArgumentError: another shape, a NaN, an infinite or a negative weight, or all
            weights zero.
    """
    if sample_weight is None:
        return np.ones(n)
    try:
        sw = np.asarray(sample_weight, dtype=np.float64)
    except (TypeError, ValueError):
        raise ArgumentTypeError("`sample_weight` must be numbers, got "
                                f"{type(sample_weight).__name__}") from None
    if sw.ndim == 0:
        sw = np.full(n, float(sw))
    if sw.shape != (n,):
        raise InvalidArgumentError(f"`sample_weight` must have shape ({n},) (one weight per "
                                   f"sample), got {sw.shape}")
    bad = np.flatnonzero(~(np.isfinite(sw) & (sw >= 0)))
    if bad.size:
        raise InvalidArgumentError("`sample_weight` must be finite and >= 0; fix or drop the "
                                   f"samples at {bad[:5].tolist()}")
    if not np.sum(sw) > 0:
        raise InvalidArgumentError("every `sample_weight` is zero: at least one sample must "
                                   "have a positive weight")
    return sw


def check_newton_steps(value) -> int:
    """``newton_steps`` of the ALOOCV-tuned estimators: an integer ``>= 0`` (0: the grid
    search alone).

    Raises:
        InvalidArgumentError: a negative, fractional or non-integer value.
    """
    return check_positive_int("newton_steps", value, minimum=0)
