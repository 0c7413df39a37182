"""The generic per-fold Newton step ``u_NS(w_o) = u_1 - H(w_o)^{-1} grad F(u_1, w_o)``.

Dense ``H(w_o)`` per fold, factored with the recorded jitter ladder of
:mod:`approxcv.optim.pd`, batched over folds with ``lax.map``; each fold also gets its chord
steps (:func:`approxcv.engine.chord.chord_step`). Used by the ``ns`` method and by the GLM
fast path for the folds whose rank-one downdates fail.
"""
from __future__ import annotations

from functools import partial

import jax

from ..optim.hessian import hessian_by_hvp
from ..optim.pd import jittered_cholesky
from .batching import fold_weights
from .._batched_map import map_in_batches
from .chord import chord_step
from .derivatives import gradient
from .._compile import jit

__all__ = ["newton_step", "newton_params"]


def newton_step(fun, u, w, data):
    """``(u - H(w)^{-1} g(w), min_eig, jitter, reliable, d, rho)`` for one weight vector
    ``w``; ``(correction, rho)``: chord steps from the Newton point with the same factor
    (:func:`~approxcv.engine.chord.chord_step`)."""
    g = gradient(fun, u, w, data)
    chol, jitter, min_eig, reliable = jittered_cholesky(hessian_by_hvp(fun, u, w, data))
    u_ns = u - jax.scipy.linalg.cho_solve((chol, True), g)
    d, rho = chord_step(fun, chol, u_ns, w, data)
    return u_ns, min_eig, jitter, reliable, d, rho


@partial(jit, static_argnums=(0, 4, 5))
def newton_params(fun, u_full, index, data, n: int, batch_size: int = 16):
    """Newton-step parameters of every fold (``index``: ``(n_folds, m)`` padded left-out
    indices): ``(params (n_folds, D), min_eig, jitter, reliable, chord_step, chord_rate)``,
    each per fold."""
    return map_in_batches(lambda idx: newton_step(fun, u_full, fold_weights(idx, n), data),
                          index, batch_size)
