"""Dense Hessians from chunked Hessian-vector products (memory: ``chunk`` tangents, not ``D``)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax


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


def hessian_by_hvp(fun, u, *args, chunk: int | None = None):
    """``d2 fun(u, *args) / du2`` from ``D`` Hessian-vector products, ``chunk`` at a time.

    Same value as :func:`hessian`, but memory holds ``chunk`` tangents of the forward pass
    instead of ``D`` (which for long data and ``D`` in the hundreds is gigabytes). ``chunk``
    defaults to :func:`tangent_chunk` of ``args`` (pass the data there, not in a closure).
    """
    chunk = tangent_chunk(args) if chunk is None else chunk
    _, hvp = jax.linearize(lambda x: jax.grad(fun)(x, *args), u)
    return lax.map(hvp, jnp.eye(u.shape[0], dtype=u.dtype), batch_size=min(chunk, u.shape[0]))
