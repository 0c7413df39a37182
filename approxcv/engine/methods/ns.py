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
(:mod:`approxcv.engine.error_estimate`). Up to :data:`FEW_FOLDS` folds of a small problem
take these steps through the fit's compiled derivative sweep instead of a program of their
own.
"""
from __future__ import annotations

import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..aloo import glm_newton_params
from ..diagnostics import fit_state
from ..fold_newton import newton_params, newton_params_by_sweeps
from ..fold_checks import with_fold_check
from ..matrix_free import newton_params_cg
from .model_estimators import model_estimator
from ..registry import register_method
from ...optim.newton import polish_jacobian
from ..._runtime import jit


#: up to this many folds, where the fit's ``(F, g, H, J)`` sweep is small
#: (:func:`~approxcv.optim.newton.polish_jacobian`), the Newton and chord steps run fold by
#: fold through that compiled sweep (:func:`~approxcv.engine.fold_newton.
#: newton_params_by_sweeps`) instead of a batched program of their own: the table test's
#: NS of a TimeVaryingPoisson on 3 folds compiled nothing new, where its batched program
#: took 4.8-6.0 s to compile (``-O0``)
FEW_FOLDS = 8


def _weight_rows(index, n: int):
    """``(n_folds, n)`` 0/1 weights of the padded left-out indices (padding ``>= n``)."""
    index = np.asarray(index)
    weights = np.ones((len(index), n))
    rows, cols = np.nonzero(index < n)
    weights[rows, index[rows, cols]] = 0.0
    return weights


def ns(problem, folds, options):
    """Newton-step parameters of every fold and the diagnostics (module docstring)."""
    model_estimator(problem, "ns")      # refused by name for a model with its own
    index = jnp.asarray(folds.padded())
    dim = int(problem.u_full.shape[0])
    if problem.glm is not None and options.dense(dim, problem.n_units):   # ERM: rank-one downdates
        return glm_newton_params(problem, folds, options)
    diagnostics = fit_state(problem, options)
    t = time.perf_counter()
    if options.dense(dim, problem.n_units):
        if len(folds) <= FEW_FOLDS and polish_jacobian(dim, problem.n_units):
            # a few folds of a small problem: through the fit's compiled derivative sweep
            params, min_eig, jitter, reliable, step, rate = newton_params_by_sweeps(
                problem.fun, problem.u_full, _weight_rows(folds.padded(), problem.n_units),
                problem.data, True)
        else:
            params, min_eig, jitter, reliable, step, rate = jax.block_until_ready(
                newton_params(problem.fun, problem.u_full, index, problem.data,
                              problem.n_units, options.batch_size or 16))
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
__all__ = ["ns", "newton_params"]
