"""EM for hidden Markov models: the fast first stage of :meth:`HMM.fit`.

An HMM's objective is ``F(u, w) = -log Z_w(phi(u)) - log p(u)`` with log-potentials
``phi = (log pi, log A, l)`` (:meth:`HMM.log_potentials`) and ``log Z_w`` the weighted chain
log-normaliser (:func:`approxcv.inference.chain.weighted_log_marginal`; at
``level="structure"`` the weighted sum of the sequences' ``log Z``). That is the form
:mod:`approxcv.optim.em` needs, so every HMM — whatever its emissions — gets generalised EM:
the E-step is forward-backward (the gradient of ``log Z`` in ``phi``), the M-step the
model's closed form where it has one (:meth:`HMM._emission_m_step`: Gaussian, Poisson,
categorical emissions), else a damped Newton step on the expected complete-data objective.

:func:`em_fit` runs EM from every start in one compiled batched loop (on CPU a group of
starts per core, :func:`em_solver`), then exact Newton
steps on ``F`` from the best EM point (:func:`~approxcv.optim.newton.newton_polish`, on the
``(F, g, H, J)`` program the IJ reuses). When EM has not converged from every start, or
the polished gradient is not below the fit's tolerance, :meth:`HMM.fit` fits by BFGS +
Newton from the same starts instead (as with ``fit_em=False``). Where EM converges it takes
tens of cheap iterations where BFGS takes about 50 steps, each with a line search: a
2-state Gaussian HMM on 1,500 steps fits in a fifth of the time (docs/guide.md, "How an
HMM is fitted").
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...inference import chain
from ...fitting import rows_in_threads
from ...optim.em import batched_em
from ...optim.newton import newton_polish
from ...optim.quasi_newton import GTOL
from ...problem import binder, flat_params, function_key, template

#: EM iterations at most, and the tolerance on the decrease of ``F`` per iteration
#: (relative to the objective's scale, the number of observed steps); if a start is still
#: moving after ``EM_MAX_STEPS``, the fit is left to BFGS
EM_MAX_STEPS, EM_TOL = 100, 1e-8
#: exact Newton steps on ``F`` after EM, ending early at a gradient norm of
#: ``STOP_GTOL * scale`` (round-off level); a step may raise ``F`` by ``MAX_RISE * scale``
POLISH_STEPS, STOP_GTOL, MAX_RISE = 3, 1e-11, 1e-9
#: EM is used up to this many parameters (its M-step forms a ``D x D`` Hessian per start)
EM_MAX_DIM = 200


@functools.lru_cache(maxsize=64)
def em_parts(key, unravel, level: str, scheme: str = "A"):
    """``(potentials(u, data), log_partition(phi, w, data), log_prior(u, data))`` of an HMM
    objective on the flat vector ``u`` (``unravel``: the Problem's) and the Problem's data;
    cached per :func:`~approxcv.problem.function_key` (the model, or its structure when its
    numbers come with the data), so the compiled EM program is reused."""
    bind = binder(key)

    def potentials(u, data):
        model, seqs = bind(data)
        params = unravel(u)
        if level == "within":
            return model.log_potentials(params, seqs.x[0], seqs.mask[0])
        return jax.vmap(lambda x, m: model.log_potentials(params, x, m))(seqs.x, seqs.mask)

    def log_partition(phi, w, data):
        if level == "within":
            return chain.weighted_log_marginal(*phi, w, scheme)
        return jnp.dot(w, jax.vmap(chain.log_normalizer)(*phi))

    def log_prior(u, data):
        bound, seqs = bind(data)
        return bound.log_prior(unravel(u), seqs)

    return potentials, log_partition, log_prior


@functools.lru_cache(maxsize=64)
def closed_form_m_step(key, unravel, level: str):
    """The exact M-step ``m_step(u, stats, data) -> u`` when the model has a closed-form
    emission M-step (:meth:`HMM.emission_m_step`), else ``None`` (Newton M-step); ``key``
    and ``data`` as in :func:`em_parts`.

    Initial and transition probabilities: Dirichlet MAP of the expected counts (the
    gradients of ``log Z`` in ``log pi`` and ``log A``); emissions: the model's update from
    the posterior marginals ``r (N, K)`` of the ``N`` observed steps, flattened over
    sequences (padded steps carry ``r = 0``).
    """
    bind = binder(key)
    if not template(key).closed_form_m_step():
        return None

    def m_step(u, stats, data):
        model, seqs = bind(data)
        params = unravel(u)
        e_init, e_trans, gamma = stats
        mask, x = ((seqs.mask[0], seqs.x[0]) if level == "within" else (seqs.mask, seqs.x))
        if level != "within":
            e_init, e_trans = jnp.sum(e_init, 0), jnp.sum(e_trans, 0)
        r = (gamma * mask[..., None]).reshape(-1, gamma.shape[-1])
        x = x.reshape((-1,) + x.shape[mask.ndim:])
        params = type(params)(*model.chain_m_step(e_init, e_trans), *params[2:])
        return flat_params(model, model.emission_m_step(params, r, x, seqs))[0]
    return m_step


def occupancy(stats, seqs, level: str) -> np.ndarray:
    """``(rows, K)`` expected observed steps per state from the E-step statistics (the
    gradient of ``log Z`` in the emission log-likelihoods is ``p(z_t = k | x)``)."""
    gamma = np.asarray(stats[2])                                   # (rows, [S,] T, K)
    mask = np.asarray(seqs.mask)[0] if level == "within" else np.asarray(seqs.mask)
    return np.sum(gamma * mask[..., None], axis=tuple(range(1, gamma.ndim - 1)))


def em_solver(model, problem, level: str):
    """The batched EM program of an HMM problem (:func:`approxcv.optim.em.batched_em` on
    :func:`em_parts`, the closed-form M-step where the model has one, tolerance ``EM_TOL``):
    ``solve(u0s, weights, problem.data, max_steps) -> EMResult`` (NumPy). The starts run in
    sequence within a program on CPU (``batch_rows="map"``), so a group of them goes to
    each core (:func:`approxcv.fitting.rows_in_threads`)."""
    key = function_key(model, problem.data)
    solve = batched_em(*em_parts(key, problem.unravel, level), float(problem.scale),
                       EM_TOL, m_step=closed_form_m_step(key, problem.unravel, level))
    workers = None if getattr(model, "batch_rows", "map") == "map" else 1

    def run(u0s, weights, data, max_steps):
        return rows_in_threads(solve, (u0s, weights), data, max_steps, workers=workers)
    return run


class EMFit(NamedTuple):
    """Result of :func:`em_fit`: ``u (D,)``, ``record`` and ``occupancy (K,)`` of a finished
    fit (``u`` is ``None`` when EM hands over to BFGS), ``steps``: the EM iterations
    of every start, and ``ends (S, D)``: where EM from every start ended (finished fits)."""
    u: np.ndarray | None
    record: dict | None
    occupancy: np.ndarray | None
    steps: np.ndarray
    ends: np.ndarray | None = None


def em_fit(model, problem, u0s, seqs, level: str) -> EMFit:
    """EM from every start, then exact Newton steps from the best EM point.

    Finished (``EMFit.u`` set) when EM converged from every start within
    ``EM_MAX_STEPS`` and the polish reached the gradient tolerance. Otherwise — EM crawls
    along the flat ridges of some multi-state likelihoods, where BFGS does not — the
    caller fits by BFGS + Newton from the same starts, exactly as with ``fit_em=False``.
    (Going on by BFGS from where EM stopped is faster but lands in other optima: on a
    3-state Gaussian HMM 12 nats above the one BFGS from the starts reaches, on a 4-state
    one 4 nats below; the plain fallback keeps the fit what it was without EM.)

    ``record`` is the fit record of :meth:`HMM.fit` (objective, convergence, gradient norm
    and EM iterations of every start, ``best``, ``"method": "em"``, ``final_objective``,
    ``final_grad_norm``); only the best start is polished, so the others carry
    ``converged = False`` and a NaN gradient norm.
    """
    rows, n = len(u0s), problem.n_units
    solve = em_solver(model, problem, level)
    ones = np.ones((rows, n))
    u0s = np.asarray(u0s, np.float64)
    res = solve(u0s, ones, problem.data, EM_MAX_STEPS)
    values = np.where(np.isfinite(np.asarray(res.value)), np.asarray(res.value), np.inf)
    finite = np.isfinite(values) & np.all(np.isfinite(np.asarray(res.u)), axis=1)
    steps = np.asarray(res.num_steps)
    handover = EMFit(None, None, None, steps)
    if not (finite.all() and np.asarray(res.converged).all()):
        return handover
    best = int(np.argmin(values))
    scale = float(problem.scale)
    u, value, grad_norm = newton_polish(problem.fun, np.asarray(res.u)[best], ones[0],
                                        problem.data,
                                        POLISH_STEPS, stop_gtol=STOP_GTOL * scale,
                                        max_rise=MAX_RISE * scale)
    if not (np.isfinite(value) and grad_norm <= GTOL * scale):
        return handover
    # E-step statistics at the polished point (0 EM iterations; same batch shape)
    at_fit = solve(np.repeat(u[None], rows, 0), ones, problem.data, 0)
    values[best] = value
    converged = np.zeros(rows, bool)
    converged[best] = True
    norms = np.full(rows, np.nan)
    norms[best] = grad_norm
    record = {"objective": values, "converged": converged, "grad_norm": norms,
              "num_steps": steps, "best": best, "method": "em",
              "em_converged": np.asarray(res.converged), "final_objective": float(value),
              "final_grad_norm": float(grad_norm)}
    return EMFit(u, record, occupancy(at_fit.stats, seqs, level)[0], steps,
                 np.asarray(res.u))
