"""Quasi-Newton minimisation: BFGS / L-BFGS with a gradient stop, then an optional
safeguarded Newton polish.

The iteration is optimistix's ``BFGS`` / ``LBFGS`` (inverse-Hessian updates skipped when
``s^T y <= eps``, backtracking Armijo line search with slope 0.1 and halving, Cauchy test on
the change in ``u`` and ``F`` under the max norm) plus a gradient stop, written as one
``lax.while_loop`` over a *batch* of starts: the objective is evaluated over the batch
inside the loop body (``vmap``ped, or row by row: :func:`over_rows`), not around the loop,
so the body is traced once and each start stops on its own test
(``tests/engine/test_quasi_newton.py`` checks it against optimistix step for step). A
start whose line search has shrunk the step below round-off stops instead of idling to
``max_steps``. Tracing it takes about a third of the time the optimistix version took, and
importing it nothing (optimistix, equinox and lineax took about 0.5 s to import): every fit
and every exact-CV refit of a new model configuration in a fresh process pays both.

For small ``D`` a few Newton steps — on the exact Hessian (fits), or on a forward-difference
Hessian of the exact gradient in the whitened coordinates of exact refits (a much smaller
program), each accepted only if the Hessian is positive definite and the objective does not
increase or the gradient norm halves — bring the gradient to round-off level, which is what
the IJ and exact CV need to be compared at the 1e-6 level. Everything is pure and
``jit``/``vmap`` compatible.
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from .hessian import hessian_by_hvp, tangent_chunk, value_grad_fd_hessian
from .._runtime import current_platform, jit

#: L-BFGS history length (optimistix's default)
LBFGS_HISTORY = 10
#: backtracking Armijo line search: sufficient-decrease slope and step shrink factor
ARMIJO_SLOPE, BACKTRACK = 0.1, 0.5
#: a run is converged when ``||grad F|| <= GTOL * scale`` (fits, refits, Newton polish, EM)
GTOL = 1e-7
#: a start stops (unconverged unless its gradient is small) once its trial step is below this
#: fraction of the Cauchy tolerance ``atol + rtol |u|`` in every coordinate
STALL = 1e-3


class MinimizeResult(NamedTuple):
    """u: minimiser ``(D,)``; value: objective there; grad_norm: ``||dF/du||``;
    converged: BFGS met its tolerance and everything is finite; num_steps: BFGS steps."""
    u: jax.Array
    value: jax.Array
    grad_norm: jax.Array
    converged: jax.Array
    num_steps: jax.Array


# ------------------------------------------------------------ per-start pieces
def _bfgs_direction(hinv, grad):
    """``-B^{-1} g`` from the dense inverse-Hessian approximation."""
    return -hinv @ grad


def _bfgs_update(hinv, s, y, inner):
    """Inverse BFGS update ``(I - rho s y^T) B^{-1} (I - rho y s^T) + rho s s^T``."""
    hy = hinv @ y
    return (hinv + ((inner + y @ hy) / inner ** 2) * jnp.outer(s, s)
            - (jnp.outer(hy, s) + jnp.outer(s, hy)) / inner)


def _lbfgs_direction(memory, grad):
    """``-H g`` by the two-loop recursion over the ring buffer ``(S, Y, rho, next)``, with
    ``H_0 = (s^T y / y^T y) I`` from the newest pair (1 while the history is empty)."""
    s_hist, y_hist, rho, nxt = memory
    m = rho.shape[0]
    order = (jnp.arange(m) + nxt) % m              # oldest -> newest

    def _newest_first(q, i):
        """First loop: ``alpha_i = rho_i s_i^T q``, ``q -= alpha_i y_i``."""
        alpha = rho[i] * (s_hist[i] @ q)
        return q - alpha * y_hist[i], alpha

    q, alphas = lax.scan(_newest_first, grad, order, reverse=True)
    newest = (nxt - 1) % m
    yy = y_hist[newest] @ y_hist[newest]
    gamma = jnp.where(yy > 0, (s_hist[newest] @ y_hist[newest]) / jnp.where(yy > 0, yy, 1.0),
                      1.0)

    def _oldest_first(r, inputs):
        """Second loop: ``r += (alpha_i - rho_i y_i^T r) s_i``."""
        i, alpha = inputs
        return r + s_hist[i] * (alpha - rho[i] * (y_hist[i] @ r)), None

    r, _ = lax.scan(_oldest_first, gamma * q, (order, alphas))
    return -r


def _lbfgs_update(memory, s, y, inner):
    """Push the pair ``(s, y)`` into the ring buffer."""
    s_hist, y_hist, rho, nxt = memory
    i = nxt % rho.shape[0]
    return (s_hist.at[i].set(s), y_hist.at[i].set(y), rho.at[i].set(1.0 / inner), nxt + 1)


class _State(NamedTuple):
    """Per-start state of the quasi-Newton loop (optimistix's, flattened)."""
    steps: jax.Array      # loop steps taken (accepted or not)
    u: jax.Array          # last accepted point
    f: jax.Array          # F(u) / scale
    g: jax.Array          # its gradient
    memory: tuple         # (B^{-1},) for BFGS, (S, Y, rho, next) for L-BFGS
    u_eval: jax.Array     # point tried next
    step_size: jax.Array
    first: jax.Array      # no step taken yet
    cauchy: jax.Array     # the last accepted step met the Cauchy test


def _step(state: _State, f_eval, g_eval, *, rtol, atol, limited):
    """One optimistix quasi-Newton step for one start, given ``F`` and its gradient at
    ``state.u_eval``: Armijo acceptance, inverse-Hessian update, Cauchy test, next trial."""
    diff = state.u_eval - state.u
    predicted = state.g @ diff
    accept = state.first | ((f_eval - state.f <= ARMIJO_SLOPE * predicted) & (predicted <= 0))
    step_size = jnp.where(accept, 1.0, BACKTRACK * state.step_size)
    grad_diff = g_eval - state.g
    inner = grad_diff @ diff
    update = accept & (inner > jnp.finfo(inner.dtype).eps)
    safe = jnp.where(update, inner, 1.0)
    if limited:
        memory = _lbfgs_update(state.memory, diff, grad_diff, safe)
    else:
        memory = (_bfgs_update(state.memory[0], diff, grad_diff, safe),)
    memory = jax.tree_util.tree_map(lambda new, old: jnp.where(update, new, old),
                                    memory, state.memory)
    u_scale = atol + rtol * jnp.abs(state.u_eval)
    f_scale = atol + rtol * jnp.abs(f_eval)
    cauchy = ((jnp.max(jnp.abs(diff) / u_scale) < 1)
              & (jnp.abs(f_eval - state.f) / f_scale < 1) & ~state.first)
    u, f, g = (jnp.where(accept, new, old) for new, old in
               ((state.u_eval, state.u), (f_eval, state.f), (g_eval, state.g)))
    direction = _lbfgs_direction(memory, g) if limited else _bfgs_direction(memory[0], g)
    return _State(state.steps + 1, u, f, g, memory, u + step_size * direction, step_size,
                  jnp.zeros_like(state.first), accept & cauchy)


def _init_state(u0, limited: bool) -> _State:
    dim, dtype = u0.shape[0], u0.dtype
    if limited:
        m = LBFGS_HISTORY
        memory = (jnp.zeros((m, dim), dtype), jnp.zeros((m, dim), dtype),
                  jnp.zeros(m, dtype), jnp.asarray(0))
    else:
        memory = (jnp.eye(dim, dtype=dtype),)
    zero = jnp.zeros((), dtype)
    return _State(jnp.asarray(0), u0, zero, jnp.zeros_like(u0), memory, u0,
                  jnp.ones((), dtype), jnp.asarray(True), jnp.asarray(False))


def _newton_polish(fun, u, f, g, args, num_steps: int, chunk: int | None = None,
                   hessian: str = "hvp"):
    """Up to ``num_steps`` safeguarded Newton steps on ``fun(u, args)`` from ``u`` (one
    start), where ``f, g`` are ``fun`` and its gradient at ``u``; returns the new triple. A
    step is kept only if the objective does not rise or the gradient norm halves (next to
    the minimum ``F`` changes by less than its round-off, so the objective alone would
    reject the steps that matter most).

    ``hessian``: ``"hvp"``, the exact Hessian from ``D`` Hessian-vector products; or
    ``"fd"``, forward differences of the exact gradient
    (:func:`~approxcv.optim.hessian.value_grad_fd_hessian`) for well-scaled (whitened)
    coordinates: each pass evaluates ``F`` and ``g`` at the candidate and its ``D``
    displaced points in one batched map, whose values also give the next step's Hessian,
    so the program holds one more copy of the gradient and no Hessian-vector products
    (forward-over-reverse through the model's scans; the exact refits' program compiled
    about twice as fast). In badly scaled coordinates (Hessian diagonals over 20 orders of
    magnitude, an ARHMM on data in units 1e7 apart) differences are too inexact: the fit's
    polish keeps ``"hvp"``. ``chunk``: tangents or points at a time (default: sized by
    ``args``; pass it when ``fun`` closes over data, which ``args`` then does not show)."""
    value_and_grad = jax.value_and_grad(fun)
    if hessian == "fd":
        return _fd_newton_polish(value_and_grad, u, f, g, args, num_steps,
                                 u.shape[0] + 1 if chunk is None else chunk)

    def _newton(carry, _):
        u, f, g = carry
        h = hessian_by_hvp(fun, u, args, chunk=chunk)
        chol = jnp.linalg.cholesky(0.5 * (h + h.T))
        u_new = u - jax.scipy.linalg.cho_solve((chol, True), g)
        f_new, g_new = value_and_grad(u_new, args)
        ok = (jnp.all(jnp.isfinite(u_new))
              & ((f_new <= f) | (jnp.linalg.norm(g_new) < 0.5 * jnp.linalg.norm(g))))
        return tuple(jnp.where(ok, new, old) for new, old in
                     zip((u_new, f_new, g_new), carry)), None

    (u, f, g), _ = lax.scan(_newton, (u, f, g), None, length=num_steps)
    return u, f, g


def _fd_newton_polish(value_and_grad, u, f, g, args, num_steps: int, batch: int):
    """:func:`_newton_polish` with ``hessian="fd"``: the first pass evaluates the Hessian
    at ``u`` (candidate ``u`` itself); each later one tries the Newton step from the kept
    point and evaluates ``F``, ``g`` and the next Hessian there (one copy of the gradient
    in the program)."""
    def _newton(carry, first):
        u, f, g, hess = carry
        chol = jnp.linalg.cholesky(hess)
        cand = jnp.where(first, u, u - jax.scipy.linalg.cho_solve((chol, True), g))
        f_new, g_new, h_new = value_grad_fd_hessian(value_and_grad, cand, args, batch)
        ok = first | (jnp.all(jnp.isfinite(cand)) & jnp.isfinite(f_new)
                      & ((f_new <= f) | (jnp.linalg.norm(g_new) < 0.5 * jnp.linalg.norm(g))))
        keep_f = jnp.where(first, f, f_new)      # the first pass only adds the Hessian
        keep_g = jnp.where(first, g, g_new)
        return tuple(jnp.where(ok, new, old) for new, old in
                     zip((cand, keep_f, keep_g, h_new), carry)), None

    firsts = jnp.arange(num_steps + 1) == 0
    (u, f, g, _), _ = lax.scan(_newton, (u, f, g, jnp.eye(u.shape[0], dtype=u.dtype)), firsts)
    return u, f, g


def over_rows(fn, rows: str = "vmap"):
    """``fn(*row_args)`` applied to every row of its (leading-axis batched) arguments:
    ``jax.vmap`` (``rows="vmap"``), or ``lax.map`` — the rows in sequence inside one
    program — for ``rows="map"`` on CPU. A recursion over time (an HMM's forward pass)
    ``vmap``ped over rows carries the batch through every step, which on CPU ran about
    twice slower for exact-CV refits of HMMs (3.6 times for a bare forward-backward of 4
    rows) than the same rows in sequence; elsewhere, and for models without
    such a recursion, ``vmap`` is used (the platform is the placement's,
    :mod:`approxcv._runtime.placement`). Arguments that are ``None`` are passed through."""
    if rows != "map" or current_platform() != "cpu":
        def batched(*args):
            return jax.vmap(fn, tuple(None if a is None else 0 for a in args))(*args)
        return batched

    def mapped(*args):
        present = [i for i, a in enumerate(args) if a is not None]

        def one(row):
            full = list(args)
            for i, r in zip(present, row):
                full[i] = r
            return fn(*full)
        return lax.map(one, tuple(args[i] for i in present))
    return mapped


def _minimize_batch(fun, u0s, args, *, max_steps, rtol, atol, scale, newton_steps, gtol,
                    method, rows: str = "vmap", closed_over=None, hessian: str = "hvp"):
    """:func:`minimize` of ``fun(u, args_i)`` from every row of ``u0s (b, D)``, with
    ``args`` batched along its leading axis (``None``: no arguments); the objective of
    the rows is evaluated by :func:`over_rows`. ``closed_over``: the data ``fun`` closes
    over, which sizes the Newton polish's batches of gradients (one row of ``args`` and it:
    a CRF refit on 14,041 sentences sized by its weights alone took 128 tangents at once
    and asked for 30 GB)."""
    limited = method == "lbfgs"
    if limited:
        newton_steps = 0
    scaled = lambda u, a: fun(u, a) / scale  # noqa: E731
    value_and_grad = over_rows(jax.value_and_grad(scaled), rows)
    step = jax.vmap(functools.partial(_step, rtol=rtol, atol=atol, limited=limited))
    # stop at a tenth of the convergence threshold, so that the Newton polish (or, without
    # it, the gradient test below) starts from a point that already passes
    stop = 0.1 * gtol

    def _active(s: _State):
        small = (jnp.linalg.norm(s.g, axis=-1) <= stop) & ~s.first
        # the line search has shrunk the trial step below a thousandth of the Cauchy
        # tolerance: F cannot change by more than round-off along it, so Armijo only ever
        # fails and the loop would idle to max_steps with u unchanged
        stalled = jnp.all(jnp.abs(s.u_eval - s.u) <= STALL * (atol + rtol * jnp.abs(s.u)),
                          -1) & ~s.first
        return (~(s.cauchy | small | stalled) & (s.steps < max_steps)
                & jnp.all(jnp.isfinite(s.u), -1))

    def _body(s: _State):
        """Evaluate ``F`` and its gradient at every trial point; active starts take a step."""
        f_eval, g_eval = value_and_grad(s.u_eval, args)
        new, active = step(s, f_eval, g_eval), _active(s)
        return jax.tree_util.tree_map(
            lambda a, b: jnp.where(active.reshape(active.shape + (1,) * (a.ndim - 1)), a, b),
            new, s)

    u0s = jnp.asarray(u0s, jnp.float64)
    init = jax.vmap(_init_state, (0, None))(u0s, limited)
    final = lax.while_loop(lambda s: jnp.any(_active(s)), _body, init)
    stopped = (final.cauchy | ((jnp.linalg.norm(final.g, axis=-1) <= stop) & ~final.first)) \
        & jnp.all(jnp.isfinite(final.u), -1)
    # F and its gradient at the last accepted point, unscaled (NaN where no step was taken:
    # the start was not finite)
    u, value, grad = final.u, jnp.where(final.first, jnp.nan, final.f * scale), final.g * scale
    if newton_steps:
        row = None if args is None else jax.tree_util.tree_map(lambda a: a[0], args)
        chunk = tangent_chunk((row, closed_over))
        u, value, grad = over_rows(
            lambda *a: _newton_polish(fun, *a, newton_steps, chunk, hessian), rows)(
                u, value, grad, args)
    grad_norm = jnp.linalg.norm(grad, axis=-1)
    converged = ((stopped | (grad_norm <= gtol * scale)) & jnp.isfinite(value)
                 & jnp.all(jnp.isfinite(u), -1))
    return MinimizeResult(u, value, grad_norm, converged, final.steps)


def minimize(fun, u0, args=None, *, max_steps: int = 1000, rtol: float = 1e-10,
             atol: float = 1e-10, scale: float = 1.0, newton_steps: int = 2,
             gtol: float = GTOL, method: str = "bfgs") -> MinimizeResult:
    """Minimise ``fun(u, args)`` from ``u0`` with BFGS and Newton polishing.

    Args:
        fun: scalar function ``fun(u, args)`` of a flat ``(D,)`` vector.
        u0: starting point ``(D,)``.
        args: passed through to ``fun``.
        max_steps: BFGS step limit.
        rtol, atol: BFGS Cauchy tolerances on the objective divided by ``scale``; BFGS also
            stops when ``||grad F|| / scale <= gtol / 10``.
        scale: positive constant dividing the objective (e.g. the number of units) so the
            tolerances are per unit.
        newton_steps: safeguarded Newton steps after BFGS (0 to skip; use 0 for large D).
        gtol: the run also counts as converged when ``||grad F|| / scale <= gtol``.
        method: ``"bfgs"`` (dense inverse-Hessian approximation, ``D x D`` memory) or
            ``"lbfgs"`` (L-BFGS, history 10, ``O(D)`` memory; for large ``D``, where the
            Newton polish is skipped too).

    Returns:
        :class:`MinimizeResult`; ``converged`` is False when neither the Cauchy test nor
        the gradient test holds, or values are non-finite — callers must report it, not
        ignore it.
    """
    res = _minimize_batch(lambda u, _: fun(u, args), jnp.asarray(u0)[None], None,
                          max_steps=max_steps, rtol=rtol, atol=atol, scale=scale,
                          newton_steps=newton_steps, gtol=gtol, method=method,
                          closed_over=args)
    return MinimizeResult(*(x[0] for x in res))


def batched_minimize(fun, scale: float, max_steps: int, newton_steps: int,
                     method: str = "bfgs", rows: str = "vmap", hessian: str = "hvp"):
    """:func:`minimize` over a batch of starting points and weights for ``fun(u, w, data)``.

    Returns ``solve(u0s (b, D), weights (b, n), data) -> MinimizeResult`` with a leading
    batch axis: one ``jit``-compiled ``while_loop`` in which every start stops on its own
    test; built (and compiled) once per objective, settings and batch shape — ``scale`` is
    an argument of the program, not a constant of it, so data of another size in the same
    shape (an HMM's series padded to a size bucket) reuse it. Used both by model fits
    (several starts, unit weights) and by exact CV (one warm start, many folds).
    ``rows``: how the rows' objectives are evaluated (:func:`over_rows`; a model's
    ``batch_rows``). ``hessian``: the Newton polish's Hessian, ``"hvp"`` or ``"fd"``
    (:func:`_newton_polish`; ``"fd"`` for whitened coordinates, as exact refits use).
    """
    return functools.partial(
        _batched_program(fun, max_steps, newton_steps, method, rows, hessian),
        scale=np.float64(scale))


def single_start(solve, u0, weights, data) -> MinimizeResult:
    """One run of a batched optimiser ``solve(u0s, weights, data)`` (:func:`batched_minimize`)
    from ``u0 (D,)`` with ``weights (n,)``: a batch of one, NumPy in and out (eager JAX
    operations on the host, ``u0[None]`` or ``res.u[0]``, would each compile a small
    program in every process)."""
    res = solve(np.asarray(u0, np.float64)[None], np.asarray(weights, np.float64)[None], data)
    return MinimizeResult(*(np.asarray(x)[0] for x in res))


@functools.lru_cache(maxsize=64)
def _batched_program(fun, max_steps: int, newton_steps: int, method: str, rows: str,
                     hessian: str):
    """The compiled program of :func:`batched_minimize`:
    ``solve(u0s, weights, data, scale)``."""
    def solve(u0s, weights, data, scale):
        return _minimize_batch(lambda u, w: fun(u, w, data), u0s, weights,
                               max_steps=max_steps, rtol=1e-10, atol=1e-10, scale=scale,
                               newton_steps=newton_steps, gtol=GTOL, method=method,
                               rows=rows, closed_over=data, hessian=hessian)
    return jit(solve)
