"""Elastic net (squared loss) and its smooth surrogate on the support of a fit.

``F(theta, b; w) = 1/2 sum_i w_i (y_i - x_i^T theta - b)^2 + lam1 ||theta||_1
+ 1/2 lam2 ||theta||^2`` (intercept unpenalised); held-out loss ``1/2 (y_i - eta_i)^2``.

The L1 term is not differentiable at 0, so approximate CV follows the support rule:
**work on the support S = {j : theta_hat_j != 0} of the full fit, drop the L1 term from
the Hessian and use sign(theta_hat_j) as its gradient.** On S (with signs fixed) the
objective equals the smooth

    1/2 sum_i w_i (y_i - x_{i,S}^T theta_S - b)^2 + lam1 s_S^T theta_S + 1/2 lam2 ||theta_S||^2,

so the Newton step / IJ apply to it; coefficients outside S stay 0. The approximation is
exact as long as leaving data out does not change the support; when an approximate fold
fit flips a sign on S, or violates the optimality condition ``|x_j^T r| <= lam1`` for some
``j`` outside S, the support would change and a :class:`SupportChangeWarning` is raised.
:meth:`ElasticNet.on_support` returns the surrogate as a model, so
``approxcv.cross_validate`` can be run on it.

Fitting: FISTA (accelerated proximal gradient, adaptive restart) to find the support and
signs, then an exact solve of the smooth problem on that support, accepted only when the
signs agree and every KKT condition holds (so fits are exact to round-off).
"""
from __future__ import annotations

import functools
import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._validate import check_positive_int
from ..errors import ApproxCVWarning, InvalidArgumentError
from .erm import ERM, ERMData, SmoothERM, check_lam

__all__ = ["ElasticNet", "ElasticNetParams", "ElasticNetOnSupport", "SupportChangeWarning",
           "enet_fit"]


class SupportChangeWarning(ApproxCVWarning):
    """Leaving data out would change the support of an L1-penalised fit."""


class ElasticNetParams(NamedTuple):
    """coef ``(p,)``; intercept ``()`` (shape ``(0,)`` when ``fit_intercept=False``)."""
    coef: jax.Array
    intercept: jax.Array


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


@partial(jax.jit, static_argnames=("max_rounds", "chunk"))
def enet_fit(design, y, w, lam1, lam2, pen, u0, step, max_rounds: int = 100,
             chunk: int = 200):
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


_enet_fit_batch = jax.jit(
    jax.vmap(enet_fit, in_axes=(None, None, 0, None, None, None, None, None, None, None)),
    static_argnums=(8, 9))


def enet_regularizers(coef, aux=None):
    """``r(theta) = [||theta||_1, ||theta||^2 / 2]``."""
    return jnp.stack([jnp.sum(jnp.abs(coef)), 0.5 * jnp.sum(coef ** 2)])


