"""The one boundary between models and the engine.

:func:`make_problem` is the only place that touches a model during cross-validation: it
validates the data and the parameters against the model and turns the model's
``objective`` and ``heldout_loss`` on constrained parameter trees into functions of a flat
unconstrained vector ``u`` (``ravel`` of the unconstrained tree, dynamax style), so H and J
are taken in unconstrained space and the IJ never leaves a simplex. The engine sees only the
resulting :class:`Problem` and arrays.

The data are an explicit argument, ``fun(u, w, data)``, and the functions are built once per
(model configuration, scheme, level, parameter layout): jitted engine kernels that take them
as static arguments are compiled once per session, not once per call. A model's numeric
hyperparameters (:attr:`~approxcv.models.base.Model.numeric_hyperparameters`, e.g. an ERM's
penalty weight) travel with the data instead (:class:`WithNumbers`), so the functions, and
every program compiled on them, are shared by all models of one structure.
"""
from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .errors import ArgumentTypeError, InvalidDataError
from .engine.with_numbers import WithNumbers
from ._runtime import array_module, jit

__all__ = ["Problem", "GLMStructure", "Windows", "Lanes", "WithNumbers", "make_problem",
           "flat_params", "function_key", "binder", "template"]


class Problem(NamedTuple):
    """Everything the engine needs about one model on one data set.

    fun(u, w, data) -> scalar ``F``; heldout(u, w, data) -> ``(fold_loss, point_losses (n,))``;
    data: the prepared data pytree (a :class:`WithNumbers` of them and the model's numeric
    hyperparameters when it declares some: pass ``problem.data`` to ``fun`` and
    ``heldout``, never the model's prepared data); u_full: ``(D,)`` unconstrained
    full-data parameters; unravel(u) -> constrained parameter pytree; n_units: ``n``, the units
    of ``data`` with a model's null padding units (:meth:`~approxcv.models.base.Model.padded_units`;
    folds index the data's own units, the first ones); scale: positive normaliser
    of ``F`` for optimiser tolerances; starts: ``(R, D)`` unconstrained starting points from
    the model's own initialisation (for exact-CV restarts), possibly empty; key: a hashable
    description of the model configuration, scheme and level (for checkpoints); refit_solver:
    the model's preferred exact-CV optimiser or ``None``; batch_rows: how batched refits
    evaluate their rows (the model's ``batch_rows``); for_refits: ``None``, or a function of
    no arguments returning the problem exact refits use when this one is a smooth local
    surrogate or carries no starts (``"auto"`` and ``audit=``); windows: ``None``, or a
    function of no arguments returning the :class:`Windows` of a model whose held-out
    losses of short folds can be computed in windows of one long series (scheme A); lanes:
    ``None``, or the :class:`Lanes` of a chain model whose scheme-A folds of one long
    series can be evaluated many at once with folds in lanes (:mod:`approxcv.engine.lanes`).

    ERM extras (model-declared capabilities turned into plain fields; ``None`` otherwise):
    glm: :class:`GLMStructure` (``F = sum_i w_i loss(a_i^T u, y_i) + R(u)``: rank-one
    fast paths of ``ns`` and ``ij``); refit: the model's own exact-CV solver
    ``solve(u0s, weights, data) -> MinimizeResult`` (e.g. proximal for a non-smooth
    objective); fold_check(fold_params (n_folds, D), index (n_folds, m), warn) ->
    ``{name: (n_folds,) bool}``: folds that break an assumption of the approximation
    (the elastic net's L1 support), in the full model's layout.

    estimators: ``None``, or the model's own methods (``model.own_estimators``):
    ``{name: fn(folds, options) -> (fold_loss, points, diagnostics)}``; the engine's
    methods call them (:mod:`approxcv.engine.methods.model_estimators`) and refuse every
    other method. splits: the objective splits as ``F(u, w_o) = F(u, 1) - L_o(u)``
    (``model.objective_splits``; the IJ's screened error estimate).
    """
    fun: Callable
    heldout: Callable
    data: Any
    u_full: jax.Array
    unravel: Callable
    n_units: int
    scale: float
    starts: Any = None
    key: Any = None
    refit_solver: str | None = None
    glm: Any = None
    refit: Callable | None = None
    fold_check: Callable | None = None
    batch_rows: str = "vmap"
    for_refits: Callable | None = None
    windows: Callable | None = None
    lanes: Any = None
    estimators: dict | None = None
    splits: bool = False


