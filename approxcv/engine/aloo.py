"""ERM fast paths: approximate CV of GLM-type objectives from ONE Cholesky factor.

When a :class:`~approxcv.problem.Problem` carries GLM structure (``problem.glm``: the
objective is ``F(u, w) = sum_i w_i phi(a_i^T u, y_i) + R(u)`` with design rows ``a_i``),
every sample's Hessian is rank one, ``phi''_i a_i a_i^T``, so the Hessian without the fold
``o`` is a rank-``|o|`` downdate of the full Hessian ``H = L L^T``:

    H_{-o} = H - sum_{i in o} d_i a_i a_i^T,      d_i = phi''(a_i^T u_1, y_i).

* **NS / ALOOCV** (Beirami et al. 2017): ``u_o = u_1 - H_{-o}^{-1} (grad F(u_1) -
  sum_{i in o} g_i a_i)`` with ``g_i = phi'(a_i^T u_1, y_i)``; ``H_{-o}`` is factored by
  downdating ``L`` (``O(|o| D^2)`` per fold instead of ``O(D^3)``), or afresh when folds
  are large. This is the ``ns`` method's path for such problems
  (:func:`glm_newton_params`); exact for quadratic losses.
* **IJ**: ``J = d2F/(du dw) = A^T diag(g)`` in closed form (:func:`glm_jacobian`).
* **Influence function with a linearised loss** (seed Lemma 3, :func:`influence_losses`):
  ``l_i(u_o) ~ phi_i + g_i a_i^T H^{-1} sum_{j in o} g_j a_j``. It never exceeds the IJ
  correction and underestimates LOO (ridge: ``1/2 r_i^2 (1 + 2 h_i)`` against the exact
  ``1/2 r_i^2 / (1 - h_i)^2``); not a method (it yields losses, not parameters).

Kernels take arrays (and pure callables as static arguments), never models. Folds are
padded index arrays (padding ``n`` gathers zero rows, which leave a factor unchanged).
"""
from __future__ import annotations

import time
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax

from ..optim.pd import NEGLIGIBLE_JITTER, factor_hessian
from .batching import fold_weights
from .._runtime import jit, map_in_batches
from .chord import chord_step
from .derivatives import full_derivatives
from .diagnostics import fit_diagnostics
from .fold_newton import newton_params
from .options import Options

__all__ = ["GLMTerms", "glm_terms", "glm_hessian", "cholesky_rank_one_update",
           "cholesky_rank_one_downdate", "cholesky_downdate_rows", "leverages",
           "fold_newton_params", "loo_newton_params_closed_form", "glm_jacobian",
           "glm_newton_params", "influence_losses"]


class GLMTerms(NamedTuple):
    """Per-sample derivatives of ``phi`` at a point ``u``.

    design: ``A`` ``(n, D)``; loss: ``phi_i`` ``(n,)``; grad: ``g_i = phi'_i`` ``(n,)``;
    curv: ``d_i = phi''_i`` ``(n,)`` (all in the linear predictor ``eta_i = a_i^T u``).
    """
    design: jax.Array
    loss: jax.Array
    grad: jax.Array
    curv: jax.Array


def glm_terms(loss_fn, design, y, u) -> GLMTerms:
    """``phi``, ``phi'`` and ``phi''`` at ``eta = A u`` for an elementwise ``loss_fn(eta, y)``."""
    eta = design @ u

    def total(e):
        return jnp.sum(loss_fn(e, y))

    grad = jax.grad(total)(eta)
    curv = jax.jvp(jax.grad(total), (eta,), (jnp.ones_like(eta),))[1]
    return GLMTerms(design, loss_fn(eta, y), grad, curv)


def glm_hessian(terms: GLMTerms, penalty_hessian):
    """``H = A^T diag(d) A + penalty_hessian`` (``(D, D)``); sample weights all 1."""
    a = terms.design
    return (a * terms.curv[:, None]).T @ a + penalty_hessian


# ---------------------------------------------------------------- Cholesky updates
def _rank_one(chol, x, sign):
    """``L'`` with ``L' L'^T = L L^T + sign x x^T``, column by column (LINPACK-style).

    Column ``k`` of ``L'`` depends only on column ``k`` of ``L`` and the running vector
    ``x``, so the columns are a ``lax.scan`` output. A downdate that leaves the matrix
    indefinite yields NaN (square root of a negative number).
    """
    rows = jnp.arange(chol.shape[0])

    def _step(x, col_k):
        """Rotate column ``k`` against ``x``; return the updated ``x`` and new column."""
        col, k = col_k
        lkk = col[k]
        r = jnp.sqrt(lkk ** 2 + sign * x[k] ** 2)
        c, s = r / lkk, x[k] / lkk
        below = rows > k
        new_col = jnp.where(below, (col + sign * s * x) / c, jnp.where(rows == k, r, 0.0))
        x = jnp.where(below, c * x - s * new_col, 0.0)
        return x, new_col

    _, cols = lax.scan(_step, x, (chol.T, rows))
    return cols.T


