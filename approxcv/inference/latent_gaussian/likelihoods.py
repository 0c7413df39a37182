"""Observation models ``p(y_i | f_i, phi)`` of a Gaussian latent model (seed paper eq. 5).

Each likelihood is an immutable, hashable dataclass (compiled functions are cached per
configuration) with

- ``log_lik(y_i, f_i, phi) -> scalar``: one point's log density; ``y_i`` is a scalar, or a
  pair ``(time, censored)`` for the survival model; ``phi`` is the likelihood's own
  unconstrained hyperparameters (``n_params`` of them, possibly none);
- ``check(y) -> np.ndarray``: the validated targets (errors from :mod:`approxcv.errors`
  naming ``y``);
- ``init_params(y)``: a starting ``phi`` for type-II MAP; ``param_names``: its names;
- ``log_concave``: whether ``log p`` is concave in ``f`` (Laplace and EP then use the
  symmetric, Cholesky-based updates; Student-t is not and uses the damped variant).

``tilted`` is ``None`` except for the probit, whose tilted moments are closed form.
"""
from __future__ import annotations

from dataclasses import dataclass

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln, log_ndtr

from ..._validate import check_finite
from ...errors import InvalidArgumentError, InvalidDataError

__all__ = ["Gaussian", "Probit", "Logit", "Poisson", "StudentT", "LogLogistic", "get",
           "LIKELIHOODS"]

_LOG_2PI = float(np.log(2 * np.pi))


def _as_vector(y) -> np.ndarray:
    arr = check_finite("y", np.asarray(y, dtype=float))
    if arr.ndim != 1:
        raise InvalidDataError(f"`y` must be one-dimensional, got shape {arr.shape}")
    return arr


def _as_labels(y) -> np.ndarray:
    """Labels -1 and +1; labels 0 and 1 (as :class:`~approxcv.models.Logistic` takes them)
    are mapped to -1 and +1, so one ``(X, y)`` serves both."""
    arr = _as_vector(y)
    if np.all(np.isin(arr, (0.0, 1.0))):
        return 2.0 * arr - 1.0
    if not np.all(np.isin(arr, (-1.0, 1.0))):
        bad = np.unique(arr[~np.isin(arr, (-1.0, 1.0))])[:5].tolist()
        raise InvalidDataError(f"`y` must hold labels -1 and +1 (or 0 and 1) for a binary "
                               f"likelihood, got values {bad}")
    return arr


class _Likelihood:
    """Defaults of the likelihoods below: no hyperparameters of its own, log-concave, no
    closed-form tilted moments, real-valued targets."""
    n_params = 0
    param_names = ()
    log_concave = True
    tilted = None
    #: targets are labels -1/+1 (0/1 accepted)
    binary = False

    def check(self, y):
        return _as_vector(y)

    def init_params(self, y):
        return np.zeros(0)


class _BinaryLabels(_Likelihood):
    """A binary likelihood: targets are labels -1 and +1 (or 0 and 1)."""
    binary = True

    def check(self, y):
        return _as_labels(y)


@dataclass(frozen=True)
class Gaussian(_Likelihood):
    """``N(y | f, sigma^2)`` (eq. 6); ``phi = [log sigma]``."""
    name = "gaussian"
    n_params = 1
    param_names = ("log_noise_sd",)

    def log_lik(self, y, f, phi):
        s = jnp.exp(phi[0])
        return -0.5 * _LOG_2PI - jnp.log(s) - 0.5 * ((y - f) / s) ** 2

    def init_params(self, y):
        return np.array([np.log(0.5 * np.std(y) + 1e-3)])


def _probit_tilted(y, mean, var):
    """Closed-form tilted moments of ``N(f | mean, var) Phi(y f)`` (Rasmussen & Williams
    eq. 3.58): ``z = y m / sqrt(1+v)``, ``log Z = log Phi(z)``, ``r = N(z)/Phi(z)``,
    ``mean' = m + y v r / sqrt(1+v)``, ``var' = v - v^2 r (z + r) / (1+v)``."""
    s = jnp.sqrt(1.0 + var)
    z = y * mean / s
    log_z = log_ndtr(z)
    r = jnp.exp(-0.5 * z ** 2 - 0.5 * _LOG_2PI - log_z)
    return log_z, mean + y * var * r / s, var - var ** 2 * r * (z + r) / (1.0 + var)


@dataclass(frozen=True)
class Probit(_BinaryLabels):
    """``Phi(y f)`` with ``y`` in {-1, +1}."""
    name = "probit"
    tilted = staticmethod(_probit_tilted)

    def log_lik(self, y, f, phi):
        return log_ndtr(y * f)


@dataclass(frozen=True)
class Logit(_BinaryLabels):
    """``1 / (1 + exp(-y f))`` with ``y`` in {-1, +1}."""
    name = "logit"

    def log_lik(self, y, f, phi):
        return -jnp.logaddexp(0.0, -y * f)


