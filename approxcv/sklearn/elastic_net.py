"""``ElasticNetALO``: the elastic net with ``alpha`` tuned by approximate leave-one-out.

scikit-learn's ``ElasticNet`` minimises ``1/(2n) sum_i s_i (y_i - eta_i)^2 + alpha l1_ratio
||w||_1 + alpha (1 - l1_ratio)/2 ||w||^2`` (``s`` rescaled to sum to ``n``); times ``n`` this is
approxcv's ``ElasticNet(lam1 = n alpha l1_ratio, lam2 = n alpha (1 - l1_ratio))``.
``l1_ratio`` is fixed (as in ``ElasticNetCV`` with one ratio); ``alpha`` is chosen on a grid
by ALOOCV under the support rule (docs/erm.md): on the support ``S`` of the fit the objective
is quadratic, so the leave-one-out residual is ``r_i / (1 - h_i)`` with
``h_i = s_i a_i^T (A_S^T diag(s) A_S + lam2 I_S)^{-1} a_i`` (``a_i`` the support features and
the intercept column) — the ``ns`` method of :func:`approxcv.cross_validate` in closed form.
Samples whose removal would change the support are reported (``unreliable_``).
"""
from __future__ import annotations

import numpy as np
import pandas as pd
from sklearn.base import RegressorMixin
from sklearn.utils.validation import check_is_fitted

from .._validate import check_in_range
from ..api import cross_validate
from ..folds import leave_one_out
from ..models.erm.elastic_net import ElasticNet
from ._base import _ALOLinear, check_grid

__all__ = ["ElasticNetALO", "enet_alo_losses"]


def enet_alo_losses(X, y, s, u, lam2, fit_intercept):
    """ALOOCV half squared errors ``(n,)`` of the elastic-net fit ``u`` under the support
    rule (module docstring)."""
    p = X.shape[1]
    supp = np.flatnonzero(u[:p] != 0)
    A = X[:, supp]
    pen = np.full(supp.size, lam2)
    if fit_intercept:
        A = np.column_stack([A, np.ones(len(y))])
        pen = np.append(pen, 0.0)
    r = y - (X @ u[:p] + (u[p] if fit_intercept else 0.0))
    if A.shape[1] == 0:
        return 0.5 * s * r ** 2
    H = (A * s[:, None]).T @ A + np.diag(pen)
    h = s * np.einsum("ij,ij->i", A, np.linalg.lstsq(H, A.T, rcond=None)[0].T)
    return 0.5 * s * (r / (1.0 - h)) ** 2


class ElasticNetALO(RegressorMixin, _ALOLinear):
    """Elastic net with ``alpha`` tuned by ALOOCV at a fixed ``l1_ratio``.

    Args:
        l1_ratio: in ``(0, 1]``, as scikit-learn's.
        alphas: grid of ``alpha`` (default: ``n_alphas`` values from ``alpha_max``, where
            every coefficient is 0, down to ``1e-3 alpha_max``, as ``ElasticNetCV``).
        n_alphas: size of the default grid.
        fit_intercept: fit an unpenalised intercept.

    Attributes:
        alpha_, coef_, intercept_, alo_score_ (ALOOCV half squared error at ``alpha_``),
        alo_path_ (``alpha``, ``acv``, ``support_size``), cv_result_ (approxcv
        :class:`~approxcv.results.CVResult`, ``"ns"``, at ``alpha_``; ``None`` with
        non-uniform sample weights, which approxcv's ElasticNet model does not carry),
        unreliable_ (samples whose removal changes the support, or whose estimate is
        unreliable), n_features_in_, feature_names_in_.
    """

    def __init__(self, l1_ratio=0.5, *, alphas=None, n_alphas=10, fit_intercept=True):
        self.l1_ratio = l1_ratio
        self.alphas = alphas
        self.n_alphas = n_alphas
        self.fit_intercept = fit_intercept

    def _alpha_grid(self, X, y, s, l1_ratio):
        """The user's ``alphas`` (largest first), or ``n_alphas`` from ``alpha_max``."""
        if self.alphas is not None:
            return np.sort(check_grid("alphas", self.alphas))[::-1]
        yc = y - (np.average(y, weights=s) if self.fit_intercept else 0.0)
        Xc = X - (np.average(X, axis=0, weights=s) if self.fit_intercept else 0.0)
        amax = np.max(np.abs(Xc.T @ (s * yc))) / (len(y) * l1_ratio)
        amax = amax if amax > 0 else 1.0
        return amax * np.logspace(0, -3, int(self.n_alphas))

    def fit(self, X, y, sample_weight=None):
        """Choose ``alpha`` on the grid by ALOOCV and fit; returns ``self``."""
        X, y, sw = self._validate_fit(X, y, sample_weight, y_numeric=True)
        l1_ratio = check_in_range("l1_ratio", self.l1_ratio, 0.0, 1.0, "right",
                                  " (0, the ridge, has no alpha_max: use RidgeALO)")
        n = X.shape[0]
        s = sw * (n / np.sum(sw))
        data = (X, y)
        base = ElasticNet(1.0, 1.0, fit_intercept=self.fit_intercept)
        prepared = base.prepare(data)[0]
        rows, fits, u = [], [], None
        for alpha in self._alpha_grid(X, y, s, l1_ratio):
            lam = np.array([n * alpha * l1_ratio, n * alpha * (1 - l1_ratio)])
            u, _ = base.fit_flat(prepared, lam, u0=u, weights=s)
            u = np.asarray(u)
            acv = float(np.mean(enet_alo_losses(X, y, s, u, lam[1], self.fit_intercept)))
            rows.append({"alpha": alpha, "acv": acv if np.isfinite(acv) else np.inf,
                         "support_size": int(np.sum(u[:X.shape[1]] != 0))})
            fits.append((lam, u))
        self.alo_path_ = pd.DataFrame(rows)
        best = int(np.argmin(self.alo_path_["acv"].to_numpy()))
        lam, u = fits[best]
        self.alpha_ = float(self.alo_path_["alpha"].iloc[best])
        self.alo_score_ = float(self.alo_path_["acv"].iloc[best])
        p = X.shape[1]
        self.coef_ = u[:p].copy()
        self.intercept_ = float(u[p]) if self.fit_intercept else 0.0
        self._alo_state = (data, lam, u, bool(np.allclose(s, s[0])), None)
        return self

    @property
    def cv_result_(self):
        """approxcv :class:`~approxcv.results.CVResult` of leave-one-out CV (``"ns"``) at
        ``alpha_`` (computed at the first access); ``None`` with non-uniform weights."""
        check_is_fitted(self, "coef_")
        data, lam, u, uniform, res = self._alo_state
        if res is None and uniform:
            model = ElasticNet(float(lam[0]), float(lam[1]), fit_intercept=self.fit_intercept)
            res = cross_validate(model, data, leave_one_out(len(data[1])), "ns",
                                 params=model.flat_to_params(u), progress=False, warn=False)
            self._alo_state = (data, lam, u, uniform, res)
        return res

    @property
    def unreliable_(self):
        """Samples whose removal changes the support or whose estimate is unreliable."""
        res = self.cv_result_
        if res is None:
            return np.array([], dtype=int)
        bad = res.unreliable | np.asarray(res.diagnostics.get("support_change", False))
        return np.flatnonzero(bad)

    def predict(self, X):
        """``X coef_ + intercept_`` ``(n,)``."""
        return self._linear(X)
