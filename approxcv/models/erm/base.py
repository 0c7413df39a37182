"""Shared machinery of GLM-type regularised empirical risk minimisation (ERM).

Every model here minimises

    F(theta, b; w) = sum_i w_i phi(eta_i, y_i) + lam^T r(theta),   eta_i = x_i^T theta + b,

over coefficients ``theta`` (``p``) and an unpenalised intercept ``b``; ``w`` switches samples
on (1) or off (0), so the units of cross-validation are samples (level ``"within"``).
The held-out loss of a left-out sample is its training loss ``phi(eta_i, y_i)``.

A concrete model supplies only the elementwise loss ``phi`` (:meth:`ERM.loss`), the
validation of ``y`` and, if not ridge-type, its regularisers ``r``. The flat parameter
vector is ``u = (theta, b)`` (``D = p + 1``, or ``p`` without intercept) and the design row
of sample ``i`` is ``a_i = (x_i, 1)``, so ``eta = A u``; this is the layout
:func:`approxcv.problem.make_problem` produces from the parameter NamedTuple
``(coef (p,), intercept ())`` — without an intercept, ``intercept`` has shape ``(0,)``.

Cross-validation goes through :func:`approxcv.cross_validate` like every model. An ERM
model declares its GLM structure (:meth:`ERM.glm_structure`), so the ``ns`` method (ALOOCV)
uses rank-one Cholesky downdates of one factor and the ``ij`` method a closed-form ``J``;
fits and exact refits use :func:`approxcv.optim.minimize` — BFGS with the safeguarded
Newton polish, which ends at a round-off-level gradient (exact refits match independent
solvers to ~1e-13) — the elastic net its own proximal solver, ridge fits their closed form.
"""
from __future__ import annotations

import functools
import warnings
from functools import partial
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...errors import user_stacklevel
from ..._validate import as_real_array, check_finite, check_positive_int
from ..._runtime import jit
from ...fitting import single_run
from ...optim import batched_minimize
from .. import constraints as C
from ..base import Model, check_weights, left_out
from ...errors import (ArgumentTypeError, ConvergenceWarning, FitError, InvalidArgumentError,
                      InvalidDataError)

__all__ = ["ERM", "ERMData", "SmoothERM", "check_lam", "design_matrix", "weights_array"]


class ERMData(NamedTuple):
    """Prepared i.i.d. data: features ``X`` ``(n, p)`` and responses ``y`` ``(n,)``."""
    X: jax.Array
    y: jax.Array

    @property
    def num_samples(self) -> int:
        return int(self.X.shape[0])


class SmoothERM(NamedTuple):
    """A smooth GLM-type ERM around a fit, as tuning differentiates it in ``lam``.

    ``F(u, w; lam) = sum_i w_i loss_fn(a_i^T u, y_i) + penalty_fn(u, lam, aux)``.

    design: ``A`` ``(n, D)``; y: ``(n,)``; u: ``(D,)`` the fit; lam: ``(m,)``;
    aux: extra arrays for ``penalty_fn`` (``None``, or the elastic net's signs and
    support); loss_fn, penalty_fn: pure callables. The layout is the model's flat vector.
    """
    design: jax.Array
    y: jax.Array
    u: jax.Array
    lam: jax.Array
    aux: Any
    loss_fn: Callable
    penalty_fn: Callable


