"""Conditional log-probabilities of a binary pairwise MRF by summing out small node sets.

Pure kernels on couplings, biases and one binary sample (no model objects). For the energy
(seed eq. 29, with optional biases)

    E(x) = sum_{i<j} theta_ij x_i x_j + sum_i b_i x_i,     x in {0, 1}^m,

setting a node set ``S`` free in a sample ``x`` changes the energy to
``E(x^{S<-v}) = E(x^{S<-0}) + v . h_S + sum_{a<b in S} theta_{S_a S_b} v_a v_b`` with the local
field ``h_S = W[S] x^{S<-0} + b_S`` (``W`` the symmetric coupling matrix), so the log-sum
over the ``2^|S|`` configurations of ``S``::

    L_S(x) = log sum_{v in {0,1}^S} exp E(x^{S<-v})

costs ``O(|S| m + 2^|S| |S|^2)``, never ``2^m``. A likelihood object (seed Definition 1,
eq. 25) with ``C = (A u B)^c`` is then

    S(A, B) = log p(x_A | x_B) = L_C(x) - L_{A u C}(x)             (B non-empty)
    S(A, {}) = log p(x_A)       = L_C(x) - log Z                    (B empty)

with ``L_{}(x) = E(x)`` and ``log Z = log sum_x exp E(x)`` by enumerating all ``2^m`` states
(:func:`log_partition`). :func:`free_log_sum` returns ``L_S(x) - E(x)``: the observed
``x_S`` is one of the configurations, ``E(x) = E(x^{S<-0}) + x_S . h_S + quad(x_S)``, so the
clamped energy is never formed and a component costs ``O(|S| m)`` (PL1 on all ``m`` nodes:
``O(m^2)`` per sample, like one energy), and ``E(x)`` cancels from conditionals.
"""
from __future__ import annotations

import itertools

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

__all__ = ["all_states", "energy", "log_partition", "free_log_sum", "coupling_matrix"]


def all_states(m: int) -> np.ndarray:
    """The ``2^m`` binary states as a ``(2^m, m)`` float array, state ``s`` = bits of ``s``
    with node 0 the most significant."""
    if m == 0:
        return np.zeros((1, 0))
    return np.array(list(itertools.product((0.0, 1.0), repeat=m)))


def coupling_matrix(couplings, m: int):
    """Symmetric ``(m, m)`` ``W`` with ``W_ij = W_ji = theta_ij`` (pairs ``i < j`` in
    lexicographic order in ``couplings``) and a zero diagonal."""
    iu = np.triu_indices(m, 1)
    upper = jnp.zeros((m, m), couplings.dtype).at[iu].set(couplings)
    return upper + upper.T


def energy(weights, biases, x):
    """``E(x) = sum_{i<j} W_ij x_i x_j + b . x`` for ``x (..., m)``: shape ``(...)``."""
    return 0.5 * jnp.einsum("...i,ij,...j->...", x, weights, x) + x @ biases


def log_partition(weights, biases):
    """``log Z = log sum_{x in {0,1}^m} exp E(x)`` by enumeration (``m <= 20``)."""
    states = jnp.asarray(all_states(weights.shape[0]))
    return logsumexp(energy(weights, biases, states))


def free_log_sum(weights, biases, x, free, configs):
    """``L_S(x) - E(x) = log sum_v exp(E(x^{S<-v}) - E(x))`` for the node set ``S = free``
    (module docstring).

    Args:
        weights: ``(m, m)`` symmetric couplings; biases: ``(m,)``.
        x: one binary sample ``(m,)``.
        free: ``(f,)`` integer node indices ``S`` (static length; ``f = 0`` gives 0).
        configs: ``(2^f, f)`` all binary configurations of ``S`` (:func:`all_states`).
    """
    if free.shape[0] == 0:
        return jnp.zeros((), x.dtype)
    observed = x[free]
    field = weights[free] @ x.at[free].set(0.0) + biases[free]
    inner = jnp.triu(weights[free][:, free], 1)
    local = configs @ field + jnp.einsum("sa,ab,sb->s", configs, inner, configs)
    return logsumexp(local) - (observed @ field + observed @ inner @ observed)
