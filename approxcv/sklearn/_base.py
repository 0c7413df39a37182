"""Shared body of the scikit-learn estimators tuned by approximate leave-one-out.

An estimator validates its input the scikit-learn way (``validate_data``; sample weights
and ``newton_steps`` by :mod:`._checks`), converts its penalty to approxcv's convention

    F(theta, b; w) = sum_i w_i s_i phi(x_i^T theta + b, y_i) + sum_g lam_g/2 ||theta_g||^2

(:mod:`approxcv.sklearn._models`), chooses ``lam`` by ALOOCV
(:func:`approxcv.sklearn._penalty_search.search_penalty`) and records the leave-one-out
:class:`~approxcv.results.CVResult` at the chosen weights (``method="ns"``, ALOOCV). The
family sets the conversion (:meth:`_ALOLinear._to_lam` / :meth:`_ALOLinear._from_lam`).
"""
from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted, validate_data

from ..api import cross_validate
from ..errors import ArgumentTypeError, InvalidArgumentError
from ..folds import leave_one_out
from ._checks import check_newton_steps, check_sample_weight
from ._exact_refinement import refine_exact
from ._models import WEIGHTED_MODELS, pack_response, padded_rows
from ._penalty_search import search_penalty
from ._ridge_dual import dual_search

__all__ = ["default_grid", "check_grid", "check_groups", "check_refine", "padded_rows",
           "padded_columns", "uses_dual", "fit_glm", "ALOFit", "_ALOLinear"]

#: default grid of ``lam / sum(sample_weight)`` (standardised features: ``X^T X ~ n I``)
GRID_PER_SAMPLE = np.logspace(-6, 2, 9)


def default_grid(n_eff: float) -> np.ndarray:
    """``n_eff * 10^{-6..2}``: nine weights, from nearly none to heavy shrinkage."""
    return n_eff * GRID_PER_SAMPLE


def check_groups(penalty_groups, n_features: int):
    """``None`` or a tuple of ``p`` group indices ``0 .. m-1`` (every group used)."""
    if penalty_groups is None:
        return None
    g = np.asarray(penalty_groups)
    if g.shape != (n_features,) or not np.issubdtype(g.dtype, np.integer):
        raise InvalidArgumentError(f"`penalty_groups` must hold one integer group index per "
                                   f"feature ({n_features}), got shape {g.shape}")
    if g.min() != 0 or set(np.unique(g)) != set(range(g.max() + 1)):
        raise InvalidArgumentError("`penalty_groups` must use every index 0 .. m-1")
    return tuple(int(v) for v in g)


def check_grid(name: str, values) -> np.ndarray:
    """``values`` (a number or a sequence of them: Python, NumPy scalars or arrays of any
    float or integer dtype) as a 1-D float64 array of positive finite numbers; else raise
    naming ``name`` (the estimator's ``alphas`` or ``Cs``)."""
    try:
        v = np.asarray(values, dtype=np.float64).reshape(-1)
    except (TypeError, ValueError):
        raise ArgumentTypeError(f"`{name}` must be a sequence of numbers, got "
                                f"{values!r}") from None
    if v.size == 0:
        raise InvalidArgumentError(f"`{name}` must hold at least one value")
    bad = v[~(np.isfinite(v) & (v > 0))]
    if bad.size:
        raise InvalidArgumentError(f"`{name}` must hold positive finite numbers, got "
                                   f"{float(bad[0])} among {values!r}")
    return v


class ALOFit:
    """One ALOOCV-tuned fit: ``lam`` ``(m,)``, flat ``u``, ``acv``, ``path``, and
    ``cv_result`` (leave-one-out by ``"ns"`` at ``lam``, computed at its first access).

    ``fit_data``: the (padded, :func:`fit_glm`) data the search ran on; the fit at ``lam``
    is the search's own (``search.u``, the fit its ALOOCV was computed at; the model's
    ``fit_flat`` only where that is not finite), and the coefficients of padded feature
    columns (zero) are dropped, so ``u``, ``coef`` and ``cv_result`` are those of the model
    on ``data`` with ``groups``."""

    def __init__(self, search, data, fit_intercept: bool, fit_data=None, groups=None):
        self.lam, self.acv, self.path = search.lam, search.acv, search.path
        self.refined = search.refined
        self.exact_loo = None             # exact leave-one-out at lam (refine="exact")
        model = search.model
        fit_data = data if fit_data is None else fit_data
        if search.u is not None and np.all(np.isfinite(search.u)):
            u = np.asarray(search.u, np.float64)
        else:                                 # no converged grid fit: the model's own fit
            u = np.asarray(model.fit_flat(model.prepare(fit_data)[0], model.lam_vector())[0])
        p, p_fit = np.shape(data[0])[1], np.shape(fit_data[0])[1]
        if p_fit != p:                    # padded feature columns: their coefficients are 0
            u = np.concatenate([u[:p], u[p_fit:]])
            model = type(model)(model.lam, groups, fit_intercept=fit_intercept,
                                max_steps=model.max_steps)
        self.u = u
        params = model.flat_to_params(self.u)
        self._model, self._data, self._params, self._cv = model, data, params, None
        self.coef = np.asarray(params[0])
        self.intercept = float(np.sum(params[1])) if fit_intercept else 0.0

    @property
    def cv_result(self):
        if self._cv is None:
            self._cv = cross_validate(self._model, self._data,
                                      leave_one_out(len(self._data[1])), "ns",
                                      params=self._params, progress=False, warn=False)
        return self._cv


