"""Derivatives of a structure-level objective, accumulated over batches of structures.

When whole structures (sequences) are the units, they are independent given ``theta``:

    F(u, w) = r(u) + sum_i w_i f_i(u),     r(u) = F(u, 0)   (the prior),

so ``g``, ``H`` and the columns of ``J = [d grad_u F / d w_i]_i = [grad f_i]_i`` are sums
(or concatenations) of per-structure terms. Each batch of structures contributes the data
part ``F(u, w_b; d_b) - F(u, 0; d_b)`` of its own slice ``d_b`` of the data, so a batch
needs only its own sequences and memory is bounded by the batch, not the data set. Batches
are independent tasks and go through the executor seam (:func:`approxcv.executors.run_batches`)
so they can run in parallel — threads, processes or a Dask cluster.

The dense Hessian of a batch is built from ``D`` Hessian-vector products in chunks of
``chunk`` (``lax.map``), so memory is ``chunk`` tangents at a time rather than ``D``.

Contract: every leaf of the prepared data has the unit (structure) axis first, as
:class:`approxcv.models.hmm.Sequences` and the ERM data do; :func:`has_unit_axis` checks it
(a model's numeric hyperparameters beside them, :class:`approxcv.problem.WithNumbers`, are
kept whole).
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ..executors import run_batches
from .with_numbers import WithNumbers
from .._runtime import jit, map_in_batches


def has_unit_axis(data, num_units: int) -> bool:
    """True when every array leaf of ``data`` has leading dimension ``num_units`` (of a
    :class:`~approxcv.problem.WithNumbers`, every leaf of its data: the model's numbers
    are no units)."""
    if isinstance(data, WithNumbers):
        return has_unit_axis(data.data, num_units)
    leaves = jax.tree_util.tree_leaves(data)
    return bool(leaves) and all(np.ndim(x) >= 1 and np.shape(x)[0] == num_units
                                for x in leaves)


def take_units(data, idx):
    """The slice of ``data`` holding units ``idx`` (leading axis; a
    :class:`~approxcv.problem.WithNumbers` keeps its numbers whole)."""
    if isinstance(data, WithNumbers):
        return data._replace(data=take_units(data.data, idx))
    return jax.tree_util.tree_map(lambda x: x[np.asarray(idx)], data)


def _dense_hessian(grad_fn, u, chunk: int):
    """``H`` of the function whose gradient is ``grad_fn`` by ``D`` HVPs in chunks."""
    _, hvp = jax.linearize(grad_fn, u)
    eye = jnp.eye(u.shape[0], dtype=u.dtype)
    return map_in_batches(hvp, eye, min(chunk, u.shape[0]))


@partial(jit, static_argnums=(0, 4, 5))
def batch_derivatives(fun, u, w_b, data_b, chunk: int = 256, with_jacobian: bool = True):
    """``(g_b, H_b, J_b)`` of the data part ``F(u, w_b; d_b) - F(u, 0; d_b)`` at ``w_b``.

    ``J_b`` is ``(D, n_b)`` (``n_b`` JVPs in ``w`` of the gradient; cheap because batches
    are small), or ``None``.
    """
    def data_part(x, w):
        return fun(x, w, data_b) - fun(x, jnp.zeros_like(w), data_b)

    grad_u = jax.grad(data_part, argnums=0)
    g = grad_u(u, w_b)
    hess = _dense_hessian(lambda x: grad_u(x, w_b), u, chunk)
    jac = jax.jacfwd(lambda w: grad_u(u, w), argnums=0)(w_b) if with_jacobian else None
    return g, hess, jac


@partial(jit, static_argnums=(0, 3))
def prior_derivatives(fun, u, data_b, chunk: int = 256):
    """``(g, H)`` of ``r(u) = F(u, 0)``: the part of ``F`` that no weight touches."""
    zeros = jnp.zeros(jax.tree_util.tree_leaves(data_b)[0].shape[0], u.dtype)
    grad_u = jax.grad(lambda x: fun(x, zeros, data_b))
    return grad_u(u), _dense_hessian(grad_u, u, chunk)


class BatchDerivatives:
    """Picklable task: NumPy ``(g_b, H_b, J_b)`` of one batch (see :func:`batch_derivatives`)."""

    def __init__(self, fun, chunk: int, with_jacobian: bool):
        self.fun, self.chunk, self.with_jacobian = fun, chunk, with_jacobian

    def __call__(self, u, w_b, data_b):
        out = batch_derivatives(self.fun, jnp.asarray(u), jnp.asarray(w_b), data_b,
                                self.chunk, self.with_jacobian)
        return tuple(None if o is None else np.asarray(o) for o in out)


def structure_derivatives(fun, u, data, num_units: int, *, batch_size: int = 8,
                          chunk: int = 256, with_jacobian: bool = True, executor=None,
                          progress: bool = False):
    """``(g (D,), H (D, D), J (D, n) or None)`` of a structure-level objective at ``w = 1``.

    Structures are split into batches of ``batch_size`` (the last one padded with
    zero-weight copies so every batch has one shape and compiles once); each batch's
    derivatives run as one task on ``executor`` and are summed (``g``, ``H``) or
    concatenated (``J``); the prior's are added once.
    """
    u = jnp.asarray(u)
    batch_size = int(max(1, min(batch_size, num_units)))
    batches, sizes = [], []
    for start in range(0, num_units, batch_size):
        idx = np.arange(start, min(start + batch_size, num_units))
        w_b = np.ones(batch_size)
        if len(idx) < batch_size:
            w_b[len(idx):] = 0.0
            idx = np.concatenate([idx, np.full(batch_size - len(idx), idx[0])])
        batches.append((u, w_b, take_units(data, idx)))
        sizes.append(int(w_b.sum()))
    task = BatchDerivatives(fun, chunk, with_jacobian)
    results = run_batches(task, batches, executor, progress, desc="derivatives", sizes=sizes)
    g0, h0 = prior_derivatives(fun, u, batches[0][2], chunk)
    grad = np.asarray(g0) + sum(r[0] for r in results)
    hess = np.asarray(h0) + sum(r[1] for r in results)
    jac = (np.concatenate([r[2][:, :s] for r, s in zip(results, sizes)], axis=1)
           if with_jacobian else None)
    return grad, hess, jac