class Lanes(NamedTuple):
    """A chain model's pieces for the passes with folds in lanes
    (:func:`approxcv.inference.chain_lanes.lane_pass`), all of one fold, all pure.

    potentials(u) -> ``(log_init (K,), log_trans (K, K), emission parameters)``;
    emission(emission parameters, x_chunk) -> ``(C, K)`` emission log-likelihoods;
    log_prior(u, data) -> scalar ``log p(theta)``; series(data) -> the ``(T, ...)``
    sequence. Scheme A: ``F(u, w_o) = -log Z(kept; u) - log_prior(u)``.
    """
    potentials: Callable
    emission: Callable
    log_prior: Callable
    series: Callable


class Windows(NamedTuple):
    """Held-out losses in windows of one long series (``model.window_heldout_loss``).

    heldout(u, start, w_window, context, data) -> ``(fold_loss, points (L,))`` of the units
    with weight 0 in ``[start, start + L)``; context: the full fit's boundary messages. Under
    scheme A the weighted objective also splits as ``F(u, w_o) = F(u, 1) - L_o(u)`` (the
    fold loss), which the error estimates of long series use
    (:mod:`approxcv.engine.windows`).
    """
    heldout: Callable
    context: Any


class _Structure:
    """A model's configuration without the values of its numeric hyperparameters: hashes
    and compares by ``(type, structure_key())``. ``template`` is the model with NaN in place
    of each of them, so that their values reach a program only as arguments: a function
    that read them from the model instead would give NaN, never another model's number."""
    __slots__ = ("key", "template")

    def __init__(self, model):
        self.key = (type(model), model.structure_key())
        self.template = model.with_numbers({k: np.full(np.shape(v), np.nan)
                                            for k, v in model.numbers().items()})

    def __hash__(self):
        return hash(self.key)

    def __eq__(self, other):
        return isinstance(other, _Structure) and self.key == other.key


def function_key(model, data):
    """What functions of ``model`` on a problem's ``data`` are cached by: the model's
    structure (a :class:`_Structure`) when the data carry its numbers (a
    :class:`WithNumbers`), else the model itself."""
    return _Structure(model) if isinstance(data, WithNumbers) else model


def template(key):
    """The model of a :func:`function_key`: the structure's NaN template, or the model."""
    return key.template if isinstance(key, _Structure) else key


def binder(key):
    """``bind(data) -> (model, prepared data)`` for the functions cached by ``key`` (a
    :func:`function_key`): for a structure, its template with the numbers of ``data`` (a
    :class:`WithNumbers`, else an error: the numbers are not optional); for a model, the
    model and ``data`` (with the numbers of a :class:`WithNumbers`)."""
    if not isinstance(key, _Structure):
        def bind_model(data):
            if isinstance(data, WithNumbers):       # the model's own function, on them
                return key.with_numbers(data.numbers), data.data
            return key, data
        return bind_model
    model = key.template

    def bind(data):
        if not isinstance(data, WithNumbers):
            raise ArgumentTypeError(
                f"the functions of a {type(model).__name__} problem take its data "
                f"with the model's numeric hyperparameters (`problem.data`, a "
                f"WithNumbers), got {type(data).__name__}")
        return model.with_numbers(data.numbers), data.data
    return bind


class GLMStructure(NamedTuple):
    """design ``A (n, D)`` in the flat layout, responses ``y (n,)`` and the pure elementwise
    ``loss(eta, y)``: ``F(u, w) = sum_i w_i loss(a_i^T u, y_i) + R(u)``."""
    design: jax.Array
    y: jax.Array
    loss: Callable


@functools.partial(jit, static_argnums=0)
def _vmapped(fn, rows):
    return jax.vmap(fn)(rows)