class ElasticNet(ERM):
    """Elastic net. Data: ``(X (n, p), y (n,))``; see the module docstring.

    Args:
        lam1: L1 weight ``>= 0``; lam2: L2 weight ``>= 0`` (scalars).
        fit_intercept: fit an unpenalised intercept.
        max_steps: FISTA iteration limit.
    """
    params_type = ElasticNetParams

    def __init__(self, lam1: float = 1.0, lam2: float = 0.0, *, fit_intercept: bool = True,
                 max_steps: int = 20000):
        self.lam1 = _check_scalar(lam1, "lam1")
        self.lam2 = _check_scalar(lam2, "lam2")
        self.fit_intercept = bool(fit_intercept)
        self.max_steps = check_positive_int("max_steps", max_steps, 200)
        self.fit_result_ = None

    @staticmethod
    def loss(eta, y):
        """``1/2 (y - eta)^2``."""
        return 0.5 * (y - eta) ** 2

    def regularizer_function(self):
        """:func:`enet_regularizers`."""
        return enet_regularizers

    def lam_vector(self):
        """``(lam1, lam2)``."""
        return jnp.asarray([self.lam1, self.lam2], dtype=jnp.float64)

    def with_lam(self, lam):
        lam = np.asarray(lam, dtype=np.float64).reshape(-1)
        if lam.shape != (2,):
            raise InvalidArgumentError(f"`lam` must be (lam1, lam2), got shape {lam.shape}")
        new = self._copy()
        new.lam1, new.lam2 = _check_scalar(lam[0], "lam1"), _check_scalar(lam[1], "lam2")
        return new

    def _check_lam_length(self, p: int):
        return None

    def _penalised(self, dim: int):
        return jnp.concatenate([jnp.ones(self.num_coef(dim)),
                                jnp.zeros(dim - self.num_coef(dim))])

    def _step_size(self, design, lam2):
        gram = design.T @ design
        return 1.0 / (jnp.linalg.eigvalsh(gram)[-1] * (1 + 1e-6) + lam2 + 1e-12)

    def fit_flat(self, data: ERMData, lam, u0=None, weights=None):
        """FISTA + exact polish on the support. Returns ``(u, info)``."""
        design = self.design(data)
        n, dim = design.shape
        lam = jnp.asarray(lam, jnp.float64)
        u0 = jnp.zeros(dim) if u0 is None else jnp.asarray(u0, jnp.float64)
        w = jnp.ones(n) if weights is None else jnp.asarray(weights, jnp.float64)
        u, ok, rounds = enet_fit(design, data.y, w, lam[0], lam[1], self._penalised(dim), u0,
                                 self._step_size(design, lam[1]),
                                 max_rounds=max(1, self.max_steps // 200))
        value = jnp.sum(w * self.loss(design @ u, data.y)) + self.penalty(u, lam)
        info = {"objective": float(value), "converged": bool(ok), "num_steps": int(rounds) * 200,
                "grad_norm": float("nan"), "support_size": int(np.sum(np.asarray(u)[
                    :self.num_coef(dim)] != 0))}
        self._check_fit(u, info)
        return u, info

    def refit_batch(self, data: ERMData, lam, u0, weights, batch_size: int = 64):
        """Exact refits of many folds, warm-started at ``u0`` (``vmap`` of :func:`enet_fit`).

        Args:
            data: prepared data; lam: ``(lam1, lam2)``; u0: ``(D,)``; weights: ``(n_folds, n)``.
            batch_size: folds refitted together.

        Returns:
            ``(u (n_folds, D), converged (n_folds,))`` as NumPy arrays.
        """
        design = self.design(data)
        dim = design.shape[1]
        lam = jnp.asarray(lam, jnp.float64)
        step = self._step_size(design, lam[1])
        u0 = jnp.asarray(u0, jnp.float64)
        weights = jnp.asarray(weights, jnp.float64)
        pen, rounds = self._penalised(dim), max(1, self.max_steps // 200)
        outs = [_enet_fit_batch(design, data.y, weights[s:s + batch_size], lam[0], lam[1], pen,
                                u0, step, rounds, 200)
                for s in range(0, len(weights), batch_size)]
        return (np.concatenate([np.asarray(o[0]) for o in outs]),
                np.concatenate([np.asarray(o[1]) for o in outs]))

    # -------------------------------------------------------- support rule
    def support(self, u) -> np.ndarray:
        """Indices ``j`` of the non-zero coefficients of the flat fit ``u``."""
        u = np.asarray(u)
        return np.flatnonzero(u[:self.num_coef(len(u))] != 0)

    def smooth_problem(self, data: ERMData, u) -> SmoothERM:
        """The smooth surrogate on the support of ``u`` (support coefficients + intercept)."""
        u = np.asarray(u, dtype=np.float64)
        dim = len(u)
        active = np.concatenate([self.support(u), np.arange(self.num_coef(dim), dim)])
        pen = np.asarray(self._penalised(dim))[active]
        signs = np.sign(u[active]) * pen
        design = self.design(data)[:, active]
        return SmoothERM(design, data.y, jnp.asarray(u[active]), self.lam_vector(),
                         (jnp.asarray(signs), jnp.asarray(pen)), active, self.loss,
                         support_penalty)

    def support_violations(self, data: ERMData, u_full, fold_params, weights,
                           warn: bool = True) -> np.ndarray:
        """Folds whose approximate fit implies a different support, ``(n_folds,)`` bool.

        A fold is flagged when a support coefficient changes sign, or when an off-support
        coefficient violates its optimality condition ``|x_j^T W_o (y - A u_o)| <= lam1``
        at the fold parameters ``u_o`` (it would enter the support).

        Args:
            data: prepared data; u_full: ``(D,)`` full fit; fold_params: ``(n_folds, D)``;
            weights: ``(n_folds, n)``; warn: raise a :class:`SupportChangeWarning`.
        """
        u_full = np.asarray(u_full)
        fold_params = np.asarray(fold_params)
        supp = self.support(u_full)
        p = self.num_coef(len(u_full))
        off = np.setdiff1d(np.arange(p), supp)
        flips = np.any(np.sign(fold_params[:, supp]) != np.sign(u_full[supp]), axis=1)
        design = np.asarray(self.design(data))
        resid = np.asarray(weights) * (np.asarray(data.y)[None, :] - fold_params @ design.T)
        score = np.abs(resid @ design[:, off]) if off.size else np.zeros((len(resid), 0))
        tol = self.lam1 * (1 + 1e-8) + 1e-10 * (1 + np.abs(design.T @ np.asarray(data.y)).max())
        enters = np.any(score > tol, axis=1)
        changed = flips | enters
        if warn and changed.any():
            warnings.warn(
                f"{int(changed.sum())} of {len(changed)} folds would change the support of the "
                f"elastic net ({int(flips.sum())} sign flips, {int(enters.sum())} entering "
                "coefficients); the support-restricted approximation is inexact there "
                "(see diagnostics['support_change'])", SupportChangeWarning, stacklevel=3)
        return changed

    def on_support(self, params):
        """``(ElasticNetOnSupport model, its params)``: the smooth surrogate as a model.

        Pass the *full* data ``(X, y)`` to the returned model; it selects the support columns.
        """
        u = np.asarray(self.params_to_flat(params))
        supp = self.support(u)
        model = ElasticNetOnSupport(self.lam1, self.lam2, tuple(int(j) for j in supp),
                                    tuple(float(s) for s in np.sign(u[supp])),
                                    fit_intercept=self.fit_intercept)
        reduced = model.params_type(np.asarray(params[0])[supp], np.asarray(params[1]))
        return model, reduced

    def local_model(self, params, data):
        """``(model, params, prepared data)`` of the smooth surrogate on the support of
        ``params``: what generic approximate CV (``cross_validate`` with ``"ij"``/``"ns"``)
        must differentiate instead of the non-smooth elastic net."""
        sub_model, sub_params = self.on_support(params)
        prepared, _, _ = self.prepare(data)
        cols = np.asarray(sub_model.support, dtype=int)
        return sub_model, sub_params, ERMData(prepared.X[:, cols], prepared.y)

    def __repr__(self) -> str:
        return (f"ElasticNet(lam1={self.lam1!r}, lam2={self.lam2!r}, "
                f"fit_intercept={self.fit_intercept})")


def support_penalty(u, lam, aux):
    """``lam1 s^T u + lam2/2 sum pen u^2`` on the support (``aux = (signs, pen)``)."""
    signs, pen = aux
    return lam[0] * jnp.dot(signs, u) + 0.5 * lam[1] * jnp.sum(pen * u ** 2)


class ElasticNetOnSupport(ERM):
    """The elastic net restricted to a support with fixed signs: a smooth quadratic model.

    ``F = 1/2 sum_i w_i (y_i - x_{i,S}^T theta - b)^2 + lam1 s^T theta + lam2/2 ||theta||^2``.
    Raw data are the full ``(X, y)``; :meth:`prepare` keeps the columns ``support``.
    Build it with :meth:`ElasticNet.on_support`.
    """
    params_type = ElasticNetParams

    def __init__(self, lam1: float, lam2: float, support: tuple, signs: tuple, *,
                 fit_intercept: bool = True):
        self.lam1, self.lam2 = _check_scalar(lam1, "lam1"), _check_scalar(lam2, "lam2")
        self.support = tuple(int(j) for j in support)
        self.signs = tuple(float(s) for s in signs)
        if len(self.support) != len(self.signs):
            raise InvalidArgumentError("`support` and `signs` must have the same length")
        self.fit_intercept = bool(fit_intercept)
        self.max_steps = 1000
        self.fit_result_ = None

    @staticmethod
    def loss(eta, y):
        """``1/2 (y - eta)^2``."""
        return 0.5 * (y - eta) ** 2

    def regularizer_function(self):
        """``r(theta) = [s^T theta, ||theta||^2 / 2]`` with the fixed signs ``s``."""
        return _signed_regularizers(self.signs)

    def lam_vector(self):
        return jnp.asarray([self.lam1, self.lam2], dtype=jnp.float64)

    def _check_lam_length(self, p):
        return None

    def prepare(self, data, level=None):
        """Validate the full ``(X, y)`` and keep the support columns (prepared data pass)."""
        if isinstance(data, ERMData):
            return super().prepare(data, level)
        full, level, n = super().prepare(data, level)
        if self.support and max(self.support) >= full.X.shape[1]:
            raise InvalidArgumentError(
                f"`support` index {max(self.support)} is outside the {full.X.shape[1]} "
                "features of `X`")
        return ERMData(full.X[:, np.asarray(self.support, dtype=int)], full.y), level, n

    def fit_flat(self, data: ERMData, lam, u0=None, weights=None):
        """Closed form of the quadratic surrogate. Returns ``(u, info)``."""
        design = self.design(data)
        w = jnp.ones(design.shape[0]) if weights is None else jnp.asarray(weights, jnp.float64)
        lam = jnp.asarray(lam, jnp.float64)
        k = len(self.support)
        pen = jnp.concatenate([jnp.ones(k), jnp.zeros(design.shape[1] - k)])
        signs = jnp.concatenate([jnp.asarray(self.signs).reshape(-1),
                                 jnp.zeros(design.shape[1] - k)])
        aw = design * w[:, None]
        u = jnp.linalg.solve(aw.T @ design + lam[1] * jnp.diag(pen),
                             aw.T @ data.y - lam[0] * signs)
        info = {"objective": float(jnp.sum(w * self.loss(design @ u, data.y))
                                   + self.penalty(u, lam)),
                "converged": bool(np.all(np.isfinite(np.asarray(u)))), "num_steps": 0,
                "grad_norm": float("nan")}
        self._check_fit(u, info)
        return u, info

    def embed(self, params, n_features: int) -> ElasticNetParams:
        """Full-length :class:`ElasticNetParams` with zeros off the support."""
        coef = np.zeros(n_features)
        coef[list(self.support)] = np.asarray(params[0])
        return ElasticNetParams(coef, np.asarray(params[1]))

    def __repr__(self) -> str:
        return (f"ElasticNetOnSupport(lam1={self.lam1!r}, lam2={self.lam2!r}, "
                f"support of size {len(self.support)})")


@functools.lru_cache(maxsize=64)
def _signed_regularizers(signs: tuple):
    """``r(theta) = [s^T theta, ||theta||^2 / 2]`` for fixed signs (cached per signs)."""
    s = np.asarray(signs, dtype=np.float64)

    def regularizers(coef, aux=None):
        return jnp.stack([jnp.dot(jnp.asarray(s), coef), 0.5 * jnp.sum(coef ** 2)])
    return regularizers


def _check_scalar(value, name):
    lam = check_lam(value, name)
    if isinstance(lam, tuple):
        raise InvalidArgumentError(f"`{name}` must be a scalar for the elastic net")
    return lam
