"""The generic per-fold Newton step ``u_NS(w_o) = u_1 - H(w_o)^{-1} grad F(u_1, w_o)``.

Dense ``H(w_o)`` per fold, factored with the recorded jitter ladder of
:mod:`approxcv.optim.pd`, batched over folds with ``lax.map``; each fold also gets its chord
steps (:func:`approxcv.engine.chord.chord_step`). Used by the ``ns`` method and by the GLM
fast path for the folds whose rank-one downdates fail.

For a few folds of a small problem, :func:`newton_params_by_sweeps` computes the same
quantities fold by fold through the compiled ``(F, g, H, J)`` sweep of the fit's Newton
polish and the IJ (:func:`approxcv.optim.newton.value_and_derivatives`): no program with
the model inside is compiled for them.
"""
from __future__ import annotations

from functools import partial

import jax
import numpy as np

from ..optim.hessian import hessian_by_hvp
from ..optim.newton import value_and_derivatives
from ..optim.pd import jittered_cholesky
from .batching import fold_weights
from .._runtime import jit, map_in_batches
from .chord import chord_step, contraction_rate, extrapolate, signed_rate
from .derivatives import gradient

__all__ = ["newton_step", "newton_params", "newton_params_by_sweeps"]


def newton_step(fun, u, w, data):
    """``(u - H(w)^{-1} g(w), min_eig, jitter, reliable, d, rho)`` for one weight vector
    ``w``; ``(correction, rho)``: chord steps from the Newton point with the same factor
    (:func:`~approxcv.engine.chord.chord_step`)."""
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
    return map_in_batches(lambda idx: newton_step(fun, u_full, fold_weights(idx, n), data),
                          index, batch_size)


@jit
def _newton_from_derivatives(u, g, hess):
    """``(u - H^{-1} g, chol, min_eig, jitter, reliable)`` with ``H`` factored by the jitter
    ladder (:func:`~approxcv.optim.pd.jittered_cholesky`), as :func:`newton_step`."""
    chol, jitter, min_eig, reliable = jittered_cholesky(hess)
    return u - jax.scipy.linalg.cho_solve((chol, True), g), chol, min_eig, jitter, reliable


@jit
def _chord_direction(chol, r):
    """``M^{-1} r`` with ``M = chol chol'``."""
    return jax.scipy.linalg.cho_solve((chol, True), r)


@jit
def _chord_from_residuals(value, r1, d1, r2, d2):
    """``(correction, rho)`` of :func:`~approxcv.engine.chord.chord_step` from its two
    residuals ``r_k = grad F`` and steps ``d_k = M^{-1} r_k``."""
    den_sq = jax.numpy.dot(d1, r1)
    rho = contraction_rate(jax.numpy.dot(d2, r2), den_sq, value)
    return extrapolate(d1, d2, rho, signed_rate(jax.numpy.dot(d1, r2), den_sq, rho)), rho


def newton_params_by_sweeps(fun, u_full, weights, data, with_jacobian: bool):
    """:func:`newton_params` of the folds with weight rows ``weights (n_folds, n)``, fold by
    fold: per fold three calls of the compiled ``(F, g, H, J)`` sweep
    (:func:`~approxcv.optim.newton.value_and_derivatives`, ``with_jacobian`` as the fit's
    polish asked for it, so the program is the one already compiled) — the Hessian and
    gradient at ``u_1``, then ``F`` and ``grad F`` at the Newton point and at the first chord
    step — and three small programs of the algebra. The same values as :func:`newton_params`
    to rounding; for a few folds of a small problem (``ns``'s :data:`FEW_FOLDS`), where
    compiling the batched program (the model's Hessian-vector products, gradient and chord
    steps inside a map over folds) takes seconds and running it milliseconds."""
    u = jax.numpy.asarray(u_full)
    rows = []
    for w in np.asarray(weights, dtype=np.float64):
        _, g, hess, _ = value_and_derivatives(fun, u, w, data, with_jacobian)
        u_ns, chol, min_eig, jitter, reliable = _newton_from_derivatives(u, g, hess)
        value, r1 = value_and_derivatives(fun, u_ns, w, data, with_jacobian)[:2]
        d1 = _chord_direction(chol, r1)
        r2 = value_and_derivatives(fun, u_ns - d1, w, data, with_jacobian)[1]
        d, rho = _chord_from_residuals(value, r1, d1, r2, _chord_direction(chol, r2))
        rows.append((u_ns, min_eig, jitter, reliable, d, rho))
    return tuple(np.stack([np.asarray(r[k]) for r in rows]) for k in range(6))
