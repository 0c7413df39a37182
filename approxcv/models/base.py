"""The model protocol: what a model must say so that approxcv can cross-validate it.

A model is immutable hyperparameters plus pure functions of ``(params, data, weights)``:

* ``prepare(data, level) -> (prepared, level, n_units)``: validate the user's data once and
  return a pytree of arrays (``level`` is ``"within"``: units are points of one structure,
  or ``"structure"``: units are whole structures);
* ``objective(params, data, weights, scheme, level)``: the weighted objective
  ``F(theta, w)``, e.g. a weighted negative log joint plus the negative log prior;
* ``heldout_loss(params, data, weights, level) -> (fold_loss, point_losses (n,))``: for the
  units with weight 0 (:func:`left_out`), ``-log p(x_o | x_kept)`` jointly and
  ``-log p(x_t | x_kept)`` per unit, in the full model; 0 at every kept unit, so a fold that
  leaves nothing out has fold loss 0 and no point losses;
* ``init_params(data, level, n, seed) -> list``: ``n`` starting parameter sets;
* ``param_constraints()``: a tree beside the parameters whose leaves are
  :class:`~approxcv.models.constraints.Constraint` bijectors (``constrain``/``unconstrain``
  and the validation of user parameters derive from it);
* ``fit(data, level=None)``: the full-data fit; the default (:meth:`Model.fit`) is the MAP
  by approxcv's optimiser from ``init_params`` (``n_init`` starts).

``prepare`` receives the user's data: the engine passes data through it several times, but
a model's own output comes back unchanged (:func:`prepares_once`), so ``prepare`` need not
accept it; ``fit``, ``objective``, ``heldout_loss`` and ``init_params`` receive prepared
data.

Optional capabilities are *declared* here with their defaults, never sniffed:
``objective_scale(data)`` (normaliser of optimiser tolerances, default ``n_units``),
``local_model(params, data)`` (a smooth surrogate for non-smooth objectives, default
``None``), ``refit_solver`` (the exact-CV optimiser a model prefers, default ``None``: by
size), ``refit_restarts`` (default number of extra exact-CV starts, ``None``: by size),
``batch_rows`` (how the optimisers evaluate a batch of starts or folds: ``"vmap"``, or
``"map"`` — in sequence, on CPU — for objectives with a recursion over time),
``compute_profile`` (``"sequential"``: recursions over time, run on the host's CPU beside an
accelerator, :mod:`approxcv._runtime.placement`; default ``None``) and, for ERM,
``glm_structure``, ``batched_refit`` and ``fold_check`` (below), ``own_estimators``
(a model that computes its cross-validation methods itself: Gaussian processes) and
``fit_concerns(params, data)`` (reasons the fit may not be the optimum, e.g. an HMM's
coinciding states; every fold of an approximate method is then marked) and
``known_optima(params, data)`` (other local optima: a fold's estimate above one of them on
the fold's objective is marked ``"other_basin"``).

Parameters are checked at every entry point: a subclass's methods named in
:data:`PARAMS_ENTRY_POINTS` (``objective``, ``heldout_loss``, ``predict``, ...) are wrapped
so that concrete ``params`` go through :meth:`Model.check_params` — the one check that
``cross_validate`` applies — before the method runs: structure and type, shapes on the
data (when the method takes the model's ``data``), finite values inside the constraints'
domains. Traced parameters (under ``jit``, ``grad``, ``vmap``: the engine's calls) pass
unchecked, so the check costs nothing in compiled code.

Hyperparameters are hashable by construction: :meth:`Model.static_key` is the tuple of
public attributes (a model with an unhashable hyperparameter — a graph, a kernel — must
override it), and models compare and hash by it, so compiled functions are cached per
model configuration. Hyperparameters a model declares numeric
(:attr:`Model.numeric_hyperparameters`, e.g. an ERM's penalty weight) are arguments of
those functions instead: they are cached per :meth:`Model.structure_key`.
"""
from __future__ import annotations

import functools
import inspect

import jax
import numpy as np

from . import constraints as C
from ..errors import ArgumentTypeError, InvalidArgumentError
from ..fitting import map_fit

__all__ = ["Model", "left_out", "check_model", "check_weights", "PARAMS_ENTRY_POINTS",
           "checks_params"]

