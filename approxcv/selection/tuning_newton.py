"""Tuning a few penalty weights by second-order steps on ALOOCV in ``rho = log lam``.

``ACV(rho) = 1/n sum_i phi(a_i^T u_i, y_i)`` with ``u_i`` the ALOOCV (Sherman-Morrison)
leave-one-out points around the fit ``u_hat(rho)``
(:mod:`approxcv.selection.tuning_gradient`). Its gradient and Hessian in ``rho`` are exact, by implicit differentiation done by automatic
differentiation: ``u_hat(rho)`` is replaced by two Newton steps on ``F(., lam)`` from the
converged fit held constant (``stop_gradient``), ``u_2(rho) = N(N(u_hat(rho_0), rho), rho)``.
Newton's map converges quadratically, so ``u_2(rho) - u_hat(rho) = O(|rho - rho_0|^4)``:
``u_2`` has the fit's value and its first three derivatives at ``rho_0``, and
``jax.hessian`` of ``ACV(u_2(rho), rho)`` is the Hessian of ``ACV(u_hat(rho), rho)`` (one
Newton step would give the gradient only: the Laplace approximation's trick, one order up).

The loop — one compiled step (:func:`_newton_step`, compiled once per problem shape),
called from the host until the test stops it, so each step's end is timed — takes
Levenberg-Marquardt-damped Newton steps ``d = (H + mu s I)^{-1} g`` (``s = mean|diag H|``;
``mu`` grows tenfold while ``H + mu s I`` is not positive definite or a step does not
decrease ``ACV`` by ``1e-4 g^T d``, shrinks tenfold after an accepted step, to 0), each
step capped at ``MAX_STEP`` in ``rho`` (a factor ``e^2`` in ``lam``), and refits ``u_hat``
at every trial ``rho`` by damped Newton warm-started at the current fit
(:func:`approxcv.optim.newton.newton_minimize`). It stops when ``|g|_inf <= gtol (1 +
|ACV|)``, when (``xtol > 0``) the undamped Newton step ``H^{-1} g`` from an accepted
point is at most ``xtol`` in ``rho`` (near the optimum that step is the distance to it, so
the weights are within a factor ``e^xtol`` of the optimum, and the step is not taken), or
after ``max_iter`` steps. Kernels take arrays and pure callables, never models.
"""
from __future__ import annotations

import time
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .._runtime import jit
from ..optim.newton import newton_minimize
from .tuning_gradient import (FAST_COMPILE_ELEMENTS, QUADRATIC_STOP, _acv_closed_form,
                              _hessian, _objective)

__all__ = ["NewtonTuneResult", "newton_tune", "MAX_STEP", "GTOL"]

#: largest step in ``rho = log lam`` per iteration (a factor e^2 in ``lam``)
MAX_STEP = 2.0
#: stop when ``|dACV/drho|_inf <= GTOL (1 + |ACV|)``
GTOL = 1e-9
#: Newton steps (Hessians) of each refit
REFIT_STEPS = 50


class NewtonTuneResult(NamedTuple):
    """rho: ``(m,)`` the last accepted point; u: the fit there; acv, grad, hess at it;
    converged: the gradient test met; iterations: steps taken; refit_converged: every
    accepted refit met its gradient tolerance; path_rho ``(max_iter + 2, m)``, path_acv,
    path_grad_norm ``(max_iter + 2,)`` (2-norm): the accepted points (NaN after the last);
    path_time ``(max_iter + 2,)`` NumPy: the host's ``time.perf_counter()`` when each
    accepted step was done."""
    rho: jax.Array
    u: jax.Array
    acv: jax.Array
    grad: jax.Array
    hess: jax.Array
    converged: jax.Array
    iterations: jax.Array
    refit_converged: jax.Array
    path_rho: jax.Array
    path_acv: jax.Array
    path_grad_norm: jax.Array
    path_time: np.ndarray


