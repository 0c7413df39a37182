"""Variable elimination for pairwise discrete Markov random fields, in log space.

Pure functions on log-potentials and weights, no model imports (cf. :mod:`.chain`). Shapes:
``n`` nodes, ``E`` edges, ``K`` states. A pairwise MRF on a graph with edges ``(s, t)``::

    log Z = log sum_z exp( sum_t u_t(z_t) + sum_{(s,t)} P_st(z_s, z_t) )

with unary log-potentials ``u (n, K)`` and pairwise ones ``P (E, K, K)`` (row: the edge's
first node). :func:`build_plan` chooses an elimination order by min-fill (Koller and
Friedman 2009, §9.4.3) and records, once per graph, which factors each elimination step
combines; :func:`log_partition` runs that fixed plan: for each eliminated variable ``v``
the factors touching ``v`` are summed (broadcast over their union scope ``S + {v}``) and
``v`` is summed out by one ``logsumexp`` — a log-space contraction that never leaves log
space, so it cannot under- or overflow. The plan is a hashable NamedTuple of tuples, a
static argument of ``jit``; the run is differentiable in the potentials (and so in
parameters and weights) and ``vmap``s over folds.

The *induced width* of the order is the largest number of neighbours a variable has when
it is eliminated; the largest intermediate tensor has ``K ** (width + 1)`` entries.
:func:`check_memory` raises :class:`~approxcv.errors.GraphTooWideError` naming the width,
the state count and the bytes it would need when that exceeds a limit.

Weighted marginal likelihood of a hidden MRF (structured-CV paper, eq. 4-5): latent field
``p(z) ∝ exp(sum_t h_t(z_t) + sum_e P_e)``, emissions ``l_t(k) = log p(x_t | z_t = k)``:

* scheme **A** weights only the emissions; the field's normaliser is unweighted::

      log p_A(x; w) = log sum_z exp(sum_t h_t + sum_e P_e + sum_t w_t l_t) - log Z_field

* scheme **B** drops ``x_t`` and ``z_t``: unary factors get ``w_t``, the edge ``(s, t)``
  gets ``w_s w_t``, and the field's normaliser is weighted the same way (it depends on
  ``w``)::

      log p_B(x; w) = log sum_z exp(sum_t w_t (h_t + l_t) + sum_e w_s w_t P_e)
                      - log sum_z exp(sum_t w_t h_t + sum_e w_s w_t P_e)

  A dropped site (``w_t = 0``) contributes ``log K`` to both terms, which cancel.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

__all__ = ["EliminationPlan", "Step", "build_plan", "min_fill_order", "induced_width",
           "check_memory", "log_partition", "site_marginals", "SiteMarginals",
           "weighted_potentials", "weighted_log_marginal", "heldout_losses",
           "DEFAULT_MAX_BYTES"]

#: largest intermediate factor allowed by default (bytes of float64)
DEFAULT_MAX_BYTES = 2 ** 30


class Step(NamedTuple):
    """Eliminate ``var``: sum the factors ``inputs`` (ids), each broadcast to the union
    scope ``scope + (var,)`` by ``(perm, expand)`` (axis order, then the positions where a
    size-1 axis is inserted), and ``logsumexp`` out the last axis. The result has scope
    ``scope`` and the next free id."""
    var: int
    inputs: tuple
    perms: tuple
    expands: tuple
    scope: tuple


class EliminationPlan(NamedTuple):
    """A compiled elimination plan of one graph (hashable; a static argument of ``jit``).

    n_nodes; edges: ``((s, t), ...)`` in input order and orientation (factor ids
    ``n_nodes + e``); order: the elimination order; steps: one :class:`Step` per node;
    width: the induced width of ``order``.
    """
    n_nodes: int
    edges: tuple
    order: tuple
    steps: tuple
    width: int


def _neighbour_sets(n_nodes, edges):
    nbrs = [set() for _ in range(n_nodes)]
    for s, t in edges:
        nbrs[s].add(t)
        nbrs[t].add(s)
    return nbrs


def min_fill_order(n_nodes: int, edges) -> tuple:
    """Greedy min-fill elimination order: repeatedly eliminate the node whose neighbours
    need the fewest fill-in edges to become a clique (ties: fewest neighbours, then the
    lowest index), connecting its neighbours. Deterministic; ``O(n^2 d^2)``."""
    nbrs = _neighbour_sets(n_nodes, edges)
    remaining, order = set(range(n_nodes)), []
    while remaining:
        def cost(v):
            nb = sorted(nbrs[v])
            fill = sum(1 for i, a in enumerate(nb) for b in nb[i + 1:] if b not in nbrs[a])
            return fill, len(nb), v
        v = min(remaining, key=cost)
        for a in nbrs[v]:
            nbrs[a] |= nbrs[v] - {a}
            nbrs[a].discard(v)
        remaining.discard(v)
        order.append(v)
    return tuple(order)


def induced_width(n_nodes: int, edges, order) -> int:
    """Largest number of (remaining) neighbours of a node when ``order`` eliminates it."""
    nbrs = _neighbour_sets(n_nodes, edges)
    width = 0
    for v in order:
        width = max(width, len(nbrs[v]))
        for a in nbrs[v]:
            nbrs[a] |= nbrs[v] - {a}
            nbrs[a].discard(v)
    return width


def build_plan(n_nodes: int, edges, order=None) -> EliminationPlan:
    """Build the elimination plan of a pairwise MRF (once per graph; a Python loop).

    Args:
        n_nodes: number of nodes ``n``.
        edges: pairs ``(s, t)``, ``s != t``, each once; ``pairwise[e]`` of
            :func:`log_partition` is indexed ``[z_s, z_t]``.
        order: a permutation of ``range(n)``; default :func:`min_fill_order`.

    Raises:
        ValueError: ``order`` is not a permutation of the nodes.
    """
    edges = tuple((int(s), int(t)) for s, t in edges)
    order = min_fill_order(n_nodes, edges) if order is None else tuple(int(v) for v in order)
    if sorted(order) != list(range(n_nodes)):
        raise ValueError(f"`order` must be a permutation of range({n_nodes}), got {order}")
    scopes = [(t,) for t in range(n_nodes)] + [e for e in edges]
    live = set(range(len(scopes)))
    steps, width = [], 0
    for v in order:
        inputs = tuple(sorted(f for f in live if v in scopes[f]))
        rest = sorted({x for f in inputs for x in scopes[f]} - {v})
        union = tuple(rest) + (v,)
        perms, expands = [], []
        for f in inputs:
            pos = [union.index(x) for x in scopes[f]]
            perms.append(tuple(int(i) for i in np.argsort(pos)))
            expands.append(tuple(i for i in range(len(union)) if union[i] not in scopes[f]))
        live -= set(inputs)
        live.add(len(scopes))
        scopes.append(tuple(rest))
        width = max(width, len(rest))
        steps.append(Step(v, inputs, tuple(perms), tuple(expands), tuple(rest)))
    return EliminationPlan(int(n_nodes), edges, order, tuple(steps), width)


def check_memory(plan: EliminationPlan, n_states: int, max_bytes: float = DEFAULT_MAX_BYTES):
    """Bytes of the largest factor, ``8 K^(width + 1)``; raise
    :class:`~approxcv.errors.GraphTooWideError` (naming width, ``K`` and bytes) above
    ``max_bytes``."""
    from ..errors import GraphTooWideError
    need = 8.0 * float(n_states) ** (plan.width + 1)
    if need > max_bytes:
        raise GraphTooWideError(
            f"the graph is too wide for exact elimination: induced width {plan.width} with "
            f"{n_states} states needs a factor of {n_states}^{plan.width + 1} entries "
            f"({need / 2 ** 20:.4g} MiB), above the limit of {max_bytes / 2 ** 20:.4g} MiB")
    return need


def log_partition(plan: EliminationPlan, unary, pairwise):
    """``log Z = log sum_z exp(sum_t unary[t, z_t] + sum_e pairwise[e, z_s, z_t])`` by the
    fixed elimination plan (module docstring). ``unary (n, K)``, ``pairwise (E, K, K)``."""
    factors = list(unary) + list(pairwise)
    for step in plan.steps:
        total = 0.0
        for f, perm, expand in zip(step.inputs, step.perms, step.expands):
            total = total + jnp.expand_dims(jnp.transpose(factors[f], perm), expand)
        factors.append(logsumexp(total, axis=-1))
    return sum(factors[-1 - i] for i, s in enumerate(reversed(plan.steps)) if not s.scope)


class SiteMarginals(NamedTuple):
    """log_normalizer: ``log Z``; marginals: ``(n, K)`` ``p(z_t = k)``."""
    log_normalizer: jax.Array
    marginals: jax.Array


def site_marginals(plan: EliminationPlan, unary, pairwise) -> SiteMarginals:
    """``log Z`` and the site marginals ``p(z_t = k) = d log Z / d unary[t, k]`` (reverse
    mode through the plan: one forward and one backward elimination)."""
    log_z, marg = jax.value_and_grad(log_partition, argnums=1)(plan, unary, pairwise)
    return SiteMarginals(log_z, marg)


def weighted_potentials(plan: EliminationPlan, unary, pairwise, weights, scheme: str):
    """Weighted ``(unary, pairwise)`` of the latent field for scheme ``"A"`` (unchanged)
    or ``"B"`` (``w_t h_t`` and ``w_s w_t P_st``). ``pairwise`` may be ``(K, K)`` (shared
    by every edge) or ``(E, K, K)``."""
    n_edges = len(plan.edges)
    if pairwise.ndim == 2:
        pairwise = jnp.broadcast_to(pairwise, (n_edges,) + pairwise.shape)
    if scheme == "A":
        return unary, pairwise
    if scheme == "B":
        s, t = (np.array([e[i] for e in plan.edges], dtype=np.int64) for i in (0, 1))
        pair_w = weights[s] * weights[t] if n_edges else jnp.zeros(0)
        return unary * weights[:, None], pairwise * pair_w[:, None, None]
    raise ValueError(f"`scheme` must be 'A' or 'B', got {scheme!r}")


def weighted_log_marginal(plan: EliminationPlan, field_unary, field_pairwise, log_lik,
                          weights, scheme: str = "A"):
    """``log p_scheme(x; w)`` of a hidden MRF (module docstring, seed eq. 4-5), the
    latent field's weighted normaliser included. ``field_unary (n, K)``, ``field_pairwise``
    ``(K, K)`` or ``(E, K, K)``, ``log_lik (n, K)``, ``weights (n,)``."""
    h, pair = weighted_potentials(plan, field_unary, field_pairwise, weights, scheme)
    log_num = log_partition(plan, h + log_lik * weights[:, None], pair)
    return log_num - log_partition(plan, h, pair)


def heldout_losses(plan: EliminationPlan, field_unary, field_pairwise, log_lik, weights):
    """Held-out losses of the sites with ``weights == 0``, in the full (unweighted) model.

    Returns ``(fold_loss, point_losses (n,))``: ``-log p(x_o | x_kept) = log Z(kept) -
    log Z(all)`` and ``-log p(x_t | x_kept) = -log sum_k p(z_t = k | x_kept) p(x_t | z_t =
    k)`` at left-out sites, 0 at kept ones.
    """
    _, pair = weighted_potentials(plan, field_unary, field_pairwise, weights, "A")
    kept = (weights != 0).astype(log_lik.dtype)
    post = site_marginals(plan, field_unary + log_lik * kept[:, None], pair)
    log_z_all = log_partition(plan, field_unary + log_lik, pair)
    log_marg = jnp.log(jnp.maximum(post.marginals, jnp.finfo(log_lik.dtype).tiny))
    log_pred = logsumexp(log_marg + log_lik, axis=1)
    points = jnp.where(kept > 0, 0.0, -log_pred)
    fold = jnp.where(jnp.any(kept == 0), post.log_normalizer - log_z_all, 0.0)
    return fold, points
