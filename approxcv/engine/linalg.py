"""Factorising the Hessian once, with recorded jitter when it is not positive definite."""
from __future__ import annotations

import warnings
from typing import NamedTuple

import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np

from ..errors import JitterWarning, NotPositiveDefiniteError

#: largest number of parameters for which dense Hessians are formed by default (the
#: matrix-free path and L-BFGS take over above it): 3,000 x 3,000 doubles = 72 MB and an
#: eigen-decomposition of seconds
MAX_DENSE_DIM = 3000

#: jitter ladder, relative to the mean absolute diagonal of H
_JITTER_LADDER = 10.0 ** np.arange(-12, -1)


class HessianFactor(NamedTuple):
    """Cholesky factor of ``H + jitter * I`` and what it took to get it.

    chol: lower-triangular ``(D, D)``; jitter: added multiple of the identity (0 if none);
    min_eig, max_eig: extreme eigenvalues of ``H`` itself; condition_number: ``max/min``
    eigenvalue of ``H + jitter I``.
    """
    chol: jnp.ndarray
    jitter: float
    min_eig: float
    max_eig: float
    condition_number: float


def factor_hessian(hess, name: str = "Hessian", warn: bool = True) -> HessianFactor:
    """Cholesky-factor ``hess``; add the smallest jitter on a 1e-12..1e-2 ladder (relative to
    the mean ``|diag H|``) that makes it positive definite, warn and record it.

    Raises:
        NotPositiveDefiniteError: ``hess`` is non-finite or no jitter on the ladder suffices.
    """
    hess = np.asarray(hess, dtype=np.float64)
    if not np.all(np.isfinite(hess)):
        raise NotPositiveDefiniteError(f"the {name} contains NaN or inf entries")
    hess = 0.5 * (hess + hess.T)
    eigs = np.linalg.eigvalsh(hess)
    min_eig, max_eig = float(eigs[0]), float(eigs[-1])
    scale = float(np.mean(np.abs(np.diag(hess)))) or 1.0
    jitter = 0.0
    if min_eig <= 1e-14 * max(abs(max_eig), 1e-300):
        for rel in _JITTER_LADDER:
            if min_eig + rel * scale > 1e-14 * scale:
                jitter = float(rel * scale)
                break
        else:
            raise NotPositiveDefiniteError(
                f"the {name} is not positive definite (smallest eigenvalue {min_eig:.3g}, "
                f"largest {max_eig:.3g}) and a jitter of up to 1e-2 x mean|diag| "
                f"({1e-2 * scale:.3g}) does not fix it; is the fit at a minimum?")
        if warn:
            warnings.warn(
                f"the {name} is not positive definite (smallest eigenvalue {min_eig:.3g}); "
                f"added jitter {jitter:.3g} x I (recorded in diagnostics['jitter'])",
                JitterWarning, stacklevel=3)
    chol = np.linalg.cholesky(hess + jitter * np.eye(hess.shape[0]))
    cond = (max_eig + jitter) / (min_eig + jitter)
    return HessianFactor(jnp.asarray(chol), jitter, min_eig, max_eig, float(cond))


def solve(factor: HessianFactor, rhs):
    """Return ``(H + jitter I)^{-1} rhs`` from the Cholesky factor; ``rhs`` is ``(D,)`` or ``(D, m)``."""
    return jsl.cho_solve((factor.chol, True), rhs)
