"""``"ns"``: one Newton step per fold from the full-data fit.

``u_NS(w_o) = u_1 - H(w_o)^{-1} grad F(u_1, w_o)``: a new Hessian per fold, batched with
``lax.map`` over folds whose weights are built inside each batch. Dense ``H(w_o)`` is
factored with the recorded jitter ladder of :mod:`approxcv.optim.pd`; a fold whose
``H(w_o)`` needed more than a negligible jitter (it is not positive definite: the step
would be taken along a direction of negative curvature, or of none) is *unreliable* — its
step is computed so nothing is lost, but it is listed, never passed off as an estimate.
Matrix-free (``D > max_dense_dim`` or ``solver="cg"``): CG on ``H(w_o)`` HVPs; folds whose
CG did not converge or met non-positive curvature are unreliable.

Each fold also gets two chord steps from its Newton point with the same ``H(w_o)``
(two more gradients per fold), from which the engine estimates the fold's error
(:mod:`approxcv.engine.error_estimate`).
"""
from __future__ import annotations

import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ...optim.hessian import hessian_by_hvp
from ...optim.pd import jittered_cholesky
from ..batching import fold_weights, map_batches
from ..derivatives import gradient
from ..aloo import glm_newton_params
from ..diagnostics import fit_state
from ..error_estimate import chord_step
from ..fold_checks import with_fold_check
from ..matrix_free import newton_params_cg
from . import register_method
from ..._compile import jit


def newton_step(fun, u, w, data):
    """``(u - H(w)^{-1} g(w), min_eig, jitter, reliable, d, rho)`` for one weight vector
    ``w``; ``(correction, rho)``: chord steps from the Newton point with the same factor
    (:func:`~approxcv.engine.error_estimate.chord_step`)."""
    g = gradient(fun, u, w, data)
    chol, jitter, min_eig, reliable = jittered_cholesky(hessian_by_hvp(fun, u, w, data))
    u_ns = u - jax.scipy.linalg.cho_solve((chol, True), g)
    d, rho = chord_step(fun, chol, u_ns, w, data)
    return u_ns, min_eig, jitter, reliable, d, rho


@partial(jit, static_argnums=(0, 4, 5))
def newton_params(fun, u_full, index, data, n: int, batch_size: int = 16):
    """Newton-step parameters of every fold (``index``: ``(n_folds, m)`` padded left-out
    indices): ``(params (n_folds, D), min_eig, jitter, reliable, chord_step, chord_rate)``,
    each per fold."""
    return map_batches(lambda idx: newton_step(fun, u_full, fold_weights(idx, n), data),
                       index, batch_size)


def ns(problem, folds, options):
    """Newton-step parameters of every fold and the diagnostics (module docstring)."""
    index = jnp.asarray(folds.padded())
    dim = int(problem.u_full.shape[0])
    if problem.glm is not None and options.dense(dim, problem.n_units):   # ERM: rank-one downdates
        return glm_newton_params(problem, folds, options)
    diagnostics = fit_state(problem, options)
    t = time.perf_counter()
    if options.dense(dim, problem.n_units):
        params, min_eig, jitter, reliable, step, rate = jax.block_until_ready(newton_params(
            problem.fun, problem.u_full, index, problem.data, problem.n_units,
            options.batch_size or 16))
        diagnostics.update(ns_hessian_min_eig=np.asarray(min_eig),
                           ns_jitter=np.asarray(jitter),
                           unreliable={"fold_hessian_not_pd": ~np.asarray(reliable)})
    else:
        params, cg, step, rate = jax.block_until_ready(newton_params_cg(
            problem.fun, problem.u_full, index, problem.data, problem.n_units,
            options.cg_rtol, options.cg_max_steps, options.batch_size or 16))
        diagnostics.update(ns_cg_num_steps=np.asarray(cg.num_steps),
                           ns_cg_converged=np.asarray(cg.converged),
                           ns_hessian_min_eig=np.asarray(cg.min_curvature),
                           unreliable={"cg_unconverged": ~np.asarray(cg.converged)})
    diagnostics["chord_correction"], diagnostics["chord_rate"] = step, rate
    diagnostics["stage_seconds"]["solve"] = time.perf_counter() - t
    return params, diagnostics


register_method("ns", with_fold_check(ns))
__all__ = ["ns", "newton_params", "newton_step"]