@functools.lru_cache(maxsize=128)
def _functions(model, scheme, level, treedef, shapes):
    """Build ``(fun, heldout, unravel)`` for one model configuration and parameter layout.

    ``model`` hashes by its hyperparameters (:meth:`~approxcv.models.base.Model.static_key`),
    so equal configurations share the functions and hence every compiled kernel; a
    :class:`_Structure` by its structure, and ``fun``/``heldout`` then take the numeric
    hyperparameters with the data (:class:`WithNumbers`).

    ``fun`` and ``heldout`` are jitted, so inside the engine's programs they are nested
    calls: the model's Python is traced once per argument shapes, and every program that
    differentiates, batches or repeats them (the optimiser's loop and its Newton polish, the
    ``(F, g, H, J)`` sweep, a fit followed by exact refits) reuses that trace and its cached
    transforms instead of tracing the model again (the table test's fit/IJ/NS/exact rows:
    tracing 48.6 -> 35.6 s, 136 -> 121 s in all, measured side by side).
    """
    bind = binder(model)
    model = template(model)
    sizes = [int(np.prod(s)) for s in shapes]
    splits = np.cumsum(sizes)[:-1].tolist()
    built_in = all(getattr(c, "maps_numpy_rows", False) for c in jax.tree_util.tree_leaves(
        model.param_constraints(), is_leaf=lambda c: hasattr(c, "maps_numpy_rows")))

    def unravel(u):
        """Constrained parameters of ``u (D,)``; of every row of a NumPy ``u (F, D)``
        (leaves with a leading ``F`` axis, in NumPy when the constraints are built in)."""
        if isinstance(u, np.ndarray) and u.ndim == 2 and not built_in:
            return jax.tree_util.tree_map(np.asarray, _vmapped(unravel, jnp.asarray(u)))
        xp = array_module(u)
        leaves = [p.reshape(u.shape[:-1] + s)
                  for p, s in zip(xp.split(u, splits, axis=-1), shapes)]
        return model.constrain(jax.tree_util.tree_unflatten(treedef, leaves))

    @jit
    def fun(u, w, data):
        bound, data = bind(data)
        return bound.objective(unravel(u), data, w, scheme=scheme, level=level)

    @jit
    def heldout(u, w, data):
        bound, data = bind(data)
        return bound.heldout_loss(unravel(u), data, w, level=level)

    def window_heldout(u, start, w, context, data):
        bound, data = bind(data)
        return bound.window_heldout_loss(unravel(u), data, start, w, context)

    def lane_log_prior(u, data):
        bound, data = bind(data)
        return bound.log_prior(unravel(u), data)

    lanes = None
    if hasattr(model, "lane_potentials"):
        # the potentials and emissions are of the parameters alone (a model's numbers
        # enter its prior): with a structure's template a number read there would be NaN
        lanes = Lanes(lambda u: model.lane_potentials(unravel(u)), model.lane_emission,
                      lane_log_prior, lambda data: model.lane_series(bind(data)[1]))
    return fun, heldout, unravel, window_heldout, lanes


def flat_params(model, params):
    """``(u (D,), treedef, shapes)``: the unconstrained flat vector of ``params``."""
    leaves, treedef = jax.tree_util.tree_flatten(model.unconstrain(params))
    shapes = tuple(tuple(np.shape(leaf)) for leaf in leaves)
    xp = jnp if any(isinstance(leaf, jax.core.Tracer) for leaf in leaves) else np
    u = xp.concatenate([xp.ravel(xp.asarray(leaf, xp.float64)) for leaf in leaves])
    return u, treedef, shapes


def model_starts(model, prepared, level, restarts: int, seed: int = 1):
    """``(restarts, D)`` unconstrained starts from the model's own initialisation (exact-CV
    restarts; seed 1, so they differ from a fit's first start), or ``None`` for 0."""
    inits = model.init_params(prepared, level, int(restarts), seed) if restarts else []
    return (np.stack([np.asarray(flat_params(model, p)[0]) for p in inits]) if inits
            else None)