def cholesky_rank_one_update(chol, x):
    """Lower Cholesky factor of ``L L^T + x x^T``; ``chol`` ``(D, D)``, ``x`` ``(D,)``."""
    return _rank_one(chol, x, 1.0)


def cholesky_rank_one_downdate(chol, x):
    """Lower Cholesky factor of ``L L^T - x x^T`` (NaN if that is not positive definite)."""
    return _rank_one(chol, x, -1.0)


def cholesky_downdate_rows(chol, rows):
    """Lower Cholesky factor of ``L L^T - rows^T rows`` by ``q`` rank-one downdates.

    ``rows`` is ``(q, D)``; zero rows (padding) leave the factor unchanged.
    """
    def _step(c, x):
        """One rank-one downdate."""
        return cholesky_rank_one_downdate(c, x), None

    out, _ = lax.scan(_step, chol, rows)
    return out


def leverages(chol, terms: GLMTerms):
    """``h_i = a_i^T H^{-1} a_i`` for every sample, ``(n,)`` (one batched triangular solve)."""
    z = jsl.solve_triangular(chol, terms.design.T, lower=True)
    return jnp.sum(z * z, axis=0)


# ------------------------------------------------------------------ NS fast path
def _gather(values, idx):
    """``values[idx]`` with zeros where ``idx`` is padding (``>= len(values)``)."""
    return values.at[idx].get(mode="fill", fill_value=0.0)


@partial(jit, static_argnames=("batch_size", "refactor", "fun", "n"))
def fold_newton_params(chol, hess, terms: GLMTerms, u_full, index, grad_full,
                       batch_size: int | None = 256, refactor: bool = False, fun=None,
                       data=None, n: int | None = None):
    """Newton-step (ALOOCV) parameters of every fold from downdates of ``chol``.

    ``u_o = u_1 - H_{-o}^{-1} (grad F(u_1) - sum_{i in o} g_i a_i)`` with ``H_{-o}`` from
    ``|o|`` rank-one downdates of ``chol`` (``refactor=False``, ``O(q D^2)``) or a fresh
    factorisation of ``H - A_o^T diag(d_o) A_o`` (``refactor=True``, ``O(q D^2 + D^3)``,
    cheaper once ``q`` exceeds about ``D / 3``).

    Args:
        chol, hess: Cholesky factor of the full Hessian and the Hessian ``(D, D)``.
        terms: :class:`GLMTerms` at ``u_full``; grad_full: ``grad F(u_1)`` ``(D,)``.
        index: ``(n_folds, q)`` left-out samples, padded with ``n``.
        batch_size: folds per vectorised batch (memory ``batch_size * D^2``).

    Returns:
        ``(params (n_folds, D), pivot (n_folds,))``: ``pivot`` is the smallest squared
        diagonal entry of the fold's factor (an upper bound on the smallest eigenvalue of
        ``H_{-o}``), NaN where the downdate failed (``H_{-o}`` not positive definite).
        With the flat objective ``fun(u, w, data)`` (and ``data``, ``n``) also the chord
        correction from each fold's point with its factor and its contraction
        (:func:`~approxcv.engine.chord.chord_step`): ``(params, pivot, d, rho)``.
    """
    def one(idx):
        a = terms.design.at[idx].get(mode="fill", fill_value=0.0)            # (q, D)
        rhs = _gather(terms.grad, idx) @ a
        scaled = jnp.sqrt(jnp.maximum(_gather(terms.curv, idx), 0.0))[:, None] * a
        c = (jnp.linalg.cholesky(hess - scaled.T @ scaled) if refactor
             else cholesky_downdate_rows(chol, scaled))
        u_o = u_full + jsl.cho_solve((c, True), rhs - grad_full)
        pivot = jnp.min(jnp.diag(c)) ** 2
        ok = jnp.all(jnp.isfinite(jnp.diag(c))) & jnp.all(jnp.isfinite(u_o))
        if fun is None:
            return u_o, jnp.where(ok, pivot, jnp.nan)
        d, rho = chord_step(fun, c, u_o, fold_weights(idx, n, u_full.dtype), data)
        return u_o, jnp.where(ok, pivot, jnp.nan), d, rho

    return map_in_batches(one, index, batch_size)


def loo_newton_params_closed_form(chol, terms: GLMTerms, u_full):
    """ALOOCV leave-one-out parameters by Sherman-Morrison, differentiable end to end.

    ``H_{-i}^{-1} a_i = H^{-1} a_i / (1 - d_i h_i)``, so ``u_i = u_1 + g_i / (1 - d_i h_i)
    H^{-1} a_i`` (``u_1`` stationary). Equal to :func:`fold_newton_params` on single-sample
    folds; used where derivatives in ``u_1`` and the penalty weights are needed (one
    Cholesky ``chol`` of ``H``, not ``n`` downdates). Returns ``(n, D)``.
    """
    z = jsl.cho_solve((chol, True), terms.design.T)                    # (D, n)
    lev = jnp.sum(terms.design.T * z, axis=0)
    coeff = terms.grad / (1.0 - terms.curv * lev)
    return u_full[None, :] + (z * coeff[None, :]).T


