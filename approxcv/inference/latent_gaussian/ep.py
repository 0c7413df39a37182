"""Expectation propagation with parallel, damped updates (seed §2.3, eq. 9-12).

Sites ``t_i(f_i) = C_i exp(-tau_i f_i^2 / 2 + nu_i f_i)`` give ``q(f) = N(mu, Sigma)`` with
``Sigma = (K^-1 + T)^-1``, ``mu = Sigma nu``. One parallel sweep forms every cavity
``tau_-i = 1/Sigma_ii - tau_i``, ``nu_-i = mu_i/Sigma_ii - nu_i`` (eq. 11), matches the
tilted moments ``(log Z_i, m_i, v_i)`` of ``N(f | nu_-i/tau_-i, 1/tau_-i) p(y_i | f)``
(eq. 12), and moves every site a fraction ``damping`` towards
``tau_i' = 1/v_i - tau_-i``, ``nu_i' = m_i/v_i - nu_-i``. A site whose cavity would be
improper (``tau_-i <= 0``, possible for Student-t) keeps its value. Points with weight
0 keep zero sites: the posterior without them (brute-force LOO). A run stops when one
*undamped* update would move no site by more than ``tol (1 + max_i max(|tau_i|, |nu_i|))``
(the residual of the fixed-point equations, not the damped step: with ``damping = 0.01``
a step is a hundredth of it): relative to the sites' size, because on Boston's Student-t
(sites up to |nu_i| = 113) the sweeps stall at changes of 3e-9 from rounding (the LOO
densities then move by 3e-10), which an absolute 1e-9 never passes. It is reported
**converged** only when that test holds *and* the fixed point is a proper, finite one,
checked: every site, posterior mean and variance finite, every variance positive, every
tilted normaliser finite, and no site's tilted moments failed in the last sweep — a run
whose sites blew up (the relative test passes trivially at ``|site| ~ 1e296``) is not
converged. ``damping`` in (0, 1] (0 would never move a site and "stop" at the start).

**Power EP** (``eta`` in (0, 1], Minka 2004; the fractional EP of Jylanki et al. 2011):
the cavity removes a fraction ``eta`` of each site, ``tau_-i = 1/Sigma_ii - eta tau_i``,
``nu_-i = mu_i/Sigma_ii - eta nu_i``, the tilted distribution has ``p(y_i | f)^eta``, and the
site update is ``tau_i' = (1/v_i - tau_-i)/eta``, ``nu_i' = (m_i/v_i - nu_-i)/eta``;
``eta = 1`` is plain EP. EP-LOO always uses the full cavity (``eta = 1``).

The EP marginal likelihood, from ``int N(f|0,K) prod_i t_i(f_i) df`` with each ``C_i`` set so
that the site times the cavity integrates to ``Z_i``::

    log Z_EP = sum_i [log Z_i + log(1 + tau_i / tau_-i) / 2 - mu_i^2 / (2 Sigma_ii)
                      + nu_-i^2 / (2 tau_-i)] - log|I + K T| / 2 + nu^T Sigma nu / 2

At a fixed point it is stationary in the sites, so its gradient in ``theta`` is taken with
the sites held fixed (cavities recomputed from ``theta``).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..._validate import real_number
from ...errors import ArgumentTypeError, InvalidArgumentError
from .quadrature import tilted_moments

__all__ = ["EPState", "ep_posterior", "ep_marginals", "ep_fit", "ep_log_marginal", "cavity"]


class EPState(NamedTuple):
    """tau, nu: site precisions and precision-means; mu, var: posterior mean and marginal
    variances; log_z: tilted log normalisers at the final cavities (EP-LOO, eq. 36);
    converged; iterations."""
    tau: jax.Array
    nu: jax.Array
    mu: jax.Array
    var: jax.Array
    log_z: jax.Array
    converged: jax.Array
    iterations: jax.Array


def ep_posterior(K, tau, nu, log_concave: bool):
    """``(mu, Sigma)`` of ``N(0, K) prod_i exp(-tau_i f^2/2 + nu_i f)`` and ``log|I + K T|``;
    symmetric Cholesky form for ``tau >= 0`` (R&W Alg. 3.5), LU otherwise."""
    n = K.shape[0]
    if log_concave:
        sw = jnp.sqrt(jnp.maximum(tau, 0.0))
        L = jnp.linalg.cholesky(jnp.eye(n) + sw[:, None] * K * sw[None, :])
        V = jax.scipy.linalg.solve_triangular(L, sw[:, None] * K, lower=True)
        sigma = K - V.T @ V
        logdet = 2.0 * jnp.sum(jnp.log(jnp.diag(L)))
    else:
        A = jnp.eye(n) + K * tau[None, :]
        sigma = jnp.linalg.solve(A, K)
        sigma = 0.5 * (sigma + sigma.T)
        logdet = jnp.linalg.slogdet(A)[1]
    return sigma @ nu, sigma, logdet


def ep_marginals(K, tau, nu, log_concave: bool):
    """``(mu, diag Sigma)`` of :func:`ep_posterior` without forming ``Sigma``: with
    ``tau >= 0``, ``V = L^-1 T^1/2 K``, ``diag Sigma = diag K - sum_rows V^2`` and
    ``mu = K nu - V^T (V nu)`` (saves the ``V^T V`` product, two thirds of a sweep's
    flops); otherwise one LU of ``I + K T`` solved for ``[K, K nu]``."""
    n = K.shape[0]
    if log_concave:
        sw = jnp.sqrt(jnp.maximum(tau, 0.0))
        L = jnp.linalg.cholesky(jnp.eye(n) + sw[:, None] * K * sw[None, :])
        V = jax.scipy.linalg.solve_triangular(L, sw[:, None] * K, lower=True)
        return K @ nu - V.T @ (V @ nu), jnp.diag(K) - jnp.sum(V ** 2, 0)
    lu = jax.scipy.linalg.lu_factor(jnp.eye(n) + K * tau[None, :])
    sol = jax.scipy.linalg.lu_solve(lu, jnp.concatenate([K, (K @ nu)[:, None]], 1))
    return sol[:, n], jnp.diag(sol[:, :n])


def cavity(mu, var, tau, nu):
    """Cavity natural parameters ``(tau_-i, nu_-i)`` (eq. 11 / eq. 31)."""
    return 1.0 / var - tau, mu / var - nu


def _check_options(damping, max_iter, tol, eta):
    """Named errors for EP's numeric options (fixed at trace time); returns ``(damping,
    tol, eta)`` as Python floats (NumPy scalars and 0-d arrays are accepted)."""
    numbers = []
    for name, value, bound in (("damping", damping, "in (0, 1]"), ("tol", tol, "> 0"),
                               ("eta", eta, "in (0, 1]")):
        try:
            number = real_number(name, value)
        except ArgumentTypeError:
            number = np.nan
        ok = number > 0.0 and (number <= 1.0 if name != "tol" else np.isfinite(number))
        if not ok:
            raise InvalidArgumentError(f"EP's `{name}` must be a finite number {bound}, "
                                       f"got {value!r}")
        numbers.append(number)
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise InvalidArgumentError(f"EP's `max_iter` must be an integer >= 1, got "
                                   f"{max_iter!r}")
    return tuple(numbers)


def ep_fit(K, y, lik, phi, weights, tau0, nu0, damping: float = 0.5, max_iter: int = 500,
           tol: float = 1e-9, eta: float = 1.0):
    """Parallel damped (power) EP from sites ``(tau0, nu0)``; returns an :class:`EPState`
    (``log_z`` always at the full cavities, eta = 1). ``K`` and ``phi`` enter without
    gradient. ``converged``: the fixed point test of the module docstring, checked.

    Raises:
        InvalidArgumentError: ``damping`` or ``eta`` outside (0, 1], ``tol <= 0``,
            ``max_iter < 1``.
    """
    damping, tol, eta = _check_options(damping, max_iter, tol, eta)
    K, phi = lax.stop_gradient(K), lax.stop_gradient(phi)
    on = weights > 0.5

    def _targets(tau, nu):
        """The undamped (power-EP) update of every site and whether it could be made:
        ``(tau_t, nu_t, good, failed)``; ``failed``: a site with a proper cavity whose
        tilted moments are not a proper Gaussian (non-finite, variance <= 0)."""
        mu, var = ep_marginals(K, tau, nu, lik.log_concave)
        tc, nc = cavity(mu, var, eta * tau, eta * nu)
        ok = on & (tc > 0)
        tcs = jnp.where(ok, tc, 1.0)
        _, m, v = tilted_moments(lik, y, phi, nc / tcs, 1.0 / tcs, eta=eta)
        tau_t, nu_t = (1.0 / v - tcs) / eta, (m / v - nc) / eta
        if lik.log_concave:
            tau_t = jnp.maximum(tau_t, 0.0)
        good = ok & jnp.isfinite(tau_t) & jnp.isfinite(nu_t) & (v > 0)
        return tau_t, nu_t, good, ok & ~good

    def _body(state):
        """One damped sweep; the undamped residual ``max |site' - site|`` of the sites
        updated, and whether any site's update failed."""
        tau, nu, it, _, _ = state
        tau_t, nu_t, good, failed = _targets(tau, nu)
        resid = jnp.max(jnp.where(good, jnp.maximum(jnp.abs(tau_t - tau),
                                                     jnp.abs(nu_t - nu)), 0.0))
        tau_new = jnp.where(good, (1 - damping) * tau + damping * tau_t, tau)
        nu_new = jnp.where(good, (1 - damping) * nu + damping * nu_t, nu)
        return (jnp.where(on, tau_new, 0.0), jnp.where(on, nu_new, 0.0), it + 1, resid,
                jnp.any(failed))

    def _small(tau, nu, resid):
        """The stopping test: one undamped update would move no site by more than
        ``tol (1 + max site)`` (a finite residual)."""
        return jnp.isfinite(resid) & (resid <= tol * (1.0 + jnp.maximum(
            jnp.max(jnp.abs(tau)), jnp.max(jnp.abs(nu)))))

    def _cond(state):
        tau, nu, it, resid, _ = state
        return ~_small(tau, nu, resid) & (it < max_iter) & jnp.all(jnp.isfinite(tau)) \
            & jnp.all(jnp.isfinite(nu))

    tau0, nu0 = jnp.where(on, tau0, 0.0), jnp.where(on, nu0, 0.0)
    tau, nu, it, resid, failed = lax.while_loop(
        _cond, _body, (tau0, nu0, jnp.array(0), jnp.array(jnp.inf), jnp.array(False)))
    mu, var = ep_marginals(K, tau, nu, lik.log_concave)
    tc, nc = cavity(mu, var, tau, nu)
    tcs = jnp.where(tc > 0, tc, jnp.nan)
    log_z = tilted_moments(lik, y, phi, nc / tcs, 1.0 / tcs)[0]
    finite = (jnp.all(jnp.isfinite(tau)) & jnp.all(jnp.isfinite(nu))
              & jnp.all(jnp.isfinite(mu)) & jnp.all(jnp.isfinite(var)) & jnp.all(var > 0)
              & jnp.all(jnp.where(on & (tc > 0), jnp.isfinite(log_z), True)))
    converged = _small(tau, nu, resid) & finite & ~failed
    return EPState(tau, nu, mu, var, log_z, converged, it)


def ep_log_marginal(K, y, lik, phi, weights, tau, nu):
    """``log Z_EP`` of the module docstring at fixed sites (gradient in ``K``, ``phi``)."""
    tau, nu = lax.stop_gradient(tau), lax.stop_gradient(nu)
    mu, sigma, logdet = ep_posterior(K, tau, nu, lik.log_concave)
    var = jnp.diag(sigma)
    tc, nc = cavity(mu, var, tau, nu)
    on = (weights > 0.5) & (tc > 0)
    tcs = jnp.where(on, tc, 1.0)
    log_z = tilted_moments(lik, y, phi, nc / tcs, 1.0 / tcs)[0]
    per_site = (log_z + 0.5 * jnp.log1p(tau / tcs) - 0.5 * mu ** 2 / var
                + 0.5 * nc ** 2 / tcs)
    return jnp.sum(jnp.where(on, per_site, 0.0)) - 0.5 * logdet + 0.5 * nu @ sigma @ nu