def make_problem(model, data, params, *, scheme: str = "A", level: str | None = None,
                 local: bool = False, restarts: int = 0, checked: bool = False,
                 known_optima=None) -> Problem:
    """Build the :class:`Problem` of ``model`` on ``data`` at the fitted ``params``.

    Args:
        model: an approxcv model (:class:`~approxcv.models.base.Model`).
        data: the user's data or the model's prepared data.
        params: full-data parameters; validated with ``model.check_params``.
        scheme, level: passed to the model's objective.
        local: use the model's smooth local surrogate (``model.local_model``) if it
            declares one (derivative-based methods on non-smooth objectives).
        restarts: starts to draw from the model's own initialisation
            (:func:`model_starts`, exact CV's restarts).
        checked: ``params`` were already validated by ``model.check_params``.
        known_optima: ``(A, D)`` unconstrained points of other local optima
            (``model.known_optima``), appended to the refits' starts (``auto``'s refits
            start there too, and test its folds against them).

    Raises:
        InvalidDataError: ``params`` lie on the boundary of their domain.
        ArgumentTypeError, InvalidArgumentError: ``params`` do not belong to ``model``.
    """
    prepared, level, n_units = model.prepare(data, level)
    if not checked:
        params = model.check_params(params, prepared, level)
    n_data, scale = n_units, model.objective_scale(prepared)    # the data's, not padding's
    if hasattr(model, "padded_units"):     # null units to a size bucket: shared programs
        prepared, n_units = model.padded_units(prepared, level)
    starts = model_starts(model, prepared, level, restarts)
    if known_optima is not None and len(known_optima):
        known = np.asarray(known_optima, np.float64).reshape(len(known_optima), -1)
        starts = known if starts is None else np.concatenate([np.asarray(starts), known])
    checker = functools.partial(model.fold_check, params, prepared)
    refit = None if local else model.batched_refit()
    estimators = model.own_estimators(params, prepared)
    surrogate = model.local_model(params, prepared) if local else None
    if surrogate is not None:
        model, params, prepared = surrogate
    u_full, treedef, shapes = flat_params(model, params)
    if not np.all(np.isfinite(np.asarray(u_full))):
        raise InvalidDataError("`params` lie on the boundary of their domain (a probability "
                               "or rate of 0); the unconstrained parameters are infinite")
    numeric = _numbers_as_arguments(model, refit, estimators)
    fun, heldout, unravel, window_heldout, lanes = _functions(
        _Structure(model) if numeric else model, scheme, level, treedef, shapes)
    glm = model.glm_structure(prepared)
    engine_data = prepared
    if numeric:
        engine_data = WithNumbers(prepared, {k: jnp.asarray(v)
                                             for k, v in model.numbers().items()})
    windows = None
    if scheme == "A" and getattr(model, "supports_windows", None) is not None \
            and model.supports_windows(prepared, level):
        windows = _LazyWindows(model, window_heldout, unravel, prepared, u_full)
    else:
        lanes = None
    splits = getattr(model, "objective_splits", None)
    return Problem(fun, heldout, engine_data, u_full, unravel, int(n_units),
                   float(n_data if scale is None else scale), starts,
                   (model, scheme, level), getattr(model, "refit_solver", None),
                   None if glm is None else GLMStructure(*glm), refit, checker,
                   getattr(model, "batch_rows", "vmap"), None, windows, lanes, estimators,
                   bool(splits(scheme, level)) if splits is not None else False)


def _numbers_as_arguments(model, refit, estimators) -> bool:
    """Whether the problem's functions take ``model``'s numeric hyperparameters as arguments
    (:class:`WithNumbers`): when it declares some and no function of the model's own reads
    the problem's data (a refit solver, its own estimators); otherwise they stay constants
    of the programs, compiled per value."""
    return (bool(getattr(model, "numeric_hyperparameters", ()))
            and refit is None and estimators is None)


@functools.partial(jit, static_argnums=(0, 1))
def _window_context(model, unravel, u, data):
    return model.window_context(unravel(u), data)


class _LazyWindows:
    """Called with no arguments: the :class:`Windows` (the boundary messages of the full fit
    are computed on first use only, one forward-backward pass). Picklable, so a
    :class:`Problem` can travel to worker processes (the messages are recomputed there)."""

    def __init__(self, model, window_heldout, unravel, data, u_full):
        self._args = (model, window_heldout, unravel, data, u_full)
        self._value = None

    def __call__(self) -> Windows:
        if self._value is None:
            model, window_heldout, unravel, data, u_full = self._args
            self._value = Windows(window_heldout, _window_context(
                model, unravel, jnp.asarray(u_full), data))
        return self._value

    def __getstate__(self):
        return {"_args": self._args, "_value": None}
