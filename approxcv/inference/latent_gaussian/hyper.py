"""Hyperparameters: type-II MAP and central composite design (CCD) points (seed §2.6, eq. 20-21).

Type-II MAP minimises ``-log q(y | theta) - log p(theta)`` over the unconstrained vector
``theta`` with :func:`approxcv.optim.batched_minimize` (BFGS; the gradient is exact: the
implicit derivative of the Laplace mode, or EP's stationarity in its sites). The prior is
``N(0, prior_sd^2)`` on every log hyperparameter (``prior_sd=None``: none, i.e. type-II
maximum likelihood).

CCD (Rue, Martino & Chopin 2009, §6.5, as in GPstuff's ``gp_ia``): with ``H = V L V^T`` the
Hessian of the negative log posterior at the mode (central differences of the exact
gradient), points ``theta_k = theta_hat + V L^-1/2 z_k`` at ``z = 0``, the ``2p`` axial
points ``+-f0 sqrt(p) e_j`` and two-level design points ``+-1`` scaled to the same radius
``f0 sqrt(p)``; the design is the full factorial for ``p <= 4``, the half fraction with the
last column the product of the others (resolution >= V) for ``5 <= p <= 8``, and, beyond,
the columns of a Sylvester-Hadamard matrix (resolution III only: a documented shortcut).
Weights ``w_k = delta_k p(theta_k | D) / p(theta_hat | D)`` with ``delta_0 = 1`` and
``delta_k = [(n_p - 1) (f0^2 - 1) (1 + exp(-p f0^2 / 2))]^-1`` otherwise; normalised.
"""
from __future__ import annotations

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg

from ..._runtime import jit
from ...errors import FitError
from ...optim import batched_minimize, single_start
from .posterior import log_marginal

__all__ = ["map_objective", "fit_map", "ccd_design", "ccd_points", "log_prior"]

#: CCD radius factor (Rue et al. 2009)
F0 = 1.1


def log_prior(theta, prior_sd):
    """``sum_j log N(theta_j | 0, prior_sd^2)`` (0 when ``prior_sd`` is None)."""
    if prior_sd is None:
        return 0.0
    return jnp.sum(-0.5 * (theta / prior_sd) ** 2 - jnp.log(prior_sd)
                   - 0.5 * jnp.log(2 * jnp.pi))


@functools.lru_cache(maxsize=32)
def map_objective(lik, inference: str, prior_sd, damping: float):
    """``F(theta, w, (X, y)) = -log q(y_w | theta) - log p(theta)`` (``w`` 0/1 switches
    points off; type-II MAP uses ``w = 1``): one function object per configuration, so its
    compiled optimiser is reused."""
    def objective(theta, weights, data):
        X, y = data
        return -(log_marginal(theta, X, y, weights, lik=lik, inference=inference,
                              damping=damping)
                 + log_prior(theta, prior_sd))
    return objective


def fit_map(X, y, lik, inference: str, theta0, prior_sd, damping: float,
            max_steps: int = 200):
    """``(theta_hat, MinimizeResult)`` of type-II MAP from ``theta0``.

    Raises:
        FitError: the optimiser reached no finite objective.
    """
    fun = map_objective(lik, inference, prior_sd, damping)
    n = int(y.shape[0])
    solve = batched_minimize(fun, float(n), max_steps, 0, "bfgs")
    res = single_start(solve, theta0, np.ones(n), (X, y))
    if not np.isfinite(res.value):
        raise FitError("type-II MAP reached no finite log marginal likelihood; rescale `X` "
                       "or pass `theta0`")
    return res.u, res


def ccd_design(p: int) -> np.ndarray:
    """``(n_p, p)`` unit-free CCD points ``z`` (module docstring), centre first."""
    if p <= 4:
        cube = np.array(list(itertools.product((-1.0, 1.0), repeat=p)))
    elif p <= 8:
        half = np.array(list(itertools.product((-1.0, 1.0), repeat=p - 1)))
        cube = np.concatenate([half, np.prod(half, 1, keepdims=True)], 1)
    else:
        m = 1 << int(np.ceil(np.log2(p + 1)))
        cube = scipy.linalg.hadamard(m)[:, 1:p + 1].astype(float)
    axial = np.concatenate([np.eye(p), -np.eye(p)])
    radius = F0 * np.sqrt(p)
    cube = cube / np.linalg.norm(cube, axis=1, keepdims=True) * radius
    return np.concatenate([np.zeros((1, p)), axial * radius, cube])


def _hessian_fd(fun, theta, data, step: float = 1e-4):
    """Symmetrised central differences of the exact gradient of ``fun``."""
    p = theta.shape[0]
    grad = jit(jax.vmap(jax.grad(fun), (0, None, None)))
    pts = np.concatenate([theta + step * np.eye(p), theta - step * np.eye(p)])
    g = np.asarray(grad(jnp.asarray(pts), jnp.ones(data[1].shape[0]), data))
    h = (g[:p] - g[p:]) / (2 * step)
    return 0.5 * (h + h.T)


def ccd_points(X, y, lik, inference: str, theta_hat, prior_sd, damping: float):
    """``(points (n_p, p), weights (n_p,))`` of the module docstring around ``theta_hat``.

    Raises:
        FitError: the Hessian at ``theta_hat`` is not positive definite.
    """
    fun = map_objective(lik, inference, prior_sd, damping)
    data = (X, y)
    h = _hessian_fd(fun, np.asarray(theta_hat), data)
    lam, vecs = np.linalg.eigh(h)
    if not np.all(lam > 0):
        raise FitError(f"the Hessian of the negative log posterior at the type-II MAP has "
                       f"eigenvalue {lam.min():.3g} <= 0: no CCD around it (fit with "
                       "hyper='map' or supply draws)")
    z = ccd_design(theta_hat.shape[0])
    points = np.asarray(theta_hat)[None] + (z / np.sqrt(lam)[None]) @ vecs.T
    value = jit(jax.vmap(fun, (0, None, None)))
    neg = np.asarray(value(jnp.asarray(points), jnp.ones(y.shape[0]), data))
    n_p, p = z.shape
    delta = np.full(n_p, 1.0 / ((n_p - 1) * (F0 ** 2 - 1) * (1 + np.exp(-p * F0 ** 2 / 2))))
    delta[0] = 1.0
    logw = np.log(delta) - (neg - neg[0])
    logw = np.where(np.isfinite(logw), logw, -np.inf)
    w = np.exp(logw - logw.max())
    return points, w / w.sum()
