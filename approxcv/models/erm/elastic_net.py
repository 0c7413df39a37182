"""Elastic net (squared loss): FISTA fits and refits, and the L1 support rule.

``F(theta, b; w) = 1/2 sum_i w_i (y_i - x_i^T theta - b)^2 + lam1 ||theta||_1
+ 1/2 lam2 ||theta||^2`` (intercept unpenalised); held-out loss ``1/2 (y_i - eta_i)^2``.

The L1 term is not differentiable at 0, so approximate CV follows the support rule:
**work on the support S = {j : theta_hat_j != 0} of the full fit, drop the L1 term from
the Hessian and use sign(theta_hat_j) as its gradient.** On S (with signs fixed) the
objective equals the smooth quadratic
``1/2 sum_i w_i (y_i - x_{i,S}^T theta_S - b)^2 + lam1 s_S^T theta_S + 1/2 lam2 ||theta_S||^2``;
:class:`ElasticNetOnSupport` is that surrogate *in the full layout* (the coefficients off
S enter only through a fixed quadratic that keeps them at exactly 0), so IJ and NS fold
parameters have the elastic net's own layout. The rule covers every method:

* ``ij``/``ns`` differentiate the surrogate (:meth:`ElasticNet.local_model`);
* ``exact`` refits the non-smooth objective with the proximal solver below
  (:meth:`ElasticNet.batched_refit`), not a smooth optimiser;
* every method reports folds whose support changes (:meth:`ElasticNet.fold_check`):
  a support coefficient that changes sign or vanishes, one outside S that becomes non-zero
  or whose optimality condition ``|x_j^T W_o (y - A u_o)| <= lam1`` fails at the fold
  parameters (it would enter). IJ/NS are inexact exactly there and warn
  (:class:`SupportChangeWarning`); for exact refits the change is recorded.

Fitting: FISTA (accelerated proximal gradient, adaptive restart) to find the support and
signs, then an exact solve of the smooth problem on that support, accepted only when the
signs agree and every KKT condition holds (so fits are exact to round-off).
"""
from __future__ import annotations

import functools
import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...errors import user_stacklevel
from ..._validate import check_positive_int
from ...errors import ApproxCVWarning, InvalidArgumentError
from ...optim import MinimizeResult
from .elastic_net_support import (ElasticNetOnSupport, ElasticNetParams,
                                  off_support_curvature, support_changes)
from .base import ERM, ERMData, _flat_objective, check_lam, design_matrix, weights_array
from ..._runtime import jit

__all__ = ["ElasticNet", "ElasticNetParams", "ElasticNetOnSupport", "SupportChangeWarning",
           "enet_fit"]

#: FISTA iterations between two polish attempts
CHUNK = 200


class SupportChangeWarning(ApproxCVWarning):
    """Leaving data out would change the support of an L1-penalised fit."""


def _soft_threshold(x, t):
    """``sign(x) max(|x| - t, 0)`` elementwise."""
    return jnp.sign(x) * jnp.maximum(jnp.abs(x) - t, 0.0)


def _polish(design, y, w, lam1, lam2, pen, x):
    """Exact minimiser on the support/signs of ``x``, and whether it is the global one.

    Solves ``(A_S^T W A_S + lam2 I) u_S = A_S^T W y - lam1 s_S`` with the other coordinates
    at 0; accepts when the signs on ``S`` are unchanged and ``|grad_j| <= lam1`` off ``S``.
    """
    active = jnp.where(pen > 0, x != 0, True)
    m = active.astype(x.dtype)
    signs = jnp.sign(x) * pen
    gram = (design * w[:, None]).T @ design + lam2 * jnp.diag(pen)
    mat = m[:, None] * gram * m[None, :] + jnp.diag(1.0 - m)
    rhs = m * ((design * w[:, None]).T @ y - lam1 * signs)
    u = jnp.linalg.solve(mat, rhs)
    grad_loss = (design * w[:, None]).T @ (design @ u - y)
    scale = 1.0 + jnp.max(jnp.abs((design * w[:, None]).T @ y))
    signs_ok = jnp.all(~active | (pen == 0) | (jnp.sign(u) == signs) | (lam1 == 0))
    kkt_ok = jnp.all(active | (jnp.abs(grad_loss) <= lam1 * (1 + 1e-9) + 1e-11 * scale))
    return u, signs_ok & kkt_ok & jnp.all(jnp.isfinite(u))


