"""The chord step: two steps towards a fold's optimum with a fixed matrix, and the
geometric extrapolation of the rest.

From a method's point ``u_m`` with a fixed positive definite ``M`` (``H`` at the fit, or the
fold's ``H(w_o)``): ``d_1 = M^{-1} grad F(u_m, w_o)``, ``d_2 = M^{-1} grad F(u_m - d_1, w_o)``,
contraction ``rho = ||d_2||_M / ||d_1||_M``, and where ``rho < 1`` the remaining distance to
the fold's optimum ``u* ~ u_m - (d_1 + d_2 / (1 - rho))``. A leaf module: the error estimate
(:mod:`approxcv.engine.error_estimate`), the GLM fast path, the NS method, lanes, windows and
the matrix-free solvers all use it.

**The screen** (:func:`screen_bound`) decides after the first step whether the second is
needed. With ``delta = u_m - u_1`` (the method's step from the fit), the first-order change
of the fold loss ``L_o`` along the correction is bounded by Cauchy-Schwarz in the ``M``
metric, ``|grad L_o . c| <= ||grad L_o||_{M^-1} ||c||_M``; at the IJ point
``||grad L_o||_{M^-1} ~ ||delta||_M`` (``H delta = J_o``, the fold's gradient in the
``H^{-1}`` metric), ``||c||_M <= ||d_1||_M / (1 - rho)`` and, before ``d_2`` is known, the
rate is taken as ``rho_hat = ||d_1||_M / ||delta||_M`` (the step from the fit contracted
to ``d_1``). So ``S = ||delta||_M ||d_1||_M / ((1 - rho_hat) |L_o(u_m)|)`` estimates an
upper bound of the two-step estimate; where ``rho_hat >= SCREEN_RATE`` it is ``inf``. On
four kinds of problem (HMM i.i.d. and contiguous folds, hidden Potts leave-one-out,
weakly regularised logistic leave-one-out; 749 folds) the two-step estimate exceeded
``S`` by at most a factor 1.28, so a fold is cleared — its estimate is ``S``, no second
step, no held-out pass at ``u*`` — only where ``SCREEN_SAFETY * S <= tol``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl

__all__ = ["ROUNDOFF_DECREASE", "SCREEN_RATE", "SCREEN_SAFETY", "contraction_rate",
           "extrapolate", "chord_step", "first_chord_step", "second_chord_step",
           "screen_bound"]


#: a first chord step whose predicted decrease of ``F`` (``d_1' r_1``) is below this times
#: ``max(|F|, 1)`` is at round-off: the method's point solves the fold to working precision,
#: and the ratio of two round-off steps says nothing about contraction (``rho = 0``)
ROUNDOFF_DECREASE = 1e-12


def contraction_rate(num_sq, den_sq, value):
    """``rho = sqrt(num_sq / den_sq)`` (``||d_2||_M / ||d_1||_M``); 0 where the first step
    is at round-off (:data:`ROUNDOFF_DECREASE` of ``|F|``), ``inf`` for x/0."""
    num, den = jnp.sqrt(jnp.maximum(num_sq, 0.0)), jnp.sqrt(jnp.maximum(den_sq, 0.0))
    rate = jnp.where(den > 0, num / jnp.where(den > 0, den, 1.0),
                     jnp.where(num > 0, jnp.inf, 0.0))
    return jnp.where(den_sq <= ROUNDOFF_DECREASE * jnp.maximum(jnp.abs(value), 1.0), 0.0,
                     rate)


def extrapolate(d1, d2, rho):
    """``d_1 + d_2 / (1 - rho)`` where ``rho < 1``, NaN elsewhere (no contraction)."""
    ok = rho < 1.0
    return jnp.where(ok, d1 + d2 / jnp.where(ok, 1.0 - rho, 1.0), jnp.nan)


#: the screen vouches for no fold whose first step shrank the method's step by less than this
SCREEN_RATE = 0.5
#: a fold is cleared by the screen where this times its bound is within ``tol`` (the
#: two-step estimate exceeded the bound by at most 1.28x where measured: module docstring)
SCREEN_SAFETY = 4.0


def screen_bound(step_norm, d1_sq, fold_loss):
    """``S = ||delta||_M ||d_1||_M / ((1 - rho_hat) |L_o|)`` (module docstring) from the
    ``M``-norm of the method's step ``delta``, ``d_1' r_1`` and the fold loss; ``inf``
    where ``rho_hat >= SCREEN_RATE`` or anything is not finite (``jnp`` or NumPy arrays)."""
    d1 = jnp.sqrt(jnp.maximum(d1_sq, 0.0))
    rate = jnp.where(step_norm > 0, d1 / jnp.where(step_norm > 0, step_norm, 1.0),
                     jnp.where(d1 > 0, jnp.inf, 0.0))
    bound = step_norm * d1 / ((1.0 - rate) * jnp.abs(fold_loss))
    bound = jnp.where(d1 == 0, 0.0, bound)
    return jnp.where((rate < SCREEN_RATE) & jnp.isfinite(bound), bound, jnp.inf), rate


def first_chord_step(fun, chol, u_m, w, data):
    """``(d_1, d_1' r_1, F(u_m, w))`` of one fold: the first chord step."""
    value, r1 = jax.value_and_grad(fun)(u_m, w, data)
    d1 = jsl.cho_solve((chol, True), r1)
    return d1, jnp.dot(d1, r1), value


def second_chord_step(fun, chol, u_m, w, data, d1, d1_sq, value):
    """``(correction, rho)`` of one fold from its first step (:func:`chord_step`)."""
    r2 = jax.grad(fun)(u_m - d1, w, data)
    d2 = jsl.cho_solve((chol, True), r2)
    rho = contraction_rate(jnp.dot(d2, r2), d1_sq, value)
    return extrapolate(d1, d2, rho), rho


def chord_step(fun, chol, u_m, w, data):
    """``(correction, rho)`` for one fold: two chord steps from ``u_m`` with ``M = chol
    chol'`` and the geometric sum of the rest, ``u* = u_m - correction`` (module docstring)."""
    value, r1 = jax.value_and_grad(fun)(u_m, w, data)
    d1 = jsl.cho_solve((chol, True), r1)
    r2 = jax.grad(fun)(u_m - d1, w, data)
    d2 = jsl.cho_solve((chol, True), r2)
    rho = contraction_rate(jnp.dot(d2, r2), jnp.dot(d1, r1), value)
    return extrapolate(d1, d2, rho), rho
