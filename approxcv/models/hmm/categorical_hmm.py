"""Hidden Markov model with categorical emissions.

``x_t | z_t = k ~ Categorical(B_k)`` with ``B_k ~ Dirichlet(emission_concentration)``;
unconstrained by ``V - 1`` logits per state.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..._validate import check_positive, check_positive_int
from ...errors import InvalidDataError
from .._transforms import dirichlet_log_prior, dirichlet_map
from .. import constraints as C
from .base import HMM, as_column_vector, check_array


class CategoricalHMMParams(NamedTuple):
    """initial_probs (K,), transition_matrix (K, K), emission_probs (K, V)."""
    initial_probs: jax.Array
    transition_matrix: jax.Array
    emission_probs: jax.Array


class CategoricalHMM(HMM):
    """Categorical HMM. Data: ``(T,)`` integers in ``[0, n_symbols)``, or a list of them."""
    params_type = CategoricalHMMParams
    numeric_hyperparameters = HMM.numeric_hyperparameters + ("emission_concentration",)

    def __init__(self, n_states: int, n_symbols: int, *, emission_concentration: float = 1.1,
                 **kwargs):
        super().__init__(n_states, **kwargs)
        self.n_symbols = check_positive_int("n_symbols", n_symbols, 2)
        self.emission_concentration = check_positive("emission_concentration",
                                                     emission_concentration)

    def __repr__(self):
        return f"CategoricalHMM(n_states={self.n_states}, n_symbols={self.n_symbols})"

    def _validate_sequence(self, x, name):
        """Symbols ``(T,)``; a column ``(T, 1)`` (hmmlearn's layout) is read as ``(T,)``."""
        arr = check_array(as_column_vector(x, name), name, 1, "i")
        if arr.dtype.kind == "f" and np.any(arr != np.round(arr)):
            raise InvalidDataError(f"`{name}` must hold integer symbols")
        if np.any(arr < 0) or np.any(arr >= self.n_symbols):
            raise InvalidDataError(
                f"`{name}` holds symbols outside [0, {self.n_symbols}): "
                f"min {arr.min()}, max {arr.max()}")
        return arr.astype(np.int32)

    #: one observation per emission row (windows of the series: HMM.supports_windows)
    rowwise_emissions = True

    def _emission_log_lik(self, params, x):
        """``log B[k, x_t]``, shape ``(T, K)``."""
        return jnp.log(params.emission_probs)[:, x].T

    def _emission_log_prior(self, params):
        return dirichlet_log_prior(jnp.log(params.emission_probs), self.emission_concentration)

    def _emission_constraints(self):
        return (C.Simplex(),)

    def closed_form_m_step(self) -> bool:
        return True

    def _emission_m_step(self, params, r, x, data):
        """``B[k, v] ∝ sum_t r_tk [x_t = v] + alpha - 1`` (Dirichlet MAP)."""
        counts = r.T @ jax.nn.one_hot(x, self.n_symbols, dtype=r.dtype)
        return params._replace(emission_probs=dirichlet_map(counts,
                                                            self.emission_concentration))

    def _state_emission_means(self, params):
        """``B (K, V)``: the mean of the one-hot encoding of ``x`` given each state, so a
        forecast's ``mean`` is the predictive probability of each symbol."""
        return params.emission_probs

    def _sample_emissions(self, params, z, key):
        """``x_t ~ Categorical(B_{z_t})``, ``(T,)`` ints."""
        return jax.random.categorical(key, jnp.log(params.emission_probs)[z], axis=-1)

    def _initial_emissions(self, x, rng, i):
        """Empirical symbol frequencies perturbed by Dirichlet noise, one row per state."""
        freq = np.bincount(x.astype(int), minlength=self.n_symbols) + 1.0
        freq = freq / freq.sum()
        return (rng.dirichlet(50.0 * freq * self.n_symbols, size=self.n_states),)