@partial(jit, static_argnames=("max_rounds", "chunk"))
def enet_fit(design, y, w, lam1, lam2, pen, u0, step, max_rounds: int = 100,
             chunk: int = CHUNK):
    """Elastic-net fit by FISTA with adaptive restart, polished on the detected support.

    Minimises ``1/2 sum w_i (y_i - a_i^T u)^2 + lam1 sum_j pen_j |u_j| + lam2/2 sum pen_j u_j^2``.

    Args:
        design: ``A`` ``(n, D)``; y, w: ``(n,)``; lam1, lam2: scalars; pen: ``(D,)`` 1 for
            penalised coordinates (0 for the intercept); u0: ``(D,)`` warm start;
        step: ``1 / L`` with ``L >= lambda_max(A^T W A) + lam2``.
        max_rounds, chunk: at most ``max_rounds`` rounds of ``chunk`` FISTA iterations, a
            polish attempt after each.

    Returns:
        ``(u (D,), converged, num_rounds)``.
    """
    aw = design * w[:, None]

    def grad_smooth(u):
        return aw.T @ (design @ u - y) + lam2 * pen * u

    def prox(v):
        return jnp.where(pen > 0, _soft_threshold(v, step * lam1), v)

    def _fista_step(state, _):
        """One FISTA iteration with gradient-based restart."""
        x, x_prev, t = state
        t_next = 0.5 * (1.0 + jnp.sqrt(1.0 + 4.0 * t * t))
        z = x + ((t - 1.0) / t_next) * (x - x_prev)
        x_new = prox(z - step * grad_smooth(z))
        restart = jnp.dot(z - x_new, x_new - x) > 0
        return (x_new, x, jnp.where(restart, 1.0, t_next)), None

    def _round(carry):
        """``chunk`` FISTA iterations, then a polish attempt."""
        state, _, _, k = carry
        state, _ = lax.scan(_fista_step, state, None, length=chunk)
        u, ok = _polish(design, y, w, lam1, lam2, pen, state[0])
        return state, u, ok, k + 1

    def _not_done(carry):
        return (~carry[2]) & (carry[3] < max_rounds)

    u_pol, ok0 = _polish(design, y, w, lam1, lam2, pen, u0)
    init = ((u0, u0, jnp.asarray(1.0)), u_pol, ok0, jnp.asarray(0))
    state, u, ok, rounds = lax.while_loop(_not_done, _round, init)
    return jnp.where(ok, u, state[0]), ok, rounds


def _step_size(design, lam2):
    """``1 / L``, ``L = lambda_max(A^T A) + lam2`` (bounds every weighted ``A^T W A``)."""
    return 1.0 / (jnp.linalg.eigvalsh(design.T @ design)[-1] * (1 + 1e-6) + lam2 + 1e-12)


def _penalised(dim: int, fit_intercept: bool):
    return jnp.concatenate([jnp.ones(dim - int(fit_intercept)), jnp.zeros(int(fit_intercept))])


def _kkt_residual(design, y, w, lam1, lam2, pen, u):
    """Norm of the minimum-norm subgradient of the weighted objective at ``u``."""
    g = (design * w[:, None]).T @ (design @ u - y) + lam2 * pen * u
    on = g + lam1 * jnp.sign(u)
    off = jnp.sign(g) * jnp.maximum(jnp.abs(g) - lam1, 0.0)
    return jnp.linalg.norm(jnp.where(pen == 0, g, jnp.where(u != 0, on, off)))


@partial(jit, static_argnums=(5, 6, 7, 8))
def _fit_and_check(design, y, w, lam, u0, loss_fn, penalty_fn, fit_intercept: bool,
                   max_rounds: int):
    """:func:`enet_fit` at ``lam = (lam1, lam2)`` and its checks in one program:
    ``(u, ok, rounds, F(u), KKT residual)``, ``F(u) = sum_i w_i loss_fn(a_i^T u, y_i) +
    penalty_fn(u, lam)``."""
    pen = _penalised(design.shape[1], fit_intercept)
    u, ok, rounds = enet_fit(design, y, w, lam[0], lam[1], pen, u0,
                             _step_size(design, lam[1]), max_rounds=max_rounds)
    value = _flat_objective(loss_fn, penalty_fn)(u, w, (design, y, lam, None))
    return u, ok, rounds, value, _kkt_residual(design, y, w, lam[0], lam[1], pen, u)


