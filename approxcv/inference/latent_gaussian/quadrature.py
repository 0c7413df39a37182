"""One-dimensional integrals against a Gaussian: the tilted distribution
``q_-i(f) p(y_i | f)`` (seed eq. 12, 36, 37) and expectations under a marginal ``q(f_i)``.

Tilted moments use *adaptive* Gauss-Hermite quadrature: the integrand's mode is found by
Newton steps on ``log N(f | m, v) + log p(y | f)``, each with a line search (the best of
the fractions ``1, 1/2, ..., 2^-29`` of the step, taken only if the log density rises: a
Poisson count of 30 under a wide cavity overshoots to ``f ~ 30`` on a plain step, from
which Newton on ``exp(f)`` creeps back one unit per step and a fixed number of steps ends
far from the mode, with nodes of width ``1e-4`` there), its curvature there sets the scale ``s``
(floored at the cavity's precision), and with probabilists' Hermite nodes ``x_k``,
weights ``w_k``::

    int g(f) df = s * sum_k w_k exp(x_k^2 / 2) g(f* + s x_k)

evaluated in log space. A likelihood that is not log-concave (Student-t) can make the tilted
distribution bimodal, which one Gauss-Hermite rule around one mode misses; for it the
integrals use the trapezoid rule on ``GRID_POINTS`` equally spaced nodes spanning both
``mean +- 12 sd`` of the cavity and ``mode +- 12 s`` (spectrally accurate for these smooth,
decaying integrands while the likelihood is wider than about 1/20 of the cavity sd).
Expectations ``E_q[h(f)]`` under ``q = N(m, v)`` use plain
Gauss-Hermite nodes ``m + sqrt(v) x_k``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

__all__ = ["tilted_moments", "gauss_hermite", "expect", "N_NODES"]

#: Gauss-Hermite nodes of the adaptive tilted quadrature and of the expectations
N_NODES = 48
#: Newton steps that locate the tilted mode
MODE_STEPS = 12
#: step fractions of the mode search's line search
_LADDER = 0.5 ** np.arange(30)
#: trapezoid nodes for likelihoods that are not log-concave
GRID_POINTS = 801


def gauss_hermite(n: int = N_NODES):
    """Probabilists' Gauss-Hermite nodes and log weights normalised to sum to one
    (so ``E_N(0,1)[h] ~ sum_k exp(logw_k) h(x_k)``)."""
    x, w = np.polynomial.hermite_e.hermegauss(n)
    return jnp.asarray(x), jnp.asarray(np.log(w / w.sum()))


def _log_tilted(lik, y, phi, mean, var, eta=1.0):
    def log_t(f):
        return eta * lik.log_lik(y, f, phi) - 0.5 * (f - mean) ** 2 / var
    return log_t


def _tilted_one(lik, y, phi, mean, var, n_nodes, eta=1.0):
    """(log Z, mean, var) of ``N(f | mean, var) p(y | f)^eta`` for one point."""
    log_t = _log_tilted(lik, y, phi, mean, var, eta)
    d1, d2 = jax.grad(log_t), jax.grad(jax.grad(log_t))

    def _newton(f, _):
        """A Newton step on the tilted log density (curvature floored at ``1/var``) with a
        line search: the best of the step fractions ``2^-k``, taken only if it ascends."""
        curv = jnp.maximum(-d2(f), 1.0 / var)
        trial = f + _LADDER * (d1(f) / curv)
        vals = jax.vmap(log_t)(trial)
        vals = jnp.where(jnp.isfinite(vals), vals, -jnp.inf)
        best = jnp.argmax(vals)
        return jnp.where(vals[best] > log_t(f), trial[best], f), None

    mode, _ = jax.lax.scan(_newton, mean, None, length=MODE_STEPS)
    scale = 1.0 / jnp.sqrt(jnp.maximum(-d2(mode), 1.0 / var))
    if lik.log_concave:
        x, logw = gauss_hermite(n_nodes)
        f = mode + scale * x
        log_dx = logw + 0.5 * x ** 2 + 0.5 * jnp.log(2 * jnp.pi) + jnp.log(scale)
    else:
        sd = jnp.sqrt(var)
        lo = jnp.minimum(mean - 12 * sd, mode - 12 * scale)
        hi = jnp.maximum(mean + 12 * sd, mode + 12 * scale)
        f = jnp.linspace(lo, hi, GRID_POINTS)
        log_dx = jnp.log((hi - lo) / (GRID_POINTS - 1)) + jnp.zeros(GRID_POINTS)
    log_g = jax.vmap(log_t)(f) - 0.5 * jnp.log(2 * jnp.pi * var)
    terms = log_dx + log_g
    log_z = logsumexp(terms)
    p = jnp.exp(terms - log_z)
    m = jnp.sum(p * f)
    return log_z, m, jnp.sum(p * (f - m) ** 2)


def tilted_moments(lik, y, phi, mean, var, n_nodes: int = N_NODES, eta: float = 1.0):
    """``(log Z_i, mean_i, var_i)``, each ``(n,)``: zeroth moment (log) and mean and
    variance of the tilted distributions ``N(f | mean_i, var_i) p(y_i | f)^eta`` (``eta``
    < 1: power EP's fractional likelihood); closed form where the likelihood has one
    (probit, ``eta = 1``), adaptive quadrature otherwise."""
    if lik.tilted is not None and eta == 1.0:
        return lik.tilted(y, mean, var)
    return jax.vmap(lambda yi, mi, vi: _tilted_one(lik, yi, phi, mi, vi, n_nodes, eta))(
        y, mean, var)


def expect(fn, mean, var, n_nodes: int = N_NODES):
    """``fn(f)`` at the Gauss-Hermite nodes of ``N(mean_i, var_i)``: returns
    ``(values (n, K), log weights (K,))`` so callers can form any expectation."""
    x, logw = gauss_hermite(n_nodes)
    f = mean[:, None] + jnp.sqrt(var)[:, None] * x[None, :]
    return fn(f), logw