@dataclass(frozen=True)
class Poisson(_Likelihood):
    """``Poisson(y | exp(f))`` (log link)."""
    name = "poisson"

    def log_lik(self, y, f, phi):
        return y * f - jnp.exp(f) - gammaln(y + 1.0)

    def check(self, y):
        arr = _as_vector(y)
        if np.any(arr < 0) or np.any(arr != np.round(arr)):
            raise InvalidDataError("`y` must hold non-negative integer counts for the "
                                   "Poisson likelihood")
        return arr


@dataclass(frozen=True)
class StudentT(_Likelihood):
    """Student-t with fixed ``nu`` degrees of freedom and scale ``sigma``;
    ``phi = [log sigma]``. Not log-concave: Laplace uses the damped Newton, EP skips
    updates whose cavity would be improper."""
    nu: float = 4.0
    name = "student_t"
    n_params = 1
    param_names = ("log_scale",)
    log_concave = False

    def __post_init__(self):
        if not np.isfinite(self.nu) or self.nu <= 0:
            raise InvalidArgumentError(f"`nu` must be positive and finite, got {self.nu!r}")

    def log_lik(self, y, f, phi):
        s, nu = jnp.exp(phi[0]), self.nu
        return (gammaln((nu + 1) / 2) - gammaln(nu / 2) - 0.5 * jnp.log(nu * jnp.pi)
                - jnp.log(s) - (nu + 1) / 2 * jnp.log1p(((y - f) / s) ** 2 / nu))

    def init_params(self, y):
        return np.array([np.log(0.3 * np.std(y) + 1e-3)])

    def gaussian_surrogate(self, y, phi):
        """``(targets, variances)`` of the Gaussian likelihood with this one's mean and
        variance (``s^2 nu / (nu - 2)``; ``s^2`` for ``nu <= 2``): the Laplace mode search's
        alternative start (:func:`approxcv.inference.latent_gaussian.laplace.laplace_mode`)."""
        s2 = jnp.exp(2.0 * phi[0])
        v = s2 * self.nu / (self.nu - 2.0) if self.nu > 2 else s2
        return y, jnp.full_like(y, v)


@dataclass(frozen=True)
class LogLogistic(_Likelihood):
    """Log-logistic survival with right censoring (the seed's Leukemia model, as in
    GPstuff's ``lik_loglogistic``): ``y_i = (t_i, c_i)``, ``c_i = 1`` censored. With shape
    ``r`` and ``u = r (log t - f)``: observed ``log p = log r - log t + u - 2 log(1+e^u)``,
    censored ``log S = -log(1 + e^u)``; ``phi = [log r]``."""
    name = "loglogistic"
    n_params = 1
    param_names = ("log_shape",)

    def log_lik(self, y, f, phi):
        t, c = y[0], y[1]
        r = jnp.exp(phi[0])
        u = r * (jnp.log(t) - f)
        observed = jnp.log(r) - jnp.log(t) + u - 2 * jnp.logaddexp(0.0, u)
        return jnp.where(c > 0.5, -jnp.logaddexp(0.0, u), observed)

    def check(self, y):
        arr = check_finite("y", np.asarray(y, dtype=float))
        if arr.ndim != 2 or arr.shape[1] != 2:
            raise InvalidDataError("`y` must have shape (n, 2): survival time and censoring "
                                   f"indicator (1 = censored), got shape {arr.shape}")
        if np.any(arr[:, 0] <= 0):
            raise InvalidDataError("`y` survival times (column 0) must be positive")
        if not np.all(np.isin(arr[:, 1], (0.0, 1.0))):
            raise InvalidDataError("`y` censoring indicators (column 1) must be 0 or 1")
        return arr

    def init_params(self, y):
        return np.array([0.0])


LIKELIHOODS = {"gaussian": Gaussian, "probit": Probit, "logit": Logit, "poisson": Poisson,
               "student_t": StudentT, "loglogistic": LogLogistic}


def get(likelihood, **options):
    """The likelihood object for a name in :data:`LIKELIHOODS` (``options`` such as
    ``nu=4`` go to its constructor), or ``likelihood`` itself if it is one already."""
    if not isinstance(likelihood, str):
        if hasattr(likelihood, "log_lik") and hasattr(likelihood, "check"):
            return likelihood
        raise InvalidArgumentError(f"`likelihood` must be one of {sorted(LIKELIHOODS)} or a "
                                   f"likelihood object, got {likelihood!r}")
    if likelihood not in LIKELIHOODS:
        raise InvalidArgumentError(f"`likelihood` must be one of {sorted(LIKELIHOODS)}, got "
                                   f"{likelihood!r}")
    return LIKELIHOODS[likelihood](**options)