#: feature counts up to this are padded (:func:`padded_columns`); above it a program's
#: compilation is small beside its run, and padding would add up to twice the work
MAX_PADDED_COLUMNS = 64


def padded_columns(p: int) -> int:
    """Feature columns after padding: 8, 16, 32 or 64 (the next power of two, at least 8)
    for ``p <= MAX_PADDED_COLUMNS``, else ``p``: fits on nearby feature counts (a
    pipeline's feature selection, scikit-learn's checks) share compiled programs."""
    if p > MAX_PADDED_COLUMNS:
        return int(p)
    return max(8, 1 << (int(p) - 1).bit_length())


def check_refine(refine, groups):
    """``None`` or ``"exact"`` (:mod:`approxcv.sklearn._exact_refinement`), which tunes one
    penalty weight."""
    if refine not in (None, "exact"):
        raise InvalidArgumentError(f"`refine` must be None or 'exact', got {refine!r}")
    if refine == "exact" and groups is not None:
        raise InvalidArgumentError("refine='exact' tunes one penalty weight; with "
                                   "`penalty_groups` use refine=None (ALOOCV)")
    return refine


def uses_dual(family: str, X, groups) -> bool:
    """Whether :func:`fit_glm` searches in ridge's ``n x n`` dual form
    (:mod:`approxcv.sklearn._ridge_dual`): ridge with one penalty weight on a wide design
    (more features than samples), where the general search's ``(p + 1)``-square Hessians
    cost ``O(p^3)`` per evaluation."""
    return family == "ridge" and groups is None and X.shape[1] > X.shape[0]


def _fit_ridge_dual(X, y, sw, grid, fit_intercept, newton_steps, refine, data) -> ALOFit:
    """:func:`fit_glm` for :func:`uses_dual`: the dual search on the data as given (no
    padding: its cost does not grow with compiled shapes). ``refine="exact"`` adds no
    refits: for ridge ALOOCV is exact leave-one-out (the PRESS residuals), so its
    minimiser is exact leave-one-out's and ``exact_loo`` is ALOOCV there."""
    search = dual_search(X, y, sw, grid, fit_intercept, newton_steps)
    fit = ALOFit(search, data, fit_intercept)
    if refine == "exact":
        fit.exact_loo = fit.acv
    return fit


def fit_glm(family: str, X, y, sw, grid, groups, fit_intercept, newton_steps,
            refine=None) -> ALOFit:
    """Tune and fit a sample-weighted GLM (``family`` of :data:`WEIGHTED_MODELS`).

    The search runs on the data padded to :func:`padded_columns` feature columns of zeros
    (in group 0) and, by the model's ``padded_units``, to :func:`padded_rows` rows with
    sample weight 0 (response 0). The
    padded rows add nothing to the objective or to the sum of leave-one-out losses, whose
    mean is rescaled by ``n_padded / n``; a zero column's coefficient is 0 at every
    penalty (its gradient is ``lam theta_j``) and adds nothing to any prediction or
    leverage. So the search's ALOOCV and fit are those of the data as given, and the
    padded shapes let fits on nearby sizes share their compiled programs. The chosen fit's
    coefficients and its ``cv_result`` are those of the data as given.

    ``refine="exact"`` goes on from ALOOCV's weight to exact leave-one-out's minimiser
    (:func:`~approxcv.sklearn._exact_refinement.refine_exact`; its evaluations are rows of
    ``path`` with ``stage="exact"``); the fit's ``acv`` is then ALOOCV at that weight and
    ``exact_loo`` exact leave-one-out there.

    Ridge with one weight on a wide design (:func:`uses_dual`) searches in the ``n x n``
    dual form instead (:mod:`approxcv.sklearn._ridge_dual`): the same ALOOCV and fit."""
    m = 1 if groups is None else max(groups) + 1
    lam0 = 1.0 if groups is None else tuple(np.ones(m))
    (n, p), data = X.shape, (X, pack_response(y, sw))
    if uses_dual(family, X, groups):
        return _fit_ridge_dual(X, y, sw, grid, fit_intercept, newton_steps, refine, data)
    p_pad = padded_columns(p)
    columns = np.zeros((n, p_pad))
    columns[:, :p] = X
    padded_groups = None if groups is None else tuple(groups) + (0,) * (p_pad - p)
    model = WEIGHTED_MODELS[family](lam0, padded_groups, fit_intercept=fit_intercept)
    padded, n_pad = model.padded_units((columns, data[1]))
    search = search_penalty(model, padded, np.asarray(grid, np.float64), m, newton_steps)
    search.acv *= n_pad / n
    search.path["acv"] *= n_pad / n
    exact = (refine_exact(search.model, padded, float(search.lam[0]), n)
             if refine == "exact" else None)
    if exact is not None:
        path = pd.concat([search.path, exact.path.assign(stage="exact")], ignore_index=True)
        search = dataclasses.replace(search, lam=np.array([exact.lam]), path=path,
                                     model=search.model.with_lam(exact.lam), u=exact.u)
    fit = ALOFit(search, data, fit_intercept, padded, groups)
    if exact is not None:              # ALOOCV at the refined weight: NS leave-one-out
        fit.exact_loo = exact.loss
        fit.acv = float(np.mean(fit.cv_result.fold_loss))
    return fit


