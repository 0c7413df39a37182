"""The elastic net's smooth surrogate on a support, in the full layout, and the support check.

:class:`ElasticNetOnSupport` minimises, over the elastic net's own parameters
``(coef (p,), intercept)``,

    1/2 sum_i w_i (y_i - x_{i,S}^T theta_S - b)^2 + lam1 s^T theta_S + lam2/2 ||theta_S||^2
    + c/2 ||theta_{not S}||^2,

with the support ``S`` and signs ``s`` of a fit fixed. The off-support coefficients do not
enter the loss (their columns of the design are masked) and only through the last term,
whose gradient is 0 at 0 and which does not depend on the weights: every IJ/NS step keeps
them at exactly 0 and ``H`` block-diagonal there, so fold parameters come out in the full
layout. ``c`` (:func:`off_support_curvature`) is of the size of the support's curvature, so
``H`` is no worse conditioned than its support block. Build it with
:meth:`approxcv.models.erm.elastic_net.ElasticNet.on_support`.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...errors import InvalidArgumentError
from .base import ERM, check_lam, design_matrix, weights_array
from ..._runtime import jit, map_in_batches

__all__ = ["ElasticNetParams", "ElasticNetOnSupport", "support_penalty",
           "off_support_curvature", "support_changes"]


class ElasticNetParams(NamedTuple):
    """coef ``(p,)``; intercept ``()`` (shape ``(0,)`` when ``fit_intercept=False``)."""
    coef: jax.Array
    intercept: jax.Array


def support_penalty(u, lam, aux):
    """``lam1 s^T u + lam2/2 sum_S u^2 + 1/2 sum_j c_j u_j^2`` with ``aux = (s, on_S, c)``,
    ``(D,)`` each (``s`` and ``on_S`` zero off the support, ``c`` zero on it)."""
    signs, on, off = aux
    return (lam[0] * jnp.dot(signs, u) + 0.5 * lam[1] * jnp.sum(on * u ** 2)
            + 0.5 * jnp.sum(off * u ** 2))


def off_support_curvature(X, lam2: float) -> float:
    """``c = mean_j ||x_j||^2 + lam2`` (1 for an all-zero ``X``)."""
    c = float(np.mean(np.sum(np.asarray(X) ** 2, axis=0))) + float(lam2)
    return c if c > 0 else 1.0


@partial(jit, static_argnames=("p",))
def support_changes(design, y, u_full, fold_params, index, lam1, p: int):
    """Per fold ``(flips, enters)`` ``(n_folds,)`` bool at the fold parameters ``u_o``.

    ``flips``: some coefficient's sign differs from the fit's (a support coefficient flips
    or vanishes, or one off the support is non-zero); ``enters``: an off-support
    coefficient that is 0 violates ``|x_j^T W_o (y - A u_o)| <= lam1`` (it would enter).
    ``index``: ``(n_folds, m)`` left-out samples padded with ``n``; ``p``: coefficients.
    """
    n = y.shape[0]
    s_full = jnp.sign(u_full[:p])
    tol = lam1 * (1 + 1e-8) + 1e-10 * (1 + jnp.max(jnp.abs(design.T @ y)))

    def one(args):
        u, idx = args
        w = jnp.ones(n, y.dtype).at[idx].set(0.0, mode="drop")
        score = jnp.abs(design[:, :p].T @ (w * (y - design @ u)))
        s = jnp.sign(u[:p])
        enters = (s_full == 0) & (s == 0) & (score > tol)
        return jnp.any(s != s_full), jnp.any(enters)

    return map_in_batches(one, (fold_params, index), 64)


class ElasticNetOnSupport(ERM):
    """The elastic net restricted to a support with fixed signs (module docstring).

    Args:
        lam1, lam2: the elastic net's weights.
        support: indices of the support; signs: ``+-1`` of its coefficients.
        n_features: ``p``.
        off_curvature: ``c`` of the off-support quadratic.
        fit_intercept: fit an unpenalised intercept.
    """
    params_type = ElasticNetParams
    #: lam1 and lam2 are constants of its programs, as of the elastic net's
    numeric_hyperparameters = ()

    def __init__(self, lam1: float, lam2: float, support: tuple, signs: tuple,
                 n_features: int, off_curvature: float = 1.0, *, fit_intercept: bool = True,
                 max_steps: int = 100):
        self.lam1, self.lam2 = float(check_lam(lam1, "lam1")), float(check_lam(lam2, "lam2"))
        self.support = tuple(int(j) for j in support)
        self.signs = tuple(float(s) for s in signs)
        self.n_features = int(n_features)
        self.off_curvature = float(off_curvature)
        if len(self.support) != len(self.signs):
            raise InvalidArgumentError("`support` and `signs` must have the same length")
        if self.support and not 0 <= min(self.support) <= max(self.support) < self.n_features:
            raise InvalidArgumentError(f"`support` must index the {self.n_features} features")
        self.fit_intercept = bool(fit_intercept)
        self.max_steps = int(max_steps)
        self.fit_result_ = None

    @staticmethod
    def loss(eta, y):
        """``1/2 (y - eta)^2``."""
        return 0.5 * (y - eta) ** 2

    def lam_vector(self):
        return weights_array((self.lam1, self.lam2))

    def with_lam(self, lam):
        lam = np.asarray(lam, dtype=np.float64).reshape(-1)
        new = self._copy()
        new.lam1, new.lam2 = float(lam[0]), float(lam[1])
        return new

    def _check_lam_length(self, p):
        if p != self.n_features:
            raise InvalidArgumentError(f"`X` has {p} features but the surrogate was built "
                                       f"for {self.n_features}")

    def _on_support(self) -> np.ndarray:
        """``(p,)`` 1 on the support, 0 elsewhere."""
        mask = np.zeros(self.n_features)
        mask[list(self.support)] = 1.0
        return mask

    def design(self, data):
        """``[X_S, 1]`` in the full layout: off-support columns are zero."""
        return design_matrix(data.X, self.fit_intercept, self._on_support())

    @property
    def penalty(self):
        """:func:`support_penalty`."""
        return support_penalty

    def penalty_aux(self):
        """``(s, on_S, c)`` ``(D,)`` each (:func:`support_penalty`)."""
        on = self._on_support()
        signs = np.zeros(self.n_features)
        signs[list(self.support)] = self.signs
        tail = np.zeros(int(self.fit_intercept))
        return (jnp.asarray(np.r_[signs, tail]), jnp.asarray(np.r_[on, tail]),
                jnp.asarray(np.r_[self.off_curvature * (1.0 - on), tail]))

    def __repr__(self) -> str:
        return (f"ElasticNetOnSupport(lam1={self.lam1!r}, lam2={self.lam2!r}, "
                f"support of size {len(self.support)} of {self.n_features})")
