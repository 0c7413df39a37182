"""LOO predictive densities ``log p(y_i | x_i, D_-i, theta)`` at one hyperparameter point,
from the full-data :class:`~approxcv.bayes.posterior.Posterior` (seed §3.3-3.8).

Every estimator returns ``(lpd (n,), unreliable (n,) bool)``; ``unreliable`` marks points
the estimator cannot vouch for (non-finite values, an improper cavity, or WAIC's
``p_waic,i > 0.4`` of Vehtari, Gelman & Gabry 2017).

- ``exact_cavity`` (Gaussian likelihood, eq. 30-31): ``v_-i = (1/Sigma_ii - 1/s^2)^-1``,
  ``mu_-i = v_-i (mu_i / Sigma_ii - y_i / s^2)``, ``lpd = log N(y_i | mu_-i, v_-i + s^2)``.
- ``exact_sk`` (Sundararajan & Keerthi, eq. 32-34) with ``c_ii = [(K + s^2 I)^-1]_ii``,
  ``g_i = [(K + s^2 I)^-1 y]_i``: ``lpd = -log(2 pi)/2 + log(c_ii)/2 - g_i^2 / (2 c_ii)``.
  The paper prints ``- log(c_ii)/2``; the predictive variance is ``1/c_ii``, so the sign
  is ``+`` (checked against brute force in the tests).
- ``la`` (eq. 37): the cavity ``q_-i = q(f_i) / t_i(f_i)`` by eq. 31 with the Laplace sites
  (``tau_i = W_i``, ``nu_i = W_i f_i + g_i``), or the linear-response form (eq. 38-39)
  ``N(f_hat_i - v_-i g_i, v_-i)``, ``v_-i = (1/Sigma_ii - W_i)^-1`` (algebraically equal);
  ``lpd = log int q_-i(f) p(y_i | f) df`` by the tilted quadrature.
- ``ep`` (eq. 36): EP's tilted log normaliser at the converged cavity.
- ``q`` (eq. 46): ``lpd = -log E_q(f_i|D)[1 / p(y_i | f)]`` under the Gaussian marginal
  (LA-G / EP-G), Gauss-Hermite.
- ``tq`` (eq. 52-53): weights ``1 / max(p(y_i | f), c)`` with
  ``1/c = (1/c0) int_a^b q(f)/p(y_i | f) df``, ``c0 = 1e-4``, ``(a, b)`` the marginal's mean
  ``+- 6`` sd; both integrals by Gauss-Legendre on ``(a, b)``.
- ``waic_g`` / ``waic_v`` (eq. 54-55, pointwise on the log-density scale):
  ``2 E[log p] - log E[p]`` and ``log E[p] - Var[log p]`` under ``q(f_i | D)``.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from .covariance import kernel_matrix
from .posterior import split_theta
from .quadrature import expect, tilted_moments

__all__ = ["ESTIMATORS", "exact_cavity", "exact_sk", "la_loo", "ep_loo", "q_loo", "tq_loo",
           "waic_g", "waic_v", "C0", "TQ_SD"]

C0 = 1e-4
TQ_SD = 6.0
#: Gauss-Legendre nodes of the TQ-LOO integrals on (mean - 6 sd, mean + 6 sd)
TQ_NODES = 200
_LOG_2PI = float(np.log(2 * np.pi))


def _bad(lpd):
    return ~jnp.isfinite(lpd)


def exact_cavity(post, y, lik, theta, X):
    """Gaussian likelihood: exact LOO from the cavity (eq. 30-31)."""
    s2 = jnp.exp(2 * split_theta(theta, X.shape[1])[1][0])
    v = 1.0 / (1.0 / post.var - 1.0 / s2)
    m = v * (post.mean / post.var - y / s2)
    pred = v + s2
    lpd = -0.5 * _LOG_2PI - 0.5 * jnp.log(pred) - 0.5 * (y - m) ** 2 / pred
    return lpd, _bad(lpd) | (v <= 0)


def exact_sk(post, y, lik, theta, X):
    """Gaussian likelihood: Sundararajan-Keerthi form (eq. 32-34, sign of log c_ii fixed)."""
    theta_k, phi = split_theta(theta, X.shape[1])
    n = y.shape[0]
    L = jnp.linalg.cholesky(kernel_matrix(theta_k, X) + jnp.exp(2 * phi[0]) * jnp.eye(n))
    cinv = jax.scipy.linalg.cho_solve((L, True), jnp.eye(n))
    c, g = jnp.diag(cinv), cinv @ y
    lpd = -0.5 * _LOG_2PI + 0.5 * jnp.log(c) - 0.5 * g ** 2 / c
    return lpd, _bad(lpd)


def _la_cavity(post, form: str):
    if form == "lr":                                 # eq. 38-39
        v = 1.0 / (1.0 / post.var - post.tau)
        return post.mean - v * post.g, v
    v = 1.0 / (1.0 / post.var - post.tau)            # eq. 31 with the Laplace sites
    return v * (post.mean / post.var - post.nu), v


def la_loo(post, y, lik, theta, X, form: str = "cavity"):
    """LA-LOO (eq. 37): tilted normaliser of the Laplace cavity (``form`` "cavity"/"lr")."""
    m, v = _la_cavity(post, form)
    ok = (v > 0) & jnp.isfinite(v)
    phi = split_theta(theta, X.shape[1])[1]
    lpd = tilted_moments(lik, y, phi, m, jnp.where(ok, v, 1.0))[0]
    return jnp.where(ok, lpd, jnp.nan), _bad(lpd) | ~ok


def ep_loo(post, y, lik, theta, X):
    """EP-LOO (eq. 36): the tilted normalisers EP already computed."""
    return post.log_z, _bad(post.log_z)


def _log_lik_at(lik, y, phi, f):
    """``log p(y_i | f_ik)`` for ``f (n, K)``."""
    return jax.vmap(lambda yi, fi: jax.vmap(lambda fk: lik.log_lik(yi, fk, phi))(fi))(y, f)


def q_loo(post, y, lik, theta, X):
    """Q-LOO (eq. 46) with the Gaussian marginal."""
    phi = split_theta(theta, X.shape[1])[1]
    logp, logw = expect(lambda f: _log_lik_at(lik, y, phi, f), post.mean, post.var)
    lpd = -logsumexp(logw[None] - logp, axis=1)
    return lpd, _bad(lpd)


def tq_loo(post, y, lik, theta, X, c0: float = C0):
    """TQ-LOO (eq. 52-53) with the Gaussian marginal."""
    phi = split_theta(theta, X.shape[1])[1]
    x, w = np.polynomial.legendre.leggauss(TQ_NODES)
    sd = jnp.sqrt(post.var)
    f = post.mean[:, None] + TQ_SD * sd[:, None] * jnp.asarray(x)[None]
    logq = (-0.5 * ((f - post.mean[:, None]) / sd[:, None]) ** 2 - 0.5 * _LOG_2PI
            - jnp.log(sd)[:, None])
    logdx = jnp.log(jnp.asarray(w))[None] + jnp.log(TQ_SD * sd)[:, None]
    logp = _log_lik_at(lik, y, phi, f)
    log_c = jnp.log(c0) - logsumexp(logdx + logq - logp, axis=1)
    logwt = -jnp.maximum(logp, log_c[:, None])
    lpd = (logsumexp(logdx + logq + logp + logwt, axis=1)
           - logsumexp(logdx + logq + logwt, axis=1))
    return lpd, _bad(lpd)


def _waic_terms(post, y, lik, theta, X):
    phi = split_theta(theta, X.shape[1])[1]
    logp, logw = expect(lambda f: _log_lik_at(lik, y, phi, f), post.mean, post.var)
    w = jnp.exp(logw)[None]
    lppd = logsumexp(logw[None] + logp, axis=1)
    mean_log = jnp.sum(w * logp, 1)
    var_log = jnp.sum(w * (logp - mean_log[:, None]) ** 2, 1)
    return lppd, mean_log, var_log


def waic_g(post, y, lik, theta, X):
    """WAIC_G pointwise (eq. 54): ``lppd_i - 2 (lppd_i - E[log p])``."""
    lppd, mean_log, _ = _waic_terms(post, y, lik, theta, X)
    p_i = 2 * (lppd - mean_log)
    lpd = lppd - p_i
    return lpd, _bad(lpd) | (p_i > 0.4)


def waic_v(post, y, lik, theta, X):
    """WAIC_V pointwise (eq. 55): ``lppd_i - Var[log p]``."""
    lppd, _, var_log = _waic_terms(post, y, lik, theta, X)
    lpd = lppd - var_log
    return lpd, _bad(lpd) | (var_log > 0.4)


ESTIMATORS = {"exact": exact_cavity, "exact_sk": exact_sk, "la": la_loo, "ep": ep_loo,
              "q": q_loo, "tq": tq_loo, "waic_g": waic_g, "waic_v": waic_v}