class _ALOLinear(BaseEstimator):
    """Base of the ALOOCV-tuned linear estimators (not public)."""
    _family = None
    _param_name = "alpha"      # the scikit-learn penalty attribute: alpha_ or C_

    def _validate_fit(self, X, y, sample_weight, **kw):
        X, y = validate_data(self, X, y, dtype=np.float64, ensure_min_samples=2, **kw)
        if "newton_steps" in self.get_params(deep=False):
            check_newton_steps(self.newton_steps)
        return X, y, check_sample_weight(sample_weight, X.shape[0])

    def _grid(self, values, n_eff):
        """``lam`` grid: the user's values (``alphas`` or ``Cs``, :func:`check_grid`)
        converted, or :func:`default_grid`."""
        if values is None:
            return default_grid(n_eff)
        name = "Cs" if self._param_name == "C" else "alphas"
        return np.sort(self._to_lam(check_grid(name, values), n_eff))

    def _fit_tuned(self, family: str, X, y, sw, values):
        """Tune one penalty of ``family`` (a key of :data:`WEIGHTED_MODELS`) on the user's
        grid ``values`` (or the default), fit, and set the fitted attributes; ``self``."""
        groups = check_groups(self.penalty_groups, X.shape[1])
        refine = check_refine(self.refine, groups)
        n_eff = float(np.sum(sw))
        fit = fit_glm(family, X, y, sw, self._grid(values, n_eff), groups,
                      self.fit_intercept, self.newton_steps, refine)
        self.coef_, self.intercept_ = fit.coef, fit.intercept
        self._record(fit, n_eff)
        return self

    def _record(self, fit: ALOFit, n_eff):
        """The fitted attributes of one tuned fit."""
        value = self._from_lam(fit.lam, n_eff)
        setattr(self, self._param_name + "_", float(value[0]) if value.size == 1 else value)
        path = fit.path.copy()
        for c in [c for c in path.columns if c == "lam" or c.startswith("lam_")]:
            path[c.replace("lam", self._param_name)] = self._from_lam(path[c].to_numpy(), n_eff)
        self.alo_path_ = path
        self.alo_score_ = fit.acv
        self.__dict__.pop("exact_loo_score_", None)        # a previous fit's
        if fit.exact_loo is not None:
            self.exact_loo_score_ = fit.exact_loo
        self._alo_fits = [fit]

    @property
    def cv_result_(self):
        """approxcv :class:`~approxcv.results.CVResult` of leave-one-out CV (``"ns"``) at
        the chosen penalty (computed at the first access; one-vs-rest: a list per class)."""
        check_is_fitted(self, "coef_")
        res = [f.cv_result for f in self._alo_fits]
        return res[0] if len(res) == 1 else res

    @property
    def unreliable_(self):
        """Indices of the samples whose leave-one-out estimate cannot be vouched for (from
        :attr:`cv_result_`; one-vs-rest: a list per class)."""
        check_is_fitted(self, "coef_")
        res = [np.flatnonzero(f.cv_result.unreliable) for f in self._alo_fits]
        return res[0] if len(res) == 1 else res

    def _linear(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, dtype=np.float64, reset=False)
        return X @ self.coef_.T + self.intercept_

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False
        return tags
