"""Expected occupancy of the states of a fitted HMM, and a warning for (almost) empty states.

A MAP fit can park a state where it explains nothing: with a prior that rewards a small
variance, an empty state (or one sitting on a single observation) can beat a sensible fit.
:func:`check_occupancy` runs after every HMM fit, records the expected number of observed
steps of each state and warns (:class:`~approxcv.errors.EmptyStateWarning`) about a state
whose count is below :func:`min_occupancy`.
"""
from __future__ import annotations

import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np

from ...errors import user_stacklevel
from ...errors import EmptyStateWarning
from ...inference import chain
from ..._runtime import jit


@functools.partial(jit, static_argnums=0)
def _occupancy(model, params, seqs):
    def one(x, mask):
        post = chain.posterior_marginals(*model.log_potentials(params, x, mask))
        return jnp.sum(jnp.exp(post.log_smoothed_probs) * mask[:, None], axis=0)
    return jnp.sum(jax.vmap(one)(seqs.x, seqs.mask), axis=0)


def state_occupancy(model, params, seqs) -> np.ndarray:
    """``(K,)`` expected observed steps per state: ``sum_i sum_t mask_it p(z_it = k | x_i)``,
    posterior marginals of every sequence under ``params`` (forward-backward; one compiled
    program per model configuration and data shape)."""
    params = type(params)(*[jnp.asarray(p, jnp.float64) for p in params])
    return np.asarray(_occupancy(model, params, seqs))


def min_occupancy(num_observed: float) -> float:
    """Expected count below which a state is (almost) empty: ``max(2, 0.001 N)`` for ``N``
    observed steps — fewer than two observations cannot support a variance, and a state
    holding under 0.1 % of the data explains nothing a prior could not."""
    return max(2.0, 1e-3 * float(num_observed))


def check_occupancy(model, params, seqs, occupancy=None):
    """Record ``state_occupancy`` (or the given ``occupancy (K,)``, e.g. from the fit's last
    E-step at ``params``) in ``model.fit_result_["state_occupancy"]`` and warn with
    :class:`~approxcv.errors.EmptyStateWarning` naming every state under
    :func:`min_occupancy`; returns ``params`` unchanged."""
    if occupancy is None:
        occupancy = state_occupancy(model, params, seqs)
    num_observed = float(np.sum(np.asarray(seqs.mask)))
    threshold = min_occupancy(num_observed)
    if model.fit_result_ is not None:
        model.fit_result_["state_occupancy"] = occupancy
    empty = np.flatnonzero(occupancy < threshold)
    if empty.size:
        one = empty.size == 1
        warnings.warn(
            f"{type(model).__name__}.fit: state{'' if one else 's'} "
            f"{', '.join(str(k) for k in empty)} carr{'ies' if one else 'y'} (almost) no "
            f"data: {', '.join(f'{occupancy[k]:.3g}' for k in empty)} expected observed "
            f"step(s) of {num_observed:.0f} (threshold {threshold:.3g}), an empty or "
            "collapsed state; try fewer states or other starts (n_init, seed)",
            EmptyStateWarning, stacklevel=user_stacklevel())
    return params
