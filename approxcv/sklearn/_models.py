"""The approxcv ERM models in the form scikit-learn estimators need: sample weights and
penalty groups.

A scikit-learn ``fit(X, y, sample_weight)`` minimises ``sum_i s_i phi(eta_i, y_i) +
penalty``. These models keep the ERM objective of :mod:`approxcv.models.erm` and put the
sample weight ``s_i`` inside the elementwise loss, so that every fast path (the ALOOCV
downdates, the tuning's implicit derivatives) applies unchanged:

    F(theta, b; w) = sum_i w_i s_i phi(x_i^T theta + b, y_i) + sum_g lam_g r_g(theta),

where ``w`` are the cross-validation weights. The responses are packed with the sample
weights as ``y`` ``(n, 2) = [y_i, s_i]`` (:func:`pack_response`); the held-out loss of a
left-out sample is ``s_i phi_i`` (its weighted loss). The penalty is one ridge weight, or one
per group of features: ``r_g(theta) = 1/2 sum_{j in g} theta_j^2`` with the groups as a
one-hot ``(m, p)`` membership matrix (the penalty's ``aux``).
"""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from .._runtime import LENGTH_BITS, count_bucket
from .._validate import as_real_array, check_finite
from ..errors import InvalidDataError
from ..models.erm.base import ERM, ERMData, ridge_total
from ..models.erm.logistic import Logistic
from ..models.erm.poisson_regression import PoissonRegression
from ..models.erm.ridge import Ridge, closed_form_ridge_fit

__all__ = ["pack_response", "group_ridge", "padded_rows", "POW2_MAX_ROWS", "WeightedRidge",
           "WeightedLogistic", "WeightedPoisson", "WEIGHTED_MODELS"]

#: rows up to this are padded to a power of two (:func:`padded_rows`)
POW2_MAX_ROWS = 256


def padded_rows(n: int) -> int:
    """Rows after padding with null samples (sample weight 0), so that fits and
    cross-validation on data of nearby sizes (a grid search's splits, scikit-learn's checks,
    ``alo_score`` on the splits of an outer CV) share compiled programs: the next power of
    two (at least 16) up to :data:`POW2_MAX_ROWS` rows, above that the next number with
    four significant bits (:data:`~approxcv._runtime.sizes.LENGTH_BITS`, as data lengths; less
    than 12.5 % more rows). The fit's time grows with the rows: breast cancer (569 rows)
    took 0.048 s on 1,024 rows against 0.022 s unpadded, 0.029 s on 640 (another
    machine); on an AMD EPYC with AVX-512 the estimator's warm fit took 0.012-0.014 s on
    576 rows (4 bits) against 0.015-0.016 s on 640 (3 bits) and bbai's 0.013-0.014 s.
    Up to 256 rows a fit takes milliseconds whatever the padding, and a new shape compiles
    for about a second: scikit-learn's estimator checks fitted 6 row counts with powers of
    two up to 256."""
    return count_bucket(n, 16, POW2_MAX_ROWS, LENGTH_BITS)


def pack_response(y, sample_weight) -> np.ndarray:
    """``(n, 2)``: the responses and the sample weights side by side."""
    y = np.asarray(y, dtype=np.float64)
    s = np.ones_like(y) if sample_weight is None else np.asarray(sample_weight, np.float64)
    return np.stack([y, s], axis=1)


def group_ridge(coef, aux):
    """``r_g(theta) = 1/2 sum_{j in g} theta_j^2``: ``aux`` is the ``(m, p)`` membership."""
    return 0.5 * aux @ coef ** 2


# a sum of per-coefficient terms: the penalty Hessian is diagonal (tuning uses it)
group_ridge.separable = True


def _weighted(phi):
    """``loss(eta, y) = y[:, 1] phi(eta, y[:, 0])`` (one function per family, built once)."""
    def loss(eta, y):
        return y[..., 1] * phi(eta, y[..., 0])
    loss.__doc__ = f"Sample-weighted ``{phi.__qualname__}``: ``s_i phi(eta_i, y_i)``."
    return loss


