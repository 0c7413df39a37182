"""The shared optimiser: optimistix BFGS, then optional safeguarded Newton polishing.

BFGS (quasi-Newton, from the maintained ``optimistix`` library) does the work; for small
``D`` a few exact Newton steps — each accepted only if the Hessian is positive definite and
the objective does not increase — bring the gradient to round-off level, which is what the
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

    def _step(u, _):
        """One Newton step, kept only if H is PD and the objective does not rise."""
        g = jax.grad(fun)(u, args)
        h = jax.hessian(fun)(u, args)
        chol = jnp.linalg.cholesky(0.5 * (h + h.T))
        step = jax.scipy.linalg.cho_solve((chol, True), g)
        u_new = u - step
        ok = jnp.all(jnp.isfinite(u_new)) & (fun(u_new, args) <= fun(u, args))
        return jnp.where(ok, u_new, u), None

    u, _ = lax.scan(_step, u, None, length=num_steps)
    return u


def minimize(fun, u0, args=None, *, max_steps: int = 1000, rtol: float = 1e-10,
             atol: float = 1e-10, scale: float = 1.0, newton_steps: int = 2,
             gtol: float = 1e-7) -> MinimizeResult:
    """Minimise ``fun(u, args)`` from ``u0`` with BFGS (optimistix) and Newton polishing.

    Args:
        fun: scalar function ``fun(u, args)`` of a flat ``(D,)`` vector.
        u0: starting point ``(D,)``.
        args: passed through to ``fun``.
        max_steps: BFGS step limit.
        rtol, atol: BFGS Cauchy tolerances on the objective divided by ``scale``.
        scale: positive constant dividing the objective (e.g. the number of units) so the
            tolerances are per unit.
        newton_steps: safeguarded Newton steps after BFGS (0 to skip; use 0 for large D).
        gtol: the run also counts as converged when ``||grad F|| / scale <= gtol``.

    Returns:
        :class:`MinimizeResult`; ``converged`` is False when neither BFGS's Cauchy criterion
        nor the gradient criterion holds, or values are non-finite — callers must report
        it, not ignore it.
    """
    scaled = lambda u, a: fun(u, a) / scale  # noqa: E731
    solver = optx.BFGS(rtol=rtol, atol=atol)
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
def batched_minimize(fun, scale: float, max_steps: int, newton_steps: int):
    """``jit(vmap(minimize))`` over starting points and weights for ``fun(u, w, data)``.

    Returns ``solve(u0s (b, D), weights (b, n), data) -> MinimizeResult`` with a leading
    batch axis; built (and compiled) once per objective and settings. Used both by model
    fits (several starts, unit weights) and by exact CV (one warm start, many folds).
    """
    def one(u0, w, data):
        return minimize(lambda u, a: fun(u, a[0], a[1]), u0, (w, data), max_steps=max_steps,
                        scale=scale, newton_steps=newton_steps)
    return jax.jit(jax.vmap(one, in_axes=(0, 0, None)))