@partial(jit, static_argnames=("loss_fn", "penalty_fn"))
def _newton_map(u, lam, design, y, aux, loss_fn, penalty_fn):
    """One Newton step ``u - H^{-1} grad F(u; lam)`` on ``F = sum phi(A u, y) + lam^T r``,
    with ``grad F = A^T phi' + grad r`` and ``H = A^T diag(phi'') A + hess r`` from the
    per-sample derivatives in the linear predictor (a ``jax.hessian`` of ``F`` pushed
    ``D`` tangents through the data, then was differentiated twice more by the tuning
    loop: most of its first call's tracing)."""
    terms, h = _hessian(u, lam, design, y, aux, loss_fn, penalty_fn)
    g = design.T @ terms.grad + jax.grad(penalty_fn)(u, lam, aux)
    return u - jnp.linalg.solve(0.5 * (h + h.T), g)


def newton_tune(u0, rho0, design, y, aux, loss_fn, penalty_fn, max_iter: int = 30,
                gtol: float = GTOL, xtol: float = 0.0) -> NewtonTuneResult:
    """Minimise ``ACV(rho)`` from ``rho0`` with the fit ``u0`` near ``u_hat(rho0)`` (module
    docstring: ``gtol`` the gradient test, ``xtol`` the step test, off at 0); returns a
    :class:`NewtonTuneResult` (``converged`` when either test stopped it).

    Each iteration is one call of the compiled :func:`_newton_step` (compiled once per
    problem shape and ``max_iter``), so the host sees each step end: ``path_time`` holds
    the ``time.perf_counter()`` at which each accepted step was done."""
    rho0 = np.asarray(rho0, dtype=np.float64)
    m = rho0.shape[0]
    # the first iteration evaluates rho0 itself (g = 0: a zero step, accepted against
    # ACV = inf), so the program holds one refit and one derivative sweep. The state is
    # built in NumPy: eager JAX operations would each compile a small program
    nan_rows = np.full(max_iter + 2, np.nan)
    s = dict(rho=rho0, u=np.asarray(u0, dtype=np.float64), f=np.float64(np.inf),
             g=np.zeros(m), h=np.eye(m), mu=np.float64(0.0), k=np.int64(0),
             done=np.bool_(False), refit_ok=np.bool_(True), reliable=np.bool_(True),
             near=np.bool_(False),
             path_rho=np.full((max_iter + 2, m), np.nan), path_acv=nan_rows,
             path_gn=nan_rows, accepted=np.int64(0))
    path_time = np.full(max_iter + 2, np.nan)
    accepted = 0
    while (not bool(s["done"]) and int(s["k"]) <= max_iter
           and not (int(s["k"]) > 0 and not np.isfinite(float(s["f"])))):
        s = _newton_step(s, design, y, aux, np.float64(gtol), np.float64(xtol),
                         loss_fn=loss_fn, penalty_fn=penalty_fn)
        now = int(s["accepted"])            # waits for the step
        if now > accepted:
            path_time[accepted] = time.perf_counter()
            accepted = now
    f, g = float(s["f"]), np.asarray(s["g"])
    converged = bool((np.max(np.abs(g)) <= gtol * (1.0 + abs(f)) or bool(s["near"]))
                     and np.isfinite(f))
    return NewtonTuneResult(s["rho"], s["u"], s["f"], s["g"], s["h"],
                            np.bool_(converged and bool(s["reliable"])), int(s["k"]) - 1,
                            s["refit_ok"], s["path_rho"], s["path_acv"], s["path_gn"],
                            path_time)


def _gnorm(g):
    return jnp.max(jnp.abs(g))


def _pd_solve(h, g):
    """``(H^{-1} g, pd)``: the solve by a Cholesky factor of ``H``, and whether ``H`` is
    positive definite (the factor finite; the solve is then by ``I`` and meaningless)."""
    chol = jnp.linalg.cholesky(h)
    pd = jnp.all(jnp.isfinite(chol))
    return jax.scipy.linalg.cho_solve((jnp.where(pd, chol, jnp.eye(h.shape[0])), True), g), pd


def _predicted_step(h, g):
    """``|H^{-1} g|_inf``, the undamped Newton step's length (``inf`` unless ``H`` is
    positive definite)."""
    d, pd = _pd_solve(h, g)
    return jnp.where(pd, _gnorm(d), jnp.inf)


@partial(jit, static_argnames=("loss_fn", "penalty_fn"),
         fast_compile_elements=FAST_COMPILE_ELEMENTS)
