"""Dense Hessians: from chunked Hessian-vector products (memory: ``chunk`` tangents, not
``D``), or from forward differences of the exact gradient (:func:`value_grad_fd_hessian`, the
optimisers' Newton steps: a much smaller program)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._runtime import map_in_batches


def data_entries(tree) -> int:
    """Number of array entries in the pytree ``tree`` (static shapes: works under ``jit``)."""
    return sum(int(np.size(x)) for x in jax.tree_util.tree_leaves(tree))


#: data entries times tangents that one forward-over-reverse sweep may hold at once
#: (each tangent carries several arrays the size of the data; 2^25 entries ~ a few GB)
SWEEP_BUDGET = 2 ** 25


def tangent_chunk(tree, max_chunk: int = 128, budget: int = 2 ** 21) -> int:
    """Tangents per vectorised batch for data ``tree``: about ``budget`` data entries times
    tangents at once (each tangent of a forward pass holds several arrays the size of the
    data), at most ``max_chunk``, at least 1."""
    return int(max(1, min(max_chunk, budget // max(data_entries(tree), 1))))


#: memory one forward-over-reverse sweep may take (bytes): :func:`sweep_chunk`
SWEEP_BYTES = 2 ** 31
#: below this many ``D x data entries`` a sweep is small whatever the model: no trace
SMALL_SWEEP = 2 ** 22
_RESIDUALS: dict = {}


def residual_bytes(fun, u, w, data) -> int:
    """Bytes the reverse pass of ``fun(u, w, data)`` saves from its forward pass (the
    residuals of ``jax.vjp``, by ``jax.eval_shape``: traced, nothing computed), cached per
    function and argument shapes. A tangent of a forward-over-reverse sweep carries about
    this much again (measured on a PoissonHMM: 0.95x per tangent in XLA's buffer plan)."""
    key = (fun,) + tuple((jax.tree_util.tree_structure(t),
                          tuple((np.shape(x), jnp.result_type(x))
                                for x in jax.tree_util.tree_leaves(t)))
                         for t in (u, w, data))
    if key not in _RESIDUALS:
        vjp = jax.eval_shape(lambda v: jax.vjp(lambda x: fun(x, w, data), v)[1],
                             jax.ShapeDtypeStruct(np.shape(u), jnp.result_type(u)))
        if len(_RESIDUALS) > 256:
            _RESIDUALS.clear()
        _RESIDUALS[key] = int(sum(np.prod(np.shape(x)) * np.dtype(x.dtype).itemsize
                                  for x in jax.tree_util.tree_leaves(vjp)))
    return _RESIDUALS[key]


def sweep_chunk(fun, u, w, data, max_chunk: int, budget: int | None = None) -> int:
    """Tangents per forward-over-reverse sweep of ``fun``: :func:`tangent_chunk` of the
    data, and no more than fit in ``budget`` bytes (default :data:`SWEEP_BYTES`) at twice :func:`residual_bytes` each
    (the data's size alone misjudges models whose forward pass is larger than their data:
    a 40-state PoissonHMM at T = 50,000 keeps 94 MiB a tangent for 0.4 MB of data, and
    335 tangents asked XLA for 159 GB)."""
    chunk = tangent_chunk(data, max_chunk=max_chunk, budget=SWEEP_BUDGET)
    if max_chunk * data_entries(data) <= SMALL_SWEEP:
        return chunk
    per = 2 * max(residual_bytes(fun, u, w, data), 1)
    return int(max(1, min(chunk, (SWEEP_BYTES if budget is None else budget) // per)))


def hessian_by_hvp(fun, u, *args, chunk: int | None = None):
    """``d2 fun(u, *args) / du2`` from ``D`` Hessian-vector products, ``chunk`` at a time.

    Same value as :func:`hessian`, but memory holds ``chunk`` tangents of the forward pass
    instead of ``D`` (which for long data and ``D`` in the hundreds is gigabytes). ``chunk``
    defaults to :func:`tangent_chunk` of ``args`` (pass the data there, not in a closure).
    """
    chunk = tangent_chunk(args) if chunk is None else chunk
    _, hvp = jax.linearize(lambda x: jax.grad(fun)(x, *args), u)
    return map_in_batches(hvp, jnp.eye(u.shape[0], dtype=u.dtype), min(chunk, u.shape[0]))


#: relative step of :func:`value_grad_fd_hessian`: ``h_j = FD_STEP (1 + |u_j|)``
FD_STEP = 1e-6


def value_grad_fd_hessian(value_and_grad, u, args, batch: int):
    """``(F(u), g(u), H)`` with ``H e_j = (g(u + h_j e_j) - g(u)) / h_j`` symmetrised
    (``h_j = FD_STEP (1 + |u_j|)``), from ``value_and_grad(x, args) -> (F, g)`` at ``u`` and
    its ``D`` displaced points, ``batch`` points at a time (one batched map: the program
    holds one copy of the gradient).

    For the optimisers' Newton steps in well-scaled coordinates, where a program with
    Hessian-vector products (forward-over-reverse through the model's scans) compiled two
    to three times slower (TimeVaryingPoisson exact refits, ``D`` = 18, backend compile:
    BFGS with its polish 3.75 -> 1.84 s, the Newton solver 4.54 -> 1.30 s): the Hessian's
    ``O(h)`` error only turns quadratic convergence into linear convergence with rate about
    ``1e-6``; acceptance is judged on the exact ``F`` and ``g``, and the derivatives the IJ
    and NS use are exact (:func:`hessian_by_hvp`)."""
    h = FD_STEP * (1.0 + jnp.abs(u))
    points = jnp.concatenate([u[None], u[None] + jnp.diag(h)])
    values, grads = map_in_batches(lambda x: value_and_grad(x, args), points,
                                   max(1, min(int(batch), u.shape[0] + 1)))
    hess = (grads[1:] - grads[0][None]) / h[:, None]
    return values[0], grads[0], 0.5 * (hess + hess.T)
