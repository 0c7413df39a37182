"""The chord step: two steps towards a fold's optimum with a fixed matrix, and the
geometric extrapolation of the rest.

From a method's point ``u_m`` with a fixed positive definite ``M`` (``H`` at the fit, or the
fold's ``H(w_o)``): ``d_1 = M^{-1} grad F(u_m, w_o)``, ``d_2 = M^{-1} grad F(u_m - d_1, w_o)``,
contraction ``rho = ||d_2||_M / ||d_1||_M``, and where ``rho < 1`` the remaining distance to
the fold's optimum ``u* ~ u_m - (d_1 + d_2 / (1 - lambda))``, with the *signed* ratio
``lambda = <d_2, d_1>_M / ||d_1||_M^2 = d_1' r_2 / d_1' r_1`` (``|lambda| <= rho``): the
iteration matrix ``I - M^{-1} H(w_o)`` along ``d_1``. Its sign matters: the chord iteration
oscillates (``lambda < 0``) where the fold's curvature exceeds ``M``'s, and there the
geometric sum is ``1 / (1 + |lambda|)``, not ``1 / (1 - |lambda|)``; extrapolating with
``rho`` sent such folds the wrong way (PoissonHMM(3) on the Puerto Rico deaths, T = 1,201,
folds holding the first day, whose initial distribution the fold frees: ``lambda ~ -0.4``,
error 0.74 %, estimate 0.004 % with ``rho``, 0.68 % with ``lambda``). A leaf module: the error estimate
(:mod:`approxcv.engine.error_estimate`), the GLM fast path, the NS method, lanes, windows and
the matrix-free solvers all use it.

The **screen** (:func:`first_chord_step`, :func:`screen_terms`) takes the first step only.
Where the weighted objective splits as ``F(u, w_o) = F(u, 1) - L_o(u)`` (``L_o`` the held-out
fold loss; :meth:`~approxcv.models.base.Model.objective_splits`), the held-out gradient at
the method's point is ``grad L_o(u_m) = grad F(u_m, 1) - r_1 ~ g_1 + H delta - r_1``
(``delta = u_m - u_1``, ``g_1 = grad F(u_1, 1)``, first order in ``delta``), so the first
step changes the fold loss by, to first order and with ``H d_1 = r_1``::

    L_o(u_m - d_1) - L_o(u_m) ~ r_1' (d_1 - delta) - g_1' d_1,

and ``rho = ||d_1||_H / ||delta||_H`` compares the first step with the IJ's own: the chord
iteration's contraction where ``F`` is linear in ``w`` (the IJ point is then the first chord
step from ``u_1``), a guard that overstates it for latent-variable models. Both come from
the one gradient per fold the first step needs.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
from jax import lax

__all__ = ["ROUNDOFF_DECREASE", "FORWARD_MAX_DIM", "contraction_rate", "signed_rate",
           "extrapolate",
           "value_and_gradient", "chord_step", "first_chord_step", "second_chord_step",
           "second_step_correction", "screen_terms"]


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


def signed_rate(cross, den_sq, rho):
    """``lambda = <d_2, d_1>_M / ||d_1||_M^2`` from ``cross = d_1' r_2`` and ``den_sq =
    ||d_1||_M^2 = d_1' r_1`` (module docstring), clipped to ``[-rho, rho]`` (Cauchy-Schwarz:
    it only guards rounding; 0 where ``rho`` is, at round-off)."""
    lam = cross / jnp.where(den_sq > 0, den_sq, 1.0)
    return jnp.clip(jnp.where(den_sq > 0, lam, 0.0), -rho, rho)


def extrapolate(d1, d2, rho, lam):
    """``d_1 + d_2 / (1 - lambda)`` where ``rho < 1`` (then ``|lambda| <= rho < 1``), NaN
    elsewhere (no contraction)."""
    ok = rho < 1.0
    return jnp.where(ok, d1 + d2 / jnp.where(ok, 1.0 - lam, 1.0), jnp.nan)


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
    den_sq = jnp.dot(d[0], r[0])
    rho = contraction_rate(jnp.dot(d[1], r[1]), den_sq, values[0])
    return extrapolate(d[0], d[1], rho, signed_rate(jnp.dot(d[0], r[1]), den_sq, rho)), rho


def first_chord_step(fun, chol, u_m, w, data, forward: bool | None = None):
    """``(d_1, r_1, F(u_m, w))``: the first step of :func:`chord_step`, ``r_1 = grad F(u_m,
    w)`` and ``d_1 = M^{-1} r_1``."""
    value, r = value_and_gradient(fun, u_m, w, data, forward=forward)
    return jsl.cho_solve((chol, True), r), r, value


def second_chord_step(fun, chol, u_m, d1, w, data, forward: bool | None = None):
    """``(correction, rho)`` of :func:`chord_step` given its first step ``d_1``: the second
    gradient at ``u_m - d_1``, then :func:`second_step_correction`."""
    value, r2 = value_and_gradient(fun, u_m - d1, w, data, forward=forward)
    return second_step_correction(chol, d1, r2, value)


def second_step_correction(chol, d1, r2, value):
    """``(correction, rho)`` from the first step ``d_1`` and the second residual ``r_2 =
    grad F(u_m - d_1, w)`` (``value`` = ``F`` there): ``d_2 = M^{-1} r_2``, ``rho =
    ||d_2||_H / ||d_1||_H`` (``||d_1||_H^2 = ||chol' d_1||^2``), the signed ``lambda`` and
    the extrapolation. One fold; folds in lanes ``vmap`` it over their second passes."""
    d2 = jsl.cho_solve((chol, True), r2)
    den_sq = jnp.sum(jnp.square(chol.T @ d1))
    rho = contraction_rate(jnp.dot(d2, r2), den_sq, value)
    return extrapolate(d1, d2, rho, signed_rate(jnp.dot(d1, r2), den_sq, rho)), rho


def screen_terms(chol, d1, r1, value, delta, g1, g1_step):
    """``(change, reach, rho)`` of one fold from its first chord step (module docstring, the
    screen): ``change = r_1' (d_1 - delta) - g_1' d_1``, the first-order change of the
    held-out fold loss along ``-d_1`` where the objective splits; ``reach =
    ||grad L_o||_{H^-1} ||d_1||_H``, which bounds the first-order change along any step of
    ``H``-norm ``||d_1||_H`` (Cauchy-Schwarz; ``H^{-1} grad L_o ~ H^{-1} g_1 + delta -
    d_1``); and ``rho = ||d_1||_H / ||delta||_H`` (``||x||_H^2 = ||chol' x||^2``,
    ``||d_1||_H^2 = d_1' r_1``), with :func:`contraction_rate`'s conventions. ``g1_step``:
    ``H^{-1} g_1``, the same for every fold (solved once by the caller)."""
    h_delta = chol @ (chol.T @ delta)
    held_grad = g1 + h_delta - r1                       # grad L_o(u_m), first order
    held_step = g1_step + delta - d1                    # H^{-1} grad L_o(u_m)
    step_sq = jnp.dot(d1, r1)
    change = jnp.dot(r1, d1 - delta) - jnp.dot(g1, d1)
    reach = jnp.sqrt(jnp.maximum(jnp.dot(held_grad, held_step), 0.0)
                     * jnp.maximum(step_sq, 0.0))
    return change, reach, contraction_rate(step_sq, jnp.dot(delta, h_delta), value)
