"""Held-out losses and IJ chord steps of many folds of one long series, folds in lanes.

Folds that spread over a long series (i.i.d. 10 % folds, say) each need passes over all of
it: fold by fold, ``vmap``-ped a few at a time, those passes cost a scan step per fold and
``(T, K)`` arrays per fold. For a chain model that offers them (``Problem.lanes``, scheme A,
one sequence), a batch of ``B`` folds instead shares one scan over time
(:func:`approxcv.inference.chain_lanes.lane_pass`), with ``B`` set by a memory budget
(:data:`LANES_MEMORY`), so storage is bounded whatever ``T``.

The IJ's error estimate reuses the held-out pass: under scheme A with 0/1 weights,
``F(u, w_o) = F(u, 1) - L_o(u) = -log Z(kept; u) - log p(u)``, so the pass that gives the
fold loss ``L_o(u_m)`` at the IJ point also gives ``F(u_m, w_o)`` and, from the kept
model's smoothed marginals, ``grad F(u_m, w_o)`` — the first chord step's residual. The
second step needs one more pass (kept model only) at ``u_m - d_1``. The IJ's screened
estimate (:func:`lanes_first_steps`) needs only the first pass.
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from .._runtime import jit
from ..executors import host_workers
from ..inference.chain_lanes import chunk_counts, lane_pass, normaliser_floor, safe_block
from .batching import in_chunks
from .chord import (contraction_rate, extrapolate, screen_terms, second_step_correction,
                    signed_rate)
from .windows import use_windows

__all__ = ["use_lanes", "lane_batch_size", "off_stride", "lanes_heldout_losses",
           "lanes_fold_losses", "lanes_chord_steps", "lanes_first_steps", "lanes_second_steps",
           "LANES_MEMORY", "LANES_MIN_WORK"]

#: folds x series length above which folds go in lanes (below it the per-fold passes are
#: cheap; tests lower it to exercise the lanes on small series)
LANES_MIN_WORK = 2 ** 18
#: bytes the batches of folds in lanes running at once may hold together (sets the folds
#: per batch, :func:`lane_batch_size`): 896 MiB
LANES_MEMORY = 7 * 2 ** 27
#: 8-byte words a batch holds per left-out unit of a fold (:func:`lane_batch_size`)
PER_UNIT_WORDS = 7
#: steps per chunk of the series (emissions and forward messages are held a chunk at a time)
LANES_CHUNK = 1024


def use_lanes(problem, index) -> bool:
    """Lanes pay: the problem offers them, the work is large and the folds are not short
    ones that windows of the series serve (:func:`approxcv.engine.windows.use_windows`)."""
    if getattr(problem, "lanes", None) is None:
        return False
    if np.asarray(index).shape[0] * problem.n_units <= LANES_MIN_WORK:
        return False
    return not use_windows(problem, index)


def _chunk(n: int) -> int:
    """Steps per chunk: :data:`LANES_CHUNK`, or the series rounded up to a multiple of 8."""
    return int(min(LANES_CHUNK, -(-n // 8) * 8))


def lane_batch_size(n: int, m: int, k: int, cap: int, n_folds: int,
                    memory: int | None = None) -> int:
    """Folds per batch within ``memory`` bytes (default :data:`LANES_MEMORY`): per fold the
    forward messages at chunk starts ``(T / C) K``, about 16 chunk-sized arrays ``C K``, and
    ``PER_UNIT_WORDS (m + cap)`` for its index and point losses (8-byte words).

    ``PER_UNIT_WORDS`` is measured: a batch of 73 folds of 100,000 units at ``T = 10^6``
    (PoissonHMM(2), chord steps) held 177 MB of XLA temporaries, 63 MB of arguments and 56
    MB of outputs, and the host its copies of the batch's index and outputs: about 7 words
    per left-out unit. (4 were assumed before, with a budget of 512 MB; the budget now
    says what those batches hold.)"""
    chunk = _chunk(n)
    per_fold = 8 * ((-(-n // chunk)) * k + 16 * chunk * k + PER_UNIT_WORDS * (m + cap))
    budget = LANES_MEMORY if memory is None else memory
    return int(max(1, min(n_folds, budget // per_fold)))


def off_stride(size: int) -> int:
    """Folds per batch moved off multiples of 64 (``+ 8``): with ``(K, B)`` messages a row
    stride of 64 x 2^k doubles aliases in the CPU caches. Measured (PoissonHMM(2), T = 5,000,
    i.i.d. 10 % folds, two batches at once): the gradient pass of 512 folds a batch took
    0.29 s for 1,024 folds and of 520 folds 0.20 s for 1,040; 256 a batch 0.137 s, 264
    0.105 s (the forward-only pass: no difference)."""
    return size + 8 if size >= 64 and size % 64 == 0 else size


def _layout(index, n: int, rows: int = 64):
    """``cap``: the most units of one fold in one chunk (NumPy, ``rows`` folds at a time),
    rounded up to a multiple of 16 so that other folds of the series (``"auto"``'s
    subsets) mostly reuse the compiled programs."""
    chunk = _chunk(n)
    most = max(int(chunk_counts(index[i:i + rows], n, chunk).max())
               for i in range(0, index.shape[0], rows))
    return -(-max(most, 1) // 16) * 16


def _per_fold(lanes, u):
    """``(log_init, log_trans, emission params)`` of every row of ``u (B, D)``."""
    return jax.vmap(lanes.potentials)(u)


def _run(lanes, u, index, data, n: int, cap: int, full: bool, points: bool, grads: bool,
         block: int = 1):
    """One :func:`lane_pass` of the folds ``index (B, m)`` at ``u (B, D)``. Returns
    ``(fold_loss, points, F(u, w_o), grad F(u, w_o) (B, D))``."""
    chunk = _chunk(n)
    index = jnp.sort(index, axis=1)
    ends = jnp.cumsum(chunk_counts(index, n, chunk), axis=1).T
    pad = -(-n // chunk) * chunk - n            # the series is padded at the front
    x = jax.tree_util.tree_map(
        lambda a: jnp.concatenate([jnp.broadcast_to(a[:1], (pad,) + a.shape[1:]), a]),
        lanes.series(data))
    (log_init, log_trans, em), pull = jax.vjp(partial(_per_fold, lanes), u)
    out = lane_pass(log_init, log_trans, lanes.emission, em, x, index.astype(jnp.int32),
                    ends, n, chunk, cap, full=full, points=points, grads=grads, block=block)
    prior, prior_grad = jax.vmap(jax.value_and_grad(lanes.log_prior), (0, None))(u, data)
    value = -out.log_z_kept - prior
    grad = None
    if grads:
        grad = -pull((out.grad_init, out.grad_trans, out.grad_emission))[0] - prior_grad
    return out.log_z_kept - out.log_z_full, out.points, value, grad


@partial(jit, static_argnums=(0, 4, 5, 6))
def _heldout(lanes, u, index, data, n: int, cap: int, block: int):
    """``(fold_loss, points)`` of a batch of folds."""
    return _run(lanes, u, index, data, n, cap, True, True, False, block)[:2]


@partial(jit, static_argnums=(0, 4, 5, 6))
def _fold_loss(lanes, u, index, data, n: int, cap: int, block: int):
    """``(fold_loss,)`` of a batch of folds (forward passes only)."""
    return _run(lanes, u, index, data, n, cap, True, False, False, block)[:1]


@partial(jit, static_argnums=0)
def _floor(lanes, u):
    """:func:`~approxcv.inference.chain_lanes.normaliser_floor` of all rows of ``u``."""
    log_init, log_trans, _ = jax.vmap(lanes.potentials)(u)
    return normaliser_floor(log_init, log_trans)


@partial(jit, static_argnums=(0, 5, 6, 7))
def _chord(lanes, chol, u, index, data, n: int, cap: int, block: int):
    """``(correction, rho, fold_loss, points)`` of a batch of IJ folds: the held-out pass at
    ``u_m`` gives ``r_1 = grad F(u_m, w_o)``, a kept-model pass at ``u_m - d_1`` gives
    ``r_2`` (:func:`approxcv.engine.chord.chord_step`, for many folds)."""
    fold_loss, points, value, r1 = _run(lanes, u, index, data, n, cap, True, True, True, block)
    d1 = jsl.cho_solve((chol, True), r1.T).T
    r2 = _run(lanes, u - d1, index, data, n, cap, False, False, True, block)[3]
    d2 = jsl.cho_solve((chol, True), r2.T).T
    den_sq = jnp.sum(d1 * r1, axis=1)
    rho = contraction_rate(jnp.sum(d2 * r2, axis=1), den_sq, value)
    lam = signed_rate(jnp.sum(d1 * r2, axis=1), den_sq, rho)
    return jax.vmap(extrapolate)(d1, d2, rho, lam), rho, fold_loss, points


@partial(jit, static_argnums=(0, 7, 8, 9))
def _first(lanes, chol, u_1, g_1, u, index, data, n: int, cap: int, block: int):
    """``(d_1, change, reach, rho, fold_loss, points)`` of a batch of IJ folds: the first chord
    step and its screen (:func:`approxcv.engine.chord.screen_terms`) from the held-out pass
    at ``u_m``, which also gives ``r_1 = grad F(u_m, w_o)``."""
    fold_loss, points, value, r1 = _run(lanes, u, index, data, n, cap, True, True, True, block)
    d1 = jsl.cho_solve((chol, True), r1.T).T
    change, reach, rho = jax.vmap(screen_terms, (None, 0, 0, 0, 0, None, None))(
        chol, d1, r1, value, u - u_1, g_1, jsl.cho_solve((chol, True), g_1))
    return d1, change, reach, rho, fold_loss, points


@partial(jit, static_argnums=(0, 6, 7, 8))
def _second(lanes, chol, v, d1, index, data, n: int, cap: int, block: int):
    """``(correction, rho)`` of a batch of folds given their first chord steps ``d_1``: a
    kept-model pass at ``v = u_m - d_1`` gives ``r_2``
    (:func:`approxcv.engine.chord.second_chord_step`, for many folds)."""
    value, r2 = _run(lanes, v, index, data, n, cap, False, False, True, block)[2:]
    return jax.vmap(second_step_correction, (None, 0, 0, 0))(chol, d1, r2, value)


def _batches(problem, params, index, batch_size, memory, progress, desc, call, extra=()):
    """``call(u, index, *extra, cap, block)`` over batches of folds (``extra``: more arrays
    with a leading fold axis; the last batch padded), NumPy
    outputs, one batch per core at once (:func:`approxcv.executors.host_workers`; the
    memory budget is shared among them, and the folds are split into at least as many
    batches as workers); ``block``: normalisers per ``log`` where the parameters make
    that safe (:func:`~approxcv.inference.chain_lanes.safe_block`)."""
    index = np.asarray(index)
    n, m = problem.n_units, index.shape[1]
    cap = _layout(index, n)
    k = int(jax.eval_shape(lambda u: problem.lanes.potentials(u)[0],
                           problem.u_full).shape[0])
    workers = host_workers()
    budget = (LANES_MEMORY if memory is None else memory) // workers
    size = int(batch_size or off_stride(lane_batch_size(n, m, k, cap,
                                                        -(-len(index) // workers), budget)))
    params = np.asarray(params)
    block = safe_block(float(_floor(problem.lanes, jnp.asarray(params))))
    block = block if _chunk(n) % block == 0 else 1
    return in_chunks(lambda u, i, *e: call(u, i, *e, cap, block), (params, index, *extra),
                     size, desc, progress, workers)


def lanes_heldout_losses(problem, params_flat, index, batch_size: int | None = None,
                         progress: bool = False, memory: int | None = None):
    """Held-out ``(fold_loss (n_folds,), point_loss (n_folds, m))`` of every fold, folds in
    lanes (as :func:`approxcv.engine.heldout.heldout_losses`; ``memory``: bytes per batch,
    default :data:`LANES_MEMORY`)."""
    return _batches(problem, params_flat, index, batch_size, memory, progress,
                    "held-out losses", lambda u, i, cap, block: _heldout(
                        problem.lanes, u, i, problem.data, problem.n_units, cap, block))


def lanes_fold_losses(problem, params_flat, index, batch_size: int | None = None,
                      progress: bool = False, memory: int | None = None):
    """Held-out fold losses ``(n_folds,)`` only (no point losses: the forward passes)."""
    return _batches(problem, params_flat, index, batch_size, memory, progress,
                    "held-out losses", lambda u, i, cap, block: _fold_loss(
                        problem.lanes, u, i, problem.data, problem.n_units, cap, block))[0]


def lanes_chord_steps(problem, params, index, chol, batch_size: int | None = None,
                      progress: bool = False, memory: int | None = None):
    """``(correction, rho, (fold_loss, point_loss))`` of the IJ folds ``params`` with ``M =
    H`` (Cholesky factor ``chol``): the chord steps of
    :func:`approxcv.engine.error_estimate.full_hessian_chord_steps` and, from the same
    pass, the held-out losses at ``params``."""
    chol = jnp.asarray(chol)
    corr, rho, loss, points = _batches(
        problem, params, index, batch_size, memory, progress, "held-out losses, chord steps",
        lambda u, i, cap, block: _chord(problem.lanes, chol, u, i, problem.data,
                                        problem.n_units, cap, block))
    return corr, rho, (loss, points)


def lanes_first_steps(problem, params, index, chol, g_1, batch_size: int | None = None,
                      progress: bool = False, memory: int | None = None):
    """``(d_1, change, reach, rho, (fold_loss, point_loss))`` of the IJ folds ``params``: the
    first chord step with ``M = H`` and its screen terms
    (:func:`approxcv.engine.chord.screen_terms`; ``g_1 = grad F(u_1, 1)``) and, from the same
    pass, the held-out losses at ``params``."""
    chol, u_1, g_1 = jnp.asarray(chol), jnp.asarray(problem.u_full), jnp.asarray(g_1)
    d1, change, reach, rho, loss, points = _batches(
        problem, params, index, batch_size, memory, progress, "held-out losses, chord steps",
        lambda u, i, cap, block: _first(problem.lanes, chol, u_1, g_1, u, i, problem.data,
                                        problem.n_units, cap, block))
    return d1, change, reach, rho, (loss, points)


def lanes_second_steps(problem, params, d1, index, chol, batch_size: int | None = None,
                       progress: bool = False, memory: int | None = None):
    """``(correction, rho)`` of the IJ folds ``params`` from their first chord steps ``d1``
    (:func:`lanes_first_steps`): the second step's kept-model pass at ``params - d1``."""
    chol = jnp.asarray(chol)
    v = np.asarray(params) - np.asarray(d1)
    return _batches(problem, v, index, batch_size, memory, progress, "chord steps",
                    lambda u, i, d, cap, block: _second(problem.lanes, chol, u, d, i,
                                                        problem.data, problem.n_units, cap,
                                                        block), (np.asarray(d1),))
