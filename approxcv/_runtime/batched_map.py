"""``map_in_batches``: ``lax.map`` over rows in batches with one copy of the function in the
compiled program.

``lax.map(f, xs, batch_size=b)`` traces ``f`` twice when ``b`` does not divide the number of
rows: a ``vmap`` of ``b`` rows inside the scan and a second ``vmap`` for the remainder, so the
program holds two copies of ``f`` (a per-fold Hessian, a Newton step, a held-out pass) and
compiles in about twice the time. Padding the rows to a multiple of ``b`` (with copies of the
last row, a valid input) and dropping the padded results keeps one copy; the padding costs
fewer than ``b`` extra evaluations. :func:`pad_rows` pads a batch's arrays (starts, weights)
to one batch shape the same way, for a batched optimiser that compiles once.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

__all__ = ["map_in_batches", "pad_rows"]


def map_in_batches(fun, xs, batch_size: int | None):
    """``fun`` of every row of the pytree ``xs`` (leading axis), ``batch_size`` rows at a
    time in a ``lax.map`` (one ``vmap`` when ``batch_size`` is ``None`` or covers all rows);
    the same values as ``lax.map(fun, xs, batch_size=batch_size)``."""
    n = jax.tree_util.tree_leaves(xs)[0].shape[0]
    if batch_size is None or batch_size >= n:
        return jax.vmap(fun)(xs)
    batch_size = max(int(batch_size), 1)
    pad = (-n) % batch_size
    if pad:
        xs = jax.tree_util.tree_map(
            lambda x: jnp.concatenate([x, jnp.repeat(x[-1:], pad, axis=0)]), xs)
    ys = lax.map(fun, xs, batch_size=batch_size)
    return jax.tree_util.tree_map(lambda y: y[:n], ys) if pad else ys


def pad_rows(rows: int, *arrays):
    """Each array with its last row repeated up to ``rows`` rows (unchanged if it has as
    many or more): one batch shape, so a batched optimiser compiles once."""
    return tuple(np.concatenate([a, np.repeat(a[-1:], max(rows - len(a), 0), 0)])
                 for a in map(np.asarray, arrays))