_glm_terms = jit(glm_terms, static_argnums=0)


def _terms(problem) -> GLMTerms:
    glm = problem.glm
    return _glm_terms(glm.loss, glm.design, glm.y, problem.u_full)


def glm_jacobian(problem):
    """``J = d2F/(du dw) = A^T diag(phi'(A u_1, y))`` ``(D, n)`` in closed form."""
    terms = _terms(problem)          # NumPy: eager, the product would compile programs
    return (np.asarray(terms.design) * np.asarray(terms.grad)[:, None]).T


def glm_newton_params(problem, folds, options):
    """The ``ns`` method on a problem with GLM structure: rank-one downdates of one factor.

    ``H`` is factored once by the recorded-jitter policy (:func:`factor_hessian`); every
    fold's ``H_{-o}`` is a downdate of that factor. A fold whose downdate fails or leaves
    a pivot below ``NEGLIGIBLE_JITTER * mean|diag H|`` (``H_{-o}`` is, or may be, not
    positive definite), and every fold when ``H`` itself needed jitter, is recomputed by the generic per-fold Newton step, whose jittered Cholesky
    decides whether the fold is reliable. Same result and diagnostics as the generic
    ``ns`` (``ns_hessian_min_eig`` is NaN on downdated folds: it is not computed there).
    """
    t0 = time.perf_counter()
    grad, hess, _ = full_derivatives(problem, options, with_jacobian=False)
    factor = factor_hessian(hess, warn=options.warn)
    diagnostics = fit_diagnostics(grad, factor, problem.u_full, warn=options.warn)
    t1 = time.perf_counter()
    index = jnp.asarray(folds.padded())
    n_folds, dim = len(folds), int(problem.u_full.shape[0])
    params = np.zeros((n_folds, dim))
    fast = np.zeros(n_folds, bool)
    step, rate = np.full((n_folds, dim), np.nan), np.full(n_folds, np.inf)
    if factor.reliable:
        batch = options.batch_size or int(max(1, min(n_folds, 2 ** 24 // dim ** 2)))
        out, pivot, d, rho = fold_newton_params(
            factor.chol, jnp.asarray(hess), _terms(problem), problem.u_full, index,
            jnp.asarray(grad), batch, index.shape[1] > max(1, dim // 3), problem.fun,
            problem.data, problem.n_units)
        params[:] = np.asarray(out)
        step[:], rate[:] = np.asarray(d), np.asarray(rho)
        scale = float(np.mean(np.abs(np.diag(np.asarray(hess))))) or 1.0
        fast = np.asarray(pivot) > NEGLIGIBLE_JITTER * scale             # NaN -> False
    min_eig, jitter, reliable = np.full(n_folds, np.nan), np.zeros(n_folds), fast.copy()
    redo = np.flatnonzero(~fast)
    if redo.size:
        out, eig, jit, ok, d, rho = jax.block_until_ready(newton_params(
            problem.fun, problem.u_full, index[redo], problem.data, problem.n_units,
            options.batch_size or 16))
        params[redo], min_eig[redo] = np.asarray(out), np.asarray(eig)
        jitter[redo], reliable[redo] = np.asarray(jit), np.asarray(ok)
        step[redo], rate[redo] = np.asarray(d), np.asarray(rho)
    diagnostics.update(ns_path="glm_downdate", ns_downdate_fallback=~fast,
                       ns_hessian_min_eig=min_eig, ns_jitter=jitter, chord_correction=step,
                       chord_rate=rate, unreliable={"fold_hessian_not_pd": ~reliable},
                       stage_seconds={"derivatives": t1 - t0,
                                      "solve": time.perf_counter() - t1})
    return jnp.asarray(params), diagnostics


# ------------------------------------------------------------ influence function
@jit
def _influence(chol, terms: GLMTerms, index):
    def one(idx):
        g = _gather(terms.grad, idx)
        a = terms.design.at[idx].get(mode="fill", fill_value=0.0)
        delta = jsl.cho_solve((chol, True), g @ a)
        return g * (a @ delta) + _gather(terms.loss, idx)
    points = jax.vmap(one)(index)
    return points.sum(axis=1), points


def influence_losses(problem, folds, warn: bool = True):
    """Influence-function held-out losses with a linearised loss (seed Lemma 3).

    ``l_i ~ phi_i + g_i a_i^T H^{-1} sum_{j in o} g_j a_j`` for ``i`` in ``o``; for
    leave-one-out ``phi_i + g_i^2 h_i``. ``problem`` must carry GLM structure.

    Returns:
        ``(fold_loss (n_folds,), point_loss (n_folds, m))`` NumPy arrays, padding 0.
    """
    _, hess, _ = full_derivatives(problem, Options(), with_jacobian=False)
    factor = factor_hessian(hess, warn=warn)
    fold, points = _influence(factor.chol, _terms(problem), jnp.asarray(folds.padded()))
    return np.asarray(fold), np.asarray(points)
