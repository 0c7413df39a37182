"""``"ij"``: the infinitesimal jackknife, one factorisation of ``H`` for every fold.

``u_IJ(w_o) = u_1 - H^{-1} J (w_o - 1) = u_1 + H^{-1} sum_{t in o} J[:, t]``, with ``H`` and
``J = d2F/(du dw)`` at ``(u_1, w = 1)``. Dense: ``H`` Cholesky-factored once (the recorded
jitter policy of :mod:`approxcv.optim.pd`); matrix-free (``D > max_dense_dim`` or
``solver="cg"``): block conjugate gradients on Hessian-vector products, nothing of size
``D x D`` or ``D x n`` formed. The IJ cannot vouch for a fold when ``H`` needed more than a
negligible jitter (every fold) or its CG system did not converge (that fold).

At an inexact fit (stochastic optimisers, early stopping) the IJ's error is bounded by the
terms of the seed's Proposition 2, all in the diagnostics: ``grad_norm`` (the fit's
gradient), ``hessian_min_eig`` and, per fold, ``fold_gradient_norm`` ``= ||sum_{t in o}
J[:, t]||`` (dense). Far from an optimum ``H`` may be singular or indefinite: the option
``hessian_diagonal`` adds ``lambda I`` to it before factoring (the seed uses 1e-5), recorded
as ``diagnostics["hessian_diagonal"]``.

Each fold also gets chord steps from its IJ point (gradients per fold and solves with the
same factor), from which the engine estimates the fold's error
(:mod:`approxcv.engine.error_estimate`): dense, where the objective splits, one step on
every fold (``diagnostics["chord_screen"]``) and the second only where that screen cannot
vouch; otherwise two on every fold (``diagnostics["chord_correction"]``).
"""
from __future__ import annotations

import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ...errors import InvalidArgumentError
from ...optim.pd import factor_hessian, solve
from ..._runtime import jit, map_in_batches
from ..derivatives import full_derivatives
from ..aloo import glm_jacobian
from ..diagnostics import cg_diagnostics, fit_diagnostics
from ..error_estimate import (full_hessian_chord_steps, ij_chord_screen,
                              slow_second_round)
from ..windows import use_taylor_chord_steps
from ..fold_checks import with_fold_check
from ..matrix_free import ij_params_cg
from .model_estimators import model_estimator
from ..registry import register_method

#: CG tolerance of the full-data Newton system ``H s = g`` solved alongside the IJ folds'
#: systems: ``s`` only feeds the ``newton_step_norm`` diagnostic, and at an unconverged fit
#: ``g`` lies along low-curvature directions where CG is slowest, so it must not set the
#: step count of the whole block at the folds' (tighter) tolerance.
NEWTON_DIAGNOSTIC_RTOL = 1e-3


@partial(jit, static_argnums=(3,))
def ij_params(chol, jac, u_full, batch_size, index):
    """IJ parameters ``(n_folds, D)`` from the Cholesky factor of ``H`` and ``J (D, n)``,
    and the norms ``||sum_{t in o} J[:, t]||`` of the fold directions ``(n_folds,)``.

    The fold directions are gathered from the padded ``index`` (``(n_folds, m)``, padding
    ``n`` reads zeros) in batches, then one batched solve.
    """
    def direction(idx):
        return jnp.sum(jac.at[:, idx].get(mode="fill", fill_value=0.0), axis=1)
    rhs = map_in_batches(direction, index, batch_size)
    return (u_full[None, :] + jax.scipy.linalg.cho_solve((chol, True), rhs.T).T,
            jnp.linalg.norm(rhs, axis=1))


