"""The shared optimiser: optimistix BFGS, then optional safeguarded Newton polishing.

BFGS (quasi-Newton, from the maintained ``optimistix`` library) does the work and stops on
its own Cauchy test or once the gradient is small; for small ``D`` a few exact Newton steps —
each accepted only if the Hessian is positive definite and the objective does not increase
or the gradient norm halves — bring the gradient to round-off level, which is what the
IJ and exact CV need to be compared at the 1e-6 level. Everything is pure and ``jit``/``vmap``
compatible, so exact CV can refit a batch of folds in one call.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import optimistix as optx
from jax import lax

from .derivatives import hessian_by_hvp


def _gradient_terminate(self, fn, y, args, options, state, tags):
    """optimistix's Cauchy test (small change in ``u`` and in ``F``), or ``||grad F|| <= gtol``.

    The Cauchy test at ``rtol = 1e-10`` is rarely met on long, noisy objectives (the line
    search keeps making tiny moves), so without the gradient test BFGS runs to
    ``max_steps`` long after it has converged.
    """
    small = (jnp.linalg.norm(state.f_info.grad) <= self.gtol) & ~state.first_step
    return state.terminate | small, state.result


def _with_gradient_stop(solver_class):
    """``solver_class`` (an optimistix quasi-Newton minimiser) that also stops once
    ``||grad F|| <= gtol``."""
    class Solver(solver_class):
        gtol: float

        def __init__(self, rtol: float, atol: float, gtol: float):
            super().__init__(rtol, atol)
            self.gtol = gtol

        terminate = _gradient_terminate

    Solver.__name__ = Solver.__qualname__ = f"{solver_class.__name__}WithGradientStop"
    return Solver


_BFGS = _with_gradient_stop(optx.BFGS)
_LBFGS = _with_gradient_stop(optx.LBFGS)


class MinimizeResult(NamedTuple):
    """u: minimiser ``(D,)``; value: objective there; grad_norm: ``||dF/du||``;
    converged: BFGS met its tolerance and everything is finite; num_steps: BFGS steps."""
    u: jax.Array
    value: jax.Array
    grad_norm: jax.Array
    converged: jax.Array
    num_steps: jax.Array


def _newton_polish(fun, u, args, num_steps: int):
    """Up to ``num_steps`` safeguarded Newton steps on ``fun(u, args)``."""

    grad = jax.grad(fun)

    def _step(u, _):
        """One Newton step, kept only if H is PD and the objective does not rise or the
        gradient norm halves (next to the minimum, F changes by less than its round-off,
        so the objective alone would reject the steps that matter most)."""
        g = grad(u, args)
        h = hessian_by_hvp(fun, u, args)
        chol = jnp.linalg.cholesky(0.5 * (h + h.T))
        step = jax.scipy.linalg.cho_solve((chol, True), g)
        u_new = u - step
        better = ((fun(u_new, args) <= fun(u, args))
                  | (jnp.linalg.norm(grad(u_new, args)) < 0.5 * jnp.linalg.norm(g)))
        ok = jnp.all(jnp.isfinite(u_new)) & better
        return jnp.where(ok, u_new, u), None

    u, _ = lax.scan(_step, u, None, length=num_steps)
    return u


def minimize(fun, u0, args=None, *, max_steps: int = 1000, rtol: float = 1e-10,
             atol: float = 1e-10, scale: float = 1.0, newton_steps: int = 2,
             gtol: float = 1e-7, method: str = "bfgs") -> MinimizeResult:
    """Minimise ``fun(u, args)`` from ``u0`` with BFGS (optimistix) and Newton polishing.

    Args:
        fun: scalar function ``fun(u, args)`` of a flat ``(D,)`` vector.
        u0: starting point ``(D,)``.
        args: passed through to ``fun``.
        max_steps: BFGS step limit.
        rtol, atol: BFGS Cauchy tolerances on the objective divided by ``scale``; BFGS also
            stops when ``||grad F|| / scale <= gtol / 10``.
        scale: positive constant dividing the objective (e.g. the number of units) so the
            tolerances are per unit.
        newton_steps: safeguarded Newton steps after BFGS (0 to skip; use 0 for large D).
        gtol: the run also counts as converged when ``||grad F|| / scale <= gtol``.
        method: ``"bfgs"`` (dense inverse-Hessian approximation, ``D x D`` memory) or
            ``"lbfgs"`` (optimistix L-BFGS, history 10, ``O(D)`` memory; for large ``D``,
            where the Newton polish is skipped too).

    Returns:
        :class:`MinimizeResult`; ``converged`` is False when neither BFGS's Cauchy criterion
        nor the gradient criterion holds, or values are non-finite — callers must report
        it, not ignore it.
    """
    scaled = lambda u, a: fun(u, a) / scale  # noqa: E731
    # BFGS stops at a tenth of the convergence threshold, so that the Newton polish (or,
    # without it, the gradient test below) starts from a point that already passes
    stop = 0.1 * gtol
    if method == "lbfgs":
        solver, newton_steps = _LBFGS(rtol, atol, stop), 0
    else:
        solver = _BFGS(rtol, atol, stop)
    sol = optx.minimise(scaled, solver, u0, args=args, max_steps=max_steps, throw=False)
    u = sol.value
    if newton_steps:
        u = _newton_polish(scaled, u, args, newton_steps)
    value = fun(u, args)
    grad_norm = jnp.linalg.norm(jax.grad(fun)(u, args))
    converged = (((sol.result == optx.RESULTS.successful) | (grad_norm <= gtol * scale))
                 & jnp.isfinite(value) & jnp.all(jnp.isfinite(u)))
    return MinimizeResult(u, value, grad_norm, converged, sol.stats["num_steps"])


@functools.lru_cache(maxsize=64)
def batched_minimize(fun, scale: float, max_steps: int, newton_steps: int,
                     method: str = "bfgs"):
    """``jit(vmap(minimize))`` over starting points and weights for ``fun(u, w, data)``.

    Returns ``solve(u0s (b, D), weights (b, n), data) -> MinimizeResult`` with a leading
    batch axis; built (and compiled) once per objective and settings. Used both by model
    fits (several starts, unit weights) and by exact CV (one warm start, many folds).
    """
    def one(u0, w, data):
        return minimize(lambda u, a: fun(u, a[0], a[1]), u0, (w, data), max_steps=max_steps,
                        scale=scale, newton_steps=newton_steps, method=method)
    return jax.jit(jax.vmap(one, in_axes=(0, 0, None)))


def newton_minimize(fun, u0, args=None, *, max_steps: int = 30, scale: float = 1.0,
                    gtol: float = 1e-7, max_tries: int = 40) -> MinimizeResult:
    """Minimise ``fun(u, args)`` by damped (Levenberg-Marquardt) Newton with a dense Hessian.

    Each step factors ``H + mu I`` by Cholesky, ``d = (H + mu I)^{-1} g``, and accepts
    ``u - d`` when it is finite and satisfies ``F(u - d) <= F(u) - 1e-4 g^T d``; otherwise
    ``mu`` grows tenfold (from ``1e-6 mean|diag H|``) and the step is retried without a new
    Hessian. After an accepted step ``mu`` shrinks tenfold (to 0, the plain Newton step, once
    it is below ``1e-9 mean|diag H|``), so near a minimum with a positive definite Hessian
    every step is a full Newton step and convergence is quadratic. The loop stops when the
    Newton decrement ``g^T d / scale`` is below ``1e-20`` (round-off), when no ``mu`` gives
    a decrease, or after ``max_steps`` Hessians.

    Meant for exact-CV refits warm-started at the full-data fit of models with a few hundred
    parameters and long data: a handful of steps, each one Hessian, instead of hundreds of
    BFGS steps, ending at round-off-level gradients.

    Args:
        fun: scalar function ``fun(u, args)`` of a flat ``(D,)`` vector.
        u0: starting point ``(D,)``.
        args: passed through to ``fun``.
        max_steps: limit on Newton steps (Hessian evaluations).
        scale: positive constant dividing the objective (e.g. the number of units).
        gtol: converged when ``||grad F|| / scale <= gtol`` at the end.
        max_tries: damping values tried per step.

    Returns:
        :class:`MinimizeResult` (``num_steps`` counts Newton steps).
    """
    def scaled(u):
        return fun(u, args) / scale

    value_and_grad = jax.value_and_grad(scaled)
    hess = lambda u: hessian_by_hvp(lambda x, a: fun(x, a) / scale, u, args)  # noqa: E731

    def _damped_step(u, f0, g, h, mu0):
        """Smallest ``mu`` on the ladder ``mu0, 10 mu0, ...`` giving a sufficient decrease."""
        h = 0.5 * (h + h.T)
        diag_scale = jnp.mean(jnp.abs(jnp.diag(h))) + 1e-300
        eye = jnp.eye(h.shape[0], dtype=h.dtype)

        def _try(mu):
            chol = jnp.linalg.cholesky(h + mu * eye)
            d = jax.scipy.linalg.cho_solve((chol, True), g)
            slope = jnp.dot(g, d)
            f_new = scaled(u - d)
            ok = (jnp.all(jnp.isfinite(chol)) & jnp.isfinite(f_new)
                  & (f_new <= f0 - 1e-4 * slope))
            return d, slope, ok

        def _cond(state):
            _, _, _, ok, k = state
            return (~ok) & (k < max_tries)

        def _body(state):
            mu, _, _, _, k = state
            mu = jnp.where(k == 0, mu, jnp.maximum(10.0 * mu, 1e-6 * diag_scale))
            d, slope, ok = _try(mu)
            return mu, d, slope, ok, k + 1

        zero = jnp.zeros_like(u)
        mu, d, slope, ok, _ = lax.while_loop(
            _cond, _body, (mu0 * diag_scale, zero, jnp.asarray(0.0, u.dtype), False, 0))
        mu_next = jnp.where(mu < 1e-8 * diag_scale, 0.0, 0.1 * mu / diag_scale)
        return jnp.where(ok, d, zero), slope, ok, mu_next

    def _cond(state):
        _, _, k, done = state
        return (~done) & (k < max_steps)

    def _body(state):
        """One damped Newton step (one Hessian)."""
        u, mu, k, _ = state
        f0, g = value_and_grad(u)
        d, slope, ok, mu = _damped_step(u, f0, g, hess(u), mu)
        done = (~ok) | (slope <= 1e-20)
        return u - d, mu, k + 1, done

    u0 = jnp.asarray(u0, jnp.float64)
    u, _, steps, _ = lax.while_loop(_cond, _body, (u0, jnp.asarray(0.0, u0.dtype), 0, False))
    value = fun(u, args)
    grad_norm = jnp.linalg.norm(jax.grad(fun)(u, args))
    converged = (grad_norm <= gtol * scale) & jnp.isfinite(value) & jnp.all(jnp.isfinite(u))
    return MinimizeResult(u, value, grad_norm, converged, steps)


@functools.lru_cache(maxsize=64)
def batched_newton_minimize(fun, scale: float, max_steps: int):
    """``jit(vmap(newton_minimize))`` for ``fun(u, w, data)``; same calling convention as
    :func:`batched_minimize`: ``solve(u0s (b, D), weights (b, n), data) -> MinimizeResult``."""
    def one(u0, w, data):
        return newton_minimize(lambda u, a: fun(u, a[0], a[1]), u0, (w, data),
                               max_steps=max_steps, scale=scale)
    return jax.jit(jax.vmap(one, in_axes=(0, 0, None)))