class _Weighted(ERM):
    """Mixin over an approxcv ERM family: sample weights in the loss, penalty groups.

    Args:
        lam: one weight, or one per group.
        groups: ``None`` (one weight for all coefficients) or a tuple of ``p`` group
            indices ``0 .. m-1``.
        fit_intercept, max_steps: as :class:`~approxcv.models.erm.ERM`.
    """
    family: type = None

    def __init__(self, lam=1.0, groups=None, *, fit_intercept: bool = True,
                 max_steps: int = 1000):
        super().__init__(lam, fit_intercept=fit_intercept, max_steps=max_steps)
        self.groups = None if groups is None else tuple(int(g) for g in groups)

    def regularizer_function(self):
        return ridge_total if self.groups is None else group_ridge

    def penalty_aux(self):
        if self.groups is None:
            return None
        g = np.asarray(self.groups)
        return jnp.asarray((np.arange(g.max() + 1)[:, None] == g[None, :]).astype(np.float64))

    def _check_lam_length(self, p: int):
        return None

    def prepare(self, data, level=None):
        """``data = (X (n, p), Y (n, 2))`` with ``Y = [y, sample_weight]``."""
        if isinstance(data, ERMData):
            return data, "within", data.num_samples
        X, Y = as_real_array("X", data[0]), as_real_array("y", data[1])
        if X.ndim != 2 or Y.ndim != 2 or Y.shape != (X.shape[0], 2):
            raise InvalidDataError(f"expected X (n, p) and [y, sample_weight] (n, 2), got "
                                   f"{X.shape} and {Y.shape}")
        X, Y = check_finite("X", X), check_finite("y", Y)
        self._validate_y(Y[:, 0])
        if np.any(Y[:, 1] < 0):
            raise InvalidDataError("`sample_weight` must be >= 0")
        return ERMData(jnp.asarray(X), jnp.asarray(Y)), "within", X.shape[0]

    def padded_units(self, data, level=None):
        """``(ERMData, n)``: the prepared ``data`` with rows of sample weight 0 (zero
        features, response 0) appended to :func:`padded_rows` rows, and its number of rows,
        as the estimators' search pads. A row of weight 0 is a null unit: its weighted
        loss, gradient and curvature are 0 at every parameter, so scoring data of another
        size in the same bucket reuses the compiled programs."""
        data, _, n = self.prepare(data, level)
        rows = padded_rows(n)
        if rows == n:
            return data, n
        X, Y = np.asarray(data.X), np.asarray(data.y)
        X = np.concatenate([X, np.zeros((rows - n, X.shape[1]))])
        Y = np.concatenate([Y, np.zeros((rows - n, 2))])
        return ERMData(jnp.asarray(X), jnp.asarray(Y)), rows

    def fit(self, data, level=None):
        """:meth:`~approxcv.models.erm.ERM.fit` on the data padded with null rows
        (:meth:`padded_units`): the same optimum, and data of another size in the same
        bucket reuse the fit's program."""
        data, _, _ = self.prepare(data, level)
        return super().fit(self.padded_units(data)[0])


class WeightedRidge(_Weighted, Ridge):
    """:class:`~approxcv.models.erm.Ridge` with sample weights and penalty groups."""
    loss = staticmethod(_weighted(Ridge.loss))

    def fit_flat(self, data: ERMData, lam, u0=None, weights=None):
        """Closed form ``(A^T W S A + P)^{-1} A^T W S y`` (``u0`` ignored)."""
        design = self.design(data)
        w = (jnp.ones(design.shape[0]) if weights is None
             else jnp.asarray(weights, jnp.float64))
        u, value, grad_norm = closed_form_ridge_fit(
            design, data.y[:, 0], w * data.y[:, 1], data.y, w, jnp.asarray(lam, jnp.float64),
            self.penalty_aux(), self.loss, self.penalty)
        info = {"objective": float(value), "grad_norm": float(grad_norm), "num_steps": 0,
                "converged": bool(np.all(np.isfinite(np.asarray(u))))}
        self._check_fit(u, info)
        return u, info


class WeightedLogistic(_Weighted, Logistic):
    """:class:`~approxcv.models.erm.Logistic` with sample weights and penalty groups."""
    loss = staticmethod(_weighted(Logistic.loss))


class WeightedPoisson(_Weighted, PoissonRegression):
    """:class:`~approxcv.models.erm.PoissonRegression` with sample weights and penalty
    groups."""
    loss = staticmethod(_weighted(PoissonRegression.loss))
    response = "non-negative responses"

    @staticmethod
    def valid_response(y):
        """``y >= 0`` (scikit-learn's PoissonRegressor takes non-integer responses; the
        loss ``e^eta - y eta + log Gamma(y + 1)`` is defined for them)."""
        return y >= 0


WEIGHTED_MODELS = {"ridge": WeightedRidge, "logistic": WeightedLogistic,
                   "poisson": WeightedPoisson}
