"""One Newton step per fold from the full-data fit, batched over folds."""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp

from .derivatives import gradient, hessian_by_hvp


def _newton_one(fun, u_full, w, data):
    """``u_NS(w) = u_1 - H(w)^{-1} grad F(u_1, w)`` for one fold, with per-fold jitter.

    If ``H(w)`` is not positive definite the jitter ``max(0, -lambda_min) + 1e-8 mean|diag|``
    is added and returned so it can be reported.
    """
    g = gradient(fun, u_full, w, data)
    h = hessian_by_hvp(fun, u_full, w, data)
    h = 0.5 * (h + h.T)
    min_eig = jnp.linalg.eigvalsh(h)[0]
    scale = jnp.mean(jnp.abs(jnp.diag(h)))
    jitter = jnp.where(min_eig > 1e-12 * scale, 0.0, -min_eig + 1e-8 * scale)
    chol = jnp.linalg.cholesky(h + jitter * jnp.eye(h.shape[0]))
    step = jax.scipy.linalg.cho_solve((chol, True), g)
    return u_full - step, min_eig, jitter


@partial(jax.jit, static_argnums=(0, 4))
def newton_params(fun, u_full, weights, data=None, batch_size: int | None = 16):
    """Newton-step parameters for every fold: a Hessian per fold, batched with ``vmap``.

    Args:
        fun: flat objective ``f(u, w, data)``.
        u_full: ``(D,)`` full-data parameters.
        weights: ``(n_folds, n)`` fold weights.
        data: passed to ``fun``.
        batch_size: folds per vectorised batch (``lax.map``), bounding memory.

    Returns:
        ``(params (n_folds, D), hessian_min_eig (n_folds,), jitter (n_folds,))``.
    """
    return jax.lax.map(lambda w: _newton_one(fun, u_full, w, data), weights,
                       batch_size=batch_size)
