"""First and second derivatives of a weighted objective ``f(u, w, data)``.

* ``gradient``: ``g = dF/du`` (one reverse pass).
* ``hessian``: ``H = d2F/du2`` by forward-over-reverse (``D`` JVPs of the gradient).
* ``cross_jacobian``: ``J = d2F/(du dw)`` of shape ``(D, n)`` by ``D`` forward passes through
  the reverse-mode ``dF/dw`` — never ``n`` passes, so its cost does not grow with the
  number of units or folds.
* ``gradient_hessian_jacobian``: all three from one forward-over-reverse sweep
  (``jacfwd`` in ``u`` of ``grad`` in ``(u, w)``), compiled once per objective.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


def gradient(fun, u, w, data=None):
    """Return ``dF/du`` at ``(u, w)``, shape ``(D,)``."""
    return jax.grad(fun, argnums=0)(u, w, data)


def hessian(fun, u, w, data=None):
    """Return ``d2F/du2`` at ``(u, w)``, shape ``(D, D)`` (forward-over-reverse)."""
    return jax.jacfwd(jax.grad(fun, argnums=0), argnums=0)(u, w, data)


def data_entries(tree) -> int:
    """Number of array entries in the pytree ``tree`` (static shapes: works under ``jit``)."""
    return sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(tree))


def tangent_chunk(tree, max_chunk: int = 128, budget: int = 2 ** 21) -> int:
    """Tangents per vectorised batch for data ``tree``: about ``budget`` data entries times
    tangents at once (each tangent of a forward pass holds several arrays the size of the
    data), at most ``max_chunk``, at least 1."""
    return int(max(1, min(max_chunk, budget // max(data_entries(tree), 1))))


def hessian_by_hvp(fun, u, *args, chunk: int | None = None):
    """``d2 fun(u, *args) / du2`` from ``D`` Hessian-vector products, ``chunk`` at a time.

    Same value as :func:`hessian`, but memory holds ``chunk`` tangents of the forward pass
    instead of ``D`` (which for long data and ``D`` in the hundreds is gigabytes). ``chunk``
    defaults to :func:`tangent_chunk` of ``args`` (pass the data there, not in a closure).
    """
    chunk = tangent_chunk(args) if chunk is None else chunk
    _, hvp = jax.linearize(lambda x: jax.grad(fun)(x, *args), u)
    return lax.map(hvp, jnp.eye(u.shape[0], dtype=u.dtype), batch_size=min(chunk, u.shape[0]))


def cross_jacobian(fun, u, w, data=None):
    """Return ``J[d, i] = d2F / (du_d dw_i)`` at ``(u, w)``, shape ``(D, n)``.

    Computed as the forward-mode Jacobian in ``u`` (``D`` JVPs) of the reverse-mode
    gradient in ``w``.
    """
    return jax.jacfwd(jax.grad(fun, argnums=1), argnums=0)(u, w, data).T


@partial(jax.jit, static_argnums=(0, 4))
def gradient_hessian_jacobian(fun, u, w, data, with_jacobian: bool = True):
    """Return ``(g (D,), H (D, D), J (D, n) or None)`` at ``(u, w)`` in one sweep."""
    if not with_jacobian:
        return gradient(fun, u, w, data), hessian(fun, u, w, data), None
    g = gradient(fun, u, w, data)
    hess, jac_t = jax.jacfwd(jax.grad(fun, argnums=(0, 1)), argnums=0)(u, w, data)
    return g, hess, jac_t.T
