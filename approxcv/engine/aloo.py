"""Approximate leave-one-out (ALOOCV) for GLM-type regularised ERM, from ONE Cholesky factor.

The objective is ``F(u, w) = sum_i w_i phi(a_i^T u, y_i) + lam^T r(u)`` over a flat
parameter ``u`` (``D``) with design rows ``a_i`` (``A``: ``n x D``). Every sample's Hessian
is rank one, ``phi''_i a_i a_i^T``, so the Hessian without the fold ``o`` is a rank-``|o|``
downdate of the full Hessian ``H = L L^T``:

    H_{-o} = H - sum_{i in o} d_i a_i a_i^T,      d_i = phi''(a_i^T u_1, y_i).

Methods (Beirami et al. 2017, "On optimal generalizability in parametric learning"):

* **ALOOCV / Newton step** (``newton``): ``u_o = u_1 + H_{-o}^{-1} sum_{i in o} g_i a_i``
  with ``g_i = phi'(a_i^T u_1, y_i)``; ``H_{-o}`` is factored by downdating ``L`` (``O(|o| D^2)``
  per fold instead of ``O(D^3)``). Exact for quadratic losses.
* **IJ**: ``u_o = u_1 + H^{-1} sum_{i in o} g_i a_i`` (the full-fit Hessian; one batched solve).
* **Influence function, linearised loss** (seed Lemma 3): the held-out loss itself is
  linearised, ``l_i(u_o) ~ l_i(u_1) + g_i a_i^T H^{-1} sum_{j in o} g_j a_j``. It never
  exceeds the IJ/ALOOCV correction and underestimates LOO (for ridge:
  ``1/2 r_i^2 (1 + 2 h_i)`` against the exact ``1/2 r_i^2 / (1 - h_i)^2``).

These kernels take arrays only (and, where a loss or regulariser must be re-evaluated,
pure callables passed as static arguments); they know nothing about models. Loops over
samples are ``vmap``/``lax.map``; the downdate is a ``lax.scan`` over the ``D`` columns.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
from jax import lax

__all__ = ["GLMTerms", "glm_terms", "glm_hessian", "cholesky_rank_one_update",
           "cholesky_rank_one_downdate", "cholesky_downdate_rows", "leverages",
           "loo_newton_params", "fold_newton_params", "fold_ij_params", "influence_losses",
           "loo_newton_params_closed_form", "padded_folds", "map_batches"]


class GLMTerms(NamedTuple):
    """Per-sample derivatives of ``phi`` at the full fit.

    design: ``A`` ``(n, D)``; loss: ``phi_i`` ``(n,)``; grad: ``g_i = phi'_i`` ``(n,)``;
    curv: ``d_i = phi''_i`` ``(n,)`` (all in the linear predictor ``eta_i = a_i^T u``).
    """
    design: jax.Array
    loss: jax.Array
    grad: jax.Array
    curv: jax.Array


def glm_terms(loss_fn, design, y, u) -> GLMTerms:
    """Evaluate ``phi``, ``phi'`` and ``phi''`` at ``eta = A u`` for an elementwise loss.

    Args:
        loss_fn: elementwise ``phi(eta (n,), y (n,)) -> (n,)``.
        design: ``A`` ``(n, D)``; y: ``(n,)``; u: ``(D,)``.
    """
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


def map_batches(fun, xs, batch_size: int | None):
    """``vmap(fun)`` over the leading axis of the pytree ``xs``, ``batch_size`` rows at a time.

    ``lax.map(fun, xs, batch_size=batch_size)`` (memory ``O(batch_size)`` rows of work), or
    one ``vmap`` when ``batch_size`` is ``None`` or covers all rows.
    """
    n = jax.tree_util.tree_leaves(xs)[0].shape[0]
    if batch_size is None or batch_size >= n:
        return jax.vmap(fun)(xs)
    return lax.map(fun, xs, batch_size=batch_size)


# ---------------------------------------------------------------- Cholesky updates
def _rank_one(chol, x, sign):
    """``L'`` with ``L' L'^T = L L^T + sign x x^T``, column by column (LINPACK-style).

    Column ``k`` of ``L'`` depends only on column ``k`` of ``L`` and the running vector
    ``x``, so the columns are a ``lax.scan`` output. A downdate that leaves the matrix
    indefinite yields NaN (square root of a negative number).
    """
    dim = chol.shape[0]
    rows = jnp.arange(dim)

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


# ------------------------------------------------------------------ LOO / folds
def _loo_one(chol, a, g, d, u_full, grad_full):
    """ALOOCV parameters for one sample: downdate, then one solve."""
    chol_i = cholesky_rank_one_downdate(chol, jnp.sqrt(jnp.maximum(d, 0.0)) * a)
    step = jsl.cho_solve((chol_i, True), g * a - grad_full)
    return u_full + step, chol_i


@partial(jax.jit, static_argnames=("batch_size",))
def loo_newton_params(chol, terms: GLMTerms, u_full, grad_full=None,
                      batch_size: int | None = 256):
    """ALOOCV parameters of every leave-one-out fold via rank-one downdates of ``chol``.

    ``u_i = u_1 - (L_i L_i^T)^{-1} grad F_{-i}(u_1)`` with ``L_i L_i^T = L L^T - d_i a_i a_i^T``
    and ``grad F_{-i}(u_1) = grad F(u_1) - g_i a_i`` (``= -g_i a_i`` at an exact fit).

    Args:
        chol: lower Cholesky factor of the full Hessian ``H`` ``(D, D)``.
        terms: :class:`GLMTerms` at ``u_full``.
        u_full: ``(D,)`` full-data fit.
        grad_full: ``grad F(u_1)`` ``(D,)``; ``None`` treats ``u_1`` as exactly stationary.
        batch_size: samples per vectorised batch (memory ``batch_size * D^2``).

    Returns:
        ``(params (n, D), ok (n,))``; ``ok`` is False where ``H_{-i}`` is not positive
        definite (the downdate failed) and ``params`` is NaN there.
    """
    grad_full = jnp.zeros_like(u_full) if grad_full is None else grad_full

    def one(args):
        a, g, d = args
        u_i, chol_i = _loo_one(chol, a, g, d, u_full, grad_full)
        return u_i, jnp.all(jnp.isfinite(jnp.diag(chol_i))) & jnp.all(jnp.isfinite(u_i))

    return map_batches(one, (terms.design, terms.grad, terms.curv), batch_size)


def padded_folds(weights) -> tuple[np.ndarray, np.ndarray]:
    """Turn ``(n_folds, n)`` 0/1 weights into padded left-out indices and a mask.

    Returns ``(index (n_folds, q_max) int, mask (n_folds, q_max) float)``; padding points
    at unit 0 with mask 0.
    """
    weights = np.asarray(weights)
    out = [np.flatnonzero(row <= 0) for row in weights]
    q_max = max(1, max(len(o) for o in out))
    index = np.zeros((len(out), q_max), dtype=np.int64)
    mask = np.zeros((len(out), q_max))
    for f, o in enumerate(out):
        index[f, :len(o)] = o
        mask[f, :len(o)] = 1.0
    return index, mask


@partial(jax.jit, static_argnames=("batch_size", "refactor"))
def fold_newton_params(chol, hess, terms: GLMTerms, u_full, index, mask, grad_full=None,
                       batch_size: int | None = 64, refactor: bool = False):
    """Newton-step (ALOOCV) parameters of leave-``q``-out / k-fold folds.

    ``u_o = u_1 + H_{-o}^{-1} sum_{i in o} g_i a_i`` with ``H_{-o}`` from ``|o|`` rank-one
    downdates of ``chol`` (``refactor=False``, cost ``O(q D^2)``) or, when folds are large
    (``q`` above about ``D / 3``), a fresh factorisation of ``H - A_o^T diag(d_o) A_o``
    (``refactor=True``, cost ``O(q D^2 + D^3)``).

    Args:
        chol, hess: Cholesky factor of the full Hessian and the Hessian itself ``(D, D)``.
        terms: :class:`GLMTerms` at ``u_full``.
        index, mask: ``(n_folds, q_max)`` from :func:`padded_folds`.
        grad_full: ``grad F(u_1)`` ``(D,)`` or ``None`` (exactly stationary).

    Returns:
        ``(params (n_folds, D), ok (n_folds,))``.
    """
    grad_full = jnp.zeros_like(u_full) if grad_full is None else grad_full

    def one(args):
        idx, m = args
        a = terms.design[idx]                                 # (q, D)
        rhs = jnp.sum((m * terms.grad[idx])[:, None] * a, axis=0)
        scaled = (jnp.sqrt(jnp.maximum(terms.curv[idx], 0.0)) * m)[:, None] * a
        if refactor:
            c = jnp.linalg.cholesky(hess - scaled.T @ scaled)
        else:
            c = cholesky_downdate_rows(chol, scaled)
        u_o = u_full + jsl.cho_solve((c, True), rhs - grad_full)
        return u_o, jnp.all(jnp.isfinite(jnp.diag(c))) & jnp.all(jnp.isfinite(u_o))

    return map_batches(one, (index, mask), batch_size)


@jax.jit
def fold_ij_params(chol, terms: GLMTerms, u_full, weights):
    """IJ parameters ``u_o = u_1 + H^{-1} A^T (g * (1 - w_o))`` for all folds, ``(n_folds, D)``."""
    rhs = terms.design.T @ (terms.grad[None, :] * (1.0 - weights)).T   # (D, n_folds)
    return u_full[None, :] + jsl.cho_solve((chol, True), rhs).T


@jax.jit
def influence_losses(chol, terms: GLMTerms, weights):
    """Linearised (influence-function) held-out losses, seed Lemma 3.

    ``l_i ~ phi_i + g_i a_i^T H^{-1} sum_{j in o} g_j a_j`` for ``i`` in ``o``; zero for kept
    units. For leave-one-out this is ``phi_i + g_i^2 h_i``.

    Returns:
        ``(fold_loss (n_folds,), point_losses (n_folds, n))``.
    """
    out = 1.0 - weights                                                # (F, n)
    delta = jsl.cho_solve((chol, True), terms.design.T @ (terms.grad[None, :] * out).T).T
    change = terms.grad[None, :] * (delta @ terms.design.T)            # (F, n)
    points = out * (terms.loss[None, :] + change)
    return points.sum(axis=1), points


def loo_newton_params_closed_form(hess, terms: GLMTerms, u_full):
    """ALOOCV parameters by Sherman-Morrison, differentiable end to end.

    ``H_{-i}^{-1} a_i = H^{-1} a_i / (1 - d_i h_i)``, so
    ``u_i = u_1 + g_i / (1 - d_i h_i) H^{-1} a_i``. Mathematically equal to
    :func:`loo_newton_params`; used where derivatives with respect to ``u_1`` and the
    regularisation weights are needed (reverse mode through one Cholesky, not through ``n``
    downdates). Returns ``(n, D)``.
    """
    chol = jnp.linalg.cholesky(0.5 * (hess + hess.T))
    z = jsl.cho_solve((chol, True), terms.design.T)                    # (D, n)
    lev = jnp.sum(terms.design.T * z, axis=0)
    coeff = terms.grad / (1.0 - terms.curv * lev)
    return u_full[None, :] + (z * coeff[None, :]).T