def check_lam(value, name: str = "lam"):
    """Return a non-negative finite penalty weight as ``float`` or ``tuple`` of floats."""
    if isinstance(value, (str, bytes)) or value is None:
        raise ArgumentTypeError(f"`{name}` must be a number or a 1-D array of numbers")
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(f"`{name}` must be a number or a 1-D array of numbers") from exc
    if arr.ndim > 1 or arr.size == 0:
        raise InvalidArgumentError(f"`{name}` must be a scalar or a non-empty 1-D array, "
                                   f"got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise InvalidArgumentError(f"`{name}` must be finite, got {value!r}")
    if np.any(arr < 0):
        raise InvalidArgumentError(f"`{name}` must be >= 0, got min {arr.min():.3g}")
    return float(arr) if arr.ndim == 0 else tuple(float(v) for v in arr)


def weights_array(lam):
    """``lam`` (a number or a tuple of them) as a float64 ``(m,)`` array: NumPy where its
    values are concrete (the host's: an eager ``jax.numpy`` conversion compiles a small
    program in every process), ``jax.numpy`` where they are traced (the engine passes
    numbers as arguments of its programs)."""
    traced = any(isinstance(v, jax.core.Tracer) for v in jax.tree_util.tree_leaves(lam))
    xp = jnp if traced else np
    return xp.atleast_1d(xp.asarray(lam, dtype=xp.float64))


@partial(jit, static_argnums=1)
def design_matrix(X, fit_intercept: bool, column_mask=None):
    """``A = [X, 1]`` (``(n, p + 1)``) or ``X`` without intercept; ``column_mask (p,)``:
    ``X``'s columns multiplied by it first (in the program, not eagerly)."""
    if column_mask is not None:
        X = X * column_mask
    if not fit_intercept:
        return X
    return jnp.concatenate([X, jnp.ones((X.shape[0], 1), X.dtype)], axis=1)


@functools.lru_cache(maxsize=64)
def _flat_objective(loss_fn, penalty_fn):
    """``fun(u, w, (A, y, lam, aux)) = sum w_i phi(a_i^T u, y_i) + penalty(u, lam, aux)``.

    Built once per (loss, penalty) pair so that the optimiser compiles once per model.
    """
    def fun(u, w, args):
        design, y, lam, aux = args
        return jnp.sum(w * loss_fn(design @ u, y)) + penalty_fn(u, lam, aux)
    return fun


def ridge_total(coef, aux=None):
    """``r(theta) = [||theta||^2 / 2]`` (one penalty weight), shape ``(1,)``."""
    return jnp.atleast_1d(0.5 * jnp.sum(coef ** 2))


def ridge_per_coefficient(coef, aux=None):
    """``r(theta) = theta_j^2 / 2`` (one weight per coefficient), shape ``(p,)``."""
    return 0.5 * coef ** 2


# sums of per-coefficient terms: ``lam^T r`` has a diagonal Hessian (tuning uses it)
ridge_total.separable = ridge_per_coefficient.separable = True


@functools.lru_cache(maxsize=64)
def penalty_function(regularizers, fit_intercept: bool):
    """``penalty(u, lam, aux) = lam^T r(theta)`` on the flat ``u = (theta, b)``.

    Cached per (regulariser, intercept) so that every model instance with the same
    structure shares one function, and jitted kernels compile once, not once per ``lam``.
    """
    def penalty(u, lam, aux=None):
        coef = u[:u.shape[0] - int(fit_intercept)]
        return jnp.dot(lam, regularizers(coef, aux))
    penalty.separable = bool(getattr(regularizers, "separable", False))
    return penalty


class ERM(Model):
    """Base class: weighted loss sum plus ``lam^T r(theta)`` (see module docstring).

    Args:
        lam: penalty weight, a scalar or one per coefficient (``>= 0``).
        fit_intercept: fit an unpenalised intercept.
        max_steps: BFGS step limit of a fit (models without a closed form).

    Subclasses set ``params_type`` (a NamedTuple ``(coef, intercept)``) and implement
    :meth:`loss` and :meth:`_validate_y`.
    """
    params_type: type = None
    #: exact-CV refits: BFGS + Newton polish from the fit (convex objective: no restarts).
    #: Not "newton": optim.newton_minimize stops once its sufficient-decrease test is lost
    #: in round-off, at gradients ~1e-7 (LOO losses off by ~1e-7 relative)
    refit_solver = "bfgs"
    #: ALOOCV (one Newton step per fold) by default: the IJ under-corrects leave-one-out at
    #: weak regularisation and on near-separable data (docs/erm.md)
    default_method = "ns"
    refit_restarts = 0
    #: the penalty is smooth in ``theta``, so ALOOCV is smooth in ``lam``
    #: (``tune_regularization`` may take Newton steps on it)
    smooth_penalty = True
    #: the penalty weight is an argument of the compiled programs of cross-validation, so
    #: models at other weights (tuning, a grid, an estimator's search) reuse them
    numeric_hyperparameters = ("lam",)

    def __init__(self, lam=1.0, *, fit_intercept: bool = True, max_steps: int = 1000):
        self.lam = check_lam(lam, "lam")
        self.fit_intercept = bool(fit_intercept)
        self.max_steps = check_positive_int("max_steps", max_steps)
        self.fit_result_: dict | None = None

    # --------------------------------------------------------------- hooks
    @staticmethod
    def loss(eta, y):
        """Elementwise training (and held-out) loss ``phi(eta, y)``."""
        raise NotImplementedError

    def _validate_y(self, y: np.ndarray) -> np.ndarray:
        """Model-specific checks of the (finite, 1-D) responses."""
        return y

    def regularizer_function(self):
        """The pure ``r(theta, aux) -> (m,)``: :func:`ridge_total` for a scalar ``lam``,
        :func:`ridge_per_coefficient` for one weight per coefficient."""
        # by dimension, not type: inside compiled programs lam is an array (with_numbers)
        return ridge_per_coefficient if np.ndim(self.lam) == 1 else ridge_total

    def regularizers(self, coef, aux=None):
        """``r(theta)`` ``(m,)``."""
        return self.regularizer_function()(coef, aux)

    @property
    def penalty(self):
        """``penalty(u, lam, aux=None) = lam^T r(theta)`` on the flat vector ``u`` (intercept
        unpenalised); a function shared by all instances of the same structure."""
        return penalty_function(self.regularizer_function(), self.fit_intercept)

    def lam_vector(self):
        """The penalty weights as an ``(m,)`` array (``m`` = number of regularisers):
        :func:`weights_array` of ``lam``."""
        return weights_array(self.lam)

    def with_lam(self, lam) -> "ERM":
        """A copy of this model with penalty weights ``lam`` (``(m,)``, as :meth:`lam_vector`)."""
        lam = np.asarray(lam, dtype=np.float64).reshape(-1)
        new = self._copy()
        new.lam = check_lam(lam if isinstance(self.lam, tuple) else lam[0], "lam")
        return new

    def _copy(self) -> "ERM":
        new = object.__new__(type(self))
        new.__dict__.update(self.__dict__)
        new.fit_result_ = None
        return new

    # ---------------------------------------------------------------- data
    def prepare(self, data, level: str | None = None):
        """Validate ``data = (X, y)`` and return ``(ERMData, "within", n)``.

        Raises:
            InvalidArgumentError: ``level`` is not ``None``/``"within"`` (samples are the
                only units of an i.i.d. model), or ``lam`` has the wrong length.
            InvalidDataError: wrong shapes, mismatched lengths, NaN/inf, invalid ``y``.
        """
        if level not in (None, "within"):
            raise InvalidArgumentError(
                f"`level` must be 'within' for {type(self).__name__} (its units are the "
                f"samples; there is no 'structure' level), got {level!r}")
        if isinstance(data, ERMData):
            return data, "within", data.num_samples
        if not isinstance(data, (tuple, list)) or len(data) != 2:
            raise ArgumentTypeError(f"`data` must be a tuple (X, y), got {type(data).__name__}")
        X, y = as_real_array("X", data[0]), as_real_array("y", data[1])
        if X.ndim != 2:
            raise InvalidDataError(f"`X` must be 2-D (n_samples, n_features), got shape {X.shape}")
        if y.ndim != 1:
            raise InvalidDataError(f"`y` must be 1-D (n_samples,), got shape {y.shape}")
        if X.shape[0] != y.shape[0]:
            raise InvalidDataError(f"`X` has {X.shape[0]} rows but `y` has {y.shape[0]} entries")
        if X.shape[0] < 2:
            raise InvalidDataError(f"`X` needs at least 2 samples, got {X.shape[0]}")
        if X.shape[1] < 1:
            raise InvalidDataError("`X` has no features")
        X, y = check_finite("X", X).astype(np.float64), check_finite("y", y).astype(np.float64)
        y = self._validate_y(y)
        self._check_lam_length(X.shape[1])
        return ERMData(jnp.asarray(X), jnp.asarray(y)), "within", X.shape[0]

    def _check_lam_length(self, p: int):
        if isinstance(self.lam, tuple) and len(self.lam) != p:
            raise InvalidArgumentError(
                f"`lam` has {len(self.lam)} entries but `X` has {p} features; give a "
                "scalar or one weight per feature")

    def design(self, data) -> jax.Array:
        """``A`` ``(n, D)``: the features with a column of ones if there is an intercept."""
        return design_matrix(data.X, self.fit_intercept)

    def objective_scale(self, data: ERMData) -> float:
        """Number of samples (normalises optimiser tolerances)."""
        return float(data.num_samples)

    # ---------------------------------------------------------- parameters
    def param_constraints(self):
        """Coefficients and intercept are unconstrained."""
        return self.params_type(C.Real(), C.Real())

    def init_params(self, data, level: str | None = None, n: int = 1, seed: int = 0) -> list:
        """``n`` starts: zeros, then small Gaussian coefficients (seeded)."""
        data, _, _ = self.prepare(data, level)
        # the design's shape only: traced, not compiled (a program per data shape)
        dim = jax.eval_shape(self.design, data).shape[1]
        rng = np.random.default_rng(seed)
        return [self.flat_to_params(np.zeros(dim) if i == 0 else 0.1 * rng.normal(size=dim))
                for i in range(n)]

    def params_to_flat(self, params) -> jax.Array:
        """``u = (coef, intercept)`` ``(D,)``: NumPy for NumPy parameters (an eager
        ``jax.numpy`` concatenation is a program call: about 1 ms per call on CPU, twice in
        every scikit-learn estimator's fit), ``jax.numpy`` otherwise (traced or device)."""
        xp = np if all(isinstance(p, (np.ndarray, np.generic, float, int)) for p in params) \
            else jnp
        return xp.concatenate([xp.ravel(xp.asarray(p, xp.float64)) for p in params])

    def flat_to_params(self, u):
        """Inverse of :meth:`params_to_flat` (NumPy arrays)."""
        u = np.asarray(u, dtype=np.float64)
        if self.fit_intercept:
            return self.params_type(u[:-1], np.asarray(u[-1]))
        return self.params_type(u, np.zeros((0,)))

    def num_coef(self, dim: int) -> int:
        """Number of coefficients ``p`` in a flat vector of length ``dim``."""
        return dim - int(self.fit_intercept)

    # ------------------------------------------------------ objective & loss
    def objective(self, params, data, weights, scheme: str = "A", level: str | None = None):
        """``F(theta, w) = sum_i w_i phi(x_i^T theta + b, y_i) + lam^T r(theta)``.

        Args:
            params: ``(coef (p,), intercept)``; data: ``(X, y)`` or :class:`ERMData`;
            weights: ``(n,)``; scheme: ignored (i.i.d. samples: schemes A and B coincide).
        """
        data, _, n = self.prepare(data, level)
        weights = check_weights(weights, n, "sample")
        u = self.params_to_flat(params)
        return (jnp.sum(weights * self.loss(self.design(data) @ u, data.y))
                + self.penalty(u, self.lam_vector(), self.penalty_aux()))

    def objective_splits(self, scheme: str, level: str) -> bool:
        """``sum_i w_i phi_i + penalty``: always."""
        return True

    def heldout_loss(self, params, data, weights, level: str | None = None):
        """Held-out losses ``(fold_loss, point_losses (n,))`` of the samples with weight 0.

        ``point_losses[i] = phi(x_i^T theta + b, y_i)`` where ``weights[i] == 0`` and 0
        elsewhere; ``fold_loss`` is their sum.
        """
        data, _, n = self.prepare(data, level)
        weights = check_weights(weights, n, "sample")
        eta = self.design(data) @ self.params_to_flat(params)
        points = jnp.where(left_out(weights), self.loss(eta, data.y), 0.0)
        return jnp.sum(points), points

    def predict_linear(self, params, X):
        """Linear predictor ``X theta + b`` ``(n,)``."""
        X = jnp.asarray(X, dtype=jnp.float64)
        return X @ jnp.asarray(params[0]) + jnp.sum(jnp.asarray(params[1]))

    # ----------------------------------------------------------------- fit
    def fit(self, data, level: str | None = None):
        """Minimise ``F(theta, 1)``; returns ``params_type(coef, intercept)`` (NumPy).

        The run is recorded in ``self.fit_result_``.

        Raises:
            FitError: the objective is non-finite at the solution.
        Warns:
            ConvergenceWarning: the optimiser stopped before its criterion was met.
        """
        data, _, _ = self.prepare(data, level)
        u, info = self.fit_flat(data, self.lam_vector())
        self.fit_result_ = info
        return self.flat_to_params(u)

    def fit_flat(self, data: ERMData, lam, u0=None, weights=None):
        """Fit on prepared data at penalty weights ``lam`` from ``u0`` (warm start).

        Default: BFGS with four safeguarded Newton polish steps
        (:func:`approxcv.optim.batched_minimize`), ending at a round-off-level gradient.

        Returns:
            ``(u (D,), info)`` with ``info`` a dict (objective, grad_norm, converged, steps).
        """
        design = self.design(data)
        n, dim = design.shape
        fun = _flat_objective(self.loss, self.penalty)
        args = (design, data.y, jnp.asarray(lam, jnp.float64), self.penalty_aux())
        u, info = single_run(batched_minimize(fun, float(n), self.max_steps, 4),
                             np.zeros(dim) if u0 is None else u0,
                             np.ones(n) if weights is None else weights, args)
        self._check_fit(u, info)
        return u, info

    def _check_fit(self, u, info):
        name = type(self).__name__
        if not (np.isfinite(info["objective"]) and np.all(np.isfinite(np.asarray(u)))):
            raise FitError(f"{name}.fit: the objective or parameters are not finite "
                           f"(objective {info['objective']}); is `lam` too small for "
                           "separable or collinear data?")
        if not info["converged"]:
            warnings.warn(f"{name}.fit did not converge in {self.max_steps} steps (gradient "
                          f"norm {info['grad_norm']:.3g})", ConvergenceWarning, stacklevel=user_stacklevel())

    # ------------------------------------------- capabilities (models/base.py)
    def glm_structure(self, data: ERMData):
        """``(A, y, phi)``: ``F(u, w) = sum_i w_i phi(a_i^T u, y_i) + penalty(u)`` (the
        ERM fast paths of the ``ns``/``ij`` methods)."""
        return self.design(data), data.y, self.loss

    def penalty_aux(self):
        """Extra arrays of :attr:`penalty` (``None`` for ridge-type penalties)."""
        return None

    def smooth_problem(self, data: ERMData, u) -> SmoothERM:
        """The model as a smooth GLM-type ERM around the flat fit ``u`` (for tuning)."""
        return SmoothERM(self.design(data), data.y, jnp.asarray(u, jnp.float64),
                         self.lam_vector(), self.penalty_aux(), self.loss, self.penalty)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(lam={self.lam!r}, fit_intercept={self.fit_intercept})"
