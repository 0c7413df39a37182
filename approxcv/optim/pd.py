"""The one positive-definiteness policy: Cholesky with a recorded jitter ladder.

A Hessian that is not positive definite gets the smallest multiple of the identity on the
ladder ``1e-12, 1e-11, ..., 1e-2`` (relative to ``mean|diag H|``) that makes it so; the
jitter is recorded, never hidden. A matrix that needs any jitter — its smallest eigenvalue is
at most ``1e-14`` of its largest, i.e. it is indefinite or numerically singular — has no
meaningful solve along its null or negative directions: whatever is computed from such a
factor is *unreliable* and callers must list it as such (``diagnostics["unreliable_folds"]``),
not pass it off as an estimate. :func:`factor_hessian` is the dense NumPy version used once per run (it warns),
:func:`jittered_cholesky` the traceable one used per fold inside ``vmap``.
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import jax.numpy as jnp
import jax.scipy.linalg as jsl
import numpy as np
import scipy.linalg

from ..errors import user_stacklevel
from ..errors import JitterWarning, NotPositiveDefiniteError

#: largest number of parameters for which dense Hessians are formed by default (the
#: matrix-free path and L-BFGS take over above it): 3,000 x 3,000 doubles = 72 MB and an
#: eigen-decomposition of seconds
MAX_DENSE_DIM = 3000

#: jitter ladder, relative to the mean absolute diagonal of H
_JITTER_LADDER = 10.0 ** np.arange(-12, -1)

#: relative size (of ``mean|diag H|``) below which a Cholesky pivot counts as zero (the
#: rank-one downdates of :mod:`approxcv.engine.aloo`)
NEGLIGIBLE_JITTER = 1e-10


class HessianFactor(NamedTuple):
    """Cholesky factor of ``H + jitter * I`` and what it took to get it.

    chol: lower-triangular ``(D, D)``; jitter: added multiple of the identity (0 if none);
    min_eig, max_eig: extreme eigenvalues of ``H`` itself; condition_number: ``max/min``
    eigenvalue of ``H + jitter I``; reliable: no jitter was needed (solves with this factor
    are solves with ``H``).
    """
    chol: jnp.ndarray
    jitter: float
    min_eig: float
    max_eig: float
    condition_number: float
    reliable: bool = True


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
                JitterWarning, stacklevel=user_stacklevel())
    chol = np.linalg.cholesky(hess + jitter * np.eye(hess.shape[0]))
    cond = (max_eig + jitter) / (min_eig + jitter)
    return HessianFactor(jnp.asarray(chol), jitter, min_eig, max_eig, float(cond),
                         bool(jitter == 0.0))


def solve(factor: HessianFactor, rhs):
    """Return ``(H + jitter I)^{-1} rhs`` from the Cholesky factor; ``rhs`` is ``(D,)`` or
    ``(D, m)``. A NumPy ``rhs`` is solved in SciPy (no program to compile)."""
    if isinstance(rhs, np.ndarray):
        return scipy.linalg.cho_solve((np.asarray(factor.chol), True), rhs)
    return jsl.cho_solve((factor.chol, True), rhs)


def jittered_cholesky(hess):
    """Traceable :func:`factor_hessian`: ``(chol, jitter, min_eig, reliable)`` of ``hess``.

    The same ladder (``1e-12 .. 1e-2`` of ``mean|diag H|``, the smallest rung that makes
    ``H + jitter I`` positive definite); when no rung suffices the largest is used and
    ``reliable`` is False, as it is whenever any jitter was needed.
    For use inside ``jit``/``vmap`` (per-fold Newton steps), where nothing can be raised.
    """
    hess = 0.5 * (hess + hess.T)
    min_eig = jnp.linalg.eigvalsh(hess)[0]
    scale = jnp.mean(jnp.abs(jnp.diag(hess)))
    scale = jnp.where(scale > 0, scale, 1.0)
    ladder = jnp.asarray(_JITTER_LADDER, hess.dtype) * scale
    fits = min_eig + ladder > 1e-14 * scale
    needed = min_eig <= 1e-14 * jnp.abs(jnp.linalg.eigvalsh(hess)[-1])
    rung = jnp.where(jnp.any(fits), ladder[jnp.argmax(fits)], ladder[-1])
    jitter = jnp.where(needed, rung, 0.0)
    chol = jnp.linalg.cholesky(hess + jitter * jnp.eye(hess.shape[0], dtype=hess.dtype))
    reliable = (jitter == 0.0) & jnp.all(jnp.isfinite(chol))
    return chol, jitter, min_eig, reliable
