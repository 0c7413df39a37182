"""A model from a log-likelihood: ``Pointwise(loglik, init, constraints, log_prior)``.

The user writes the log-likelihood of *one unit* of data in JAX; the data are a pytree of
arrays (a dict, a tuple or one array) whose leading axis indexes the units — an AR(p)
passes its lags as columns beside the response, so every unit is one row. The objective
and the held-out loss follow:

    F(theta, w) = - sum_i w_i loglik(theta, x_i) - log_prior(theta),
    L_o(theta)  = - sum_{i in o} loglik(theta, x_i),

in the unconstrained coordinates of ``constraints`` (by leaf: ``"real"``, ``"positive"``,
``"unit"``, ``"simplex"`` or an :mod:`approxcv.models.constraints` object). ``fit`` is the
MAP by approxcv's optimiser from ``init`` and ``n_init - 1`` jittered starts
(:func:`approxcv.fitting.map_fit`), and every method of ``cross_validate`` works on it:
``ij``, ``ns``, ``exact`` refits, ``auto``, the error estimates, ``compare``.

Example (AR(1) with Student-t noise, leave-future-out folds)::

    import jax.numpy as jnp, jax.scipy.stats as st, approxcv as acv
    def loglik(p, u):
        return st.t.logpdf(u["y"], p["nu"], p["c"] + p["phi"] * u["lag"], p["sigma"])
    model = acv.models.Pointwise(
        loglik, init={"c": 0.0, "phi": 0.0, "sigma": 1.0, "nu": 5.0},
        constraints={"sigma": "positive", "nu": "positive"})
    data = {"y": x[1:], "lag": x[:-1]}
    res = acv.cross_validate(model, data, acv.folds.leave_future_out(len(x) - 1, starts))
"""
from __future__ import annotations

from collections.abc import Mapping

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import ArgumentTypeError, InvalidArgumentError, InvalidDataError
from . import constraints as C
from .base import Model, check_weights, left_out

__all__ = ["Pointwise"]

#: standard deviation, in unconstrained coordinates and relative to ``1 + |u|``, of the
#: jitter of the starts after the first (the first is ``init`` itself)
START_JITTER = 0.1


def _tree_of_constraints(init, constraints):
    """The constraint tree of ``init``'s structure: ``constraints`` is ``None`` (every leaf
    real), a mapping from the names of ``init``'s top-level fields (a dict's keys, a
    NamedTuple's fields; absent names are real) to a name or constraint, or a tree of
    ``init``'s structure."""
    leaves, treedef = jax.tree_util.tree_flatten(init)
    if constraints is None:
        return jax.tree_util.tree_unflatten(treedef, [C.Real() for _ in leaves])
    names = (list(init) if isinstance(init, Mapping)
             else list(getattr(type(init), "_fields", ())) or None)
    if isinstance(constraints, Mapping) and names is not None:
        unknown = sorted(set(map(str, constraints)) - set(map(str, names)))
        if unknown:
            raise InvalidArgumentError(
                f"`constraints` names {unknown}, which `init` does not have (its fields: "
                f"{[str(n) for n in names]})")
        by_field = {n: C.by_name(constraints.get(n, "real"), f"`constraints[{n!r}]`")
                    for n in names}
        if isinstance(init, Mapping):
            return {n: jax.tree_util.tree_map(lambda _: by_field[n], init[n])
                    for n in init}
        return type(init)(*[jax.tree_util.tree_map(lambda _, n=n: by_field[n],
                                                   getattr(init, n)) for n in names])
    c_leaves, c_treedef = jax.tree_util.tree_flatten(
        constraints, is_leaf=lambda c: isinstance(c, (str, C.Constraint)))
    if c_treedef != treedef:
        raise InvalidArgumentError(f"`constraints` has structure {c_treedef}, but `init` has "
                                   f"{treedef}: give one constraint per leaf of `init`, or a "
                                   "dict by field name")
    return jax.tree_util.tree_unflatten(
        treedef, [C.by_name(c, f"`constraints` leaf {i}") for i, c in enumerate(c_leaves)])


