"""Matrix-free IJ and Newton steps: Hessian-vector products and conjugate gradients.

When ``D`` is too large for a dense ``D x D`` Hessian (a neural emission network has tens of
thousands of weights) nothing of size ``D x D`` or ``D x n`` is formed:

* the fold directions ``r_o = J (1 - w_o) = d/de grad_u F(u_1, 1 - e (1 - w_o))`` are JVPs
  in ``w`` of the reverse-mode gradient, evaluated through one ``jax.linearize``;
* ``H v`` is a JVP in ``u`` of the gradient (forward-over-reverse), again linearised once;
* ``H delta_o = r_o`` is solved for all folds at once by block conjugate gradients: the
  folds share ``H``, hence one block Krylov space (``m`` HVPs per step, ``vmap``-ed),
  which needs far fewer steps than one independent CG per fold.

Round-off makes CG's recursively updated residuals drift from the true ``b - A x``; both
solvers recompute the true residual at the end (one more HVP), report it, and finish every
system still outside its tolerance by single-vector CG restarted from its current solution,
while steps remain — no system is left unconverged with steps to spare.

IJ: ``u_IJ(w_o) = u_1 + H^{-1} J (1 - w_o)``. NS: ``u_NS(w_o) = u_1 - H(w_o)^{-1} g(w_o)``
with ``H(w_o) v`` a JVP at the fold's own weights.

CG only converges for positive definite ``H``. Every iteration records the curvature
``p'Hp / p'p`` along its search direction; its minimum over the run is an upper bound on
``lambda_min(H)``, and a non-positive value stops that fold and is reported
(:class:`~approxcv.errors.NotPositiveDefiniteError` from :func:`ij_params_cg`) instead of
returning a meaningless solve. A hand-written CG is used rather than ``lineax``/
``jax.scipy.sparse.linalg.cg`` because neither reports this curvature nor per-fold step
counts, which the diagnostics need.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

from .batching import fold_indicator, fold_weights
from .._runtime import jit, map_in_batches
from .chord import contraction_rate, extrapolate, signed_rate


class CGResult(NamedTuple):
    """x: solutions ``(m, D)``; num_steps, residual_norm (true relative residual
    ``||b - A x|| / ||b||``, recomputed at the end), min_curvature, converged: per
    right-hand side ``(m,)``."""
    x: jax.Array
    num_steps: jax.Array
    residual_norm: jax.Array
    min_curvature: jax.Array
    converged: jax.Array


def conjugate_gradient(matvec, rhs, rtol: float = 1e-10, max_steps: int = 1000,
                       x0=None) -> CGResult:
    """Solve ``A x_j = b_j`` for every row ``b_j`` of ``rhs (m, D)`` by conjugate gradients.

    ``matvec(v (m, D)) -> (m, D)`` applies each system's matrix to its own vector (a batched
    HVP). Standard CG from ``x0`` (``(m, D)``, default 0): ``alpha = r'r / p'Ap``,
    ``x += alpha p``, ``r -= alpha Ap``, ``p = r + (r'r)_new / r'r p``; a system stops when
    the updated ``||r|| <= rtol ||b||``, when ``p'Ap <= 0`` (not positive definite, recorded
    in ``min_curvature``) or after ``max_steps`` steps (a scalar or one limit per system).
    The true residual ``b - A x`` is then recomputed (one more ``matvec``): the updated one
    drifts from it by round-off, so a system whose true residual still exceeds its tolerance
    is restarted from it (iterative refinement) while steps remain and each restart at least
    halves it. ``residual_norm`` is that true relative residual and sets ``converged``.
    ``rtol`` is a scalar or one tolerance per system ``(m,)``.
    """
    dot = lambda a, b: jnp.sum(a * b, axis=-1)  # noqa: E731
    m = rhs.shape[0]
    b_norm = jnp.linalg.norm(rhs, axis=-1)
    scale = jnp.where(b_norm > 0, b_norm, 1.0)
    rtol = jnp.broadcast_to(jnp.asarray(rtol, rhs.dtype), (m,))
    budget = jnp.broadcast_to(jnp.asarray(max_steps, jnp.int32), (m,))
    tol = rtol * scale
    x = jnp.zeros_like(rhs) if x0 is None else x0
    r = rhs if x0 is None else rhs - matvec(x0)

    def cg_run(x, r, steps, min_curv, active):
        """Plain CG from ``(x, r)`` on the ``active`` systems until each meets ``tol``."""
        def cond(state):
            return jnp.any(state[-1])

        def body(state):
            x, r, p, rs, steps, min_curv, active = state
            ap = matvec(p)
            pap = dot(p, ap)
            curv = pap / jnp.maximum(dot(p, p), 1e-300)
            positive = pap > 0
            go = active & positive
            alpha = jnp.where(go, rs / jnp.where(positive, pap, 1.0), 0.0)
            x = x + alpha[:, None] * p
            r = r - alpha[:, None] * ap
            rs_new = dot(r, r)
            beta = jnp.where(go, rs_new / jnp.where(rs > 0, rs, 1.0), 0.0)
            p = jnp.where(go[:, None], r + beta[:, None] * p, p)
            min_curv = jnp.where(active, jnp.minimum(min_curv, curv), min_curv)
            steps = steps + active.astype(jnp.int32)
            active = go & (jnp.sqrt(rs_new) > tol) & (steps < budget)
            return x, r, p, jnp.where(go, rs_new, rs), steps, min_curv, active

        init = (x, r, r, dot(r, r), steps, min_curv, active)
        x, _, _, _, steps, min_curv, _ = lax.while_loop(cond, body, init)
        return x, steps, min_curv

    def restart_cond(state):
        return jnp.any(state[-1])

    def restart(state):
        """One CG run on the unconverged systems, then their true residual."""
        x, r, steps, min_curv, res, active = state
        x, steps, min_curv = cg_run(x, r, steps, min_curv, active)
        r = jnp.where(active[:, None], rhs - matvec(x), r)
        res_new = jnp.linalg.norm(r, axis=-1)
        active = (active & (res_new > tol) & (res_new < 0.5 * res) & (steps < budget)
                  & (min_curv > 0))
        return x, r, steps, min_curv, jnp.where(active, res_new, res), active

    res0 = jnp.linalg.norm(r, axis=-1)
    init = (x, r, jnp.zeros(m, jnp.int32), jnp.full(m, jnp.inf, rhs.dtype),
            jnp.full(m, jnp.inf, rhs.dtype), (res0 > tol) & (budget > 0))
    x, r, steps, min_curv, _, _ = lax.while_loop(restart_cond, restart, init)
    res = jnp.linalg.norm(r, axis=-1) / scale
    converged = (res <= rtol) & (min_curv > 0)
    return CGResult(x, steps, res, min_curv, converged)


def block_conjugate_gradient(matvec, rhs, rtol: float = 1e-10,
                             max_steps: int = 1000) -> CGResult:
    """Solve ``A x_j = b_j`` for all rows of ``rhs (m, D)`` at once by block CG (one ``A``).

    All systems share one growing block Krylov space, so each step (``m`` matrix-vector
    products, ``matvec(v (m, D)) -> (m, D)`` applying ``A`` to every row) improves every
    solution along ``m`` new directions instead of one; for many right-hand sides with the
    same matrix this needs far fewer steps than ``m`` independent CG runs. The search block
    is re-orthonormalised every step by a thin SVD that drops directions below round-off
    (Ji & Li 2017, breakdown-free block CG), so a converged or zero system adds no
    spurious direction and ``P'AP`` stays invertible.
    With ``P`` orthonormal (``D x m``) and ``C = P'AP``::

        alpha = C^{-1} P'R,  X += P alpha,  R -= AP alpha,
        beta = -C^{-1} (AP)'R,  P = orth(R + P beta).

    ``lambda_min(C)`` (a Rayleigh quotient of ``A`` over the block) bounds ``lambda_min(A)``
    from above; it is recorded as ``min_curvature``, and a non-positive value stops the
    run. ``num_steps[j]`` is the step at which system ``j`` first met
    ``||r_j|| <= rtol_j ||b_j||`` (``rtol``: a scalar or one tolerance per system); the block
    stops when every system has met its tolerance. One system's residual need not fall
    monotonically in block CG, and round-off separates the updated residual from the true
    one, so the true residuals ``b - A x`` are then recomputed (one more ``matvec``) and
    every straggler still above its tolerance is finished by :func:`conjugate_gradient`
    warm-started from the block solution, within the steps left of ``max_steps`` (its
    steps are added to ``num_steps[j]``). ``residual_norm`` is the true relative residual
    and sets ``converged``.
    """
    b_norm = jnp.linalg.norm(rhs, axis=1)
    rtol = jnp.broadcast_to(jnp.asarray(rtol, rhs.dtype), b_norm.shape)
    scale = jnp.where(b_norm > 0, b_norm, 1.0)
    # (D, m), unit columns: no system is lost to round-off next to a much larger one
    b = (rhs / scale[:, None]).T

    def rel_residual(r):
        return jnp.linalg.norm(r, axis=0)

    def orth(z):
        """Orthonormal basis of the columns of ``z``; directions with singular values below
        round-off are zeroed (a converged or zero system must not inject an arbitrary,
        non-conjugate direction)."""
        u, sv, _ = jnp.linalg.svd(z, full_matrices=False)
        return u * (sv > 1e-13 * sv[0])

    done0 = rel_residual(b) <= rtol
    init = (jnp.zeros_like(b), b, orth(b), jnp.asarray(0, jnp.int32),
            jnp.where(done0, 0, -1).astype(jnp.int32), jnp.asarray(jnp.inf, b.dtype))

    def cond(state):
        _, _, _, k, first, curv = state
        return jnp.any(first < 0) & (k < max_steps) & (curv > 0)

    def body(state):
        x, r, p, k, first, min_curv = state
        ap = matvec(p.T).T
        dropped = jnp.linalg.norm(p, axis=0) < 0.5                  # zeroed directions
        c = 0.5 * (p.T @ ap + ap.T @ p)
        # identity rows for dropped directions (their P'R rows are 0), shifted above the
        # spectrum of the rest so that the smallest eigenvalue is that of the kept block
        c = c + jnp.diag(dropped * (1.0 + jnp.sum(jnp.abs(c))))
        curv = jnp.linalg.eigvalsh(c)[0]
        chol = jnp.linalg.cholesky(c)
        solve = lambda y: jax.scipy.linalg.cho_solve((chol, True), y)  # noqa: E731
        ok = curv > 0
        alpha = jnp.where(ok, solve(p.T @ r), 0.0)
        x = x + p @ alpha
        r = r - ap @ alpha
        beta = jnp.where(ok, -solve(ap.T @ r), 0.0)
        p = orth(r + p @ beta)
        k = k + 1
        first = jnp.where((first < 0) & (rel_residual(r) <= rtol), k, first)
        return x, r, p, k, first, jnp.minimum(min_curv, curv)

    x, _, _, k, first, min_curv = lax.while_loop(cond, body, init)
    steps = jnp.where(first >= 0, first, k)
    left = jnp.where(min_curv > 0, max_steps - k, 0)
    tail = conjugate_gradient(matvec, rhs, rtol, left, x.T * scale[:, None])
    min_curv = jnp.minimum(min_curv, tail.min_curvature)
    converged = tail.converged & (min_curv > 0)
    return CGResult(tail.x, jnp.where(tail.num_steps > 0, k + tail.num_steps, steps),
                    tail.residual_norm, min_curv, converged)


@partial(jit, static_argnums=(0, 4, 6, 7, 8, 9))
def ij_params_cg(fun, u_full, index, data, n: int, rtol=1e-10, max_steps: int = 1000,
                 batch_size: int = 64, hvp_batch_size: int | None = None,
                 block: bool = True, newton_rtol=None):
    """Matrix-free IJ for every fold: ``u_1 + H^{-1} J (1 - w_o)`` by batched CG.

    Args:
        fun: flat objective ``f(u, w, data)``.
        u_full: ``(D,)`` full-data parameters.
        index: ``(n_folds, m)`` padded left-out indices (padding ``n``).
        data: passed to ``fun``.
        n: number of units.
        rtol: CG relative residual tolerance.
        max_steps: CG iteration limit.
        batch_size: fold directions computed per vectorised batch.
        hvp_batch_size: Hessian-vector products per vectorised batch inside each CG step
            (``None``: all systems at once); bounds memory when the data are large.
        block: one block CG over all systems (:func:`block_conjugate_gradient`; they share
            ``H``), else independent CG runs in lock-step (:func:`conjugate_gradient`).
        newton_rtol: tolerance of the full-data Newton system ``H s = g`` (``None``: ``rtol``).
            At an unconverged fit ``g`` lies mostly along low-curvature directions, so this
            diagnostic system can need many more steps than the folds' systems.

    Returns:
        ``(params (n_folds, D), grad (D,), newton_step (D,), CGResult)``: the last row of
        the CG result is the full-data Newton step ``H^{-1} g`` (solved alongside the folds
        for the fit diagnostics).
    """
    ones = jnp.ones(n, u_full.dtype)
    grad_u = jax.grad(fun, argnums=0)
    grad, dir_w = jax.linearize(lambda w: grad_u(u_full, w, data), ones)
    _, hvp = jax.linearize(lambda u: grad_u(u, ones, data), u_full)
    rhs = map_in_batches(lambda idx: dir_w(fold_indicator(idx, n, u_full.dtype)), index,
                         batch_size)
    solver = block_conjugate_gradient if block else conjugate_gradient
    tols = jnp.full(rhs.shape[0] + 1, rtol, u_full.dtype)
    tols = tols.at[-1].set(rtol if newton_rtol is None else newton_rtol)
    sol = solver(lambda v: map_in_batches(hvp, v, hvp_batch_size),
                 jnp.concatenate([rhs, grad[None]]), tols, max_steps)
    return u_full[None, :] + sol.x[:-1], grad, sol.x[-1], sol


@partial(jit, static_argnums=(0, 4, 6, 7, 8))
def newton_params_cg(fun, u_full, index, data, n: int, rtol=1e-10, max_steps: int = 1000,
                     batch_size: int = 16, refine: bool = True):
    """Matrix-free Newton step for every fold: ``u_1 - H(w_o)^{-1} g(w_o)`` by CG.

    Folds (``index``: ``(n_folds, m)`` padded left-out indices) are processed by ``lax.map``
    in vectorised batches of ``batch_size``; within a fold ``H(w_o) v`` is a JVP of the
    gradient at the fold's weights, built from its indices inside the batch.

    Returns:
        ``(params (n_folds, D), CGResult, correction (n_folds, D), rho (n_folds,))``: the
        chord correction from each Newton point with the same ``H(w_o)``
        (:mod:`~approxcv.engine.error_estimate`; two more CG solves, NaN where one failed);
        with ``refine=False`` only ``(params, CGResult)``.
    """
    grad_u = jax.grad(fun, argnums=0)
    value_grad = jax.value_and_grad(fun)

    def one(idx):
        w = fold_weights(idx, n, u_full.dtype)
        g, hvp = jax.linearize(lambda u: grad_u(u, w, data), u_full)
        sol = conjugate_gradient(jax.vmap(hvp), g[None], rtol, max_steps)
        u_ns = u_full - sol.x[0]
        if not refine:
            return u_ns, jax.tree_util.tree_map(lambda a: a[0], sol)
        def chord(u, _):
            value, r = value_grad(u, w, data)
            s = conjugate_gradient(jax.vmap(hvp), r[None], rtol, max_steps)
            return u - s.x[0], (value, r, s.x[0], s.converged[0])
        # a rolled loop of two chord steps (as ij_chord_steps_cg): one copy of the
        # gradient and of the CG solve in the program, not two
        _, (value, r, d, solved) = lax.scan(chord, u_ns, None, length=2)
        den_sq = jnp.dot(d[0], r[0])
        rho = contraction_rate(jnp.dot(d[1], r[1]), den_sq, value[0])
        lam = signed_rate(jnp.dot(d[0], r[1]), den_sq, rho)
        correction = jnp.where(solved[0] & solved[1], extrapolate(d[0], d[1], rho, lam),
                               jnp.nan)
        return u_ns, jax.tree_util.tree_map(lambda a: a[0], sol), correction, rho

    return map_in_batches(one, index, batch_size)
