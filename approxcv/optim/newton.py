"""Newton steps with a dense Hessian: damped (Levenberg-Marquardt) Newton minimisation, the
Newton polish of a fit, and the one compiled program for ``(F, g, H, J)``.

The one Newton optimiser of approxcv: exact-CV refits of models with a few hundred
parameters, fits that converge in a handful of Newton steps (GLM-type ERM, the event
model) and the Newton polish all use it. :func:`value_and_derivatives` is a single
``jit``-compiled sweep; :func:`newton_polish` calls it, so a fit followed by the IJ (which
needs the same ``H`` and ``J`` at the fit) compiles the forward-over-reverse program once.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import scipy.linalg
from jax import lax

from .hessian import hessian_by_hvp, sweep_chunk, tangent_chunk, value_grad_fd_hessian
from .quasi_newton import GTOL, MinimizeResult, over_rows
from .._runtime import carry_placement, jit, map_in_batches
from ..executors import host_workers

#: largest ``D x n`` for which :func:`newton_polish` asks for ``J`` too (32 MB): the
#: IJ then finds the program compiled; larger ``J`` is not worth forming for a polish
POLISH_JACOBIAN_MAX = 2 ** 22


def polish_jacobian(dim: int, n: int) -> bool:
    """Whether the polish's sweep carries ``J`` (``D x n <= POLISH_JACOBIAN_MAX``): callers
    that can use that program (the IJ; anything at the fit when ``J`` is cheap) ask for the
    same, so it compiles once."""
    return dim * n <= POLISH_JACOBIAN_MAX


def _value_and_derivatives(fun, u, w, data, with_jacobian: bool):
    """``(F, g, H, J or None)`` of ``fun(u, w, data)`` from one forward-over-reverse sweep."""
    def grads(x):
        value, g = jax.value_and_grad(fun, argnums=(0, 1) if with_jacobian else 0)(x, w, data)
        return g, (value, g[0] if with_jacobian else g)

    jac, (value, grad) = jax.jacfwd(grads, has_aux=True)(u)
    if with_jacobian:
        return value, grad, jac[0], jac[1].T
    return value, grad, jac, None


@functools.cache
def _compiled_derivatives():
    return jit(_value_and_derivatives, static_argnums=(0, 4))


def _tangent_columns(fun, u, w, data, with_jacobian: bool, tangents, chunk=None):
    """``(F, g, columns)``: the sweep's derivatives along the rows of ``tangents (c, D)``
    only, by JVPs of the gradient (``columns``: ``H t`` ``(c, D)``, with ``J^T t``
    ``(c, n)`` when ``with_jacobian``); ``chunk`` tangents at a time (``lax.map``), or all
    at once (``None``)."""
    def grads(x):
        return jax.grad(fun, argnums=(0, 1) if with_jacobian else 0)(x, w, data)

    g, lin = jax.linearize(grads, u)
    cols = map_in_batches(lin, tangents, chunk)
    return fun(u, w, data), g, cols


def _as_derivatives(value, g, cols, with_jacobian: bool):
    """``(F, g, H, J or None)`` from :func:`_tangent_columns` along every unit tangent."""
    if with_jacobian:
        return value, g[0], cols[0], cols[1]
    return value, g, cols, None


def _chunked_value_and_derivatives(fun, u, w, data, with_jacobian: bool, chunk: int):
    """:func:`_value_and_derivatives` from ``D`` JVPs of the gradient, ``chunk`` tangents
    at a time (``lax.map``): the same values in the memory of ``chunk`` tangents."""
    return _as_derivatives(*_tangent_columns(fun, u, w, data, with_jacobian,
                                             jnp.eye(u.shape[0], dtype=u.dtype), chunk),
                           with_jacobian)


@functools.cache
def _compiled_chunked_derivatives():
    return jit(_chunked_value_and_derivatives, static_argnums=(0, 4, 5))


def chunked_value_and_derivatives(fun, u, w, data, with_jacobian: bool, chunk: int):
    """:func:`value_and_derivatives` with ``chunk`` tangents of the sweep at a time."""
    return _compiled_chunked_derivatives()(fun, u, w, data, bool(with_jacobian), int(chunk))


@functools.cache
def _compiled_sweep_part():
    return jit(_tangent_columns, static_argnums=(0, 4))


#: from this many units on, on CPU, the sweep's tangents are split among the cores
#: (:func:`parallel_value_and_derivatives`)
PARALLEL_SWEEP_MIN_UNITS = 50_000


def parallel_value_and_derivatives(fun, u, w, data, with_jacobian: bool, workers: int):
    """:func:`value_and_derivatives` with the ``D`` tangents split into ``workers`` equal
    parts (the last padded with zero tangents, so that one program serves every part), each
    part a sweep of its own run in a thread. Each part repeats the forward and reverse
    passes, and the tangents share the rest: on a PoissonHMM(2) at ``T = 10^6`` (``D = 5``)
    two parts on two cores took 1.6 s against 2.2 s for the whole sweep."""
    from concurrent.futures import ThreadPoolExecutor
    dim = int(np.shape(u)[0])
    size = -(-dim // workers)
    eye = np.eye(size * workers, dim, dtype=jnp.result_type(u))
    part = _compiled_sweep_part()

    def run(i):
        return jax.block_until_ready(part(fun, u, w, data, bool(with_jacobian),
                                          jnp.asarray(eye[i * size:(i + 1) * size])))
    with ThreadPoolExecutor(workers) as pool:
        outs = list(pool.map(carry_placement(run), range(workers)))
    cols = jax.tree_util.tree_map(lambda *c: jnp.concatenate(c)[:dim], *(o[2] for o in outs))
    return _as_derivatives(outs[0][0], outs[0][1], cols, with_jacobian)


def value_and_derivatives(fun, u, w, data, with_jacobian: bool = True):
    """``(F, g (D,), H (D, D), J (D, n) or None)`` of ``F = fun(u, w, data)`` at ``(u, w)``.

    ``g = dF/du``, ``H = d2F/du2``, ``J = d2F/(du dw)``, all from one forward-over-reverse
    sweep (``jacfwd`` in ``u`` of ``grad`` in ``(u, w)``). One ``jit``-compiled program per
    objective, shape and ``with_jacobian``, shared by every caller (fit polish, IJ, NS).
    Where ``D`` tangents would exceed the sweep's memory budget
    (:func:`~approxcv.optim.hessian.sweep_chunk`), the sweep runs in chunks of tangents instead
    (:func:`chunked_value_and_derivatives`; e.g. the polish of a CRF fit on all 14,041
    CoNLL-2003 sentences, whose 189 tangents of one sweep would not fit in memory). From
    :data:`PARALLEL_SWEEP_MIN_UNITS` units on, on a CPU with several cores, the tangents
    are shared among the cores (:func:`parallel_value_and_derivatives`).
    """
    dim = int(np.shape(u)[0])
    chunk = sweep_chunk(fun, u, w, data, max_chunk=dim)
    if chunk < dim:
        return chunked_value_and_derivatives(fun, u, w, data, with_jacobian, chunk)
    workers = min(host_workers(), dim)
    if workers > 1 and np.shape(w)[-1] >= PARALLEL_SWEEP_MIN_UNITS:
        return parallel_value_and_derivatives(fun, u, w, data, with_jacobian, workers)
    return _compiled_derivatives()(fun, u, w, data, bool(with_jacobian))


#: from this many units on, :func:`newton_polish` checks a new point by its gradient first
#: and forms the Hessian only for another step: on a PoissonHMM at T = 10^5 the sweep took
#: 0.36 s and the gradient 0.015 s, and the last sweep of a polish only confirmed
#: convergence (below, the sweep is cheap and its compiled program is shared with the IJ)
GRADIENT_CHECK_MIN_UNITS = 10_000


@functools.cache
def _compiled_value_and_grad():
    return jit(lambda fun, u, w, data: jax.value_and_grad(fun)(u, w, data), static_argnums=0)


#: a step that cut the gradient norm by at least this factor shows the Newton iteration in
#: its quadratic regime, where a chord step with the held Hessian factor contracts by about
#: the same factor again: with the gradient check (long data), the next step is then a
#: chord step (one gradient) instead of another sweep
CHORD_REDUCTION = 1e-3


def newton_polish(fun, u, w, data, num_steps: int = 2, *, stop_gtol: float = 0.0,
                  max_rise: float = np.inf):
    """Up to ``num_steps`` safeguarded Newton steps on ``fun(u, w, data)`` from ``u``.

    A step ``u - H^{-1} g`` is kept only if ``H`` is positive definite (Cholesky), the new
    point is finite and the objective does not rise or the gradient norm halves (next to the
    minimum, ``F`` changes by less than its round-off, so the objective alone would reject
    the steps that matter most) while ``F`` rises by at most ``max_rise`` (a step from
    farther away could otherwise land on a saddle); the first rejected step ends the
    polish, and so does a gradient norm at most ``stop_gtol``. Runs in Python on
    :func:`value_and_derivatives` (``J`` included when ``D x n <= POLISH_JACOBIAN_MAX``, so
    that the IJ at the polished fit reuses the compiled program).

    From ``GRADIENT_CHECK_MIN_UNITS`` units on, where a Hessian sweep costs many gradients
    (a PoissonHMM at T = 10^6: 2.4 s against 0.19 s), a new point is checked by its value
    and gradient only, and after a step that cut the gradient norm by ``CHORD_REDUCTION``
    the next step is a *chord* step ``u - H_old^{-1} g`` with the held factor: in the
    quadratic regime ``H`` has changed by ``O(|step|)``, so the chord step shrinks the
    gradient by about as much again (a step that shrinks it less is followed by a fresh
    Hessian). A chord step that is not kept is retried once with a fresh Hessian. The
    polish ends at the same optimum, by different steps.

    Returns:
        ``(u (D,), F(u), ||g(u)||)`` as NumPy values.
    """
    u = np.asarray(u, dtype=np.float64)
    with_jacobian = polish_jacobian(u.size, np.size(w))
    by_gradient = np.size(w) >= GRADIENT_CHECK_MIN_UNITS
    value, grad, hess, _ = value_and_derivatives(fun, u, w, data, with_jacobian)
    value, grad, hess = float(value), np.asarray(grad), np.asarray(hess)
    factor, stale = None, False
    for _ in range(num_steps if np.isfinite(value) else 0):
        if np.linalg.norm(grad) <= stop_gtol:
            break
        if factor is None:
            if hess is None:
                hess = np.asarray(value_and_derivatives(fun, u, w, data, with_jacobian)[2])
            try:
                factor = scipy.linalg.cho_factor(0.5 * (hess + hess.T), lower=True)
            except (np.linalg.LinAlgError, ValueError):
                break
            stale = False
        u_new = u - scipy.linalg.cho_solve(factor, grad)
        finite = bool(np.all(np.isfinite(u_new)))
        if finite and by_gradient:
            (v_new, g_new), h_new = _compiled_value_and_grad()(fun, u_new, w, data), None
        elif finite:
            v_new, g_new, h_new, _ = value_and_derivatives(fun, u_new, w, data,
                                                           with_jacobian)
        if not (finite and (float(v_new) <= value
                            or np.linalg.norm(g_new) < 0.5 * np.linalg.norm(grad))
                and float(v_new) <= value + max_rise):
            if stale:               # the held factor failed: one more try with a fresh H
                factor, hess = None, None
                continue
            break
        v_new, g_new = float(v_new), np.asarray(g_new)
        quadratic = np.linalg.norm(g_new) <= CHORD_REDUCTION * np.linalg.norm(grad)
        u, value, grad = u_new, v_new, g_new
        hess = None if h_new is None else np.asarray(h_new)
        if h_new is None and quadratic:
            stale = True            # keep the factor: the next step is a chord step
        else:
            factor = None
    return u, value, float(np.linalg.norm(grad))


def polish_rows(fun, res: MinimizeResult, weights, data, scale: float, num_steps: int = 2,
                gtol: float = GTOL) -> MinimizeResult:
    """:func:`newton_polish` every finite row of a batched :class:`MinimizeResult`
    (``weights (b, n)``, one row per run); ``converged`` also holds where the polished
    gradient norm is at most ``gtol * scale``. A row equal to an earlier one (same point,
    same weights: starts that coincide, batch padding) copies its polished result."""
    start, weights = np.asarray(res.u), np.asarray(weights)
    u, value = start.copy(), np.array(res.value)
    grad_norm, converged = np.array(res.grad_norm), np.array(res.converged)
    done = []
    for i in np.flatnonzero(np.isfinite(value) & np.all(np.isfinite(u), axis=1)):
        same = [j for j in done if np.array_equal(start[j], start[i])
                and np.array_equal(weights[j], weights[i])]
        if same:
            u[i], value[i], grad_norm[i] = u[same[0]], value[same[0]], grad_norm[same[0]]
        else:
            u[i], value[i], grad_norm[i] = newton_polish(fun, u[i], weights[i], data,
                                                         num_steps)
            done.append(i)
        converged[i] |= bool(np.isfinite(value[i]) and grad_norm[i] <= gtol * scale)
    return MinimizeResult(u, value, grad_norm, converged, np.asarray(res.num_steps))


#: :func:`newton_minimize`: a step's predicted decrease (and F's change) below this times
#: ``1 + |F|`` is round-off, which the sufficient-decrease test cannot judge
ROUNDOFF_RTOL = 1e-13


def newton_minimize(fun, u0, args=None, *, max_steps: int = 30, scale: float = 1.0,
                    gtol: float = GTOL, max_tries: int = 40, hess=None,
                    hessian: str = "hvp", quadratic_stop: float = 0.0) -> MinimizeResult:
    """Minimise ``fun(u, args)`` by damped (Levenberg-Marquardt) Newton with a dense Hessian.

    Each step factors ``H + mu I`` by Cholesky, ``d = (H + mu I)^{-1} g``, and accepts
    ``u - d`` when it is finite and satisfies ``F(u - d) <= F(u) - 1e-4 g^T d``; otherwise
    ``mu`` grows tenfold (from ``1e-6 mean|diag H|``) and the step is retried without a new
    Hessian. After an accepted step ``mu`` shrinks tenfold (to 0, the plain Newton step, once
    it is below ``1e-9 mean|diag H|``), so near a minimum with a positive definite Hessian
    every step is a full Newton step and convergence is quadratic (with a forward-difference
    Hessian, linear with a rate of about ``1e-6``). The loop stops when the
    Newton decrement ``g^T d / scale`` is below ``1e-20`` (round-off), when no ``mu`` gives
    a decrease, or after ``max_steps`` Hessians.

    With ``quadratic_stop > 0`` (for an exact ``hess`` only) the loop also stops after an
    undamped step whose decrement was at most ``quadratic_stop``: in Newton's quadratic
    regime the next decrement is of the order of its square (``1e-14`` -> ``1e-28``), so
    the pass that would only confirm it, one Hessian, is saved.

    Meant for exact-CV refits warm-started at the full-data fit of models with a few hundred
    parameters and long data: a handful of steps, each one Hessian, instead of hundreds of
    BFGS steps, ending at round-off-level gradients.

    Args:
        fun: scalar function ``fun(u, args)`` of a flat ``(D,)`` vector.
        u0: starting point ``(D,)``.
        args: passed through to ``fun``.
        max_steps: limit on Newton steps (Hessian evaluations).
        scale: positive constant dividing the objective (e.g. the number of units).
        gtol: converged when ``||grad F|| / scale <= gtol`` at the end.
        max_tries: damping values tried per step.
        hess: optional ``hess(u, args) -> d2 fun / du2`` ``(D, D)`` from the model's own
            structure (a GLM's ``A^T diag(phi'') A``: a much smaller program than ``D``
            Hessian-vector products).
        hessian: without ``hess``, ``"hvp"`` (exact, :func:`~approxcv.optim.hessian.
            hessian_by_hvp`) or ``"fd"``: forward differences of the exact gradient
            (:func:`~approxcv.optim.hessian.value_grad_fd_hessian`, ``D + 1`` gradients per
            step; a program that compiled three times faster, for well-scaled, e.g.
            whitened, coordinates as exact refits use).

    The loop holds one copy of the derivatives: each pass steps from the kept point and
    evaluates ``F``, ``g`` and ``H`` at the new one (the first pass at ``u0``).

    Returns:
        :class:`MinimizeResult` (``num_steps`` counts Newton steps).
    """
    def scaled(u):
        return fun(u, args) / scale

    value_and_grad = jax.value_and_grad(lambda u, a: fun(u, a) / scale)
    if hess is None and hessian == "fd":
        batch = tangent_chunk(args)

        def derivatives(u):
            return value_grad_fd_hessian(value_and_grad, u, args, batch)
    elif hess is None:
        def derivatives(u):
            f, g = value_and_grad(u, args)
            return f, g, hessian_by_hvp(lambda x, a: fun(x, a) / scale, u, args)
    else:
        def derivatives(u):
            f, g = value_and_grad(u, args)
            return f, g, hess(u, args) / scale

    def _damped_step(u, f0, g, h, mu0):
        """Smallest ``mu`` on the ladder ``mu0, 10 mu0, ...`` giving a sufficient decrease."""
        h = 0.5 * (h + h.T)
        diag_scale = jnp.mean(jnp.abs(jnp.diag(h))) + 1e-300
        eye = jnp.eye(h.shape[0], dtype=h.dtype)

        def _try(mu):
            chol = jnp.linalg.cholesky(h + mu * eye)
            d = jax.scipy.linalg.cho_solve((chol, True), g)
            slope = jnp.dot(g, d)
            f_new = scaled(u - d)
            # a step whose predicted decrease is below F's round-off cannot be judged by F:
            # it is kept unless F rises beyond round-off (after a step on a forward-
            # difference Hessian, the last step to the round-off floor is such a step)
            roundoff = ROUNDOFF_RTOL * (1.0 + jnp.abs(f0))
            ok = (jnp.all(jnp.isfinite(chol)) & jnp.isfinite(f_new)
                  & ((f_new <= f0 - 1e-4 * slope)
                     | ((slope <= roundoff) & (f_new <= f0 + roundoff))))
            return d, slope, ok

        def _cond(state):
            _, _, _, ok, k = state
            return (~ok) & (k < max_tries)

        def _body(state):
            mu, _, _, _, k = state
            mu = jnp.where(k == 0, mu, jnp.maximum(10.0 * mu, 1e-6 * diag_scale))
            d, slope, ok = _try(mu)
            return mu, d, slope, ok, k + 1

        zero = jnp.zeros_like(u)
        mu, d, slope, ok, _ = lax.while_loop(
            _cond, _body, (mu0 * diag_scale, zero, jnp.asarray(0.0, u.dtype), False, 0))
        mu_next = jnp.where(mu < 1e-8 * diag_scale, 0.0, 0.1 * mu / diag_scale)
        return jnp.where(ok, d, zero), slope, ok, mu_next

    def _cond(state):
        return (~state[-1]) & (state[-2] <= max_steps)

    def _body(state):
        """One damped Newton step (one Hessian) from the kept point, then ``F``, ``g`` and
        ``H`` at the new point; the first pass only evaluates them at ``u0`` (the program
        holds one copy of the derivatives)."""
        u, f0, g, h, mu, k, _ = state
        d, slope, ok, mu_next = _damped_step(u, f0, g, h, mu)
        first = k == 0
        u_new = jnp.where(first, u, u - d)
        f, g_new, h_new = derivatives(u_new)
        # an undamped step on the exact Hessian whose decrement is at most quadratic_stop
        # leaves one of order its square: the pass that would only confirm it is skipped
        # (undamped: the damping used was below 1e-8 mean|diag H|, so mu_next is 0)
        quadratic = (mu_next == 0.0) & (slope <= quadratic_stop)
        done = ~first & ((~ok) | (slope <= 1e-20) | quadratic)
        return u_new, f, g_new, h_new, jnp.where(first, mu, mu_next), k + 1, done

    u0 = jnp.asarray(u0, jnp.float64)
    dim, zero = u0.shape[0], jnp.asarray(0.0, u0.dtype)
    # the first pass's (zero) step is accepted at once against F = inf
    init = (u0, jnp.asarray(jnp.inf, u0.dtype), jnp.zeros_like(u0),
            jnp.eye(dim, dtype=u0.dtype), zero, 0, False)
    u, value, g, _, _, steps, _ = lax.while_loop(_cond, _body, init)
    value, grad_norm = value * scale, jnp.linalg.norm(g) * scale
    converged = (grad_norm <= gtol * scale) & jnp.isfinite(value) & jnp.all(jnp.isfinite(u))
    return MinimizeResult(u, value, grad_norm, converged, steps - 1)


def batched_newton_minimize(fun, scale: float, max_steps: int, rows: str = "vmap",
                            hessian: str = "hvp"):
    """:func:`newton_minimize` over rows (:func:`~approxcv.optim.quasi_newton.over_rows`)
    for ``fun(u, w, data)``, jitted; same calling convention as :func:`batched_minimize`:
    ``solve(u0s (b, D), weights (b, n), data) -> MinimizeResult``. ``hessian``: as
    :func:`newton_minimize`; ``scale`` is an argument of the program (as there)."""
    return functools.partial(_batched_newton_program(fun, max_steps, rows, hessian),
                             scale=np.float64(scale))


@functools.lru_cache(maxsize=64)
def _batched_newton_program(fun, max_steps: int, rows: str, hessian: str):
    """The compiled program of :func:`batched_newton_minimize`:
    ``solve(u0s, weights, data, scale)``."""
    def solve(u0s, weights, data, scale):
        def one(u0, w):   # data among the args: they size the Hessian's tangent chunks
            return newton_minimize(lambda u, a: fun(u, a[0], a[1]), u0, (w, data),
                                   max_steps=max_steps, scale=scale, hessian=hessian)
        return over_rows(one, rows)(u0s, weights)
    return jit(solve)
