"""The beta heuristic of the seed's §7: weights that minimise a diagonal approximation of
``log det`` of the asymptotic variance, with the estimate plugged in for ``theta_0``.

With groups ``g`` of components (one weight ``beta_g`` each) and the realised draws,

    J(beta) = log det Sigma + 2 log det Upsilon                                 (eq. 26)
           ~= sum_l log beta^T Q_l beta - 2 sum_l log sum_g beta_g a_gl         (eq. 27-28)

    a_gl  = (1/n) sum_i sum_{j in g} Z_ij (-d^2 S_ij / d theta_l^2)      (Upsilon^{-1}_ll)
    Q_l   = (1/n) sum_i s_il s_il^T,   s_igl = sum_{j in g} Z_ij dS_ij / d theta_l

(Hadamard's inequality: the products of diagonals bound the determinants). Using the
realised ``Z_ij`` in ``Q`` keeps the selection noise that the printed eq. 17 (and so eq. 28,
written with ``lambda_j``) leaves out; ``form="paper"`` puts ``lambda_j`` in its place.
``J`` does not change when ``beta`` is scaled, so it is minimised over the simplex
(``beta = softmax(eta)``) with :func:`approxcv.optim.batched_minimize`.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._runtime import jit, map_in_batches
from .._validate import check_choice
from ..optim import batched_minimize

__all__ = ["heuristic_beta", "beta_criterion", "sweep_chunk"]


def _group_parts(model, data, theta, form, chunk=None):
    """``(a (G, D), s (n, G, D))`` of the module docstring at ``theta``, ``chunk`` tangents
    at a time (default: :func:`sweep_chunk`)."""
    n = int(data.coef.shape[0])
    pol = model.policy
    sel = model.selections(n) if form == "corrected" else np.tile(pol.lam, (n, 1))
    onehot = jnp.asarray(np.eye(len(pol.groups))[pol.group_of])         # (k, G)
    zg = jnp.asarray(sel)[:, :, None] * onehot[None]                      # (n, k, G)
    chunk = sweep_chunk(model, theta, data.samples) if chunk is None else int(chunk)
    a, s = _compiled_parts(model, chunk)(theta, data.samples, zg)
    return np.asarray(a), np.asarray(s)


#: bytes that one batch of tangents of the sweeps may hold, by the estimate of
#: :func:`sweep_chunk` (which overstates: on the chunking benchmark's Boltzmann chain the
#: compiled program held about 0.3 of it per tangent, 22 MiB of 73 MiB estimated with the
#: order-2 windows); all ``D = 473`` tangents at once took 10 GiB there and ran a run out
#: of memory
SWEEP_BYTES = 2 ** 30


def traced_entries(jaxpr) -> int:
    """Array entries of every intermediate of ``jaxpr`` (a ``Jaxpr``), nested programs
    included, a ``scan``'s body times its length (what reverse mode keeps of it)."""
    total = 0
    for eqn in jaxpr.eqns:
        total += sum(int(np.prod(v.aval.shape)) for v in eqn.outvars
                     if hasattr(v.aval, "shape"))
        times = int(eqn.params.get("length", 1)) if eqn.primitive.name == "scan" else 1
        for p in eqn.params.values():
            for sub in (p if isinstance(p, (list, tuple)) else (p,)):
                sub = getattr(sub, "jaxpr", sub)
                if hasattr(sub, "eqns"):
                    total += times * traced_entries(sub)
    return total


def sweep_chunk(model, theta, samples, budget: int = SWEEP_BYTES) -> int:
    """Tangents per batch of the forward-mode sweeps: ``budget`` bytes over the bytes of
    every intermediate of one evaluation of the component table (each tangent carries
    about that much), at most ``D``, at least 1. Like the engine's batch sizes
    (:mod:`approxcv.engine.batching`), but counting the model's work, not its data: a
    chain's window tables are ``K^k`` times its data."""
    jaxpr = jax.make_jaxpr(model.component_log_probs)(theta, samples).jaxpr
    per_tangent = 8 * max(traced_entries(jaxpr), 1)
    return int(max(1, min(int(theta.shape[0]), budget // per_tangent)))


@functools.lru_cache(maxsize=32)
def _compiled_parts(model, chunk: int):
    """Jitted ``(a, s)`` for one model structure, ``chunk`` tangents at a time (``lax.map``
    over the basis: the memory of ``chunk`` tangents, not ``D``; one ``vmap`` when
    ``chunk >= D``)."""
    def parts(theta, samples, zg):
        def group_scl(th):
            """``(n, G)``: ``sum_{j in g} Z_ij S_ij``."""
            return jnp.einsum("ik,ikg->ig", model.component_log_probs(th, samples), zg)

        basis = jnp.eye(theta.shape[0], dtype=theta.dtype)
        _, jvp = jax.linearize(group_scl, theta)
        s = jnp.moveaxis(map_in_batches(jvp, basis, chunk), 0, -1)

        def curvature(e):
            """``e^T (d2/dtheta2 sum_i group_scl) e`` for every group, ``(G,)``."""
            grad = jax.jacrev(lambda th: jnp.sum(group_scl(th), axis=0))
            return jax.jvp(grad, (theta,), (e,))[1] @ e
        diag = map_in_batches(curvature, basis, chunk)                        # (D, G)
        return -diag.T / zg.shape[0], s
    return jit(parts)


def beta_criterion(eta, weights, parts):
    """``J`` of the module docstring at ``beta = softmax(eta)``; ``parts = (Q (D, G, G),
    a (G, D))``; ``weights`` is unused (the optimiser's signature)."""
    q, a = parts
    beta = jax.nn.softmax(eta)
    sigma = jnp.einsum("g,lgh,h->l", beta, q, beta)
    return jnp.sum(jnp.log(sigma)) - 2.0 * jnp.sum(jnp.log(beta @ a))


def heuristic_beta(model, data, params, form: str = "corrected",
                   chunk: int | None = None) -> np.ndarray:
    """Weights ``beta (G,)`` (summing to 1) minimising the approximate ``J`` at ``params``.
    ``chunk``: tangents per batch of the derivative sweeps (default: by memory,
    :func:`sweep_chunk`); it changes the memory, not the result."""
    check_choice("form", form, ("corrected", "paper"))
    groups = len(model.policy.groups)
    if groups == 1:
        return np.ones(1)
    a, s = _group_parts(model, data, jnp.asarray(params.theta), form, chunk)
    q = np.einsum("igl,ihl->lgh", s, s) / s.shape[0]
    solve = batched_minimize(beta_criterion, 1.0, 200, 0)
    res = solve(jnp.zeros((1, groups)), jnp.ones((1, 1)), (jnp.asarray(q), jnp.asarray(a)))
    return np.asarray(jax.nn.softmax(res.u[0]))
