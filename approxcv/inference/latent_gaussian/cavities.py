"""Block cavities: the leave-``S``-out predictive of every point of a fold ``S`` from the
full-data Gaussian posterior ``q(f | D) = N(mu, Sigma)`` and its sites, without a refit.

A Gaussian latent posterior (Laplace or EP) is the prior times one Gaussian site
``t_i(f_i) = exp(-tau_i f_i^2 / 2 + nu_i f_i)`` per point (Laplace: ``tau = W``,
``nu = W f_hat + g`` with ``g = d log p(y | f) / df`` at the mode; EP: its sites). Leaving
the set ``S`` out divides its sites out of the joint marginal of ``f_S``::

    Lambda_S = Sigma_SS^-1 - diag(tau_S),      eta_S = Sigma_SS^-1 mu_S - nu_S

a Gaussian with covariance ``C = Lambda_S^-1 = (I - Sigma_SS T_S)^-1 Sigma_SS`` and mean
``m = C eta_S = (I - Sigma_SS T_S)^-1 (mu_S - Sigma_SS nu_S)`` (computed in these forms:
no inverse of ``Sigma_SS``). Each point's loss is ``-log int p(y_i | f) N(f | m_i, C_ii) df``
(the tilted normaliser, :func:`~approxcv.inference.latent_gaussian.quadrature.tilted_moments`): the pointwise
``-log p(y_i | y_-S)`` that the ``loo`` package's K-fold elpd sums. For one point this is
LA-LOO's / EP-LOO's cavity (seed eq. 31, 36-37); for the Gaussian likelihood (sites exact)
it is the exact leave-``S``-out predictive, equal to refitting. The other sites stay as in
the full fit (the LA-/EP-LOO assumption, which the refits of :mod:`.refits` drop).

**Block site shift.** The other sites stay as in the full fit; where they would move, the
estimate cannot be vouched for. Removing the sites of ``S`` from ``N(mu, Sigma)`` moves the
mean (for Laplace: one Newton step of the leave-``S``-out mode search) by
``df = Sigma[:, S] (B (mu_S - Sigma_SS nu_S) - nu_S)`` with ``B = (I - T_S Sigma_SS)^-1
T_S``, and the covariance to ``Sigma' = Sigma + Sigma[:, S] B Sigma[S, :]``; the other
points' curvatures then change by ``dW_j = W'_j df_j`` (``W' = -d^3 log p``), and the cavity
variances of ``S`` by ``dC_ii = -sum_{j not in S} Sigma'_ij^2 dW_j``. ``shift`` is the
largest ``|dC_ii| / C_ii`` of the fold: for one point, the site shift of LA-/EP-LOO
(:func:`approxcv.inference.latent_gaussian.estimators.la_loo`), flagged above ``SHIFT_TOL``.

**One-step error estimate.** The estimate keeps the other sites; the refit moves them.
One parallel update of every other site at the leave-``S``-out posterior ``N(mu', Sigma')``
(the mean ``mu' = mu + df`` and ``diag Sigma'`` above) shows how far they would go:
Laplace's site at ``f_j = mu'_j`` (``tau'_j = -d^2 log p(y_j | f_j)``, ``nu'_j = tau'_j f_j
+ d log p / df``: the sites of the next Newton step), EP's from the tilted moments of the
cavity ``N(mu'_j, Sigma'_jj)`` with site ``j`` divided out (one undamped parallel sweep).
With ``d tau``, ``d nu`` the changes off ``S``, the marginal of ``f_S`` moves to first order
by ``d m = Sigma'[S, :] (d nu - d tau mu')`` and ``d C = -Sigma'[S, :] diag(d tau)
Sigma'[:, S]``, and ``lpd_step`` is each point's predictive from ``N(m + dm, diag(C + dC))``:
the estimate one iteration of the refit further. ``|sum_S (lpd_step - lpd)|`` estimates the
error of the fold's value the way a second chord step estimates the IJ's
(:mod:`approxcv.engine.error_estimate`); a step that leaves a proper Gaussian is not
finite, and the fold is then unvouched.

A fold is flagged (``bad``) when its cavity is not a proper Gaussian (``C`` has an
eigenvalue below ``-EIG_RTOL`` times its largest), a point's cavity variance is wider than
its prior ``k(x_i, x_i)`` (log-concave likelihood: digits were lost) or a value is not
finite.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp

from ..._runtime import jit
from .covariance import kernel_matrix
from .ep import ep_posterior
from .posterior import split_theta
from .quadrature import tilted_moments

__all__ = ["block_cavity_lpd", "site_step"]

#: relative slack of the cavity-wider-than-prior test (round-off)
PRIOR_SLACK = 1e-6
#: least eigenvalue of the cavity covariance, relative to its largest, still counted as
#: round-off of a proper (positive semi-definite) one
EIG_RTOL = 1e-8


def site_step(lik, phi, y, mean, var, tau, nu, inference: str):
    """``(tau', nu')`` (each ``(n,)``): every site updated once at the marginals
    ``N(mean_i, var_i)`` of a Gaussian posterior with sites ``(tau, nu)`` (module
    docstring): Laplace's second-order expansion of ``log p(y_i | f)`` at ``f = mean_i``,
    EP's moment match of the cavity ``N(mean_i, var_i) / t_i`` times ``p(y_i | f)``."""
    if inference == "laplace":
        def one(yi, fi):
            g = jax.grad(lambda f: lik.log_lik(yi, f, phi))
            w = -jax.grad(g)(fi)
            return w, w * fi + g(fi)
        return jax.vmap(one)(y, mean)
    tau_cav = 1.0 / var - tau
    nu_cav = mean / var - nu
    proper = tau_cav > 0
    v_cav = jnp.where(proper, 1.0 / jnp.where(proper, tau_cav, 1.0), 1.0)
    _, m_t, v_t = tilted_moments(lik, y, phi, nu_cav * v_cav, v_cav)
    tau_new = jnp.where(proper, 1.0 / v_t - tau_cav, jnp.nan)
    return tau_new, jnp.where(proper, m_t / v_t - nu_cav, jnp.nan)


