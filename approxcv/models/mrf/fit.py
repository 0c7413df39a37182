"""Fitting a hidden Potts model: EM with the analytic M-step (structured-CV paper, L.3),
or BFGS, each finished by exact Newton steps on ``F``.

The objective has the form :mod:`approxcv.optim.em` needs, ``F(u, w) = -A(phi(u), w) -
log p(u)`` with log-potentials ``phi = l (n, K)`` (the emission log-likelihoods) and ``A``
the weighted hidden-MRF log marginal of :func:`approxcv.inference.elimination.
weighted_log_marginal` (the latent field's normaliser does not depend on ``phi``). The
E-step statistics ``s = dA/dphi`` are the weighted posterior site marginals ``w_t p(z_t =
k | x)``, by reverse mode through the elimination plan; the M-step is closed form:

* Poisson, Gamma(a, b) prior: ``lambda_k = (sum_t s_tk x_t + a - 1) / (sum_t s_tk e_t + b)``;
* Gaussian, Normal(0, v0) on means and InvGamma(a, b) on variances (one conditional
  maximisation sweep, ECM): ``mu_k = (sum_t s_tk x_t / sigma_k^2) / (sum_t s_tk /
  sigma_k^2 + 1 / v0)``, then ``sigma_k^2 = (sum_t s_tk (x_t - mu_k)^2 + 2 b) / (sum_t
  s_tk + 2 a + 2)``.

EM runs from every start in one compiled batched loop; the best point is polished by
:func:`~approxcv.optim.newton.newton_polish`. Where EM did not converge (or the polish
misses the gradient tolerance) the fit falls back to BFGS + Newton from the same starts,
which is also the fit with ``fit_em=False``.
"""
from __future__ import annotations

import functools

import jax.numpy as jnp
import numpy as np

from ...fitting import best_start
from ...inference import elimination
from ...optim import batched_minimize
from ...optim.em import batched_em
from ...optim.newton import newton_polish, polish_rows
from ...optim.quasi_newton import GTOL
from ...problem import binder, flat_params, function_key, make_problem

#: EM tolerance on the decrease of ``F`` per iteration, relative to the number of sites;
#: Newton steps after EM (ending at a gradient norm of ``STOP_GTOL * scale``)
EM_TOL, POLISH_STEPS, STOP_GTOL = 1e-10, 4, 1e-11


@functools.lru_cache(maxsize=32)
def em_parts(key, unravel, scheme: str = "A"):
    """``(potentials(u, data), log_partition(phi, w, data), log_prior(u, data))`` of the
    objective on the flat vector ``u`` and the problem's data; cached per
    :func:`~approxcv.problem.function_key` (the model, or its structure when beta and the
    priors come with the data)."""
    bind = binder(key)

    def potentials(u, data):
        model, data = bind(data)
        return model.emission_log_lik(unravel(u), data)

    def log_partition(phi, w, data):
        model, _ = bind(data)
        unary, pair = model.field_potentials()
        return elimination.weighted_log_marginal(
            model.plan_, unary, pair, phi, w, scheme,
            model.field_log_normalizer() if scheme == "A" else None)

    def log_prior(u, data):
        model, _ = bind(data)
        return model.log_prior(unravel(u))
    return potentials, log_partition, log_prior


@functools.lru_cache(maxsize=32)
def closed_form_m_step(key, unravel):
    """``m_step(u, stats, data) -> u`` (module docstring) in the flat unconstrained layout;
    ``key`` and ``data`` as in :func:`em_parts`."""
    bind = binder(key)

    def m_step(u, stats, data):
        model, data = bind(data)
        params = unravel(u)
        occ = jnp.sum(stats, axis=0)
        if model.emission == "poisson":
            num = jnp.maximum(stats.T @ data.x + model.rate_shape - 1.0, 1e-10)
            new = type(params)(num / (stats.T @ data.exposure + model.rate_rate))
        else:
            prec = 1.0 / params.variances
            means = (prec * (stats.T @ data.x)) / (prec * occ + 1.0 / model.mean_prior_variance)
            sq = jnp.sum(stats * (data.x[:, None] - means[None]) ** 2, axis=0)
            var = (sq + 2.0 * model.variance_scale) / (occ + 2.0 * model.variance_shape + 2.0)
            new = type(params)(means, var)
        return flat_params(model, new)[0]
    return m_step


def fit_potts(model, data):
    """Fit ``model`` on prepared ``data`` from its ``n_init`` starts (module docstring);
    returns the constrained parameters and sets ``model.fit_result_``."""
    n = model.n_sites
    starts = model.init_params(data, None, model.n_init, model.seed)
    problem = make_problem(model, data, starts[0], checked=True)
    data, key = problem.data, function_key(model, problem.data)   # with beta and the priors
    u0s = np.stack([np.asarray(flat_params(model, p)[0]) for p in starts])
    ones = np.ones((len(starts), n))
    scale = float(problem.scale)
    if model.fit_em:
        solve = batched_em(*em_parts(key, problem.unravel), scale, EM_TOL,
                           m_step=closed_form_m_step(key, problem.unravel))
        res = solve(u0s, ones, data, model.max_steps)
        values = np.where(np.isfinite(np.asarray(res.value)), np.asarray(res.value), np.inf)
        if np.isfinite(values).any():
            best = int(np.argmin(values))
            u, value, grad_norm = newton_polish(problem.fun, np.asarray(res.u)[best], ones[0],
                                                data, POLISH_STEPS,
                                                stop_gtol=STOP_GTOL * scale)
            if np.isfinite(value) and grad_norm <= GTOL * scale:
                model.fit_result_ = {
                    "method": "em", "objective": values, "best": best,
                    "em_converged": np.asarray(res.converged),
                    "num_steps": np.asarray(res.num_steps), "final_objective": float(value),
                    "final_grad_norm": float(grad_norm)}
                return model.params_type(*(np.asarray(p) for p in problem.unravel(u)))
    bfgs = batched_minimize(problem.fun, scale, model.max_steps, 0, "bfgs", model.batch_rows)
    res = polish_rows(problem.fun, bfgs(u0s, ones, data), ones, data, scale, POLISH_STEPS)
    u, record = best_start(res, type(model).__name__, f"{model.max_steps} BFGS steps",
                           method="bfgs")
    u, value, grad_norm = newton_polish(problem.fun, u, ones[0], data, POLISH_STEPS,
                                        stop_gtol=STOP_GTOL * scale)
    model.fit_result_ = {**record, "final_objective": float(value),
                         "final_grad_norm": float(grad_norm)}
    return model.params_type(*(np.asarray(p) for p in problem.unravel(u)))
