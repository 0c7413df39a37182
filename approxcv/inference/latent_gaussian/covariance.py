"""The covariance function: constant + linear + squared exponential with ARD length scales
(the seed paper's models, §4).

    k(x, x') = s_c^2 + s_l^2 x^T x' + s_e^2 exp(-1/2 sum_d (x_d - x'_d)^2 / l_d^2)

Hyperparameters are unconstrained logs, laid out as ``[log s_c^2, log s_l^2, log s_e^2,
log l_1, ..., log l_d]`` (``n_kernel_params(d) = 3 + d``), matching GPy's ``Bias``,
``Linear`` and ``RBF(ARD=True)`` (variances, not standard deviations).
"""
from __future__ import annotations

import jax.numpy as jnp

__all__ = ["kernel_matrix", "kernel_diag", "n_kernel_params", "KERNEL_NAMES"]

KERNEL_NAMES = ("log_constant_var", "log_linear_var", "log_se_var")


def n_kernel_params(d: int) -> int:
    """Number of kernel hyperparameters for ``d`` inputs: three variances + ``d`` scales."""
    return 3 + d


def kernel_matrix(theta_k, X, Z=None):
    """``K[i, j] = k(X_i, Z_j)`` for ``Float[Array, "n d"]`` inputs (``Z = X`` by default);
    ``theta_k`` the ``3 + d`` log hyperparameters of the module docstring."""
    Z = X if Z is None else Z
    const, lin, se = jnp.exp(theta_k[0]), jnp.exp(theta_k[1]), jnp.exp(theta_k[2])
    ls = jnp.exp(theta_k[3:])
    xs, zs = X / ls, Z / ls
    sq = (jnp.sum(xs ** 2, 1)[:, None] + jnp.sum(zs ** 2, 1)[None, :] - 2 * xs @ zs.T)
    return const + lin * (X @ Z.T) + se * jnp.exp(-0.5 * jnp.maximum(sq, 0.0))


def kernel_diag(theta_k, X):
    """``k(X_i, X_i)`` for every row, ``(n,)``, without forming ``K``:
    ``s_c^2 + s_l^2 |x_i|^2 + s_e^2``."""
    return (jnp.exp(theta_k[0]) + jnp.exp(theta_k[1]) * jnp.sum(X ** 2, 1)
            + jnp.exp(theta_k[2]))
