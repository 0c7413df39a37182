"""Laplace approximation ``q(f | D) = N(f | f_hat, (K^-1 + W)^-1)`` (seed eq. 13-16).

The mode ``f_hat = K a_hat`` maximises ``Psi(a) = sum_i w_i log p(y_i | f_i) - a^T K a / 2``
(``w_i`` in {0, 1} switches a point off: the brute-force LOO uses it), with ``g = d log p / df``
and ``W = -d^2 log p / df^2``.

**Log-concave likelihoods** (``W >= 0``): the Newton step of Rasmussen & Williams Alg. 3.1 in
its symmetric Cholesky form, ``B = I + W^1/2 K W^1/2 = L L^T``::

    b = W f + g,   a_new = b - W^1/2 B^-1 W^1/2 K b,   f_new = K a_new

*damped*: ``Psi`` is evaluated at ``a + s (a_new - a)`` for ``s = 1, 1/2, ..., 2^-9`` and the
best is kept; a run stops when ``Psi`` gains less than ``tol (1 + |Psi|)``.

**Other likelihoods** (Student-t: ``W_i < 0`` for outlying points, ``Psi`` may be
multimodal): Levenberg-Marquardt-regularised Newton, a trust-region method that converges
to a local maximum from any start. With ``r = g - a`` (the gradient of ``Psi`` in ``f``) a
trial step solves ``(K^-1 + W + lambda I) delta = r``::

    delta = C (I + C^T (W + lambda) C)^-1 C^T r,   f_t = f + delta,   a_t = g - (W + lambda) delta

(``K = C C^T``; ``a_t = K^-1 f_t`` without ``K^-1``). The step is taken only when the
quadratic model is concave — ``I + C^T (W + lambda) C`` has a Cholesky factor — its
predicted gain ``m = (r^T delta + lambda delta^T delta) / 2`` is positive, and the actual
gain is at least ``1e-4 m``. (Accepting plain Newton steps of an indefinite model lets the
iteration settle on a saddle point of ``Psi``: it did on Boston.) ``lambda`` starts at 0 (the plain Newton step, quadratic
convergence near a mode where ``K^-1 + W`` is positive definite) and follows Nielsen's rule:
after a taken step ``lambda *= max(1/3, 1 - (2 rho - 1)^3)`` (``rho``: actual / predicted;
set to 0 below ``1e-9 (1 + max|W|)``), after a refused one ``lambda = max(2^k lambda,
max(-min W, 0) + 1e-3 (1 + max|W|))`` with ``k`` the number of refusals in a row; once
``W + lambda >= 0`` the model is concave, and a large enough ``lambda`` gives a short
gradient step, so some trial always ascends. A run stops when the predicted gain of a
(positive-definite) model step is below ``tol (1 + |Psi|)``; refused steps count as
iterations. A run that ends on a saddle point (small gradient, ``K^-1 + W`` indefinite)
steps along the direction of negative curvature and runs again, at most 5 times
(:func:`_escape_saddle`). GPstuff's default for the Student-t is an EM iteration over its scale-mixture
representation (Vanhatalo, Jylanki & Vehtari 2009) and its "stabilized-newton" clips ``W``
at 0 (linear convergence); the trust region keeps the exact Newton step near the mode, and
its convergence is checked, not assumed.

A likelihood with a ``gaussian_surrogate`` (Student-t) also tries, as the start, the
posterior mean under the Gaussian likelihood of the same mean and variance, and starts from
whichever of it and ``a0`` has the higher ``Psi`` (GPstuff's stabilised Newton starts from
the observations themselves).

A run is reported **converged** only when the gradient is small,
``max|g - a| <= 1e-5 (1 + max|a|)``, and ``K^-1 + W`` is positive definite there (a local
maximum: ``I + C^T W C`` has a Cholesky factor; the posterior variances are also checked
positive by the caller) — never on the iteration count alone.

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
import numpy as np
from jax import lax

from ..._validate import real_number
from ...errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["LaplaceState", "site_derivatives", "laplace_mode", "posterior_variance",
           "laplace_log_marginal", "mode_curvature", "GRAD_TOL", "jittered_kernel",
           "JITTER_LADDER"]

#: damping ladder: step fractions tried per Newton iteration (log-concave likelihoods)
_STEPS = 0.5 ** np.arange(10)
#: the relative gradient size below which a mode counts as found
GRAD_TOL = 1e-5
#: jitters tried, relative to the mean of ``diag K``, when ``K`` has no Cholesky factor
JITTER_LADDER = 10.0 ** np.arange(-12, -1)


def jittered_kernel(K):
    """``(K + j I, j)`` with ``j`` the least jitter (0, then :data:`JITTER_LADDER` times the
    mean of ``diag K``) for which ``K + j I`` has a finite Cholesky factor. Repeated inputs
    make ``K`` singular (rank = the number of distinct rows); without jitter its factor is
    NaN and every step of a solve through it is refused. ``j`` is recorded
    (``Posterior.jitter``); 0 where ``K`` factors as it is."""
    K = lax.stop_gradient(K)
    scale = jnp.mean(jnp.diag(K))
    ladder = jnp.concatenate([jnp.zeros(1), scale * JITTER_LADDER])
    eye = jnp.eye(K.shape[0])

    def _factors(j):
        return jnp.all(jnp.isfinite(jnp.diag(jnp.linalg.cholesky(K + j * eye))))

    def _cond(k):
        return (k < ladder.shape[0] - 1) & ~_factors(ladder[k])

    k = lax.while_loop(_cond, lambda k: k + 1, jnp.array(0))
    return K + ladder[k] * eye, ladder[k]


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


def _chol_b(K, W):
    """``(sqrt(W), L)`` with ``L L^T = B = I + W^1/2 K W^1/2`` (``W >= 0``)."""
    sw = jnp.sqrt(jnp.maximum(W, 0.0))
    return sw, jnp.linalg.cholesky(jnp.eye(K.shape[0]) + sw[:, None] * K * sw[None, :])


def _solve_i_plus_wk(K, W, r):
    """``(I + W K)^-1 r = r - W^1/2 B^-1 W^1/2 K r`` for ``W >= 0``."""
    sw, L = _chol_b(K, W)
    return r - sw * jax.scipy.linalg.cho_solve((L, True), sw * (K @ r))


def _newton_target(K, f, g, W):
    """``(f_new, a_new)`` of the (undamped) Newton step, ``W >= 0`` (Cholesky form)."""
    b = W * f + g
    a_new = _solve_i_plus_wk(K, W, b)
    return K @ a_new, a_new


def _psi_fn(K, y, lik, phi, weights):
    def psi_of(a, f):
        logp = jax.vmap(lambda yi, fi: lik.log_lik(yi, fi, phi))(y, f)
        return jnp.sum(weights * logp) - 0.5 * a @ f
    return psi_of


def _damped_newton(K, y, lik, phi, weights, a0, max_iter, tol):
    """Log-concave likelihoods: damped Newton (module docstring); ``(a, f, iterations)``."""
    psi_of = _psi_fn(K, y, lik, phi, weights)

    def _cond(state):
        a, f, psi, it, done = state
        return (~done) & (it < max_iter)

    def _body(state):
        """One damped Newton iteration: the best point of the step ladder."""
        a, f, psi, it, _ = state
        _, g, W = site_derivatives(lik, y, f, phi, weights)
        f_new, a_new = _newton_target(K, f, g, W)
        fs = f[None] + _STEPS[:, None] * (f_new - f)[None]
        as_ = a[None] + _STEPS[:, None] * (a_new - a)[None]
        vals = jax.vmap(psi_of)(as_, fs)
        vals = jnp.where(jnp.isfinite(vals), vals, -jnp.inf)
        best = jnp.argmax(vals)
        better = vals[best] > psi
        gain = vals[best] - psi
        done = (~better) | (gain <= tol * (1.0 + jnp.abs(psi)))
        return (jnp.where(better, as_[best], a), jnp.where(better, fs[best], f),
                jnp.where(better, vals[best], psi), it + 1, done)

    f0 = K @ a0
    a, f, _, it, _ = lax.while_loop(_cond, _body, (a0, f0, psi_of(a0, f0), jnp.array(0),
                                                   jnp.array(False)))
    return a, f, it


def _trust_region_newton(K, y, lik, phi, weights, a0, max_iter, tol):
    """Any likelihood: Levenberg-Marquardt Newton (module docstring); ``(a, f, iterations)``.
    With ``K = C C^T``, ``(K^-1 + W_l)^-1 = C (I + C^T W_l C)^-1 C^T``: the Cholesky factor
    of ``M = I + C^T W_l C`` both solves the trial step and tells whether the quadratic model
    is concave (a failed factor is a refused step)."""
    n = K.shape[0]
    psi_of = _psi_fn(K, y, lik, phi, weights)
    C = jnp.linalg.cholesky(K)

    def _cond(state):
        return (~state[-1]) & (state[-2] < max_iter)

    def _body(state):
        """One trial step at the current ``lambda``; taken or refused."""
        a, f, psi, g, W, lam, refusals, it, _ = state
        r = g - a
        wl = W + lam
        Lm = jnp.linalg.cholesky(jnp.eye(n) + C.T @ (wl[:, None] * C))
        delta = C @ jax.scipy.linalg.cho_solve((Lm, True), C.T @ r)
        f_t, a_t = f + delta, g - wl * delta
        psi_t = psi_of(a_t, f_t)
        pred = 0.5 * (r @ delta + lam * delta @ delta)
        gain = psi_t - psi
        ok = (jnp.all(jnp.isfinite(jnp.diag(Lm))) & jnp.isfinite(psi_t)
              & jnp.all(jnp.isfinite(delta)) & (pred > 0))
        take = ok & (gain >= 1e-4 * pred)
        small = ok & (pred <= tol * (1.0 + jnp.abs(psi)))
        rho = gain / jnp.where(ok, pred, 1.0)
        scale = 1.0 + jnp.max(jnp.abs(W))
        lam_taken = lam * jnp.maximum(1.0 / 3.0, 1.0 - (2.0 * rho - 1.0) ** 3)
        lam_taken = jnp.where(lam_taken < 1e-9 * scale, 0.0, lam_taken)
        lam_refused = jnp.maximum(lam * 2.0 ** (refusals + 1),
                                  jnp.maximum(-jnp.min(W), 0.0) + 1e-3 * scale)
        a_n = jnp.where(take, a_t, a)
        f_n = jnp.where(take, f_t, f)
        _, g_n, W_n = site_derivatives(lik, y, f_n, phi, weights)
        stuck = lam_refused > 1e12 * scale
        done = small | (~take & stuck)
        return (a_n, f_n, jnp.where(take, psi_t, psi), g_n, W_n,
                jnp.where(take, lam_taken, lam_refused),
                jnp.where(take, 0, refusals + 1), it + 1, done)

    f0 = K @ a0
    _, g0, W0 = site_derivatives(lik, y, f0, phi, weights)
    state = (a0, f0, psi_of(a0, f0), g0, W0, jnp.array(0.0), jnp.array(0), jnp.array(0),
             jnp.array(False))
    out = lax.while_loop(_cond, _body, state)
    return out[0], out[1], out[-2]


def _escape_saddle(K, y, lik, phi, weights, a):
    """From a stationary point where ``K^-1 + W`` is indefinite: the best ``Psi`` along
    ``+-t C u`` (``u``: the eigenvector of ``I + C^T W C`` of least eigenvalue, a direction
    of positive curvature of ``Psi``), ``t`` on a ladder ``2^-6 .. 2^4`` in ``f`` units;
    ``a`` itself if none is higher."""
    n = K.shape[0]
    psi_of = _psi_fn(K, y, lik, phi, weights)
    C = jnp.linalg.cholesky(K)
    f = K @ a
    _, _, W = site_derivatives(lik, y, f, phi, weights)
    u = jnp.linalg.eigh(jnp.eye(n) + C.T @ (W[:, None] * C))[1][:, 0]
    v = C @ u
    v = v / jnp.max(jnp.abs(v))
    kv = jax.scipy.linalg.solve_triangular(C.T, u, lower=False) / jnp.max(jnp.abs(C @ u))
    ts = jnp.concatenate([2.0 ** jnp.arange(-6, 5), -(2.0 ** jnp.arange(-6, 5))])
    fs, as_ = f[None] + ts[:, None] * v[None], a[None] + ts[:, None] * kv[None]
    vals = jax.vmap(psi_of)(as_, fs)
    vals = jnp.where(jnp.isfinite(vals), vals, -jnp.inf)
    best = jnp.argmax(vals)
    return jnp.where(vals[best] > psi_of(a, f), as_[best], a)


def _trust_region_with_escapes(K, y, lik, phi, weights, a0, max_iter, tol, escapes=5):
    """:func:`_trust_region_newton`, and while it ends on a saddle point (small gradient,
    ``K^-1 + W`` indefinite) a step along negative curvature and another run, at most
    ``escapes`` times; ``(a, f, iterations)`` with the trials of every run counted."""
    def _cond(state):
        a, it, k, done = state
        return (~done) & (k <= escapes) & (it < max_iter)

    def _body(state):
        """One trust-region run, then an escape if it ended on a saddle."""
        a, it, k, _ = state
        a, f, its = _trust_region_newton(K, y, lik, phi, weights, a, max_iter - it, tol)
        _, _, W = site_derivatives(lik, y, f, phi, weights)
        done = _is_local_max(K, W)
        a = jnp.where(done, a, _escape_saddle(K, y, lik, phi, weights, a))
        return a, it + its, k + 1, done

    a, it, _, _ = lax.while_loop(_cond, _body, (a0, jnp.array(0), jnp.array(0),
                                                 jnp.array(False)))
    return a, K @ a, it


def _is_local_max(K, W):
    """Whether ``K^-1 + W`` is positive definite: ``I + C^T W C`` has a Cholesky factor
    (``K = C C^T``)."""
    C = jnp.linalg.cholesky(K)
    L = jnp.linalg.cholesky(jnp.eye(K.shape[0]) + C.T @ (W[:, None] * C))
    return jnp.all(jnp.isfinite(jnp.diag(L))) & jnp.all(jnp.isfinite(jnp.diag(C)))


def mode_curvature(K, W):
    """Least eigenvalue of ``I + C^T W C`` (``K = C C^T``), whose determinant is
    ``|I + K W|``: positive at a local maximum of ``Psi``, 0 at a fold of the mode (where
    two modes merge). As it goes to 0 along a branch of modes, ``-log|I + K W| / 2`` and so
    the Laplace log marginal likelihood go to ``+infinity``: type-II MAP can run into it.
    ``K`` is jittered as by :func:`jittered_kernel` where it has no Cholesky factor."""
    C = jnp.linalg.cholesky(jittered_kernel(K)[0])
    return jnp.linalg.eigvalsh(jnp.eye(K.shape[0]) + C.T @ (W[:, None] * C))[0]


def _better_start(K, y, lik, phi, weights, a0):
    """``a0`` or the posterior mean under the likelihood's Gaussian surrogate (targets ``t``,
    variances ``v``; weight-0 points have infinite variance), whichever has the higher
    ``Psi``: ``a_G = (K + V / w)^-1 t = S (I + S K S)^-1 S t`` with ``S = (w / v)^1/2``.
    From a cold start on Boston's Student-t this cuts the trust-region iterations from 56
    to 6 (the same mode); a warm start nearer the mode is kept."""
    t, v = lik.gaussian_surrogate(y, phi)
    sw, L = _chol_b(K, weights / v)
    a_g = sw * jax.scipy.linalg.cho_solve((L, True), sw * t)
    psi_of = _psi_fn(K, y, lik, phi, weights)
    f0, f_g = K @ a0, K @ a_g
    return jnp.where(psi_of(a_g, f_g) > psi_of(a0, f0), a_g, a0)


def laplace_mode(K, y, lik, phi, weights, a0, max_iter: int = 200, tol: float = 1e-12):
    """The mode search of the module docstring from ``a0``; returns a :class:`LaplaceState`
    (``converged``: small gradient, and for a non-log-concave likelihood a positive
    determinant of ``I + K W``). ``K`` and ``phi`` enter without gradient."""
    if isinstance(max_iter, bool) or not isinstance(max_iter, int) or max_iter < 1:
        raise InvalidArgumentError(f"Laplace's `max_iter` must be an integer >= 1, got "
                                   f"{max_iter!r}")
    try:
        number = real_number("tol", tol)
    except ArgumentTypeError:
        number = np.nan
    if not (np.isfinite(number) and number > 0):
        raise InvalidArgumentError(f"Laplace's `tol` must be a finite number > 0, got {tol!r}")
    tol = number
    K, phi = lax.stop_gradient(K), lax.stop_gradient(phi)
    if hasattr(lik, "gaussian_surrogate"):
        a0 = _better_start(K, y, lik, phi, weights, a0)
    if lik.log_concave:
        a, f, it = _damped_newton(K, y, lik, phi, weights, a0, max_iter, tol)
    else:
        a, f, it = _trust_region_with_escapes(K, y, lik, phi, weights, a0, max_iter, tol)
    _, g, W = site_derivatives(lik, y, f, phi, weights)
    psi = _psi_fn(K, y, lik, phi, weights)(a, f)
    grad = jnp.max(jnp.abs(g - a)) / (1.0 + jnp.max(jnp.abs(a)))
    converged = jnp.isfinite(psi) & (grad <= GRAD_TOL)
    if not lik.log_concave:
        converged = converged & _is_local_max(K, W)
    return LaplaceState(a, f, g, W, psi, converged, it)


def posterior_variance(K, W, log_concave: bool):
    """``diag((K^-1 + W)^-1)``: with ``W >= 0`` via ``B = I + W^1/2 K W^1/2 = L L^T``,
    ``Sigma = K - V^T V``, ``V = L^-1 W^1/2 K`` (R&W Alg. 3.2); otherwise
    ``Sigma = (I + K W)^-1 K`` by LU."""
    n = K.shape[0]
    if log_concave:
        sw, L = _chol_b(K, W)
        V = jax.scipy.linalg.solve_triangular(L, sw[:, None] * K, lower=True)
        return jnp.diag(K) - jnp.sum(V ** 2, 0)
    return jnp.diag(jnp.linalg.solve(jnp.eye(n) + K * W[None, :], K))


def _log_det(K, W, log_concave: bool):
    n = K.shape[0]
    if log_concave:
        L = _chol_b(K, W)[1]
        return 2.0 * jnp.sum(jnp.log(jnp.diag(L)))
    return jnp.linalg.slogdet(jnp.eye(n) + K * W[None, :])[1]


def laplace_log_marginal(K, y, lik, phi, weights, a_hat):
    """``log q(y | theta)`` of the module docstring at the mode ``a_hat`` (treated as
    constant), differentiable in ``K`` and ``phi`` with the implicit derivative of the mode."""
    a_hat = lax.stop_gradient(a_hat)
    n = K.shape[0]
    _, g, W = site_derivatives(lik, y, K @ a_hat, phi, weights)
    if lik.log_concave:
        a = a_hat + _solve_i_plus_wk(K, W, g - a_hat)
    else:
        a = a_hat + jnp.linalg.solve(jnp.eye(n) + W[:, None] * K, g - a_hat)
    f = K @ a
    logp, _, W = site_derivatives(lik, y, f, phi, weights)
    return jnp.sum(logp) - 0.5 * a @ f - 0.5 * _log_det(K, W, lik.log_concave)
