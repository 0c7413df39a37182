"""``GP``: a Gaussian-process model under the model protocol (docs/bayes.md).

A latent ``f ~ GP(0, k)`` (covariance constant + linear + squared exponential with ARD
length scales, :mod:`approxcv.inference.latent_gaussian.covariance`) and a likelihood ``p(y_i | f_i)``
(:mod:`approxcv.inference.latent_gaussian.likelihoods`); data ``(X, y)``, units are points (level
``"within"``). Binary likelihoods take labels 0/1 (as :class:`~approxcv.models.Logistic`)
or -1/+1.

* ``params``: :class:`GPParams`, the unconstrained log hyperparameters at ``S`` points and
  their log weights: ``S = 1`` for type-II MAP (``hyper="map"``), the central composite
  design around it for ``hyper="ccd"`` (:mod:`approxcv.inference.latent_gaussian.hyper`).
* ``objective(params, data, w)``: ``-log q(y_w | theta) - log p(theta)`` at the first point
  (the MAP), the type-II MAP objective with points switched off by ``w``; ``fit`` minimises
  it at ``w = 1``.
* ``heldout_loss(params, data, w)``: the latent posterior (the model's ``inference``,
  Laplace or EP) refitted on the points with ``w = 1`` at the fitted hyperparameters, and
  ``-log p(y_i | y_w)`` of every left-out point (over several points: importance weighted,
  seed eq. 44); the fold loss is their sum.

**Hyperparameters are held at the full-data fit in cross-validation** (as Vehtari et al.
2016 do): every method, ``"exact"`` included, leaves the points of a fold out of the latent
posterior, not out of type-II MAP. So the methods are the model's own
(:meth:`GP.own_estimators`, :mod:`.estimators`): ``"la"``, ``"ep"``, ``"q"``, ``"tq"``,
``"waic_g"``, ``"waic_v"``, ``"is"``, ``"exact"`` and ``"auto"``; ``"ij"``/``"ns"`` (which
would move the hyperparameters) are refused by name.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from ..._runtime import jit
from ..._validate import check_choice, check_finite, check_positive_int, real_number
from ...inference.latent_gaussian import likelihoods as _lik
from ...inference.latent_gaussian.covariance import KERNEL_NAMES, kernel_matrix, n_kernel_params
from ...inference.latent_gaussian.hyper import ccd_design, ccd_points, fit_map, map_objective
from ...inference.latent_gaussian.laplace import mode_curvature
from ...inference.latent_gaussian.posterior import INFERENCES, cold_start, posteriors_at
from .refits import heldout_lpd
from ...errors import (ArgumentTypeError, ConvergenceWarning, FitError, InvalidArgumentError,
                       InvalidDataError)
from .. import constraints as C
from ..base import Model, left_out
from .estimators import gp_estimators
from .memory import check_gp_memory

__all__ = ["GP", "GPParams", "MAP_GTOL"]

#: type-II MAP's gradient norm per data point below which it counts as converged
MAP_GTOL = 1e-4
#: sd of the moves of the kernel's log hyperparameters that make the extra starts of
#: ``GP(n_init > 1)`` (a factor of e either way per sd)
START_SD = 1.0


class GPParams(NamedTuple):
    """theta: ``(S, p)`` unconstrained hyperparameters (kernel logs, then the likelihood's
    own, :meth:`GP.param_names`) at ``S`` points, the MAP first; log_weights: ``(S,)``
    their log weights (``[0]`` for the MAP alone)."""
    theta: Any
    log_weights: Any


class GP(Model):
    """A Gaussian-process model (module docstring).

    Args:
        likelihood: ``"gaussian"``, ``"probit"``, ``"logit"``, ``"poisson"``,
            ``"student_t"``, ``"loglogistic"`` or a likelihood object.
        inference: ``"laplace"`` or ``"ep"``: the latent posterior of the fit and of
            ``"exact"`` refits.
        hyper: ``"map"`` (type-II MAP, one point) or ``"ccd"`` (CCD points around it with
            their weights; needed by ``method="is"``).
        nu: degrees of freedom of ``"student_t"`` (fixed).
        prior_sd: sd of the ``N(0, prior_sd^2)`` prior on each log hyperparameter
            (``None``: none, type-II maximum likelihood).
        damping: EP damping (fraction of each parallel update taken).
        n_init: starts of type-II MAP, the best kept: the default start (or ``theta0``)
            and ``n_init - 1`` more, its kernel's log hyperparameters moved by
            ``N(0, START_SD^2)`` draws (``seed``). The type-II objective can have several
            optima: on MASS crabs (probit, ML-II) the default start stopped 0.23 nats below
            GPy's optimum, and two of eight seeded starts (``seed=0``) reached it
            (``benchmarks/gp_gpy.py``).
        seed: seed of the extra starts.
    """

    refit_restarts = 0
    #: bytes a fit or cross-validation may use (``None``: the memory available on JAX's
    #: default device); larger problems are refused by name before anything is allocated
    #: (:mod:`approxcv.models.gp.memory`); set on an instance to override
    max_bytes: float | None = None
    #: the fitted run of :meth:`fit` (every start's objective; ``None`` before a fit)
    fit_result_: dict | None = None

    def __init__(self, likelihood="probit", inference: str = "laplace", hyper: str = "map",
                 nu: float = 4.0, prior_sd: float | None = 3.0, damping: float = 0.5,
                 n_init: int = 1, seed: int = 0):
        check_choice("inference", inference, INFERENCES)
        check_choice("hyper", hyper, ("map", "ccd"))
        _check_unit_interval("damping", damping,
                             "the fraction of each EP update taken; 0 never moves a site")
        if not _is_real(nu) or not (np.isfinite(nu) and nu > 0):
            raise InvalidArgumentError(f"`nu` must be a finite number > 0, got {nu!r}")
        if prior_sd is not None and (not _is_real(prior_sd) or not (
                np.isfinite(prior_sd) and prior_sd > 0)):
            raise InvalidArgumentError(f"`prior_sd` must be a finite number > 0 (or None: no "
                                       f"prior), got {prior_sd!r}")
        self.likelihood, self.inference, self.hyper = likelihood, inference, hyper
        self.nu = float(nu)
        self.prior_sd = None if prior_sd is None else float(prior_sd)
        self.damping = float(damping)
        self.n_init = check_positive_int("n_init", n_init)
        self.seed = check_positive_int("seed", seed, 0)
        self.lik                                   # a named error for a bad likelihood

    @property
    def lik(self):
        """The likelihood object."""
        if isinstance(self.likelihood, str) and self.likelihood == "student_t":
            return _lik.get("student_t", nu=self.nu)
        return _lik.get(self.likelihood)

    @property
    def default_method(self) -> str:
        """The inference's own estimator (``"la"``, ``"ep"``); ``"exact"`` (closed form) for
        the Gaussian likelihood."""
        if self.lik.name == "gaussian":
            return "exact"
        return "la" if self.inference == "laplace" else "ep"

    def param_names(self, d: int) -> list[str]:
        """Names of the unconstrained hyperparameters for ``d`` inputs."""
        names = getattr(self.lik, "param_names", None)
        if names is None:
            names = tuple(f"phi_{j}" for j in range(self.lik.n_params))
        return [*KERNEL_NAMES, *(f"log_lengthscale_{j}" for j in range(d)), *names]

    def hyperparameters(self, params, d: int) -> dict:
        """``{name: value}`` of the first (MAP) point on the natural scale."""
        theta = np.asarray(params.theta)[0]
        return {name.removeprefix("log_"): float(np.exp(v)) if name.startswith("log_")
                else float(v) for name, v in zip(self.param_names(d), theta)}

    # ------------------------------------------------------------ protocol
    def prepare(self, data, level: str | None = None):
        """``((X (n, d), y), "within", n)``; ``X`` 1-D is one input.

        Raises:
            InvalidDataError: not a pair ``(X, y)`` of numbers of one length.
            ProblemTooLargeError: more points than fit in memory
                (:mod:`approxcv.models.gp.memory`; every fit and method passes here)."""
        if level not in (None, "within"):
            raise InvalidArgumentError(f"a GP's units are points: `level` must be 'within' "
                                       f"(or None), got {level!r}")
        if not isinstance(data, (tuple, list)) or len(data) != 2:
            raise InvalidDataError("GP data must be a pair `(X, y)`, got "
                                   f"{type(data).__name__}")
        X = check_finite("X", _numeric_inputs(data[0]))
        if X.ndim == 1:
            X = X[:, None]
        if X.ndim != 2:
            raise InvalidDataError(f"`X` must be two-dimensional (n, d), got shape {X.shape}")
        y = self.lik.check(np.asarray(data[1]))
        if len(X) != len(y):
            raise InvalidDataError(f"`X` and `y` must have the same length, got {len(X)} "
                                   f"and {len(y)}")
        if len(y) < 2:
            raise InvalidDataError("`y` must hold at least two points")
        check_gp_memory(len(y), self.max_bytes)    # before anything n x n is allocated
        return (jnp.asarray(X), jnp.asarray(y)), "within", len(y)

    def comparable_data(self, data):
        """``data`` with binary labels -1/+1 written 0/1 (the coding of
        :class:`~approxcv.models.Logistic`): a binary likelihood reads both alike, so
        results on either compare (:meth:`Model.comparable_data`)."""
        if not self.lik.binary:
            return data
        y = np.asarray(data[1])
        if y.dtype.kind not in "iuf" or not np.all(np.isin(y, (-1, 1))):
            return data
        return type(data)((data[0], np.where(y == -1, 0, y).astype(y.dtype)))

    def n_points(self, d: int) -> int:
        """``S``: hyperparameter points of ``hyper`` for ``d`` inputs."""
        p = n_kernel_params(d) + self.lik.n_params
        return 1 if self.hyper == "map" else len(ccd_design(p))

    def objective(self, params, data, weights, scheme: str = "A", level: str | None = None):
        X, y = data
        fun = map_objective(self.lik, self.inference, self.prior_sd, self.damping)
        return fun(jnp.asarray(params.theta)[0], jnp.asarray(weights, float), (X, y))

    def heldout_loss(self, params, data, weights, level: str | None = None):
        X, y = data
        return _heldout(jnp.asarray(params.theta), jnp.asarray(params.log_weights), X, y,
                        jnp.asarray(weights, float), lik=self.lik, inference=self.inference,
                        damping=self.damping)

    def init_params(self, data, level: str | None = None, n: int = 1, seed: int = 0) -> list:
        """The start of type-II MAP (unit variances and length scales, GPy's defaults, and
        the likelihood's own start) at every point; the same for every ``seed``."""
        (X, y), _, _ = self.prepare(data, level)
        theta = np.concatenate([np.zeros(n_kernel_params(X.shape[1])),
                                self.lik.init_params(np.asarray(y))])
        S = self.n_points(X.shape[1])
        return [GPParams(np.tile(theta, (S, 1)), np.full(S, -np.log(S))) for _ in range(n)]

    def param_constraints(self):
        return GPParams(C.Real(), C.Real())

    def check_params(self, params, data=None, level: str | None = None,
                     name: str = "params"):
        """:meth:`Model.check_params` (type, structure, finite values), with any number of
        hyperparameter points ``S`` (supplied draws need not be ``hyper``'s design): on
        ``data``, ``theta`` must be ``(S, p)`` and ``log_weights`` ``(S,)``.

        Raises:
            InvalidArgumentError: other shapes (the message names the leaf and ``p``).
        """
        params = super().check_params(params, None, level, name)
        if data is not None:
            (X, _), _, _ = self.prepare(data, level)
            p = n_kernel_params(X.shape[1]) + self.lik.n_params
            theta, log_w = np.shape(params.theta), np.shape(params.log_weights)
            if len(theta) != 2 or theta[1] != p or theta[0] < 1 or log_w != theta[:1]:
                raise InvalidArgumentError(
                    f"`{name}.theta` must have shape (S, {p}) and `{name}.log_weights` "
                    f"(S,) for {self!r} on {X.shape[1]} inputs ({self.param_names(X.shape[1])}"
                    f"), got {theta} and {log_w}; were the parameters fitted on other data?")
        return params

    def fit(self, data, level: str | None = None, theta0=None) -> GPParams:
        """Type-II MAP of the hyperparameters (BFGS on the exact gradient) from ``n_init``
        starts (:meth:`starts`), the lowest finite objective kept, then for
        ``hyper="ccd"`` the CCD points around it; warns (``ConvergenceWarning``) when the
        MAP did not converge (gradient norm above ``MAP_GTOL n`` or an unconverged latent
        posterior). ``fit_result_``: every start's objective and gradient norm and the
        start kept."""
        (X, y), _, n = self.prepare(data, level)
        start = self.init_params((X, y))[0].theta[0] if theta0 is None else _as_theta0(theta0)
        if start.shape != (self.init_params((X, y))[0].theta.shape[1],):
            raise InvalidArgumentError(f"`theta0` must have shape "
                                       f"({self.init_params((X, y))[0].theta.shape[1]},), got "
                                       f"{start.shape}")
        if not np.all(np.isfinite(start)):
            raise InvalidArgumentError(f"`theta0` must be finite (unconstrained log "
                                       f"hyperparameters), got {start.tolist()}")
        theta_hat, res = self._best_of_starts(X, y, self.starts(start, X.shape[1]))
        post = posteriors_at(theta_hat[None], X, y, self.lik, self.inference, self.damping)
        post_ok = bool(np.asarray(post.converged)[0])
        converged = (np.isfinite(res.value) and np.all(np.isfinite(res.u))
                     and float(res.grad_norm) <= MAP_GTOL * n and post_ok)
        if not converged:
            self._warn_map(res, post, X, post_ok)
        if self.hyper == "map":
            return GPParams(np.asarray(theta_hat)[None], np.zeros(1))
        points, weights = ccd_points(X, y, self.lik, self.inference, theta_hat,
                                     self.prior_sd, self.damping)
        with np.errstate(divide="ignore"):
            return GPParams(np.asarray(points), np.log(np.asarray(weights)))

    def starts(self, theta0, d: int) -> np.ndarray:
        """``(n_init, p)`` starts of type-II MAP: ``theta0``, then ``theta0`` with the
        kernel's ``n_kernel_params(d)`` log hyperparameters moved by seeded
        ``N(0, START_SD^2)`` draws (the likelihood's own parameters kept)."""
        theta0 = np.asarray(theta0, float)
        rng = np.random.default_rng(self.seed)
        moves = np.zeros((self.n_init, theta0.shape[0]))
        moves[1:, :n_kernel_params(d)] = rng.normal(0.0, START_SD,
                                                    (self.n_init - 1, n_kernel_params(d)))
        return theta0 + moves

    def _best_of_starts(self, X, y, starts):
        """``(theta_hat, MinimizeResult)`` of the start whose type-II MAP reached the lowest
        finite objective with a finite gradient (one compiled program for all starts, run
        one start at a time); records every start in ``fit_result_`` (its objective, ``inf``
        where it reached no finite objective or gradient)."""
        runs, errors = [], []
        for start in starts:
            try:
                runs.append(fit_map(X, y, self.lik, self.inference, start, self.prior_sd,
                                    self.damping))
            except FitError as err:             # this start reached no finite objective
                runs.append(None)
                errors.append(err)
        values = np.array([r[1].value if r is not None and np.isfinite(r[1].grad_norm)
                           else np.inf for r in runs], float)
        if not np.any(np.isfinite(values)):
            if errors and len(errors) == len(runs):
                raise errors[0]
            best = next(i for i, r in enumerate(runs) if r is not None)
        else:
            best = int(np.argmin(values))
        self.fit_result_ = {"start_objectives": values.tolist(),
                            "start_grad_norms": [float(r[1].grad_norm) if r is not None
                                                 else float("nan") for r in runs],
                            "best_start": best}
        return runs[best]

    def _warn_map(self, res, post, X, post_ok):
        """Warn that type-II MAP did not converge; for Laplace with a likelihood that is not
        log-concave, with the least eigenvalue of ``I + C^T W C`` at the MAP's last point
        (near 0: a fold of the mode, where the Laplace log marginal likelihood is
        unbounded)."""
        msg = (f"type-II MAP did not converge (gradient norm {float(res.grad_norm):.3g}; "
               f"latent posterior at its point converged: {post_ok})")
        if self.inference == "laplace" and not self.lik.log_concave:
            theta_k = jnp.asarray(np.asarray(res.u)[:n_kernel_params(X.shape[1])])
            eig = float(mode_curvature(kernel_matrix(theta_k, X), post.tau[0]))
            msg += (f"; least eigenvalue of I + C^T W C at its last point {eig:.3g} (near 0: "
                    "a fold of the Laplace mode, where the Laplace log marginal likelihood "
                    "is unbounded; inference='ep' has no such singularity)")
        warnings.warn(msg, ConvergenceWarning, stacklevel=3)

    # -------------------------------------------------------- capabilities
    def own_estimators(self, params, data) -> dict:
        """The GP's cross-validation methods at the fitted hyperparameters
        (:func:`~approxcv.models.gp.estimators.gp_estimators`)."""
        return gp_estimators(self.lik, self.inference, self.damping, data,
                             np.asarray(params.theta), np.asarray(params.log_weights),
                             key=(type(self).__name__, self.static_key()))


@functools.partial(jit, static_argnames=("lik", "inference", "damping"))
def _heldout(theta, log_weights, X, y, w, *, lik, inference, damping):
    """``(fold_loss, points (n,))`` of :meth:`GP.heldout_loss`: refits from a cold start at
    every point ``theta (S, p)``, combined per point with ``log_weights (S,)``."""
    n = y.shape[0]

    def at(t):
        return heldout_lpd(t, X, y, w, cold_start(n, inference), lik=lik,
                           inference=inference, damping=damping)[0]
    lpd_s = jax.vmap(at)(theta)                                   # (S, n)
    log_r = log_weights[:, None] - lpd_s                          # seed eq. 43-44
    lw = log_r - logsumexp(log_r, axis=0, keepdims=True)
    lpd = logsumexp(lw + lpd_s, axis=0)
    out = left_out(w)
    points = jnp.where(out, -jnp.where(out, lpd, 0.0), 0.0)
    return jnp.sum(points), points


def _numeric_inputs(X) -> np.ndarray:
    """``X`` as a float array, or :class:`InvalidDataError` naming what to fix."""
    try:
        return np.asarray(X, dtype=float)
    except (TypeError, ValueError):
        kind = getattr(np.asarray(X, dtype=object), "dtype", None)
        raise InvalidDataError(
            "`X` must be numbers, an (n, d) array of inputs (a GP's kernel takes distances "
            f"between rows); got {type(X).__name__} holding values that are not numbers "
            f"({kind}): encode text or categorical columns as numbers first, e.g. one "
            "indicator column per category") from None


def _is_real(value) -> bool:
    """One real number: a Python or NumPy scalar, or a 0-d array (:func:`real_number`)."""
    try:
        real_number("value", value)
    except ArgumentTypeError:
        return False
    return True


def _check_unit_interval(name, value, what):
    if not _is_real(value) or not (np.isfinite(value) and 0.0 < value <= 1.0):
        raise InvalidArgumentError(f"`{name}` must be a number in (0, 1] ({what}), got "
                                   f"{value!r}")


def _as_theta0(theta0):
    try:
        return np.asarray(theta0, dtype=float)
    except (TypeError, ValueError):
        raise InvalidArgumentError(f"`theta0` must be a numeric vector, got {theta0!r}") \
            from None