@functools.lru_cache(maxsize=64)
def enet_refit_solver(lam1: float, lam2: float, fit_intercept: bool, max_rounds: int):
    """``solve(u0s (b, D), weights (b, n), data) -> MinimizeResult``: FISTA + polish refits
    of a batch of folds (``jit(vmap)``), for exact CV; ``grad_norm`` is the norm of the
    minimum-norm subgradient, ``num_steps`` counts FISTA iterations."""
    def one(u0, w, design, y, pen, step):
        u, ok, rounds = enet_fit(design, y, w, lam1, lam2, pen, u0, step,
                                 max_rounds=max_rounds)
        coef = u * pen
        value = (0.5 * jnp.sum(w * (y - design @ u) ** 2) + lam1 * jnp.sum(jnp.abs(coef))
                 + 0.5 * lam2 * jnp.sum(coef ** 2))
        return MinimizeResult(u, value, _kkt_residual(design, y, w, lam1, lam2, pen, u),
                              ok & jnp.isfinite(value), rounds * CHUNK)

    @jit
    def solve(u0s, weights, data):
        design = design_matrix(data.X, fit_intercept)
        pen = _penalised(design.shape[1], fit_intercept)
        step = _step_size(design, lam2)
        return jax.vmap(one, in_axes=(0, 0, None, None, None, None))(
            u0s, weights, design, data.y, pen, step)
    return solve


def enet_regularizers(coef, aux=None):
    """``r(theta) = [||theta||_1, ||theta||^2 / 2]``."""
    return jnp.stack([jnp.sum(jnp.abs(coef)), 0.5 * jnp.sum(coef ** 2)])


