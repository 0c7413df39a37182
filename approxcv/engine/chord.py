"""The chord step: two steps towards a fold's optimum with a fixed matrix, and the
geometric extrapolation of the rest.

From a method's point ``u_m`` with a fixed positive definite ``M`` (``H`` at the fit, or the
fold's ``H(w_o)``): ``d_1 = M^{-1} grad F(u_m, w_o)``, ``d_2 = M^{-1} grad F(u_m - d_1, w_o)``,
contraction ``rho = ||d_2||_M / ||d_1||_M``, and where ``rho < 1`` the remaining distance to
the fold's optimum ``u* ~ u_m - (d_1 + d_2 / (1 - rho))``. A leaf module: the error estimate
(:mod:`approxcv.engine.error_estimate`), the GLM fast path, the NS method, lanes, windows and
the matrix-free solvers all use it.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax

__all__ = ["ROUNDOFF_DECREASE", "FORWARD_MAX_DIM", "contraction_rate", "extrapolate",
           "value_and_gradient", "chord_step"]


#: a first chord step whose predicted decrease of ``F`` (``d_1' r_1``) is below this times
#: ``max(|F|, 1)`` is at round-off: the method's point solves the fold to working precision,
#: and the ratio of two round-off steps says nothing about contraction (``rho = 0``)
ROUNDOFF_DECREASE = 1e-12


#: parameter dimensions up to which a chord step's gradients are taken in forward mode: ``D``
#: Jacobian-vector products in one vectorised pass (the value computed once) cost about one
#: value pass each, where reverse mode costs about 2.5 (measured on SIDS, ``D = 2``: a jvp
#: 0.059 s, a value 0.060 s, a gradient 0.15 s), so forward mode pays up to ``D = 2``; the
#: gradients are the same to rounding. (It was 8: a PoissonHMM(2), ``D = 5``, at T = 10^6
#: took 15.9 s for the 8 checked folds of its error estimate in forward mode, 1.25 s in
#: reverse mode; SIDS, ``D = 2``, stays in forward mode, faster there)
FORWARD_MAX_DIM = 2


def value_and_gradient(fun, u, *args, forward: bool | None = None):
    """``(fun(u, *args), grad_u fun(u, *args))``: forward mode (one vectorised pass of ``D``
    jvps) where ``forward`` (default: ``D <= FORWARD_MAX_DIM``), else reverse mode."""
    dim = u.shape[0]
    if not (dim <= FORWARD_MAX_DIM if forward is None else forward):
        return jax.value_and_grad(fun)(u, *args)
    value, grad = jax.vmap(lambda v: jax.jvp(lambda x: fun(x, *args), (u,), (v,)),
                           out_axes=(None, 0))(jnp.eye(dim, dtype=u.dtype))
    return value, grad


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


def chord_step(fun, chol, u_m, w, data, forward: bool | None = None):
    """``(correction, rho)`` for one fold: two chord steps from ``u_m`` with ``M = chol
    chol'`` and the geometric sum of the rest, ``u* = u_m - correction`` (module docstring);
    ``forward``: the gradients' mode (:func:`value_and_gradient`)."""
    def step(u, _):
        value, r = value_and_gradient(fun, u, w, data, forward=forward)
        d = jsl.cho_solve((chol, True), r)
        return u - d, (value, r, d)
    # a rolled loop of two steps: one copy of the gradient in the program, not two
    _, (values, r, d) = lax.scan(step, u_m, None, length=2)
    rho = contraction_rate(jnp.dot(d[1], r[1]), jnp.dot(d[0], r[0]), values[0])
    return extrapolate(d[0], d[1], rho), rho
