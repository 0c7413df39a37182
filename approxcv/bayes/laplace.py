"""Laplace approximation ``q(f | D) = N(f | f_hat, (K^-1 + W)^-1)`` (seed eq. 13-16).

The mode ``f_hat = K a_hat`` maximises ``Psi(a) = sum_i w_i log p(y_i | f_i) - a^T K a / 2``
(``w_i`` in {0, 1} switches a point off: the brute-force LOO uses it). Each step is the
Newton step of Rasmussen & Williams Alg. 3.1 written for any ``W``::

    b = W f + g,   f_new = (I + K W)^-1 K b,   a_new = b - W f_new       (K a_new = f_new)

with ``g = d log p / df`` and ``W = -d^2 log p / df^2``. The step is *damped*: ``Psi`` is
evaluated at ``a + s (a_new - a)`` for ``s = 1, 1/2, ..., 2^-9`` and the best is kept.
For a likelihood that is not log-concave (Student-t) ``W`` can be negative and the Newton
direction need not ascend, so the same ladder is also tried on the direction built from
``max(W, 0)`` (a Fisher-scoring-like ascent direction) and the best of both is kept; near a
mode where every ``K^-1 + W`` is positive definite the full Newton step wins and the
convergence is quadratic. A run stops when ``Psi`` gains less than ``tol (1 + |Psi|)``.

The approximate log marginal likelihood (R&W eq. 3.32)::

    log q(y | theta) = sum_i w_i log p(y_i | f_hat_i) - a_hat^T f_hat / 2 - log|I + K W| / 2

is differentiated in ``theta`` through the implicit function ``a_hat(theta)``: one Newton
step from the (stop-gradient) mode, ``a~ = a_hat + (I + W K)^-1 (g - a_hat)``, has the mode's
value and its exact first derivative (R&W Alg. 5.1 in automatic form).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
from jax import lax

__all__ = ["LaplaceState", "site_derivatives", "laplace_mode", "posterior_variance",
           "laplace_log_marginal"]

#: damping ladder: step fractions tried per Newton iteration
_STEPS = 0.5 ** jnp.arange(10)


class LaplaceState(NamedTuple):
    """a: ``K^-1 f_hat``; f: the mode; g, W: first and minus second derivatives of the
    (weighted) log likelihood there; psi: ``Psi(a)``; converged; iterations."""
    a: jax.Array
    f: jax.Array
    g: jax.Array
    W: jax.Array
    psi: jax.Array
    converged: jax.Array
    iterations: jax.Array


def site_derivatives(lik, y, f, phi, weights):
    """``(log p (n,), g (n,), W (n,))`` of ``w_i log p(y_i | f_i)`` in each ``f_i``."""
    def one(yi, fi):
        return lik.log_lik(yi, fi, phi)
    logp = jax.vmap(one)(y, f)
    g = jax.vmap(jax.grad(one, argnums=1))(y, f)
    h = jax.vmap(jax.grad(jax.grad(one, argnums=1), argnums=1))(y, f)
    return weights * logp, weights * g, -weights * h


def _newton_target(K, f, g, W):
    """``(f_new, a_new)`` of the Newton step for curvature ``W`` (module docstring)."""
    n = f.shape[0]
    b = W * f + g
    f_new = jnp.linalg.solve(jnp.eye(n) + K * W[None, :], K @ b)
    return f_new, b - W * f_new


def laplace_mode(K, y, lik, phi, weights, a0, max_iter: int = 100, tol: float = 1e-12):
    """The damped Newton iteration of the module docstring from ``a0``; returns a
    :class:`LaplaceState`. ``K`` and ``phi`` enter without gradient."""
    K, phi = lax.stop_gradient(K), lax.stop_gradient(phi)

    def psi_of(a, f):
        logp = jax.vmap(lambda yi, fi: lik.log_lik(yi, fi, phi))(y, f)
        return jnp.sum(weights * logp) - 0.5 * a @ f

    def _ladder(a, f, f_new, a_new):
        """Psi on the damping ladder towards ``(f_new, a_new)``: (values, fs, as)."""
        fs = f[None] + _STEPS[:, None] * (f_new - f)[None]
        as_ = a[None] + _STEPS[:, None] * (a_new - a)[None]
        return jax.vmap(psi_of)(as_, fs), fs, as_

    def _cond(state):
        a, f, psi, it, done = state
        return (~done) & (it < max_iter)

    def _body(state):
        """One damped Newton iteration (both directions for non-log-concave models)."""
        a, f, psi, it, _ = state
        _, g, W = site_derivatives(lik, y, f, phi, weights)
        vals, fs, as_ = _ladder(a, f, *_newton_target(K, f, g, W))
        if not lik.log_concave:
            v2, f2, a2 = _ladder(a, f, *_newton_target(K, f, g, jnp.maximum(W, 0.0)))
            vals, fs, as_ = (jnp.concatenate([vals, v2]), jnp.concatenate([fs, f2]),
                             jnp.concatenate([as_, a2]))
        vals = jnp.where(jnp.isfinite(vals), vals, -jnp.inf)
        best = jnp.argmax(vals)
        better = vals[best] > psi
        gain = vals[best] - psi
        a_new = jnp.where(better, as_[best], a)
        f_new = jnp.where(better, fs[best], f)
        psi_new = jnp.where(better, vals[best], psi)
        done = (~better) | (gain <= tol * (1.0 + jnp.abs(psi)))
        return a_new, f_new, psi_new, it + 1, done

    f0 = K @ a0
    state = (a0, f0, psi_of(a0, f0), jnp.array(0), jnp.array(False))
    a, f, psi, it, done = lax.while_loop(_cond, _body, state)
    _, g, W = site_derivatives(lik, y, f, phi, weights)
    grad = jnp.max(jnp.abs(g - a)) / (1.0 + jnp.max(jnp.abs(a)))
    return LaplaceState(a, f, g, W, psi, done & (grad < 1e-5), it)


def posterior_variance(K, W, log_concave: bool):
    """``diag((K^-1 + W)^-1)``: with ``W >= 0`` via ``B = I + W^1/2 K W^1/2 = L L^T``,
    ``Sigma = K - V^T V``, ``V = L^-1 W^1/2 K`` (R&W Alg. 3.2); otherwise
    ``Sigma = (I + K W)^-1 K`` by LU."""
    n = K.shape[0]
    if log_concave:
        sw = jnp.sqrt(jnp.maximum(W, 0.0))
        L = jnp.linalg.cholesky(jnp.eye(n) + sw[:, None] * K * sw[None, :])
        V = jax.scipy.linalg.solve_triangular(L, sw[:, None] * K, lower=True)
        return jnp.diag(K) - jnp.sum(V ** 2, 0)
    return jnp.diag(jnp.linalg.solve(jnp.eye(n) + K * W[None, :], K))


def _log_det(K, W, log_concave: bool):
    n = K.shape[0]
    if log_concave:
        sw = jnp.sqrt(jnp.maximum(W, 0.0))
        L = jnp.linalg.cholesky(jnp.eye(n) + sw[:, None] * K * sw[None, :])
        return 2.0 * jnp.sum(jnp.log(jnp.diag(L)))
    return jnp.linalg.slogdet(jnp.eye(n) + K * W[None, :])[1]


def laplace_log_marginal(K, y, lik, phi, weights, a_hat):
    """``log q(y | theta)`` of the module docstring at the mode ``a_hat`` (treated as
    constant), differentiable in ``K`` and ``phi`` with the implicit derivative of the mode."""
    a_hat = lax.stop_gradient(a_hat)
    n = K.shape[0]
    _, g, W = site_derivatives(lik, y, K @ a_hat, phi, weights)
    a = a_hat + jnp.linalg.solve(jnp.eye(n) + W[:, None] * K, g - a_hat)
    f = K @ a
    logp, _, W = site_derivatives(lik, y, f, phi, weights)
    return jnp.sum(logp) - 0.5 * a @ f - 0.5 * _log_det(K, W, lik.log_concave)
