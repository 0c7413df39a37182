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
import numpy as np

from ..optim.newton import chunked_value_and_derivatives, polish_jacobian, value_and_derivatives
from ..optim.hessian import SWEEP_BUDGET, data_entries, hessian_by_hvp, sweep_chunk, tangent_chunk  # noqa: F401
from .._runtime import jit
from .accumulate import has_unit_axis, structure_derivatives


@partial(jit, static_argnums=0)
def gradient(fun, u, w, data=None):
    """Return ``dF/du`` at ``(u, w)``, shape ``(D,)`` (one compiled program per objective,
    a nested ``jit`` inside other programs)."""
    return jax.grad(fun, argnums=0)(u, w, data)


def hessian(fun, u, w, data=None):
    """Return ``d2F/du2`` at ``(u, w)``, shape ``(D, D)`` (forward-over-reverse)."""
    return jax.jacfwd(jax.grad(fun, argnums=0), argnums=0)(u, w, data)


def cross_jacobian(fun, u, w, data=None):
    """Return ``J[d, i] = d2F / (du_d dw_i)`` at ``(u, w)``, shape ``(D, n)``.

    Computed as the forward-mode Jacobian in ``u`` (``D`` JVPs) of the reverse-mode
    gradient in ``w``.
    """
    return jax.jacfwd(jax.grad(fun, argnums=1), argnums=0)(u, w, data).T


@partial(jit, static_argnums=(0, 4))
def gradient_hessian_jacobian(fun, u, w, data, with_jacobian: bool = True):
    """Return ``(g (D,), H (D, D), J (D, n) or None)`` at ``(u, w)`` in one sweep."""
    if not with_jacobian:
        return gradient(fun, u, w, data), hessian(fun, u, w, data), None
    g = gradient(fun, u, w, data)
    hess, jac_t = jax.jacfwd(jax.grad(fun, argnums=(0, 1)), argnums=0)(u, w, data)
    return g, hess, jac_t.T


def full_derivatives(problem, options, with_jacobian: bool):
    """``(g (D,), H (D, D), J (D, n) or None)`` of ``problem`` at the fit, ``w = 1``.

    One forward-over-reverse sweep over all the data when ``D`` tangents of it fit in
    the memory budget of :func:`~approxcv.optim.hessian.sweep_chunk`: the compiled program of
    :func:`~approxcv.optim.newton.value_and_derivatives`, which the fit's Newton polish
    already built (with ``J`` wherever ``D x n`` is small enough for the polish to ask for
    it, so a caller that needs no ``J`` reuses it too and drops ``J``). Otherwise, at
    ``level="structure"`` (data with the structure axis first) the derivatives are
    accumulated over batches of structures through the executor seam (memory bounded by a
    batch; also whenever an executor is given), and within one structure the sweep runs in
    chunks of tangents (:func:`chunked_derivatives`; e.g. a CRF's length-bucketed sentences).
    """
    dim = int(np.shape(problem.u_full)[0])
    chunk = sweep_chunk(problem.fun, problem.u_full, np.ones(problem.n_units), problem.data,
                        max_chunk=dim)
    structure = options.level == "structure" and has_unit_axis(problem.data, problem.n_units)
    if structure and (chunk < dim or options.executor is not None):
        return structure_derivatives(
            problem.fun, problem.u_full, problem.data, problem.n_units,
            batch_size=options.structure_batch_size, with_jacobian=with_jacobian,
            executor=options.executor, progress=options.progress)
    if chunk < dim:     # all D tangents of one sweep would not fit: chunks of them
        out = chunked_derivatives(problem.fun, np.asarray(problem.u_full),
                                  np.ones(problem.n_units), problem.data,
                                  with_jacobian, chunk)
        return jax.block_until_ready(out)
    jacobian = with_jacobian or polish_jacobian(dim, problem.n_units)
    _, grad, hess, jac = jax.block_until_ready(value_and_derivatives(
        problem.fun, problem.u_full, np.ones(problem.n_units), problem.data, jacobian))
    return grad, hess, jac if with_jacobian else None


def chunked_derivatives(fun, u, w, data, with_jacobian: bool, chunk: int):
    """``(g (D,), H (D, D), J (D, n) or None)`` at ``(u, w)`` from ``D`` JVPs of the
    gradient in ``(u, w)``, ``chunk`` tangents at a time: the same values as one sweep
    (:func:`gradient_hessian_jacobian`) in the memory of ``chunk`` tangents
    (:func:`~approxcv.optim.newton.chunked_value_and_derivatives` without ``F``)."""
    return chunked_value_and_derivatives(fun, u, w, data, with_jacobian, chunk)[1:]