#: what ``cross_validate`` needs of a model (duck-typed: subclassing :class:`Model` is the
#: easy way to have them all)
PROTOCOL = ("prepare", "objective", "heldout_loss", "init_params", "param_constraints", "fit",
            "check_params", "local_model", "objective_scale")


#: public methods whose first argument after ``self`` is ``params``: every subclass's
#: definition of one is wrapped by :func:`checks_params` (a method with an argument named
#: ``data`` also gets its shapes checked on those data)
PARAMS_ENTRY_POINTS = ("objective", "heldout_loss", "predict", "predict_proba",
                       "predict_mean", "predict_linear", "posterior_marginals",
                       "log_marginal_likelihood", "marginals", "decode", "score", "forecast",
                       "sample")


def _traced(tree) -> bool:
    return any(isinstance(leaf, jax.core.Tracer) for leaf in jax.tree_util.tree_leaves(tree))


def checks_params(method):
    """Wrap a model method ``method(self, params, ...)`` so that concrete ``params`` are
    validated by ``self.check_params`` first (on the method's ``data`` and ``level`` when
    it takes them); traced ``params`` or ``data`` (compiled code) pass through unchecked.
    The method then runs on the ``params`` it was given."""
    if getattr(method, "_checks_params", False):
        return method
    signature = inspect.signature(method)
    takes_data = "data" in signature.parameters

    @functools.wraps(method)
    def checked(self, params, *args, **kwargs):
        if not _traced(params):
            data = level = None
            if takes_data:
                bound = signature.bind_partial(self, params, *args, **kwargs).arguments
                data, level = bound.get("data"), bound.get("level")
                if data is not None and _traced(data):
                    data = None
            self.check_params(params, data, level)
        return method(self, params, *args, **kwargs)

    checked._checks_params = True
    return checked


#: the attribute holding a model's last ``prepare`` output (:func:`prepares_once`)
_PREPARED = "_prepared_last"


def prepares_once(prepare):
    """``prepare`` that returns its last output unchanged when given that output's prepared
    data again (the same object, at its level or ``level=None``).

    ``cross_validate``, ``fit`` and the engine each pass the data through ``prepare``; the
    first call receives the user's data, the later ones its output. With this wrapper a
    model's ``prepare`` only ever sees the user's data (and data it has not prepared
    itself), so it need not accept its own output — a user's ``prepare`` that reads, say, a
    DataFrame is not handed a dict of arrays. The output is kept on the model (not pickled:
    :meth:`Model.__getstate__`)."""
    @functools.wraps(prepare)
    def prepared_once(self, data, level=None):
        last = self.__dict__.get(_PREPARED)
        if last is not None and data is last[0] and level in (None, last[1]):
            return last
        out = prepare(self, data, level)
        if isinstance(out, tuple) and len(out) == 3:
            self.__dict__[_PREPARED] = out
        return out
    prepared_once.__wrapped_prepare__ = prepare
    return prepared_once


def check_model(model) -> None:
    """Raise :class:`~approxcv.errors.ArgumentTypeError` naming what ``model`` lacks."""
    missing = [a for a in PROTOCOL if not callable(getattr(model, a, None))]
    if missing:
        raise ArgumentTypeError(f"`model` must implement the model protocol "
                                f"(approxcv.models.base.Model); {type(model).__name__} lacks "
                                f"{missing}")


def left_out(weights):
    """``True`` where a unit is left out: its weight is exactly 0 (the one definition)."""
    return weights == 0


def check_weights(weights, n: int, unit: str = "unit"):
    """``weights`` as a float64 array of shape ``(n,)`` (one per ``unit``).

    Raises:
        InvalidArgumentError: another shape.
    """
    import jax.numpy as jnp
    weights = jnp.asarray(weights, dtype=jnp.float64)
    if weights.shape != (n,):
        raise InvalidArgumentError(
            f"`weights` must have shape ({n},) (one per {unit}), got {weights.shape}")
    return weights


