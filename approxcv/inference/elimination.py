"""Variable elimination for pairwise discrete Markov random fields, in log space.

Pure functions on log-potentials and weights, no model imports (cf. :mod:`.chain`). Shapes:
``n`` nodes, ``E`` edges, ``K`` states. A pairwise MRF on a graph with edges ``(s, t)``::

    log Z = log sum_z exp( sum_t u_t(z_t) + sum_{(s,t)} P_st(z_s, z_t) )

with unary log-potentials ``u (n, K)`` and pairwise ones ``P (E, K, K)`` (row: the edge's
first node). :func:`build_plan` chooses the narrowest of several elimination orders
(:func:`narrowest_order`: min-fill and min-degree, Koller and Friedman 2009, §9.4.3, the
nodes' own order and reverse Cuthill-McKee) and records, once per graph, which factors
each elimination step combines; :func:`log_partition` runs that fixed plan: for each
eliminated variable ``v`` the factors touching ``v`` are gathered onto the
configurations of their union scope ``S + {v}`` and summed, and ``v`` is summed out by
one ``logsumexp`` — a log-space contraction that never leaves log space, so it cannot
under- or overflow. The plan is a hashable NamedTuple of tuples, a static argument of the
``jit``-compiled kernels. The steps
run as at most three ``lax.scan``s (:func:`segments`) on fixed shapes, so the compiled
program does not grow with the graph (an unrolled plan, one contraction per step, ran
5x faster on the 100-county SIDS graph but took 26 s to compile its Hessian); the run is
differentiable in the potentials (and so in parameters and weights) and ``vmap``s over
folds.

The *induced width* of the order is the largest number of neighbours a variable has when
it is eliminated; the largest intermediate tensor has ``K ** (width + 1)`` entries.
:func:`plan_bytes` counts every allocation of a plan (indices, buffers, a step's arrays,
and the scans' residuals when differentiated); :func:`check_memory` raises
:class:`~approxcv.errors.GraphTooWideError` naming the width, the state count and the bytes
when they exceed a limit, and :func:`plan_within` refuses a graph too wide before building
whole orders (each order stops once it is wider than :func:`width_cap`).

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

import functools
import heapq
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import logsumexp
from .._runtime import jit
from ..errors import GraphTooWideError

__all__ = ["EliminationPlan", "build_plan", "min_fill_order", "min_degree_order",
           "bandwidth_order", "degeneracy", "narrowest_order", "induced_width", "width_cap",
           "plan_bytes", "check_memory", "plan_within", "log_partition", "site_marginals",
           "SiteMarginals",
           "weighted_potentials", "weighted_log_marginal", "heldout_losses",
           "DEFAULT_MAX_BYTES"]

#: work (configurations summed over the steps) below which one run is used
SMALL_WORK = 4096
#: gather indices of a plan precomputed (at trace time) up to this many bytes
INDEX_BYTES = 2 ** 25
#: largest intermediate factor allowed by default (bytes of float64)
DEFAULT_MAX_BYTES = 2 ** 30


class EliminationPlan(NamedTuple):
    """An elimination plan of one graph (hashable; a static argument of ``jit``).

    n_nodes; edges: ``((s, t), ...)`` in input order and orientation; order: the
    elimination order; width: its induced width; and per step ``s`` (eliminating
    ``order[s]``): edge_ids, the pairwise factors it consumes; msg_ids, the messages of
    earlier steps it consumes; scopes, the remaining neighbours its message depends on
    (sorted; empty: a connected component is done). Nested tuples of ints.
    """
    n_nodes: int
    edges: tuple
    order: tuple
    width: int
    edge_ids: tuple
    msg_ids: tuple
    scopes: tuple


def _neighbour_sets(n_nodes, edges):
    nbrs = [set() for _ in range(n_nodes)]
    for s, t in edges:
        nbrs[s].add(t)
        nbrs[t].add(s)
    return nbrs


def _eliminate(nbrs, v):
    """Eliminate ``v`` from the neighbour sets (in place): connect its neighbours."""
    nb = nbrs[v]
    for a in nb:
        nbrs[a] |= nb
        nbrs[a].discard(a)
        nbrs[a].discard(v)
    nbrs[v] = set()


def _fill(nbrs, v):
    nb = sorted(nbrs[v])
    return sum(1 for i, a in enumerate(nb) for b in nb[i + 1:] if b not in nbrs[a])


def min_fill_order(n_nodes: int, edges, max_width: int | None = None):
    """Greedy min-fill elimination order: repeatedly eliminate the node whose neighbours
    need the fewest fill-in edges to become a clique (ties: fewest neighbours, then the
    lowest index), connecting its neighbours. Deterministic. The fill counts are kept up
    to date incrementally (a heap with stale entries skipped): eliminating ``v`` changes
    the counts of its neighbours and of the common neighbours of each new edge.

    ``max_width``: give up — return ``None`` — as soon as a node with more neighbours is
    eliminated (the order's width would exceed it), so a graph too wide costs only the
    steps up to that point.
    """
    nbrs = _neighbour_sets(n_nodes, edges)
    fill = [_fill(nbrs, v) for v in range(n_nodes)]
    heap = [(fill[v], len(nbrs[v]), v) for v in range(n_nodes)]
    heapq.heapify(heap)
    done, order = [False] * n_nodes, []
    while heap:
        f, d, v = heapq.heappop(heap)
        if done[v] or (f, d) != (fill[v], len(nbrs[v])):
            continue                                    # a stale entry
        if max_width is not None and d > max_width:
            return None
        touched = set(nbrs[v])
        for a, b in _new_edges(nbrs, v):
            for c in nbrs[a] & nbrs[b]:                 # a, b now adjacent: one fill less
                if c != v and not done[c] and c not in touched:
                    fill[c] -= 1
                    heapq.heappush(heap, (fill[c], len(nbrs[c]), c))
        _eliminate(nbrs, v)
        done[v] = True
        order.append(v)
        for a in touched:
            fill[a] = _fill(nbrs, a)
            heapq.heappush(heap, (fill[a], len(nbrs[a]), a))
    return tuple(order)


def _new_edges(nbrs, v):
    nb = sorted(nbrs[v])
    return [(a, b) for i, a in enumerate(nb) for b in nb[i + 1:] if b not in nbrs[a]]


def min_degree_order(n_nodes: int, edges, max_width: int | None = None):
    """Greedy min-degree elimination order (ties: the lowest index); ``None`` once its
    width would exceed ``max_width`` (cf. :func:`min_fill_order`)."""
    nbrs = _neighbour_sets(n_nodes, edges)
    heap = [(len(nbrs[v]), v) for v in range(n_nodes)]
    heapq.heapify(heap)
    done, order = [False] * n_nodes, []
    while heap:
        d, v = heapq.heappop(heap)
        if done[v] or d != len(nbrs[v]):
            continue
        if max_width is not None and d > max_width:
            return None
        touched = set(nbrs[v])
        _eliminate(nbrs, v)
        done[v] = True
        order.append(v)
        for a in touched:
            heapq.heappush(heap, (len(nbrs[a]), a))
    return tuple(order)


def bandwidth_order(n_nodes: int, edges) -> tuple:
    """Reverse Cuthill-McKee order (``scipy.sparse.csgraph``): a sweep along the graph whose
    frontier — and so its induced width — is at most the bandwidth (on a lattice, a sweep
    across it, where the greedy orders fill in diagonally)."""
    # SciPy's sparse graphs are imported here, not at the top: 0.17 s of every fresh
    # process, which this module's other users (every HMM, through approxcv.inference) skip
    from scipy import sparse
    from scipy.sparse.csgraph import reverse_cuthill_mckee
    edges = np.asarray(edges, dtype=np.int64).reshape(-1, 2)
    adj = sparse.coo_matrix((np.ones(2 * len(edges)), (np.r_[edges[:, 0], edges[:, 1]],
                                                       np.r_[edges[:, 1], edges[:, 0]])),
                            shape=(n_nodes, n_nodes)).tocsr()
    return tuple(int(v) for v in reverse_cuthill_mckee(adj, symmetric_mode=True))


def degeneracy(n_nodes: int, edges) -> int:
    """The graph's degeneracy ``max_H min_v deg_H(v)`` over its subgraphs: a lower bound on
    the induced width of every elimination order (the first node of a subgraph ``H`` to be
    eliminated has at least ``min deg_H`` neighbours left). ``O(E log n)``."""
    nbrs = _neighbour_sets(n_nodes, edges)
    deg = [len(x) for x in nbrs]
    heap = [(d, v) for v, d in enumerate(deg)]
    heapq.heapify(heap)
    done, best = [False] * n_nodes, 0
    while heap:
        d, v = heapq.heappop(heap)
        if done[v] or d != deg[v]:
            continue
        best = max(best, d)
        done[v] = True
        for a in nbrs[v]:
            if not done[a]:
                deg[a] -= 1
                heapq.heappush(heap, (deg[a], a))
    return best


def induced_width(n_nodes: int, edges, order, max_width: int | None = None) -> int:
    """Largest number of (remaining) neighbours of a node when ``order`` eliminates it;
    stops at the first node above ``max_width`` (and returns its count)."""
    nbrs = _neighbour_sets(n_nodes, edges)
    width = 0
    for v in order:
        width = max(width, len(nbrs[v]))
        if max_width is not None and width > max_width:
            return width
        _eliminate(nbrs, v)
    return width


def narrowest_order(n_nodes: int, edges, max_width: int | None = None):
    """The narrowest of several elimination orders — min-fill, min-degree, the nodes'
    own order (a lattice numbered row by row: a row-major sweep) and reverse Cuthill-McKee
    — as ``(order, width)``; ties keep the first. Greedy orders are not always narrowest:
    on a 20 x 20 lattice min-fill has width 29 and a row-major sweep 20.

    ``max_width``: orders wider than it are abandoned as soon as that shows (each
    heuristic stops early), and ``(None, w)`` is returned when none fits, ``w`` a lower
    bound on the width of the narrowest of them, at least :func:`degeneracy` (checked
    first: a dense graph is refused without ordering it).
    """
    edges = tuple((int(s), int(t)) for s, t in edges)
    if max_width is not None:
        low = degeneracy(n_nodes, edges)
        if low > max_width:
            return None, low
    best, best_width = None, None
    cap = max_width
    for make in (lambda: min_fill_order(n_nodes, edges, cap),
                 lambda: min_degree_order(n_nodes, edges, cap),
                 lambda: tuple(range(n_nodes)),
                 lambda: bandwidth_order(n_nodes, edges)):
        order = make()
        if order is None:
            continue
        width = induced_width(n_nodes, edges, order, cap)
        if cap is not None and width > cap:
            continue
        if best_width is None or width < best_width:
            best, best_width = order, width
            cap = width if cap is None else min(cap, width)
    if best is None:
        return None, max_width + 1
    return best, best_width


def build_plan(n_nodes: int, edges, order=None) -> EliminationPlan:
    """Build the elimination plan of a pairwise MRF (once per graph; a Python loop).

    Args:
        n_nodes: number of nodes ``n``.
        edges: pairs ``(s, t)``, ``s != t``, each once; ``pairwise[e]`` of
            :func:`log_partition` is indexed ``[z_s, z_t]``.
        order: a permutation of ``range(n)``; default the narrowest of several
            orders (:func:`narrowest_order`).

    Raises:
        ValueError: ``order`` is not a permutation of the nodes.
    """
    edges = tuple((int(s), int(t)) for s, t in edges)
    order = (narrowest_order(n_nodes, edges)[0] if order is None
             else tuple(int(v) for v in order))
    if sorted(order) != list(range(n_nodes)):
        raise ValueError(f"`order` must be a permutation of range({n_nodes}), got {order}")
    live_edges, live_msgs, scopes, e_ids, m_ids = set(range(len(edges))), set(), [], [], []
    for v in order:
        e_in = tuple(sorted(e for e in live_edges if v in edges[e]))
        m_in = tuple(sorted(m for m in live_msgs if v in scopes[m]))
        rest = sorted(({x for e in e_in for x in edges[e]}
                       | {x for m in m_in for x in scopes[m]}) - {v})
        live_edges -= set(e_in)
        live_msgs = (live_msgs - set(m_in)) | {len(scopes)}
        scopes.append(tuple(rest))
        e_ids.append(e_in)
        m_ids.append(m_in)
    width = max([len(sc) for sc in scopes] + [0])
    return EliminationPlan(int(n_nodes), edges, order, width, tuple(e_ids), tuple(m_ids),
                           tuple(scopes))


def message_slots(plan: EliminationPlan, run_of: list) -> tuple:
    """``(row of each step's message in its run's buffer, rows of each run's buffer)``:
    messages that are never alive at the same time share a row (a register allocation per
    buffer), so the buffers a step carries — and their reverse-mode cotangents — hold only
    the live messages, each buffer with rows as long as its own run's messages."""
    n_runs = max(run_of) + 1 if run_of else 0
    free, top, rows = [[] for _ in range(n_runs)], [0] * n_runs, []
    for s in range(plan.n_nodes):
        for m in plan.msg_ids[s]:
            free[run_of[m]].append(rows[m])
        g = run_of[s]
        if free[g]:
            rows.append(min(free[g]))
            free[g].remove(rows[-1])
        else:
            rows.append(top[g])
            top[g] += 1
    return tuple(rows), tuple(top)


def segments(plan: EliminationPlan, n_states: int, max_runs: int = 3) -> list:
    """Split the steps into at most ``max_runs`` contiguous runs ``(start, stop, r)``, each
    on union scopes of ``r`` slots (its largest ``|scope| + 1``): the fewest runs whose work
    ``sum (stop - start) K^r`` is within 1.5x of the least (dynamic programming), one run
    below ``SMALL_WORK``. Min-fill eliminates small scopes first, so a few runs keep most
    steps on small tensors; each run is one ``scan`` (compilation grows with the number of
    runs, not with the graph)."""
    need = [len(sc) + 1 for sc in plan.scopes]
    n = len(need)
    if n == 0:
        return []
    # best[j][stop]: least work covering steps [0, stop) with j runs
    best = [[np.inf] * (n + 1) for _ in range(max_runs + 1)]
    back = [[0] * (n + 1) for _ in range(max_runs + 1)]
    best[0][0] = 0.0
    for j in range(1, max_runs + 1):
        for stop in range(1, n + 1):
            r = 0
            for start in range(stop - 1, -1, -1):
                r = max(r, need[start])
                cost = best[j - 1][start] + (stop - start) * float(n_states) ** r
                if cost < best[j][stop]:
                    best[j][stop], back[j][stop] = cost, start
    # the fewest runs within 1.5x of the least work; one run for small work (each run
    # costs compilation, and a run's overhead dwarfs its work on a small graph)
    least = min(best[k][n] for k in range(1, max_runs + 1))
    j = 1 if best[1][n] <= SMALL_WORK else min(
        k for k in range(1, max_runs + 1) if best[k][n] <= 1.5 * least)
    runs, stop = [], n
    while stop > 0:
        start = back[j][stop]
        runs.append((start, stop, max(need[start:stop])))
        stop, j = start, j - 1
    return runs[::-1]


def _run_arrays(plan: EliminationPlan, g: int, runs: list, run_of: list, n_states: int,
                rows: tuple, n_rows: tuple):
    """Per-step arrays of run ``g`` on ``r`` union slots (the step's scope first, its
    variable last): variable, the row of the step's own message, edge ids (padded with
    ``E``, a zero factor) and their strides ``(A_e, r)``, then for every buffer ``h <= g``
    message rows (padded with its zero row) and strides ``(A_h, r)``, and root flags. A
    factor's stride at a slot is ``K^d`` for the digit ``d`` of that variable in its flat
    row-major index, 0 off its scope; a message of run ``h`` is stored over ``r_h - 1``
    slots."""
    start, stop, r = runs[g]
    steps = range(start, stop)
    a_e = max([len(plan.edge_ids[s]) for s in steps] + [1])
    e_ids = np.full((len(steps), a_e), len(plan.edges), np.int32)
    e_str = np.zeros((len(steps), a_e, r), np.int32)
    m_ids = [None] * (g + 1)
    m_str = [None] * (g + 1)
    for h in range(g + 1):
        a_m = max([sum(run_of[m] == h for m in plan.msg_ids[s]) for s in steps] + [1])
        m_ids[h] = np.full((len(steps), a_m), n_rows[h], np.int32)
        m_str[h] = np.zeros((len(steps), a_m, r), np.int32)
    for i, s in enumerate(steps):
        slot = {x: j for j, x in enumerate(plan.scopes[s])}
        slot[plan.order[s]] = r - 1
        for a, e in enumerate(plan.edge_ids[s]):
            e_ids[i, a] = e
            for d, x in zip((1, 0), plan.edges[e]):
                e_str[i, a, slot[x]] = n_states ** d
        used = [0] * (g + 1)
        for m in plan.msg_ids[s]:
            h = run_of[m]
            a, used[h] = used[h], used[h] + 1
            m_ids[h][i, a] = rows[m]
            for j, x in enumerate(plan.scopes[m]):
                m_str[h][i, a, slot[x]] = n_states ** (runs[h][2] - 2 - j)
    root = np.array([not plan.scopes[s] for s in steps])
    return (np.asarray(plan.order[start:stop], np.int32),
            np.asarray(rows[start:stop], np.int32), e_ids, e_str, tuple(m_ids), tuple(m_str),
            root)


class _Layout(NamedTuple):
    """How :func:`log_partition` runs a plan for ``K`` states: runs ``(start, stop, r)``,
    the run of each step, message rows and buffer rows, per-run arrays
    (:func:`_run_arrays`), the factors a step of each run gathers (``a_tot``) and whether
    the gather indices are precomputed."""
    runs: list
    run_of: list
    rows: tuple
    n_rows: tuple
    arrays: list
    a_tot: list
    precomputed: bool


def _layout(plan: EliminationPlan, n_states: int) -> _Layout:
    runs = segments(plan, n_states)
    run_of = [g for g, (start, stop, _) in enumerate(runs) for _ in range(start, stop)]
    rows, n_rows = message_slots(plan, run_of)
    arrays = [_run_arrays(plan, g, runs, run_of, n_states, rows, n_rows)
              for g in range(len(runs))]
    a_tot = [a[3].shape[1] + sum(m.shape[1] for m in a[5]) for a in arrays]
    index_bytes = sum(4.0 * (stop - start) * n * float(n_states) ** r
                      for (start, stop, r), n in zip(runs, a_tot))
    return _Layout(runs, run_of, rows, n_rows, arrays, a_tot, index_bytes <= INDEX_BYTES)


def _gather_index(strides, n_states: int, r: int, xp=np):
    """Flat indices ``(..., K^r)`` of factors into the ``K^r`` configurations of ``r``
    slots, ``index[c] = sum_j strides[..., j] digit_j(c)``, ``digit_j(c) = (c // K^(r - 1 -
    j)) mod K``: accumulated one slot at a time (never an ``(r, K^r)`` table of
    configurations; ``xp`` NumPy at trace time or ``jax.numpy`` in a step)."""
    c = xp.arange(n_states ** r, dtype=np.int32)
    index = xp.zeros(strides.shape[:-1] + (n_states ** r,), np.int32)
    for j in range(r):
        digit = (c // n_states ** (r - 1 - j)) % n_states
        index = index + strides[..., j, None] * digit
    return index


def plan_bytes(plan: EliminationPlan, n_states: int, differentiate: bool = True) -> float:
    """Bytes that :func:`log_partition` allocates to run ``plan`` with ``K = n_states``
    (one elimination; a ``vmap`` over folds multiplies the working part), counting:

    * the gather indices precomputed at trace time, ``4 sum_runs S a K^r`` (the NumPy
      array and its copy as a program constant), or else those a step computes, ``4 a
      K^r``, with the slot digits;
    * the message buffers of every run, ``8 (rows + 1) K^(r - 1)``;
    * a step's working arrays: the gathered factors, their sum and the ``logsumexp``
      temporaries, ``8 (a + 4) K^r``, with ``S`` steps, ``a`` factors a step, ``r`` slots;
    * with ``differentiate`` (reverse mode, as for the site marginals and every gradient):
      what the scans keep for the backward pass, ``8 (a + 3) S K^r`` a run (a step's
      gathered factors, their sum and its softmax) plus the indices of each step when they
      are computed in the step, and cotangents of the buffers and a step's arrays.

    ``tests/inference/test_elimination.py`` checks it against the allocations measured
    (NumPy's at trace time and XLA's buffer assignment) on small graphs.
    """
    lay = _layout(plan, n_states)
    k = float(n_states)
    index = sum(2 * 4.0 * (stop - start) * a * k ** r
                for (start, stop, r), a in zip(lay.runs, lay.a_tot)) if lay.precomputed else 0
    buffers = sum(8.0 * (rows + 1) * k ** (r - 1) for (_, _, r), rows in zip(lay.runs,
                                                                            lay.n_rows))
    step = max([8.0 * (a + 4) * k ** r + (0 if lay.precomputed else 4.0 * (a + 3) * k ** r)
                for (_, _, r), a in zip(lay.runs, lay.a_tot)] + [0.0])
    total = index + buffers + step
    if differentiate:
        saved = sum(8.0 * (a + 3) * (stop - start) * k ** r
                    + (0 if lay.precomputed else 4.0 * (stop - start) * a * k ** r)
                    for (start, stop, r), a in zip(lay.runs, lay.a_tot))
        total += saved + buffers + step
    return total + 8.0 * len(plan.edges) * k * k * (2 if differentiate else 1)


def width_cap(n_states: int, max_bytes: float) -> int:
    """The largest induced width whose largest factor, ``8 K^(width + 1)`` bytes, fits in
    ``max_bytes`` (every plan within ``max_bytes`` is at most this wide)."""
    width = 0
    while 8.0 * float(n_states) ** (width + 2) <= max_bytes and width < 10 ** 6:
        width += 1
    return width


def _too_wide(width_text: str, n_states: int, need: float, max_bytes: float, what: str):
    return GraphTooWideError(
        f"the graph is too wide for exact elimination: {width_text} with {n_states} states "
        f"needs {need / 2 ** 20:.4g} MiB ({what}), above the limit of "
        f"{max_bytes / 2 ** 20:.4g} MiB (`max_bytes`); use fewer states or a sparser graph, "
        "or raise `max_bytes` if the memory is there")


def check_memory(plan: EliminationPlan, n_states: int, max_bytes: float = DEFAULT_MAX_BYTES,
                 differentiate: bool = True) -> float:
    """:func:`plan_bytes` of the plan; raise :class:`~approxcv.errors.GraphTooWideError`
    (naming the width, ``K`` and the bytes) above ``max_bytes``, before anything is
    allocated."""
    need = plan_bytes(plan, n_states, differentiate)
    if need > max_bytes:
        raise _too_wide(f"induced width {plan.width}", n_states, need, max_bytes,
                        f"the whole plan{', with gradients,' if differentiate else ''} "
                        f"whose largest factor has {n_states}^{plan.width + 1} entries")
    return need


def plan_within(n_nodes: int, edges, n_states: int, max_bytes: float = DEFAULT_MAX_BYTES,
                differentiate: bool = True) -> EliminationPlan:
    """The plan of the narrowest order (:func:`narrowest_order`) if it fits in
    ``max_bytes`` (:func:`check_memory`), else :class:`~approxcv.errors.GraphTooWideError`.
    Orders are abandoned as soon as their width exceeds :func:`width_cap`, so a graph far
    too wide is refused in the time of a few elimination steps, not of whole orders."""
    edges = tuple((int(s), int(t)) for s, t in edges)
    cap = width_cap(n_states, max_bytes)
    order, width = narrowest_order(n_nodes, edges, cap)
    if order is None:
        raise _too_wide(f"induced width {width}", n_states,
                        8.0 * float(n_states) ** (width + 1), max_bytes,
                        f"for one factor of {n_states}^{width + 1} entries; every elimination "
                        f"order tried is at least {width} wide")
    plan = build_plan(n_nodes, edges, order)
    check_memory(plan, n_states, max_bytes, differentiate)
    return plan


def _edge_factors(pairwise, e_ids):
    """``pairwise (E, K, K)`` rows ``e_ids`` flattened to ``(a, K^2)``, zeros for the padding
    id ``E``: a gather that fills out of range, not a zero row appended to ``pairwise``.
    (Appending one — ``concatenate`` or ``pad`` of the reshaped argument — compiles on XLA
    CPU into a pad kernel on which LLVM's loop vectoriser crashes the process, SIGSEGV in
    ``preparePlanForEpilogueVectorLoop``, for some edge counts: K = 2 and E = 36, 92, 120,
    180 (a 10 x 10 lattice), 264 (12 x 12), ...)"""
    flat = pairwise.reshape(pairwise.shape[0], -1)
    return jnp.take(flat, e_ids, axis=0, mode="fill", fill_value=0.0)


@functools.partial(jit, static_argnums=0)
def log_partition(plan: EliminationPlan, unary, pairwise):
    """``log Z = log sum_z exp(sum_t unary[t, z_t] + sum_e pairwise[e, z_s, z_t])`` by the
    fixed elimination plan. ``unary (n, K)``, ``pairwise (E, K, K)``.

    A few ``lax.scan``s over runs of steps (:func:`segments`; the program does not grow
    with the graph): step ``s`` gathers its factors onto the ``K^r`` configurations of
    its union scope (:func:`_gather_index`), sums them and ``logsumexp``s out
    the last slot, ``m_s(z_scope) = log sum_{z_v} exp(u_v(z_v) + sum_e P_e(z) + sum_m
    m_m(z))``; ``log Z`` is the sum of the scalar messages (one per connected component).
    Each run writes its messages into its own buffer (rows of ``K^(r - 1)``); later runs
    read it as a constant. The gather indices are computed once, at trace time, while
    they fit in ``INDEX_BYTES`` (twice as fast as computing them in every step on the
    SIDS graph, ``K`` = 2 or 3), else in each step from the strides.
    """
    n_states = unary.shape[1]
    lay = _layout(plan, n_states)
    buffers, log_z = [], jnp.zeros((), unary.dtype)
    for g, (start, stop, r) in enumerate(lay.runs):
        done = tuple(buffers)

        def _step(carry, x, r=r, done=done):
            """Sum the factors of one elimination on its union scope; sum out the variable."""
            msgs, log_z = carry
            v, row, e_ids, e_index, m_ids, m_index, root = x
            if not lay.precomputed:                     # strides -> indices, in the step
                e_index = _gather_index(e_index, n_states, r, jnp)
                m_index = [_gather_index(i, n_states, r, jnp) for i in m_index]
            last = jnp.arange(n_states ** r, dtype=np.int32) % n_states     # z_v
            total = unary[v][last]
            total = total + jnp.sum(jnp.take_along_axis(_edge_factors(pairwise, e_ids),
                                                        e_index, 1), 0)
            for buf, ids, index in zip(done + (msgs,), m_ids, m_index):
                total = total + jnp.sum(jnp.take_along_axis(buf[ids], index, 1), 0)
            new = logsumexp(total.reshape(-1, n_states), axis=-1)
            msgs = lax.dynamic_update_slice(msgs, new[None], (row, jnp.zeros((), row.dtype)))
            return (msgs, log_z + jnp.where(root, new[0], 0.0)), None

        msgs = jnp.zeros((lay.n_rows[g] + 1, n_states ** (r - 1)), unary.dtype)
        xs = lay.arrays[g]
        if lay.precomputed:                             # (steps, a, r) strides -> indices
            xs = xs[:3] + (_gather_index(xs[3], n_states, r), xs[4],
                           tuple(_gather_index(m, n_states, r) for m in xs[5]), xs[6])
        (msgs, log_z), _ = lax.scan(_step, (msgs, log_z), xs)
        buffers.append(msgs)
    return log_z


class SiteMarginals(NamedTuple):
    """log_normalizer: ``log Z``; marginals: ``(n, K)`` ``p(z_t = k)``."""
    log_normalizer: jax.Array
    marginals: jax.Array


@functools.partial(jit, static_argnums=0)
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


@functools.partial(jit, static_argnums=(0, 5))
def weighted_log_marginal(plan: EliminationPlan, field_unary, field_pairwise, log_lik,
                          weights, scheme: str = "A", field_log_normalizer=None):
    """``log p_scheme(x; w)`` of a hidden MRF (module docstring, seed eq. 4-5), the
    latent field's weighted normaliser included. ``field_unary (n, K)``, ``field_pairwise``
    ``(K, K)`` or ``(E, K, K)``, ``log_lik (n, K)``, ``weights (n,)``.

    ``field_log_normalizer``: ``log Z_field`` when the caller has it (scheme A only: there
    it depends on neither ``log_lik`` nor ``w``), saving one of the two eliminations.
    """
    if field_log_normalizer is not None:
        if scheme != "A":
            raise ValueError("`field_log_normalizer` is a constant only under scheme 'A'")
        h, pair = weighted_potentials(plan, field_unary, field_pairwise, weights, "A")
        return log_partition(plan, h + log_lik * weights[:, None], pair) - field_log_normalizer
    h, pair = weighted_potentials(plan, field_unary, field_pairwise, weights, scheme)
    # numerator and normaliser in one batched elimination (one scan in the program)
    log_z = jax.vmap(log_partition, (None, 0, None))(
        plan, jnp.stack([h + log_lik * weights[:, None], h]), pair)
    return log_z[0] - log_z[1]


@functools.partial(jit, static_argnums=0)
def heldout_losses(plan: EliminationPlan, field_unary, field_pairwise, log_lik, weights):
    """Held-out losses of the sites with ``weights == 0``, in the full (unweighted) model.

    Returns ``(fold_loss, point_losses (n,))``: ``-log p(x_o | x_kept) = log Z(kept) -
    log Z(all)`` and ``-log p(x_t | x_kept) = -log sum_k p(z_t = k | x_kept) p(x_t | z_t =
    k)`` at left-out sites, 0 at kept ones.
    """
    _, pair = weighted_potentials(plan, field_unary, field_pairwise, weights, "A")
    kept = (weights != 0).astype(log_lik.dtype)
    # the backward pass of the marginals is compiled away when only the fold loss is used
    # (leave-one-out: :func:`approxcv.engine.batching.heldout_losses`)
    post = site_marginals(plan, field_unary + log_lik * kept[:, None], pair)
    log_z_all = log_partition(plan, field_unary + log_lik, pair)
    log_marg = jnp.log(jnp.maximum(post.marginals, jnp.finfo(log_lik.dtype).tiny))
    log_pred = logsumexp(log_marg + log_lik, axis=1)
    points = jnp.where(kept > 0, 0.0, -log_pred)
    fold = jnp.where(jnp.any(kept == 0), post.log_normalizer - log_z_all, 0.0)
    return fold, points
