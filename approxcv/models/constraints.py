"""Parameter constraints as bijectors to unconstrained space (dynamax's ``ParameterProperties``).

A model declares, beside its parameter NamedTuple, a tree of the same structure whose leaves
are constraints (:meth:`approxcv.models.base.Model.param_constraints`). Fitting and every
derivative (``H``, ``J``) happen on ``u = inverse(theta)`` flattened by ``ravel``, so the IJ
never steps off a simplex or below zero. Each constraint also validates a user-supplied
value (``check``), which is how parameters from another model are refused.

Simplex vectors use ``K - 1`` free logits with the last fixed at 0, so the map is a
bijection and the Hessian in unconstrained space is not singular by construction.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import jax
import jax.numpy as jnp
import numpy as np

from .._runtime import array_module
from ..errors import ArgumentTypeError, InvalidArgumentError
from ._transforms import logits_to_log_simplex

__all__ = ["Constraint", "Real", "Positive", "Unit", "Simplex", "LowerCholesky", "Fixed",
           "PartlyFixedSimplex", "PartlyZero", "nested_tuple", "constrain", "unconstrain",
           "check_constraints", "by_name", "NAMES"]


class Constraint:
    """Bijection ``forward: R^k -> domain`` with its ``inverse`` and a ``check`` of values.

    The built-in constraints map NumPy arrays in NumPy and traced values in ``jax.numpy``,
    and ``forward`` maps leading batch axes elementwise (rows of fold parameters)."""

    #: ``forward`` maps a NumPy ``(F, k)`` array of rows in NumPy (the built-in constraints);
    #: ``False``: the Problem maps rows one at a time through a jitted ``vmap``
    maps_numpy_rows = False

    def forward(self, u):
        raise NotImplementedError

    def inverse(self, value):
        raise NotImplementedError

    def check(self, value: np.ndarray) -> str | None:
        """``None`` when ``value`` lies in the domain, else what is wrong (a phrase)."""
        return None if np.all(np.isfinite(value)) else "has NaN or inf entries"


@dataclass(frozen=True)
class Real(Constraint):
    """The identity (unconstrained reals)."""
    maps_numpy_rows = True

    def forward(self, u):
        return u

    def inverse(self, value):
        return value


@dataclass(frozen=True)
class Positive(Constraint):
    """``theta = exp(u)``."""
    maps_numpy_rows = True

    def forward(self, u):
        return array_module(u).exp(u)

    def inverse(self, value):
        return array_module(value).log(value)

    def check(self, value):
        return super().check(value) or (None if np.all(value > 0) else "must be > 0")


@dataclass(frozen=True)
class Unit(Constraint):
    """``theta = 1 / (1 + exp(-u))``: the open unit interval ``(0, 1)`` (a probability, an
    AR coefficient of a stationary process mapped to ``2 theta - 1`` by the user)."""
    maps_numpy_rows = True

    def forward(self, u):
        xp = array_module(u)
        return 1.0 / (1.0 + xp.exp(-u))

    def inverse(self, value):
        xp = array_module(value)
        return xp.log(value) - xp.log1p(-value)

    def check(self, value):
        return super().check(value) or (None if np.all((value > 0) & (value < 1))
                                         else "must lie in (0, 1)")


@dataclass(frozen=True)
class Simplex(Constraint):
    """``theta = total * softmax([u, 0])`` along the last axis: ``(..., K-1) -> (..., K)``.

    ``total`` (default 1) scales the simplex, e.g. day effects that average to 1 over a week.
    """
    maps_numpy_rows = True
    total: float = 1.0

    def forward(self, u):
        if array_module(u) is np:
            e = np.exp(np.concatenate([u, np.zeros(u.shape[:-1] + (1,))], -1)
                       - np.max(u, -1, keepdims=True, initial=0.0))
            return self.total * e / np.sum(e, -1, keepdims=True)
        return self.total * jnp.exp(logits_to_log_simplex(u))

    def inverse(self, value):
        log_p = array_module(value).log(value / self.total)
        return log_p[..., :-1] - log_p[..., -1:]

    def check(self, value):
        bad = super().check(value)
        if bad:
            return bad
        if np.any(value <= 0):
            return "must be > 0 (a point inside the simplex)"
        if not np.allclose(np.sum(value, axis=-1), self.total, rtol=1e-6, atol=0):
            return f"must sum to {self.total:g} along its last axis"
        return None


@dataclass(frozen=True)
class LowerCholesky(Constraint):
    """Lower-triangular factors with positive diagonal, ``(..., R, R)``.

    Unconstrained: ``(..., R(R+1)/2)`` packed entries with the diagonal on the log scale;
    ``diagonal=True`` keeps only the ``(..., R)`` log-diagonal (diagonal factors).
    """
    maps_numpy_rows = True
    diagonal: bool = False

    def forward(self, u):
        xp = array_module(u)
        if self.diagonal:
            return xp.exp(u)[..., None] * xp.eye(u.shape[-1])
        r = int(round((np.sqrt(8 * u.shape[-1] + 1) - 1) / 2))
        rows, cols = np.tril_indices(r)
        vals = xp.where(rows == cols, xp.exp(u), u)
        if xp is np:
            out = np.zeros(u.shape[:-1] + (r, r))
            out[..., rows, cols] = vals
            return out
        return jnp.zeros(u.shape[:-1] + (r, r), u.dtype).at[..., rows, cols].set(vals)

    def inverse(self, value):
        xp = array_module(value)
        if self.diagonal:
            return xp.log(xp.diagonal(value, axis1=-2, axis2=-1))
        rows, cols = np.tril_indices(value.shape[-1])
        vals = value[..., rows, cols]
        return xp.where(rows == cols, xp.log(xp.abs(vals)), vals)

    def check(self, value):
        bad = super().check(value)
        if bad:
            return bad
        if value.ndim < 2 or value.shape[-1] != value.shape[-2]:
            return "must be square matrices"
        if not np.allclose(value, np.tril(value), rtol=0, atol=0):
            return "must be lower triangular"
        if np.any(np.diagonal(value, axis1=-2, axis2=-1) <= 0):
            return "must have a positive diagonal"
        if self.diagonal and not np.allclose(value, np.tril(np.triu(value)), atol=0):
            return "must be diagonal"
        return None


def nested_tuple(value):
    """``value`` (an array) as nested tuples of Python floats: a hashable, exact copy (the
    held values of :class:`Fixed` and :class:`PartlyFixedSimplex`, a prior's arrays)."""
    arr = np.asarray(value, dtype=np.float64)
    return float(arr) if arr.ndim == 0 else tuple(nested_tuple(a) for a in arr)


def _held_equal(value, held) -> bool:
    """``value`` equals the ``held`` values to round-off (relative ``1e-9``)."""
    return bool(np.allclose(value, held, rtol=1e-9, atol=1e-300))


@dataclass(frozen=True)
class Fixed(Constraint):
    """A leaf held at ``values`` (nested tuples, :func:`nested_tuple`): no unconstrained
    coordinates (``(0,)``), so the leaf is a constant of the objective and of every
    derivative — a parameter the data cannot move, or one the fit did not estimate."""
    maps_numpy_rows = True
    values: tuple | float = ()

    def forward(self, u):
        xp = array_module(u)
        held = xp.asarray(self.values, dtype=xp.float64)
        return xp.broadcast_to(held, u.shape[:-1] + held.shape)

    def inverse(self, value):
        return array_module(value).zeros(np.shape(value)[:np.ndim(value) - np.ndim(
            self.values)] + (0,))

    def check(self, value):
        return None if _held_equal(value, self.values) else (
            "is held fixed and must equal its held values (the fitted estimator's)")


@dataclass(frozen=True)
class PartlyFixedSimplex(Constraint):
    """Rows of a simplex (last axis, e.g. a transition matrix ``(K, K)``) some of whose
    entries are held at ``values`` (nested tuples; ``free``: nested tuples of bools, the
    same shape, ``True`` where an entry moves).

    The free entries of a row share its remaining mass ``1 - sum(held)`` by a softmax of
    ``n_free - 1`` logits (the last free entry is the reference, as in :class:`Simplex`);
    a row with fewer than two free entries has none. Unconstrained: the free logits of
    every row, concatenated, ``(..., D)``. Held entries may be exactly 0 (a transition an
    estimator forbids): they are constants, and no derivative reaches them.
    """
    free: tuple = ()
    values: tuple = ()

    def _layout(self):
        free = np.atleast_2d(np.asarray(self.free, dtype=bool))
        held = np.where(free, 0.0, np.atleast_2d(np.asarray(self.values, dtype=np.float64)))
        moves = free & (free.sum(-1, keepdims=True) >= 2)
        ref = moves & (np.cumsum(moves, -1) == moves.sum(-1, keepdims=True))
        return free, held, moves, ref, moves & ~ref

    def forward(self, u):
        free, held, moves, ref, logit = self._layout()
        rows, k = free.shape
        idx = np.flatnonzero(logit)
        fill = jnp.full(u.shape[:-1] + (rows * k,), -jnp.inf, dtype=jnp.float64)
        fill = fill.at[..., np.flatnonzero(ref)].set(0.0).at[..., idx].set(u)
        logits = fill.reshape(u.shape[:-1] + (rows, k))
        # a row without free logits: zeros (no NaN from a softmax of -inf), times mass 0
        logits = jnp.where(moves.any(-1, keepdims=True), logits, 0.0)
        mass = np.where(moves.any(-1), 1.0 - held.sum(-1), 0.0)[:, None]
        probs = jnp.where(moves, jax.nn.softmax(logits, axis=-1) * mass, held)
        # a single free entry takes the rest of its row's mass (held: no coordinate)
        single = free & ~moves
        probs = jnp.where(single, 1.0 - held.sum(-1, keepdims=True), probs)
        return probs.reshape(u.shape[:-1] + np.shape(self.free))

    def inverse(self, value):
        free, _, _, ref, logit = self._layout()
        xp = array_module(value)
        v = xp.reshape(value, value.shape[:value.ndim - np.ndim(self.free)] + free.shape)
        safe = xp.where(ref | logit, v, 1.0)
        log_ref = xp.sum(xp.where(ref, xp.log(safe), 0.0), -1, keepdims=True)
        rel = (xp.log(safe) - log_ref).reshape(v.shape[:-2] + (-1,))
        return rel[..., np.flatnonzero(logit)]

    def check(self, value):
        free = np.asarray(self.free, dtype=bool)
        if np.shape(value) != free.shape or not np.all(np.isfinite(value)):
            return "has NaN or inf entries or the wrong shape"
        if not _held_equal(np.where(free, 0.0, value), np.where(free, 0.0, self.values)):
            return ("has entries held fixed that differ from their held values (the "
                    "fitted estimator's)")
        if np.any(value[free] <= 0):
            return "must be > 0 where its entries are free"
        if not np.allclose(np.sum(value, axis=-1), 1.0, rtol=1e-6, atol=0):
            return "must sum to 1 along its last axis"
        return None


@dataclass(frozen=True)
class PartlyZero(Constraint):
    """Reals some of whose entries are held at 0 (``free``: nested tuples of bools of the
    leaf's shape, ``True`` where an entry is a parameter): parameters a model does not
    have, e.g. the (attribute, label) features CRFsuite never created.

    Unconstrained: the free entries in row-major order, ``(..., n_free)``::

        forward(u)[..., free] = u,   forward(u)[..., ~free] = 0,   inverse(theta) = theta[..., free]

    so the objective, its gradient and its Hessian are those of the free entries only."""
    maps_numpy_rows = True
    free: tuple = ()

    @cached_property
    def _index(self) -> np.ndarray:
        """Row-major indices of the free entries."""
        return np.flatnonzero(np.asarray(self.free, dtype=bool))

    @cached_property
    def _shape(self) -> tuple:
        return np.shape(self.free)

    def forward(self, u):
        batch = u.shape[:-1]
        size = int(np.prod(self._shape, dtype=int))
        if array_module(u) is np:
            out = np.zeros(batch + (size,))
            out[..., self._index] = u
        else:
            out = jnp.zeros(batch + (size,), dtype=jnp.float64).at[..., self._index].set(u)
        return out.reshape(batch + self._shape)

    def inverse(self, value):
        ndim = len(self._shape)
        batch = np.shape(value)[:np.ndim(value) - ndim]
        return value.reshape(batch + (-1,))[..., self._index]

    def check(self, value):
        if np.shape(value) != self._shape:
            return f"must have shape {self._shape} (its mask of free entries)"
        bad = super().check(value)
        if bad:
            return bad
        held = ~np.asarray(self.free, dtype=bool)
        if np.any(value[held] != 0):
            return (f"must be 0 where its entries are held at 0 ({int(held.sum())} entries "
                    "the model does not have), got nonzero values there")
        return None


#: the constraints a user may name by a string (``approxcv.models.Pointwise``)
NAMES = {"real": Real, "positive": Positive, "unit": Unit, "simplex": Simplex}


def by_name(spec, where: str = "constraint") -> Constraint:
    """A :class:`Constraint` from a name of :data:`NAMES` or a constraint object.

    Raises:
        InvalidArgumentError: an unknown name (the message lists the names).
        ArgumentTypeError: neither a string nor a constraint.
    """
    if isinstance(spec, Constraint):
        return spec
    if isinstance(spec, str):
        if spec not in NAMES:
            raise InvalidArgumentError(f"{where}: unknown constraint {spec!r}; use one of "
                                       f"{sorted(NAMES)} or an approxcv.models.constraints "
                                       "object")
        return NAMES[spec]()
    raise ArgumentTypeError(f"{where} must be a constraint name ({sorted(NAMES)}) or an "
                            f"approxcv.models.constraints object, got {type(spec).__name__}")


def _is_constraint(x) -> bool:
    return isinstance(x, Constraint)


def _float64(p):
    """``p`` as float64: a NumPy array unless it is traced."""
    if isinstance(p, jax.core.Tracer):
        return jnp.asarray(p, dtype=jnp.float64)
    return np.asarray(p, dtype=np.float64)



def unconstrain(constraints, params):
    """Map constrained ``params`` to the unconstrained tree (float64 leaves; NumPy arrays
    for concrete ``params``, traced arrays under a transformation)."""
    return jax.tree_util.tree_map(lambda c, p: c.inverse(_float64(p)), constraints, params,
                                  is_leaf=_is_constraint)


def constrain(constraints, u_tree):
    """Map an unconstrained tree back to constrained parameters (NumPy leaves stay NumPy
    for the built-in constraints)."""
    return jax.tree_util.tree_map(lambda c, u: c.forward(u), constraints, u_tree,
                                  is_leaf=_is_constraint)


def check_constraints(constraints, params, name: str = "params") -> list[str]:
    """Messages for every leaf of ``params`` outside its constraint's domain (empty if none)."""
    fields = getattr(type(params), "_fields", None)
    problems = []
    leaves_c = jax.tree_util.tree_leaves(constraints, is_leaf=_is_constraint)
    with_paths = jax.tree_util.tree_flatten_with_path(params)[0]
    for i, (c, (path, p)) in enumerate(zip(leaves_c, with_paths)):
        msg = c.check(np.asarray(p, dtype=np.float64))
        if msg:
            if fields and len(fields) == len(with_paths):
                label = f"{name}.{fields[i]}"
            elif isinstance(params, (dict, list)) or (path and not isinstance(
                    params, tuple)):
                label = f"{name}{jax.tree_util.keystr(path)}"      # init['sigma']
            else:
                label = f"{name}.leaf {i}"
            problems.append(f"`{label}` {msg}")
    return problems
