"""The flat weighted objective the engine works on.

A model supplies ``objective(params, data, weights, scheme, level)`` and
``heldout(params, data, weights, level)`` on its constrained parameter pytree;
:func:`make_objective` turns them into functions of a flat unconstrained vector ``u``
(``ravel_pytree`` of the unconstrained tree, dynamax style), so that H and J are taken in
unconstrained space and the IJ never leaves the simplex.

The data are an explicit argument, ``fun(u, w, data)``, and the functions are built once per
(model configuration, scheme, level, parameter structure): jitted engine kernels that take
them as static arguments are therefore compiled once per session, not once per call.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np


class WeightedObjective(NamedTuple):
    """Everything the engine needs about one model on one data set.

    fun(u, w, data) -> scalar F; heldout(u, w, data) -> (fold_loss, point_losses (n,));
    data: the prepared data pytree; u_full: ``(D,)`` unconstrained full-data parameters;
    unravel(u) -> constrained parameter pytree; num_units: ``n``; scale: positive
    normaliser of F for optimiser tolerances (number of observations).
    """
    fun: Callable
    heldout: Callable
    data: Any
    u_full: jax.Array
    unravel: Callable
    num_units: int
    scale: float


def _model_key(model):
    """Hashable snapshot of a model's hyperparameters (public, non-fitted attributes)."""
    items = tuple(sorted((k, v) for k, v in vars(model).items()
                         if not k.endswith("_") and not k.startswith("_")))
    hash(items)
    return items


@functools.lru_cache(maxsize=128)
def _functions(model, model_key, scheme, level, treedef, shapes):
    """Build ``(fun, heldout, to_params)`` for one model configuration and parameter layout."""
    sizes = [int(np.prod(s)) for s in shapes]
    splits = np.cumsum(sizes)[:-1].tolist()

    def unravel(u):
        leaves = [p.reshape(s) for p, s in zip(jnp.split(u, splits), shapes)]
        return jax.tree_util.tree_unflatten(treedef, leaves)

    def to_params(u):
        return model.constrain(unravel(u))

    def fun(u, w, data):
        return model.objective(to_params(u), data, w, scheme=scheme, level=level)

    def heldout(u, w, data):
        return model.heldout(to_params(u), data, w, level=level)

    return fun, heldout, to_params


def make_objective(model, data, params, scheme: str, level: str, num_units: int,
                   scale: float = 1.0) -> WeightedObjective:
    """Build the :class:`WeightedObjective` of ``model`` on prepared ``data`` at ``params``."""
    leaves, treedef = jax.tree_util.tree_flatten(model.unconstrain(params))
    shapes = tuple(tuple(np.shape(leaf)) for leaf in leaves)
    try:
        fns = _functions(model, _model_key(model), scheme, level, treedef, shapes)
    except TypeError:  # unhashable hyperparameters: build uncached
        fns = _functions.__wrapped__(model, None, scheme, level, treedef, shapes)
    u_full = jnp.concatenate([jnp.ravel(jnp.asarray(leaf, jnp.float64)) for leaf in leaves])
    return WeightedObjective(*fns[:2], data, u_full, fns[2], num_units, float(scale))