@functools.partial(jit, static_argnames=("lik", "inference"))
def block_cavity_lpd(post, theta, X, y, index, *, lik, inference: str = "laplace"):
    """``(lpd (F, m), bad (F,), shift (F,), lpd_step (F, m))`` of the folds ``index (F, m)``
    (rows padded with ``n``, out of range; padded slots get 0) at hyperparameters ``theta``
    from the posterior ``post`` of ``inference`` (a
    :class:`~approxcv.inference.latent_gaussian.posterior.Posterior` at ``theta``); ``shift``:
    the block site shift of the module docstring (the largest over the fold's points);
    ``lpd_step``: the predictive one site update further (the one-step error estimate)."""
    n = y.shape[0]
    theta_k, phi = split_theta(theta, X.shape[1])
    K = kernel_matrix(theta_k, X) + post.jitter * jnp.eye(n)
    sigma = ep_posterior(K, post.tau, post.nu, lik.log_concave)[1]
    prior = jnp.diag(K)
    diag_sigma = jnp.diag(sigma)

    def d3(yi, fi):
        return jax.grad(jax.grad(jax.grad(lambda f: lik.log_lik(yi, f, phi))))(fi)
    w_prime = -jax.vmap(d3)(y, post.mean)

    def _one(rows):
        """The block cavity of one fold and its site shift."""
        ok = rows < n
        r = jnp.where(ok, rows, 0)
        m = rows.shape[0]
        both = ok[:, None] & ok[None, :]
        s = jnp.where(both, sigma[r][:, r], jnp.eye(m))
        tau = jnp.where(ok, post.tau[r], 0.0)
        mu = jnp.where(ok, post.mean[r], 0.0)
        nu = jnp.where(ok, post.nu[r], 0.0)
        a = jnp.eye(m) - s * tau[None, :]
        sol = jnp.linalg.solve(a, jnp.concatenate([s, (mu - s @ nu)[:, None]], 1))
        cov = 0.5 * (sol[:, :m] + sol[:, :m].T)
        mean = sol[:, m]
        var = jnp.diag(cov)
        eig = jnp.linalg.eigvalsh(cov)
        # improper: a negative eigenvalue beyond round-off (a block of near-duplicate
        # inputs has a near-singular, still proper, cavity)
        proper = eig[0] > -EIG_RTOL * jnp.abs(eig[-1])
        bad_pt = ~(jnp.isfinite(var) & (var > 0))
        if lik.log_concave:
            bad_pt = bad_pt | (var > prior[r] * (1.0 + PRIOR_SLACK))
        lpd = tilted_moments(lik, y[r], phi, jnp.where(bad_pt, 0.0, mean),
                             jnp.where(bad_pt, 1.0, var))[0]
        bad = ~proper | jnp.any(ok & (bad_pt | ~jnp.isfinite(lpd)))
        # the mode shift when the sites of S leave, the others fixed, and the change of the
        # cavity variances when the other sites' curvatures follow it (module docstring)
        sig_s = jnp.where(ok[:, None], sigma[r], 0.0)                 # Sigma[S, :] (m, n)
        b = jnp.linalg.solve(jnp.eye(m) - tau[:, None] * s, jnp.diag(tau))
        df = sig_s.T @ (b @ (mu - s @ nu) - nu)                       # (n,)
        out = jnp.zeros(n + 1).at[rows].set(1.0)[:n] > 0
        sig_new = (jnp.eye(m) + s @ b) @ sig_s                         # Sigma'[S, :]
        dvar = (sig_new ** 2) @ jnp.where(out, 0.0, w_prime * df)
        shift = jnp.max(jnp.where(ok, jnp.abs(dvar) / jnp.where(bad_pt, 1.0, var), 0.0))
        # one update of the other sites at the leave-S-out marginals, and the predictive
        # of S it leads to, to first order in the sites' changes (module docstring)
        mean_out = post.mean + df
        var_out = diag_sigma + jnp.sum(sig_s * (b @ sig_s), 0)
        tau_new, nu_new = site_step(lik, phi, y, mean_out, var_out, post.tau, post.nu,
                                    inference)
        d_tau = jnp.where(out, 0.0, tau_new - post.tau)
        d_nu = jnp.where(out, 0.0, nu_new - post.nu)
        mean_step = mean + sig_new @ (d_nu - d_tau * mean_out)
        var_step = var - jnp.sum(sig_new ** 2 * d_tau[None, :], 1)
        fine = ok & ~bad_pt & (var_step > 0) & jnp.isfinite(mean_step)
        lpd_step = tilted_moments(lik, y[r], phi, jnp.where(fine, mean_step, 0.0),
                                  jnp.where(fine, var_step, 1.0))[0]
        lpd_step = jnp.where(ok & ~fine, jnp.nan, lpd_step)
        return jnp.where(ok, lpd, 0.0), bad, shift, jnp.where(ok, lpd_step, 0.0)
    return jax.vmap(_one)(jnp.asarray(index))