def _float_leaves(tree, name: str):
    def one(x):
        try:
            return np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError):
            raise ArgumentTypeError(f"every leaf of `{name}` must be numeric, got "
                                    f"{type(x).__name__}") from None
    return jax.tree_util.tree_map(one, tree)


class Pointwise(Model):
    """A model defined by the log-likelihood of one unit of data (module docstring).

    Args:
        loglik: ``loglik(params, unit) -> scalar``, a JAX function; ``params`` has the
            structure of ``init``, ``unit`` is one row of every array of the data.
        init: a pytree of starting values (dict, NamedTuple, tuple or array); the fit
            returns parameters in its structure.
        constraints: by leaf (see :func:`_tree_of_constraints`): ``"real"`` (default),
            ``"positive"``, ``"unit"`` (``(0, 1)``), ``"simplex"`` or a constraint object.
        log_prior: ``log_prior(params) -> scalar`` (optional; flat when ``None``).
        n_init: starts of the fit (``init`` and ``n_init - 1`` jittered copies, ``seed``).
        max_steps: optimiser steps of the fit and of exact refits' defaults.

    Raises (when the model first sees data):
        InvalidArgumentError: ``loglik`` does not return a scalar, or is not finite at
            ``init`` on some unit; ``constraints`` name leaves ``init`` does not have.
        InvalidDataError: the data's leaves have different numbers of rows.
    """

    def __init__(self, loglik, init, constraints=None, log_prior=None, *, n_init: int = 4,
                 seed: int = 0, max_steps: int = 1000):
        if not callable(loglik):
            raise ArgumentTypeError(f"`loglik` must be a function (params, unit) -> scalar, "
                                    f"got {type(loglik).__name__}")
        if log_prior is not None and not callable(log_prior):
            raise ArgumentTypeError(f"`log_prior` must be a function params -> scalar or None, "
                                    f"got {type(log_prior).__name__}")
        self.loglik, self.log_prior_fn = loglik, log_prior
        self._init = _float_leaves(init, "init")
        self._constraints = _tree_of_constraints(self._init, constraints)
        problems = C.check_constraints(self._constraints, self._init, "init")
        if problems:
            raise InvalidArgumentError("; ".join(problems))
        self.n_init = int(n_init)
        self.seed = int(seed)
        self.max_steps = int(max_steps)
        if self.n_init < 1 or self.max_steps < 1:
            raise InvalidArgumentError("`n_init` and `max_steps` must be positive integers")
        self.fit_result_ = None

    def static_key(self) -> tuple:
        """Hashable identity: the functions, ``init``'s structure and values, the
        constraints and the fit settings."""
        leaves, treedef = jax.tree_util.tree_flatten(self._init)
        return (("loglik", self.loglik), ("log_prior", self.log_prior_fn),
                ("init", str(treedef), tuple(a.tobytes() for a in leaves),
                 tuple(a.shape for a in leaves)),
                ("constraints", tuple(jax.tree_util.tree_leaves(
                    self._constraints, is_leaf=lambda c: isinstance(c, C.Constraint)))),
                ("n_init", self.n_init), ("seed", self.seed), ("max_steps", self.max_steps))

    # ------------------------------------------------------------ protocol
    def prepare(self, data, level: str | None = None):
        """``(data with float64 NumPy leaves, "within", n)``: units are the rows (leading
        axis) of every leaf; ``loglik`` is checked on them at ``init`` (a scalar, finite)."""
        if level not in (None, "within"):
            raise InvalidArgumentError(f"Pointwise models have one level, 'within' (units are "
                                       f"rows of the data); got level={level!r}")
        data = _float_leaves(data, "data")
        leaves = jax.tree_util.tree_leaves(data)
        if not leaves or any(np.ndim(a) == 0 for a in leaves):
            raise InvalidDataError("the data must be arrays with one row per unit (a dict, "
                                   "tuple or array whose leaves share their leading axis)")
        sizes = {int(a.shape[0]) for a in leaves}
        if len(sizes) != 1:
            raise InvalidDataError(f"every array of the data must have one row per unit; "
                                   f"their leading sizes differ: {sorted(sizes)}")
        for a in leaves:
            if not np.all(np.isfinite(a)):
                raise InvalidDataError("the data contain NaN or inf")
        self._check_loglik(data)
        return data, "within", sizes.pop()

    def _check_loglik(self, data) -> None:
        """``loglik(init, unit)`` must be a scalar, and finite on every unit."""
        row = jax.tree_util.tree_map(lambda a: a[0], data)
        out = jax.eval_shape(self.loglik, self._init, row)
        if not hasattr(out, "shape") or tuple(out.shape) != ():
            shape = getattr(out, "shape", type(out).__name__)
            raise InvalidArgumentError(
                f"`loglik(params, unit)` must return a scalar for one unit (one row of every "
                f"array of the data), got shape {shape}; sum or index the unit's terms, or "
                "pass units as rows")
        values = np.asarray(_pointwise(self.loglik, self._init, data))
        bad = np.flatnonzero(~np.isfinite(values))
        if bad.size:
            raise InvalidArgumentError(
                f"`loglik` is not finite at `init` on {bad.size} unit(s) (first: unit "
                f"{int(bad[0])}, value {values[bad[0]]}); choose an `init` where every unit "
                "has a finite log-likelihood, or check `loglik` and the data")

    def objective(self, params, data, weights, scheme: str = "A", level: str | None = None):
        """``F = -sum_i w_i loglik(params, x_i) - log_prior(params)``."""
        n = jax.tree_util.tree_leaves(data)[0].shape[0]
        weights = check_weights(weights, n)
        return -jnp.sum(weights * _pointwise(self.loglik, params, data)) - self.log_prior(params)

    def log_prior(self, params, data=None):
        """``log_prior(params)``, 0 when none was given."""
        return 0.0 if self.log_prior_fn is None else self.log_prior_fn(params)

    def heldout_loss(self, params, data, weights, level: str | None = None):
        """``(-sum_{w_i = 0} loglik(params, x_i), per-unit -loglik at the left-out units)``."""
        n = jax.tree_util.tree_leaves(data)[0].shape[0]
        weights = check_weights(weights, n)
        points = jnp.where(left_out(weights), -_pointwise(self.loglik, params, data), 0.0)
        return jnp.sum(points), points

    def objective_splits(self, scheme: str, level: str) -> bool:
        """Independent units: ``F(u, w_o) = F(u, 1) - L_o(u)``."""
        return True

    def init_params(self, data, level: str | None = None, n: int = 1, seed: int = 0) -> list:
        """``init``, then ``n - 1`` starts jittered from it in unconstrained coordinates
        (``N(0, (START_JITTER (1 + |u|))^2)`` per entry, ``seed``)."""
        rng = np.random.default_rng(seed)
        u = self.unconstrain(self._init)
        starts = [self._init]
        for _ in range(int(n) - 1):
            moved = jax.tree_util.tree_map(
                lambda a: a + START_JITTER * (1.0 + np.abs(a)) * rng.normal(size=a.shape), u)
            starts.append(self.constrain(moved))
        return [jax.tree_util.tree_map(np.asarray, s) for s in starts]

    def param_constraints(self):
        return self._constraints

    def __repr__(self) -> str:
        name = getattr(self.loglik, "__name__", type(self.loglik).__name__)
        return f"Pointwise({name})"


def _pointwise(loglik, params, data):
    """``(n,)``: ``loglik(params, x_i)`` for every row ``i`` of the data (``vmap``)."""
    return jax.vmap(loglik, in_axes=(None, 0))(params, data)
