"""Infinitesimal jackknife for all folds at once."""
from __future__ import annotations


from .linalg import HessianFactor, solve


def ij_params(factor: HessianFactor, cross_jac, u_full, weights):
    """IJ parameters for every fold, one batched solve.

    ``u_IJ(w_o) = u_1 - H^{-1} J (w_o - 1)`` for all rows ``w_o`` of ``weights`` at once:
    ``U = u_1 + (H^{-1} J (1 - W)^T)^T``.

    Args:
        factor: Cholesky factor of ``H`` at ``(u_1, 1)``.
        cross_jac: ``J``, shape ``(D, n)``.
        u_full: ``u_1``, shape ``(D,)``.
        weights: ``W``, shape ``(n_folds, n)``.

    Returns:
        ``(n_folds, D)`` array of IJ parameters.
    """
    delta = solve(factor, cross_jac @ (1.0 - weights).T)
    return u_full[None, :] + delta.T