class Model:
    """Base class of approxcv models (see the module docstring for the protocol)."""

    #: the method ``cross_validate`` uses when none is given
    default_method: str = "ij"
    #: exact-CV refit optimiser this model prefers (``"bfgs"``, ``"newton"``, ``"lbfgs"``)
    refit_solver: str | None = None
    #: default number of exact-CV refits from the model's own starts besides the warm start
    refit_restarts: int | None = None
    #: how batched optimisers evaluate the rows (starts, folds) of a batch:
    #: :func:`approxcv.optim.quasi_newton.over_rows` (``"vmap"`` or ``"map"``)
    batch_rows: str = "vmap"
    #: what the model's programs are (:mod:`approxcv._runtime.placement`): ``"sequential"`` for
    #: recursions over time, which run on the host's CPU beside an accelerator
    compute_profile: str | None = None

    def __init_subclass__(cls, **kwargs):
        """Wrap the subclass's own :data:`PARAMS_ENTRY_POINTS` in :func:`checks_params`,
        and its ``prepare`` in :func:`prepares_once`."""
        super().__init_subclass__(**kwargs)
        for name in PARAMS_ENTRY_POINTS:
            method = cls.__dict__.get(name)
            if inspect.isfunction(method):
                setattr(cls, name, checks_params(method))
        if inspect.isfunction(cls.__dict__.get("prepare")):
            cls.prepare = prepares_once(cls.__dict__["prepare"])

    def __getstate__(self):
        """The model's attributes without the last prepared data (:func:`prepares_once`):
        a model sent to a worker does not carry a copy of the data with it."""
        state = dict(self.__dict__)
        state.pop(_PREPARED, None)
        return state

    # ----------------------------------------------------------- identity
    def static_key(self) -> tuple:
        """Hashable snapshot of the hyperparameters: public attributes not ending in ``_``.

        Raises:
            TypeError: an attribute is unhashable (override ``static_key`` for it).
        """
        items = tuple(sorted((k, v) for k, v in vars(self).items()
                             if not k.endswith("_") and not k.startswith("_")))
        for k, v in items:
            try:
                hash(v)
            except TypeError as exc:
                raise TypeError(
                    f"{type(self).__name__}.{k} is unhashable ({type(v).__name__}); "
                    "override static_key() to give a hashable summary of it") from exc
        return items

    #: names of hyperparameters that are real numbers (a float, or a tuple of floats) and
    #: enter only the arithmetic of ``objective`` and ``heldout_loss`` — never a shape, a
    #: branch or a loop count. Cross-validation passes them to its compiled programs as
    #: arguments (:func:`approxcv.problem.make_problem`), so models that differ only in
    #: them share every program: a penalty weight tuned or compared over a grid compiles once
    numeric_hyperparameters: tuple = ()

    def numbers(self) -> dict:
        """``{name: float64 array}`` of the :attr:`numeric_hyperparameters`."""
        return {k: np.asarray(getattr(self, k), dtype=np.float64)
                for k in self.numeric_hyperparameters}

    def with_numbers(self, numbers: dict):
        """A copy of this model whose numeric hyperparameters are ``numbers`` (arrays of
        the shapes :meth:`numbers` gives; traced inside compiled programs), unchecked:
        the engine's way to evaluate one model structure at many values."""
        new = object.__new__(type(self))
        new.__dict__.update(self.__getstate__())
        for k, v in numbers.items():
            setattr(new, k, v)
        return new

    def structure_key(self) -> tuple:
        """:meth:`static_key` with each numeric hyperparameter's value replaced by its
        shape: equal for models whose compiled programs can be shared."""
        numeric = set(self.numeric_hyperparameters)
        return tuple((k, ("numeric", np.shape(v)) if k in numeric else v)
                     for k, v in self.static_key())

    def __eq__(self, other):
        return type(self) is type(other) and self.static_key() == other.static_key()

    def __hash__(self):
        return hash((type(self), self.static_key()))

    # ------------------------------------------------------------ protocol
    def prepare(self, data, level: str | None = None):
        raise NotImplementedError

    def objective(self, params, data, weights, scheme: str = "A", level: str | None = None):
        raise NotImplementedError

    def heldout_loss(self, params, data, weights, level: str | None = None):
        raise NotImplementedError

    def init_params(self, data, level: str | None = None, n: int = 1, seed: int = 0) -> list:
        raise NotImplementedError

    def param_constraints(self):
        raise NotImplementedError

    #: starts (``init_params(data, level, n_init, seed)``) and step limit of the default
    #: :meth:`fit`; a subclass or an instance may set its own
    n_init: int = 1
    seed: int = 0
    max_steps: int = 1000

    def fit(self, data, level: str | None = None):
        """MAP fit by approxcv's optimiser (the default; a model may fit its own way):
        ``argmin_u F(u, 1)`` from the ``n_init`` starts of :meth:`init_params` (``seed``),
        BFGS then two Newton steps, the best start kept
        (:func:`approxcv.fitting.map_fit`); returns constrained parameters in the
        structure of :meth:`init_params`' and records the run in ``self.fit_result_``.
        ``data`` is the user's data (``prepare`` is applied here, once)."""
        prepared, level, _ = self.prepare(data, level)
        starts = self.init_params(prepared, level, int(self.n_init), int(self.seed))
        params, self.fit_result_ = map_fit(self, prepared, level, starts, int(self.max_steps))
        return jax.tree_util.tree_map(np.asarray, params)

    # -------------------------------------------------------- capabilities
    def comparable_data(self, data):
        """The user's ``data`` as results are matched on (``CVResult.fingerprint``,
        :func:`approxcv.compare`): two codings the model reads alike must give equal
        values (the default: ``data`` itself; a GP maps labels -1/+1 to 0/1)."""
        return data

    def objective_scale(self, data) -> float | None:
        """Normaliser of ``F`` for optimiser tolerances (``None``: the number of units)."""
        return None

    def objective_splits(self, scheme: str, level: str) -> bool:
        """Whether, at 0/1 weights, the weighted objective splits as ``F(u, w_o) = F(u, 1) -
        L_o(u)``, ``L_o`` the fold loss of :meth:`heldout_loss`, for every ``u``: true of
        i.i.d. losses and of latent-variable models whose weight 0 removes a unit's
        emission (scheme A), not of scheme B's weighted latent terms. The IJ's screened
        error estimate relies on it (:mod:`approxcv.engine.error_estimate`); the default
        ``False`` takes the full estimate on every fold. The all-models table test checks
        the claim numerically."""
        return False

    def local_model(self, params, data):
        """``(model, params, data)`` of a smooth local surrogate, or ``None`` (smooth)."""
        return None

    def padded_units(self, data, level: str):
        """``(data, n)``: prepared ``data`` padded with null units to a size bucket
        (:func:`approxcv._runtime.sizes.length_bucket`) and its number of units ``n``, so that data
        of similar sizes share one set of compiled programs (fits and cross-validation).
        A null unit adds nothing to the objective nor to any held-out loss, at any weight:
        every fold's result is the same as on ``data``. The default pads nothing:
        ``(data, units of data)``. Padding again changes nothing."""
        return data, self.prepare(data, level)[2]

    def fit_concerns(self, params, data=None, level: str | None = None) -> dict:
        """``{name: message}``: reasons why ``params`` may not be the optimum that every
        fold's estimate is derived from (e.g. an HMM whose states coincide, a symmetric
        stationary point). ``cross_validate`` records them in
        ``diagnostics["fit_concerns"]`` and marks every fold of an approximate method
        unreliable (cause ``"fit_may_not_be_optimum"``). Default: none."""
        return {}

    def known_optima(self, params, data=None, level: str | None = None) -> list:
        """Parameter sets of other local optima of this model's objective known besides
        ``params`` (e.g. where the fit's other starts ended). ``cross_validate`` marks a
        fold of an approximate method ``"other_basin"`` where one of them is lower on the
        fold's objective than the fold's estimate
        (:mod:`approxcv.engine.other_basins`). Default: none."""
        return []

    def own_estimators(self, params, data) -> dict | None:
        """``{method name: fn(folds, options) -> (fold_loss (F,), points (F, m),
        diagnostics)}`` when this model computes its cross-validation itself (a GP: its
        hyperparameters stay at the full-data fit and every method, ``"exact"`` included,
        works on its latent posterior), else ``None`` (the engine's methods on
        ``objective``). When given, the engine's registered methods of those names call
        them and every other method is refused by name (``UnsupportedMethodError``);
        ``diagnostics["unreliable"]`` marks folds as for any method."""
        return None

    # ERM capabilities (approxcv.models.erm): GLM structure, a non-smooth refit solver and
    # a per-fold check of the approximation's assumptions (the elastic net's L1 support)
    def glm_structure(self, data):
        """``(design A (n, D), y (n,), loss)`` when ``F(u, w) = sum_i w_i loss(a_i^T u, y_i)
        + R(u)`` in the flat unconstrained layout (``loss`` pure and elementwise: the ERM
        fast paths of ``ns``/``ij``), else ``None``."""
        return None

    def batched_refit(self):
        """Exact-CV solver made for this model's objective (e.g. proximal for a non-smooth
        one), ``solve(u0s (b, D), weights (b, n), data) -> MinimizeResult``, or ``None``.
        In process, exact CV calls it from several threads at once (one batch per core):
        it must keep no state between calls."""
        return None

    def fold_check(self, params, data, fold_params, index, warn: bool = True) -> dict:
        """``{name: (n_folds,) bool}`` folds whose parameters ``fold_params (n_folds, D)``
        (folds: padded ``index``) break an assumption of the approximation (e.g. the L1
        support changes); reported in the diagnostics of every method."""
        return {}

    @property
    def checks_folds(self) -> bool:
        """Whether the model overrides :meth:`fold_check` (its folds are checked)."""
        return type(self).fold_check is not Model.fold_check

    # ------------------------------------------------ derived from the above
    def unconstrain(self, params):
        """Constrained parameters -> the unconstrained tree used for ``H`` and ``J``."""
        return C.unconstrain(self.param_constraints(), params)

    def constrain(self, u_tree):
        """Unconstrained tree -> constrained parameters."""
        return C.constrain(self.param_constraints(), u_tree)

    def params_template(self, data, level: str | None = None):
        """Parameters with the structure and shapes this model has on ``data``."""
        return self.init_params(data, level, 1, 0)[0]

    def check_params(self, params, data=None, level: str | None = None, name: str = "params"):
        """Validate ``params`` against this model: type and tree structure, shapes on
        ``data`` (skipped when ``data`` is ``None``), finite values inside each
        constraint's domain. The one parameter check of every entry point
        (:data:`PARAMS_ENTRY_POINTS`, ``cross_validate``, :func:`approxcv.make_problem`).

        Returns:
            ``params`` with float64 NumPy leaves.

        Raises:
            ArgumentTypeError: another parameter type, or a leaf that is not numeric.
            InvalidArgumentError: another structure, wrong shapes (e.g. another number of
                states; the message names the leaf and both shapes) or values outside the
                domain (a NaN, a probability that does not sum to one).
        """
        constraints = self.param_constraints()
        c_leaves, c_treedef = jax.tree_util.tree_flatten(
            constraints, is_leaf=lambda c: isinstance(c, C.Constraint))
        template = None if data is None else self.params_template(data, level)
        want = type(constraints) if template is None else type(template)
        if want not in (tuple, list) and type(params) is not want:
            raise ArgumentTypeError(
                f"`{name}` must be {want.__name__} for {self!r}, got {type(params).__name__}")
        leaves, treedef = jax.tree_util.tree_flatten(params)
        t_treedef = (c_treedef if template is None
                     else jax.tree_util.tree_structure(template))
        if treedef != t_treedef:
            raise InvalidArgumentError(f"`{name}` has structure {treedef}, but {self!r} needs "
                                       f"{t_treedef}")
        fields = getattr(type(params), "_fields", None)
        if not fields or len(fields) != len(leaves):
            fields = [f"leaf {i}" for i in range(len(leaves))]
        arrays = []
        for f, p in zip(fields, leaves):
            try:
                arr = np.asarray(p, dtype=np.float64)
            except (TypeError, ValueError):
                raise ArgumentTypeError(f"`{name}.{f}` must be a numeric array, got "
                                        f"{type(p).__name__}") from None
            arrays.append(arr)
        if template is not None:
            for f, p, t in zip(fields, arrays, jax.tree_util.tree_leaves(template)):
                if np.shape(p) != np.shape(t):
                    raise InvalidArgumentError(
                        f"`{name}.{f}` has shape {np.shape(p)} but {self!r} on these data "
                        f"needs {np.shape(t)}; were the parameters fitted with another model "
                        "or on other data?")
        params = jax.tree_util.tree_unflatten(treedef, arrays)
        problems = C.check_constraints(constraints, params, name)
        if problems:
            raise InvalidArgumentError("; ".join(problems))
        return params

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.static_key())
        return f"{type(self).__name__}({args})"
