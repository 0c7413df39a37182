"""Affine-invariant refits: optimise in coordinates whitened by the Hessian at the fit.

A quasi-Newton run started with the identity as its inverse-Hessian guess, stopped by
gradient and step tests in the max norm, depends on the units of the parameters: the
same model on ``x`` and on ``x / 100`` reaches different refits. Optimising instead in

    v = L^T (u - u_1),   u = u_1 + L^{-T} v,   L L^T = H / scale,

(``H`` the full-data Hessian at the fit ``u_1``, ``scale`` the objective's normaliser)
makes the whole run — BFGS directions, line search, Cauchy and gradient tests, Newton
polish — invariant to ``u -> A u + b`` for any invertible diagonal ``A`` (a change of
units) and any ``b`` when ``H`` is positive definite: the Cholesky factor of
``A^{-1} H A^{-1}`` (the Hessian in the new units) is ``|A|^{-1} L`` up to signs, so ``v``
is unchanged up to the signs of its coordinates. The
scaled objective ``F / scale`` has Hessian ``I`` at ``v = 0``, so BFGS's first step is
the Newton step of the full data, and its gradient stop reads the gradient in the
metric of ``H / scale`` (``||L^{-1} g||``) instead of the Euclidean one.

``H`` not positive definite (the supplied parameters are not a minimum): its eigenvalues
are replaced by ``max(|lambda|, PRECONDITION_EIG_FLOOR * max|lambda|)`` (the number
changed is recorded); non-finite ``H``: no preconditioner (the identity, as before).
"""
from __future__ import annotations

import functools
from typing import NamedTuple

import numpy as np
import scipy.linalg

__all__ = ["Preconditioner", "hessian_preconditioner", "preconditioned",
           "PRECONDITION_EIG_FLOOR"]

#: eigenvalues of H below this fraction of the largest |eigenvalue| are raised to it (and
#: negative ones flipped) before H is used as a metric: the whitened problem is then
#: conditioned no worse than 1e8
PRECONDITION_EIG_FLOOR = 1e-8


class Preconditioner(NamedTuple):
    """``u = shift + v @ matrix.T``, ``v = (u - shift) @ factor``.

    shift: ``u_1 (D,)``; factor: ``L (D, D)`` lower triangular, ``L L^T = H / scale``
    (repaired); matrix: ``L^{-T} (D, D)``; floored: eigenvalues of ``H`` changed by the
    repair (0: ``H`` was used as it is).
    """
    shift: np.ndarray
    factor: np.ndarray
    matrix: np.ndarray
    floored: int

    def to_whitened(self, u):
        """``v (..., D)`` of ``u (..., D)``."""
        return (np.asarray(u) - self.shift) @ self.factor

    def from_whitened(self, v):
        """``u (..., D)`` of ``v (..., D)``."""
        return self.shift + np.asarray(v) @ self.matrix.T


def hessian_preconditioner(hess, u_1, scale: float) -> Preconditioner | None:
    """The :class:`Preconditioner` of the dense Hessian ``hess (D, D)`` at ``u_1``, or
    ``None`` when ``hess`` is not finite or zero (module docstring)."""
    hess = np.asarray(hess, np.float64)
    if not np.all(np.isfinite(hess)):
        return None
    hess = 0.5 * (hess + hess.T) / float(scale)
    eigs, vecs = np.linalg.eigh(hess)
    top = float(np.max(np.abs(eigs))) if eigs.size else 0.0
    if top == 0.0:
        return None
    floor = PRECONDITION_EIG_FLOOR * top
    low = eigs < floor
    if low.any():
        hess = (vecs * np.maximum(np.abs(eigs), floor)) @ vecs.T
        hess = 0.5 * (hess + hess.T)
    factor = np.linalg.cholesky(hess)
    matrix = scipy.linalg.solve_triangular(factor, np.eye(len(hess)), lower=True).T
    return Preconditioner(np.asarray(u_1, np.float64), factor, matrix, int(low.sum()))


@functools.lru_cache(maxsize=64)
def preconditioned(fun):
    """``fun(u, w, data)`` as a function of whitened coordinates:
    ``g(v, w, (data, shift, matrix)) = fun(shift + matrix @ v, w, data)``. Cached per
    ``fun``, so the optimisers built on it compile once per objective."""
    def whitened(v, w, args):
        data, shift, matrix = args
        return fun(shift + matrix @ v, w, data)
    return whitened