def _newton_step(s, design, y, aux, gtol, xtol, *, loss_fn, penalty_fn):
    """One iteration of the loop (module docstring) from the state ``s`` (a dict of
    arrays: the current point, its ACV, gradient, Hessian, damping and the path)."""
    n = design.shape[0]
    subset = jnp.arange(n)
    m = s["rho"].shape[0]
    dtype = s["rho"].dtype

    def refit(rho, u_start):
        lam = jnp.exp(rho)
        res = newton_minimize(
            lambda v, a: _objective(v, lam, design, y, aux, loss_fn, penalty_fn),
            lax.stop_gradient(u_start), max_steps=REFIT_STEPS, scale=float(n),
            hess=lambda v, a: _hessian(v, lam, design, y, aux, loss_fn, penalty_fn)[1],
            quadratic_stop=QUADRATIC_STOP)
        return res.u, res.converged

    def acv_of_rho(rho, u_hat):
        lam = jnp.exp(rho)
        u = lax.stop_gradient(u_hat)
        u = _newton_map(u, lam, design, y, aux, loss_fn, penalty_fn)
        u = _newton_map(u, lam, design, y, aux, loss_fn, penalty_fn)
        return _acv_closed_form(u, lam, design, y, aux, subset, loss_fn, penalty_fn)

    def derivatives(rho, u_hat):
        # one forward-over-reverse trace gives the value, gradient and Hessian together
        # (a separate value_and_grad traced the objective once more: a third of the first
        # call's tracing)
        def grad_with_aux(r):
            (acv, reliable), grad = jax.value_and_grad(acv_of_rho, has_aux=True)(r, u_hat)
            return grad, (acv, grad, reliable)
        hess, (acv, grad, reliable) = jax.jacfwd(grad_with_aux, has_aux=True)(rho)
        return acv, grad, 0.5 * (hess + hess.T), reliable

    scale = jnp.mean(jnp.abs(jnp.diag(s["h"]))) + 1e-300
    d, pd = _pd_solve(s["h"] + s["mu"] * scale * jnp.eye(m, dtype=dtype), s["g"])
    d = d * jnp.minimum(1.0, MAX_STEP / (_gnorm(d) + 1e-300))
    rho_new = s["rho"] - d
    u_new, ok = refit(rho_new, s["u"])
    f_new, g_new, h_new, rel_new = derivatives(rho_new, u_new)
    accept = pd & jnp.isfinite(f_new) & (f_new <= s["f"] - 1e-4 * jnp.dot(s["g"], d))
    grown = jnp.maximum(10.0 * s["mu"], 1e-6)
    mu = jnp.where(accept, jnp.where(s["mu"] < 1e-6, 0.0, 0.1 * s["mu"]), grown)
    pick = lambda a, b: jnp.where(accept, a, b)                    # noqa: E731
    out = dict(rho=pick(rho_new, s["rho"]), u=pick(u_new, s["u"]), f=pick(f_new, s["f"]),
               g=pick(g_new, s["g"]), h=pick(h_new, s["h"]), mu=mu, k=s["k"] + 1,
               refit_ok=s["refit_ok"] & (ok | ~accept),
               reliable=pick(rel_new, s["reliable"]))
    row = s["accepted"]
    out["path_rho"] = jnp.where(accept, s["path_rho"].at[row].set(rho_new), s["path_rho"])
    out["path_acv"] = jnp.where(accept, s["path_acv"].at[row].set(f_new), s["path_acv"])
    out["path_gn"] = jnp.where(accept, s["path_gn"].at[row].set(jnp.linalg.norm(g_new)),
                               s["path_gn"])
    out["accepted"] = row + accept.astype(row.dtype)
    # the optimum within xtol of an accepted point (the next Newton step, not taken)
    out["near"] = accept & (xtol > 0) & (_predicted_step(h_new, g_new) <= xtol)
    # converged, or no damping gives a decrease any more (a round-off-level step)
    out["done"] = ((_gnorm(out["g"]) <= gtol * (1.0 + jnp.abs(out["f"]))) | out["near"]
                   | (~accept & (_gnorm(d) <= 1e-12)))
    return out