class ElasticNet(ERM):
    """Elastic net. Data: ``(X (n, p), y (n,))``; see the module docstring.

    Same minimiser as scikit-learn's ``ElasticNet(alpha=(lam1 + lam2) / n,
    l1_ratio=lam1 / (lam1 + lam2))``.

    Args:
        lam1: L1 weight ``>= 0``; lam2: L2 weight ``>= 0`` (scalars).
        fit_intercept: fit an unpenalised intercept.
        max_steps: FISTA iteration limit (fits and exact refits).
    """
    params_type = ElasticNetParams
    refit_solver = None            # exact CV uses batched_refit (proximal), never Newton
    #: ALOOCV is only piecewise smooth in lam (the support changes): no Newton tuning
    smooth_penalty = False
    #: lam1 and lam2 stay constants of the programs (its exact refits are a solver of
    #: their own, built for them)
    numeric_hyperparameters = ()

    def __init__(self, lam1: float = 1.0, lam2: float = 0.0, *, fit_intercept: bool = True,
                 max_steps: int = 20000):
        self.lam1 = _check_scalar(lam1, "lam1")
        self.lam2 = _check_scalar(lam2, "lam2")
        self.fit_intercept = bool(fit_intercept)
        self.max_steps = check_positive_int("max_steps", max_steps, CHUNK)
        self.fit_result_ = None

    @staticmethod
    def loss(eta, y):
        """``1/2 (y - eta)^2``."""
        return 0.5 * (y - eta) ** 2

    def regularizer_function(self):
        """:func:`enet_regularizers`."""
        return enet_regularizers

    def lam_vector(self):
        """``(lam1, lam2)`` (:func:`~approxcv.models.erm.base.weights_array`)."""
        return weights_array((self.lam1, self.lam2))

    def with_lam(self, lam):
        lam = np.asarray(lam, dtype=np.float64).reshape(-1)
        if lam.shape != (2,):
            raise InvalidArgumentError(f"`lam` must be (lam1, lam2), got shape {lam.shape}")
        new = self._copy()
        new.lam1, new.lam2 = _check_scalar(lam[0], "lam1"), _check_scalar(lam[1], "lam2")
        return new

    def _check_lam_length(self, p: int):
        return None

    def fit_flat(self, data: ERMData, lam, u0=None, weights=None):
        """FISTA + exact polish on the support. Returns ``(u, info)``."""
        design = self.design(data)
        n, dim = design.shape
        # NumPy outside the program: eager JAX operations would each compile a small one
        u0 = np.zeros(dim) if u0 is None else np.asarray(u0, np.float64)
        w = np.ones(n) if weights is None else np.asarray(weights, np.float64)
        u, ok, rounds, value, kkt = _fit_and_check(
            design, data.y, w, jnp.asarray(lam, jnp.float64), u0, self.loss, self.penalty,
            self.fit_intercept, max(1, self.max_steps // CHUNK))
        info = {"objective": float(value), "converged": bool(ok),
                "num_steps": int(rounds) * CHUNK, "grad_norm": float(kkt),
                "support_size": int(np.sum(np.asarray(u)[:self.num_coef(dim)] != 0))}
        self._check_fit(u, info)
        return u, info

    # ----------------------------------------------- capabilities (support rule)
    def glm_structure(self, data):
        """``None``: the L1 term is not smooth (the surrogate declares the structure)."""
        return None

    def batched_refit(self):
        """Exact-CV refits by FISTA + polish (:func:`enet_refit_solver`)."""
        return enet_refit_solver(self.lam1, self.lam2, self.fit_intercept,
                                 max(1, self.max_steps // CHUNK))

    def support(self, u) -> np.ndarray:
        """Indices ``j`` of the non-zero coefficients of the flat fit ``u``."""
        u = np.asarray(u)
        return np.flatnonzero(u[:self.num_coef(len(u))] != 0)

    def on_support(self, params, data):
        """``(ElasticNetOnSupport, params)``: the smooth surrogate on the support of
        ``params`` as a model (full layout: the same parameters, the same data)."""
        prepared, _, _ = self.prepare(data)
        coef = np.asarray(params[0], dtype=np.float64)
        supp = np.flatnonzero(coef != 0)
        model = ElasticNetOnSupport(
            self.lam1, self.lam2, tuple(int(j) for j in supp),
            tuple(float(s) for s in np.sign(coef[supp])), coef.size,
            off_support_curvature(prepared.X, self.lam2), fit_intercept=self.fit_intercept)
        return model, params

    def local_model(self, params, data):
        """``(model, params, data)`` of the smooth surrogate on the support of ``params``:
        what ``ij``/``ns`` differentiate instead of the non-smooth elastic net."""
        model, params = self.on_support(params, data)
        return model, params, self.prepare(data)[0]

    def smooth_problem(self, data: ERMData, u):
        """The surrogate on the support of the flat ``u`` as a smooth ERM (for tuning)."""
        model, _ = self.on_support(self.flat_to_params(u), data)
        return model.smooth_problem(data, u)

    def fold_check(self, params, data, fold_params, index, warn: bool = True) -> dict:
        """``{"support_change": (n_folds,) bool}``: folds whose parameters have another
        support than ``params`` or violate an off-support optimality condition (module
        docstring); warns (:class:`SupportChangeWarning`) when ``warn``."""
        data, _, _ = self.prepare(data)
        u_full = self.params_to_flat(params)
        flips, enters = support_changes(self.design(data), data.y, u_full,
                                        jnp.asarray(fold_params), jnp.asarray(index),
                                        self.lam1, self.num_coef(int(u_full.shape[0])))
        flips, enters = np.asarray(flips), np.asarray(enters)
        changed = flips | enters
        if warn and changed.any():
            warnings.warn(
                f"{int(changed.sum())} of {len(changed)} folds would change the support of "
                f"the elastic net ({int(flips.sum())} with a coefficient changing sign, "
                f"{int(enters.sum())} with one entering); the support-restricted "
                "approximation is inexact there (diagnostics['support_change'])",
                SupportChangeWarning, stacklevel=user_stacklevel())
        return {"support_change": changed}

    def __repr__(self) -> str:
        return (f"ElasticNet(lam1={self.lam1!r}, lam2={self.lam2!r}, "
                f"fit_intercept={self.fit_intercept})")


def _check_scalar(value, name):
    lam = check_lam(value, name)
    if isinstance(lam, tuple):
        raise InvalidArgumentError(f"`{name}` must be a scalar for the elastic net")
    return lam