def ij(problem, folds, options):
    """IJ parameters of every fold and the fit diagnostics (see the module docstring)."""
    model_estimator(problem, "ij")      # refused by name for a model with its own
    index = folds.padded()
    dim = int(problem.u_full.shape[0])
    t = time.perf_counter()
    if options.dense(dim, problem.n_units):
        glm = problem.glm is not None       # ERM: J = A^T diag(loss') in closed form
        grad, hess, jac = full_derivatives(problem, options, with_jacobian=not glm)
        jac = glm_jacobian(problem) if glm else jac
        if options.hessian_diagonal:
            hess = np.asarray(hess) + options.hessian_diagonal * np.eye(dim)
        factor = factor_hessian(hess, warn=options.warn)
        diagnostics = fit_diagnostics(grad, factor, problem.u_full, warn=options.warn)
        t_solve = time.perf_counter()
        batch = int(max(1, min(len(folds), 2 ** 22 // max(dim * index.shape[1], 1))))
        params, fold_grad = jax.block_until_ready(ij_params(
            factor.chol, jnp.asarray(jac), problem.u_full, batch,
            np.asarray(index, np.int32 if problem.n_units < 2 ** 31 else index.dtype)))
        diagnostics["hessian_diagonal"] = float(options.hessian_diagonal)
        diagnostics["fold_gradient_norm"] = np.asarray(fold_grad)
        diagnostics["unreliable"] = {"hessian_not_pd": np.full(len(folds), not factor.reliable)}
        t_est = time.perf_counter()
        screen = ij_chord_screen(problem, params, index, options, factor.chol, grad,
                                 diagnostics, partial=folds.partial)
        if screen is not None:      # the rest of the estimate once the fold losses are known
            diagnostics["chord_screen"], diagnostics["chord_rate"] = screen, screen.rate
        else:
            step, rate = full_hessian_chord_steps(problem, params, index, options,
                                                  factor.chol, diagnostics,
                                                  unscored=folds.unscored_padded())
            if not use_taylor_chord_steps(problem, index):   # slow folds: one more round
                step, rate = slow_second_round(
                    params, step, rate, lambda rows, points: full_hessian_chord_steps(
                        problem, points, index[rows], options, factor.chol))
            diagnostics["chord_correction"], diagnostics["chord_rate"] = step, rate
        diagnostics["chord_factor"] = factor.chol   # for auto's chord stage; not reported
        diagnostics["stage_seconds"] = {"derivatives": t_solve - t, "solve": t_est - t_solve,
                                        "error_estimate": time.perf_counter() - t_est}
        return params, diagnostics
    if options.hessian_diagonal:
        raise InvalidArgumentError(
            f"`hessian_diagonal` applies to dense Hessians, but D = {dim} > max_dense_dim = "
            f"{options.max_dense_dim}; raise max_dense_dim or use solver='dense'")
    newton_rtol = max(options.cg_rtol, NEWTON_DIAGNOSTIC_RTOL)
    hvp_batch = int(max(1, 2_000_000 // max(problem.n_units, 1)))
    params, grad, step, cg = jax.block_until_ready(ij_params_cg(
        problem.fun, problem.u_full, index, problem.data, problem.n_units, options.cg_rtol,
        options.cg_max_steps, min(options.batch_size or 64, hvp_batch), hvp_batch, True,
        newton_rtol))
    diagnostics = cg_diagnostics(grad, step, cg, problem.u_full, options.cg_rtol,
                                 options.cg_max_steps, warn=options.warn)
    diagnostics["cg_newton_rtol"] = newton_rtol
    t_est = time.perf_counter()
    step, rate = full_hessian_chord_steps(problem, params, index, options)
    diagnostics["chord_correction"], diagnostics["chord_rate"] = step, rate
    diagnostics["unreliable"] = {"cg_unconverged": ~np.asarray(cg.converged)[:-1]}
    diagnostics["stage_seconds"] = {"derivatives": t_est - t, "solve": 0.0,
                                    "error_estimate": time.perf_counter() - t_est}
    return params, diagnostics


register_method("ij", with_fold_check(ij))
__all__ = ["ij", "ij_params", "solve"]
