"""Asymptotic variance of the maximum SCL estimator (seed Proposition 2, eq. 15-17), done right.

``sqrt(n) (theta_hat - theta_0) -> N(0, Upsilon Sigma Upsilon)`` with

    Upsilon^{-1} = sum_j beta_j lambda_j E[-grad^2 S_j]              (eq. 16)
    Sigma        = Var( sum_j beta_j Z_j grad S_j )                  (the per-sample score)

The variance is over ``X`` *and* ``Z``. The printed eq. 17, ``Var(sum_j beta_j lambda_j grad
S_j)``, replaces ``Z_j`` by its mean and so omits the selection noise: with
``E[grad S_j] = 0`` at ``theta_0``,

    Sigma = sum_ij beta_i beta_j E[Z_i Z_j] E[grad S_i grad S_j^T]
          = Sigma_printed + sum_ij beta_i beta_j Cov(Z_i, Z_j) E[grad S_i grad S_j^T]

(for independent Bernoulli selection the extra term is ``sum_j beta_j^2 lambda_j (1 -
lambda_j) E[grad S_j grad S_j^T]``). ``form="corrected"`` (the default) is the first line,
``form="paper"`` the printed one.

Two estimates:

* :func:`sandwich` — from data at a fit: ``V = H^{-1} (sum_i psi_i psi_i^T) H^{-1}``
  (``= Upsilon Sigma Upsilon / n``), with ``H`` the Hessian of the objective and
  ``psi_i = -J[:, i]`` the per-sample scores from the engine's cross-Jacobian
  ``J = d2F / (dtheta dw)`` (:func:`approxcv.optim.newton.value_and_derivatives`, the
  one program that computes ``H`` and ``J`` for the fit's polish and the IJ), centred. Corrected: at the
  realised draws ``Z``; paper: with every ``Z_ij`` replaced by ``lambda_j``.
* :func:`asymptotic_variance` — exact at ``theta_0`` by enumerating the ``2^m`` states of a
  Boltzmann machine (no sampling): the quantity of the seed's Figures 2-3.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._runtime import jit
from .._validate import check_choice
from ..errors import InvalidArgumentError, NotPositiveDefiniteError
from .policy import selection_moments
from ..problem import make_problem
from .model import SCLModel
from ..optim.newton import value_and_derivatives

__all__ = ["sandwich", "asymptotic_variance", "checked_inverse", "FORMS"]

FORMS = ("corrected", "paper")


def sandwich(model, data, params, form: str = "corrected") -> dict:
    """Estimated covariance of the SCL estimate at ``params`` (module docstring).

    Args:
        model: the :class:`~approxcv.composite.SCLModel`; data: its prepared
            :class:`~approxcv.composite.SCLData` (realised draws); params: the fit.
        form: ``"corrected"`` or ``"paper"``.

    Returns:
        ``{"variance": (D, D), "hessian": H (D, D), "scores": psi (n, D)}``.
    """
    check_choice("form", form, FORMS)
    n = int(data.coef.shape[0])
    if form == "paper":
        data = model.with_coefficients(data, model.coefficients(n, "mean"))
    problem = make_problem(model, data, params, checked=True)
    # the fit's Newton polish and the IJ compile this same program
    _, _, hess, jac = value_and_derivatives(problem.fun, problem.u_full, np.ones(n),
                                            problem.data, True)
    scores = -np.asarray(jac).T
    centred = scores - scores.mean(0)
    hinv = checked_inverse(hess, "the Hessian of the SCL objective at the estimate")
    var = hinv @ (centred.T @ centred) @ hinv
    return {"variance": 0.5 * (var + var.T), "hessian": np.asarray(hess), "scores": scores}


def asymptotic_variance(base, policy, theta0, form: str = "corrected") -> np.ndarray:
    """Exact ``Upsilon Sigma Upsilon`` at ``theta0`` (the covariance of ``sqrt(n) (theta_hat -
    theta_0)``) by enumerating every state of ``base`` (module docstring).

    With ``g_sj = grad S_j(x_s)`` at every state ``s`` (probability ``p_s``):
    ``Upsilon^{-1} = sum_s p_s sum_j beta_j lambda_j g_sj g_sj^T`` (eq. 16 in its
    outer-product form: ``E[-grad^2 S_j] = E[grad S_j grad S_j^T]`` for a conditional
    log-likelihood at the truth) and ``Sigma = sum_s p_s sum_ij M_ij g_si g_sj^T`` with
    ``M = beta beta^T * E[Z Z^T]`` (corrected) or ``(beta lambda)(beta lambda)^T`` (paper).

    Raises:
        InvalidArgumentError: ``base`` has no enumerable state space.
    """
    check_choice("form", form, FORMS)
    if not hasattr(base, "state_probabilities"):
        raise InvalidArgumentError(f"the exact asymptotic variance needs every state of the "
                                   f"model enumerated; {base!r} does not enumerate its states")
    model = SCLModel(base, policy)
    states, p = base.state_probabilities(theta0)
    theta0 = jnp.asarray(base.check_theta(theta0, "theta0"))
    grads = np.asarray(_state_scores(model, theta0, jnp.asarray(states)))   # (S, k, D)
    lam, cov = selection_moments(model.policy)
    beta = model.policy.beta
    bl = beta * lam
    upsilon_inv = np.einsum("s,j,sjd,sje->de", p, bl, grads, grads, optimize=True)
    second = np.outer(bl, bl) + (np.outer(beta, beta) * cov if form == "corrected" else 0.0)
    sigma = np.einsum("s,ij,sid,sje->de", p, second, grads, grads, optimize=True)
    upsilon = checked_inverse(upsilon_inv, "Upsilon^{-1} (the expected curvature) at theta0")
    var = upsilon @ sigma @ upsilon
    return 0.5 * (var + var.T)


def _state_scores(model, theta, states):
    """``grad_theta S_j(x_s)`` for every state and component, ``(S, k, D)`` (forward mode:
    ``D`` tangents; compiled once per model structure)."""
    return _compiled_scores(model)(theta, states)


@functools.lru_cache(maxsize=32)
def _compiled_scores(model):
    return jit(jax.jacfwd(model.component_log_probs))


#: a curvature matrix whose smallest eigenvalue is below this fraction of its largest is
#: treated as singular (its inverse would be round-off)
SINGULAR_RTOL = 1e-12


def checked_inverse(matrix, what: str) -> np.ndarray:
    """``matrix^{-1}`` of a symmetric curvature matrix, by its eigendecomposition.

    Raises:
        NotPositiveDefiniteError: it is not finite, or not positive definite (smallest
            eigenvalue ``<= SINGULAR_RTOL`` times the largest): some parameters are not
            identified by the data (the message names their indices) and have no
            finite variance.
    """
    m = np.asarray(matrix, dtype=np.float64)
    if not np.all(np.isfinite(m)):
        raise NotPositiveDefiniteError(f"{what} is not finite: no variance can be computed")
    evals, vecs = np.linalg.eigh(0.5 * (m + m.T))
    top = max(float(np.max(np.abs(evals))), np.finfo(float).tiny)
    bad = evals <= SINGULAR_RTOL * top
    if bad.any():
        load = np.abs(vecs[:, bad])
        idx = np.flatnonzero(np.any(load >= 0.3 * load.max(0, keepdims=True), axis=1))
        raise NotPositiveDefiniteError(
            f"{what} is not positive definite (smallest eigenvalue {evals[0]:.3g}, largest "
            f"{evals[-1]:.3g}): the parameters {idx[:8].tolist()} are not identified by the "
            "data (e.g. a node never on), so they have no finite variance; fit with a prior "
            "(`prior_var`) or drop them from the model")
    return (vecs / evals) @ vecs.T
