"""``GP``: a Gaussian-process model (covariance of :mod:`.covariance`, a likelihood of
:mod:`.likelihoods`), and ``FittedGP``: its latent posterior at one or more hyperparameter
points with their weights (eq. 21).

``GP(likelihood="probit").fit(X, y, inference="laplace", hyper="map")``:

- ``hyper="map"``: type-II MAP (one point, weight 1);
- ``hyper="ccd"``: CCD points around the type-II MAP with their weights (:mod:`.hyper`);
- ``hyper=array (S, p)``: supplied draws of the unconstrained hyperparameters (e.g. from
  MCMC), equal weights; or ``(draws, weights)``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._validate import check_choice, check_finite
from ..errors import ConvergenceWarning, InvalidArgumentError, InvalidDataError
from . import likelihoods as _lik
from .covariance import KERNEL_NAMES, kernel_matrix, n_kernel_params
from .hyper import ccd_points, fit_map
from .laplace import mode_curvature
from .posterior import INFERENCES, Posterior, cold_start, latent_posterior

__all__ = ["GP", "FittedGP"]


@dataclass(frozen=True)
class GP:
    """A GP with covariance constant + linear + SE-ARD and the named likelihood.

    Args:
        likelihood: ``"gaussian"``, ``"probit"``, ``"logit"``, ``"poisson"``,
            ``"student_t"``, ``"loglogistic"`` or a likelihood object.
        nu: degrees of freedom of ``"student_t"`` (fixed).
        prior_sd: sd of the ``N(0, prior_sd^2)`` prior on each log hyperparameter
            (``None``: no prior, type-II maximum likelihood).
        damping: EP damping (fraction of each parallel update taken).
        eta: power EP's fraction in (0, 1] (:func:`~approxcv.bayes.ep.ep_fit`; 1: plain
            EP); other than 1 only at supplied hyperparameters (``hyper=`` draws), as
            type-II MAP uses plain EP's marginal likelihood.
    """
    likelihood: Any = "probit"
    nu: float = 4.0
    prior_sd: float | None = 3.0
    damping: float = 0.5
    eta: float = 1.0

    def __post_init__(self):
        """Every numeric option checked here, by name (a wrong one fails at construction,
        not as a silently wrong fit: ``damping=0`` would never move an EP site)."""
        _check_unit_interval("damping", self.damping,
                             "the fraction of each EP update taken; 0 never moves a site")
        _check_unit_interval("eta", self.eta, "power EP's fraction; 1 is plain EP")
        if not _is_real(self.nu) or not (np.isfinite(self.nu) and self.nu > 0):
            raise InvalidArgumentError(f"`nu` must be a finite number > 0, got {self.nu!r}")
        if self.prior_sd is not None and (not _is_real(self.prior_sd) or not (
                np.isfinite(self.prior_sd) and self.prior_sd > 0)):
            raise InvalidArgumentError(f"`prior_sd` must be a finite number > 0 (or None: no "
                                       f"prior), got {self.prior_sd!r}")
        self.lik                                   # a named error for a bad likelihood

    @property
    def lik(self):
        if isinstance(self.likelihood, str) and self.likelihood == "student_t":
            return _lik.get("student_t", nu=float(self.nu))
        return _lik.get(self.likelihood)

    def param_names(self, d: int) -> list[str]:
        """Names of the unconstrained hyperparameters for ``d`` inputs."""
        names = getattr(self.lik, "param_names", None)
        if names is None:
            names = tuple(f"phi_{j}" for j in range(self.lik.n_params))
        return [*KERNEL_NAMES, *(f"log_lengthscale_{j}" for j in range(d)), *names]

    def init_theta(self, X, y) -> np.ndarray:
        """Start of type-II MAP: unit variances and length scales (GPy's defaults) and the
        likelihood's own start."""
        return np.concatenate([np.zeros(n_kernel_params(X.shape[1])),
                               self.lik.init_params(y)])

    def _check(self, X, y):
        X = check_finite("X", np.asarray(X, dtype=float))
        if X.ndim == 1:
            X = X[:, None]
        if X.ndim != 2:
            raise InvalidDataError(f"`X` must be two-dimensional (n, d), got shape {X.shape}")
        y = self.lik.check(y)
        if len(X) != len(y):
            raise InvalidDataError(f"`X` and `y` must have the same length, got {len(X)} "
                                   f"and {len(y)}")
        if len(y) < 2:
            raise InvalidDataError("`y` must hold at least two points")
        return X, y

    def fit(self, X, y, inference: str = "laplace", hyper="map", theta0=None) -> FittedGP:
        """Fit the latent posterior and the hyperparameters (module docstring)."""
        check_choice("inference", inference, INFERENCES)
        X, y = self._check(X, y)
        lik = self.lik
        if self.eta != 1.0 and isinstance(hyper, str):
            raise InvalidArgumentError(f"`eta` must be in (0, 1], and 1 unless `hyper` is "
                                       f"supplied draws; got eta={self.eta!r}, hyper={hyper!r}")
        p = n_kernel_params(X.shape[1]) + lik.n_params
        t0 = time.perf_counter()
        Xj, yj = jnp.asarray(X), jnp.asarray(y)
        map_result = None
        if isinstance(hyper, str):
            check_choice("hyper", hyper, ("map", "ccd"))
            start = self.init_theta(X, y) if theta0 is None else _as_theta0(theta0)
            if start.shape != (p,):
                raise InvalidArgumentError(f"`theta0` must have shape ({p},), got "
                                           f"{start.shape}")
            if not np.all(np.isfinite(start)):
                raise InvalidArgumentError(f"`theta0` must be finite (unconstrained log "
                                           f"hyperparameters), got {start.tolist()}")
            theta_hat, map_result = fit_map(Xj, yj, lik, inference, start, self.prior_sd,
                                            self.damping)
            if hyper == "map":
                points, weights = theta_hat[None], np.ones(1)
            else:
                points, weights = ccd_points(Xj, yj, lik, inference, theta_hat,
                                             self.prior_sd, self.damping)
        else:
            points, weights = _draws(hyper, p)
            hyper = "draws"
        posts = posteriors_at(points, Xj, yj, lik, inference, self.damping, eta=self.eta)
        jax.block_until_ready(posts)
        if map_result is not None:
            map_result = _checked_map(map_result, posts, len(y))
        fitted = FittedGP(self, X, y, inference, hyper, np.asarray(points),
                          np.asarray(weights), posts, map_result, time.perf_counter() - t0)
        if map_result is not None and not map_result.converged:
            _warn_map(fitted)
        return fitted


#: type-II MAP's gradient norm per data point below which it counts as converged
MAP_GTOL = 1e-4


def _checked_map(res, posts, n):
    """``res`` with ``converged`` meaning a finite point with a small gradient,
    ``|grad| <= MAP_GTOL n``, at which the latent posterior converged — checked here, not
    taken from the optimiser: its Cauchy test (the objective stopped changing) passed on a
    kernel without a Cholesky factor whose mode search never moved, at ``|grad| = 1.39``;
    and EP's objective, exact only to the sites' tolerance, can stall the Cauchy test at
    ``|grad| = 2.4e-5`` (MASS ``quine``, n = 146), a point that is converged."""
    ok = (np.isfinite(res.value) and np.all(np.isfinite(res.u))
          and float(res.grad_norm) <= MAP_GTOL * n
          and bool(np.asarray(posts.converged)[0]))
    return res._replace(converged=np.asarray(ok))


def _is_real(value) -> bool:
    return (not isinstance(value, (bool, np.bool_, str, bytes)) and np.ndim(value) == 0
            and isinstance(value, (int, float, np.integer, np.floating)))


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


def _warn_map(fitted):
    """Warn that type-II MAP did not converge; for Laplace with a likelihood that is not
    log-concave, with the least eigenvalue of ``I + C^T W C`` at the MAP's last point
    (``fitted.extras["mode_curvature"]``): near 0, the search ran into a fold of the mode,
    where the Laplace log marginal likelihood is unbounded."""
    import warnings
    msg = (f"type-II MAP did not converge (gradient norm "
           f"{float(fitted.map_result.grad_norm):.3g}; latent posterior at its point "
           f"converged: {bool(np.asarray(fitted.posterior.converged)[0])})")
    if fitted.inference == "laplace" and not fitted.gp.lik.log_concave:
        theta_k = jnp.asarray(fitted.points[0][:n_kernel_params(fitted.X.shape[1])])
        K = kernel_matrix(theta_k, jnp.asarray(fitted.X))
        eig = float(mode_curvature(K, fitted.posterior.tau[0]))
        fitted.extras["mode_curvature"] = eig
        msg += (f"; least eigenvalue of I + C^T W C at its last point {eig:.3g} (near 0: a "
                "fold of the Laplace mode, where the Laplace log marginal likelihood is "
                "unbounded; inference='ep' has no such singularity)")
    warnings.warn(msg, ConvergenceWarning, stacklevel=3)


def _draws(hyper, p):
    if isinstance(hyper, tuple) and len(hyper) == 2:
        points, weights = (np.asarray(h, float) for h in hyper)
    else:
        points = np.asarray(hyper, float)
        weights = None
    if points.ndim != 2 or points.shape[1] != p:
        raise InvalidArgumentError(f"`hyper` draws must have shape (S, {p}), got "
                                   f"{points.shape}")
    check_finite("hyper", points)
    if weights is None:
        weights = np.full(len(points), 1.0 / len(points))
    if weights.shape != (len(points),) or np.any(weights < 0) or weights.sum() <= 0:
        raise InvalidArgumentError("`hyper` weights must be non-negative, one per draw")
    return points, weights / weights.sum()


def posteriors_at(points, X, y, lik, inference, damping, weights=None, warm=None,
                  eta: float = 1.0):
    """The :class:`Posterior` at every row of ``points`` (stacked along a leading axis)."""
    n = y.shape[0]
    weights = jnp.ones(n) if weights is None else weights
    warm = (jnp.broadcast_to(cold_start(n, inference), (len(points),) + cold_start(
        n, inference).shape) if warm is None else warm)

    def one(theta, w0):
        return latent_posterior(theta, X, y, weights, w0, lik=lik, inference=inference,
                                damping=damping, eta=eta)
    return jax.vmap(one)(jnp.asarray(points), warm)


@dataclass
class FittedGP:
    """A fitted GP: the data, the inference method, the hyperparameter ``points (S, p)``
    and normalised ``weights (S,)``, and the stacked :class:`Posterior` at each point.
    ``map_result``: the type-II MAP optimiser's record (``None`` for supplied draws)."""
    gp: GP
    X: np.ndarray
    y: np.ndarray
    inference: str
    hyper: str
    points: np.ndarray
    weights: np.ndarray
    posterior: Posterior
    map_result: Any = None
    fit_seconds: float = 0.0
    extras: dict = field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.y)

    @property
    def theta(self) -> np.ndarray:
        """The highest-weight hyperparameter point (the MAP for ``"map"``/``"ccd"``)."""
        return self.points[int(np.argmax(self.weights))]

    @property
    def log_marginal(self) -> np.ndarray:
        """``(S,)`` approximate ``log q(y | theta_s)`` at each point."""
        return np.asarray(self.posterior.log_marginal)

    def hyperparameters(self) -> dict:
        """``{name: value}`` of :attr:`theta` on the natural scale (``exp`` of the logs)."""
        names = self.gp.param_names(self.X.shape[1])
        return {name.removeprefix("log_"): float(np.exp(v)) if name.startswith("log_")
                else float(v) for name, v in zip(names, self.theta)}

    def __repr__(self) -> str:
        return (f"FittedGP(likelihood={self.gp.lik.name!r}, inference={self.inference!r}, "
                f"hyper={self.hyper!r}, n={self.n}, points={len(self.points)}, "
                f"log_marginal={float(np.max(self.log_marginal)):.6g})")
