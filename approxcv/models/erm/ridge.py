"""Ridge regression with one penalty weight or one per coefficient.

``F(theta, b; w) = 1/2 sum_i w_i (y_i - x_i^T theta - b)^2 + 1/2 sum_j lam_j theta_j^2``
(intercept unpenalised). The held-out loss of a sample is the half squared error
``1/2 (y_i - x_i^T theta - b)^2``, the same as its training loss, so twice it is the
usual squared error. Equivalent to scikit-learn's ``Ridge(alpha=lam)``, which minimises
``||y - X theta - b||^2 + alpha ||theta||^2`` (the same minimiser).

Because the objective is quadratic, one Newton step from the full fit is the exact
refit: ``cross_validate(..., method="ns")`` (ALOOCV) equals exact CV to round-off, and for
leave-one-out both are the PRESS residuals ``r_i / (1 - h_i)``.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..._runtime import jit
from .base import ERM, ERMData, _flat_objective

__all__ = ["Ridge", "RidgeParams", "ridge_solve"]


class RidgeParams(NamedTuple):
    """coef ``(p,)``; intercept ``()`` (shape ``(0,)`` when ``fit_intercept=False``)."""
    coef: jax.Array
    intercept: jax.Array


def ridge_solve(design, y, weights, penalty_hessian):
    """Closed form ``u = (A^T W A + P)^{-1} A^T W y`` by Cholesky; ``(D,)`` (NaN if singular)."""
    aw = design * weights[:, None]
    chol = jnp.linalg.cholesky(aw.T @ design + penalty_hessian)
    return jax.scipy.linalg.cho_solve((chol, True), aw.T @ y)


@partial(jit, static_argnums=(7, 8))
def closed_form_ridge_fit(design, target, solve_weights, y, weights, lam, aux, loss_fn,
                          penalty_fn):
    """A closed-form ridge fit in one program: ``(u, F(u), ||grad F(u)||)`` with
    ``u = (A^T S A + P)^{-1} A^T S target`` (``S = diag(solve_weights)``, ``P`` the Hessian
    of the quadratic ``penalty_fn``) and
    ``F(u) = sum_i w_i loss_fn(a_i^T u, y_i) + penalty_fn(u, lam, aux)``."""
    objective = _flat_objective(loss_fn, penalty_fn)
    args = (design, y, lam, aux)
    hess_pen = jax.hessian(penalty_fn)(jnp.zeros(design.shape[1]), lam, aux)
    u = ridge_solve(design, target, solve_weights, hess_pen)
    value, grad = jax.value_and_grad(objective)(u, weights, args)
    return u, value, jnp.linalg.norm(grad)


class Ridge(ERM):
    """Ridge regression. Data: ``(X (n, p), y (n,))`` with finite real ``y``.

    Args:
        lam: penalty weight ``>= 0``, a scalar or one per feature (``(p,)``).
        fit_intercept: fit an unpenalised intercept.

    Example:
        >>> import numpy as np, approxcv as acv
        >>> rng = np.random.default_rng(0)
        >>> X = rng.normal(size=(40, 3)); y = X @ [1.0, 0.0, -2.0] + rng.normal(size=40)
        >>> model = acv.models.Ridge(1.0)
        >>> res = acv.cross_validate(model, (X, y), acv.folds.leave_one_out(40), method="ns")
    """
    params_type = RidgeParams
    #: exact refits: on a quadratic the first (undamped) Newton step is the exact refit
    refit_solver = "newton"

    @staticmethod
    def loss(eta, y):
        """``1/2 (y - eta)^2``."""
        return 0.5 * (y - eta) ** 2

    def fit_flat(self, data: ERMData, lam, u0=None, weights=None):
        """Closed-form fit (``u0`` is ignored). Returns ``(u, info)``."""
        design = self.design(data)
        w = jnp.ones(design.shape[0]) if weights is None else jnp.asarray(weights, jnp.float64)
        u, value, grad_norm = closed_form_ridge_fit(
            design, data.y, w, data.y, w, jnp.asarray(lam, jnp.float64), self.penalty_aux(),
            self.loss, self.penalty)
        info = {"objective": float(value), "grad_norm": float(grad_norm), "num_steps": 0,
                "converged": bool(np.all(np.isfinite(np.asarray(u))))}
        self._check_fit(u, info)
        return u, info
