"""Boltzmann machine with exact small conditionals (seed eq. 29, §3.1 and §8.1).

    p_theta(x) = exp(sum_{i<j} theta_ij x_i x_j [+ sum_i b_i x_i] - log psi(theta)),
    x in {0, 1}^m,

parameters one flat vector: the couplings ``theta_ij`` for ``i < j`` in lexicographic pair
order ``(0,1), (0,2), ..., (m-2,m-1)``, then the ``m`` biases when ``biases=True``. The
normaliser ``psi`` is computed by enumerating the ``2^m`` states (``m <= 20``); likelihood
objects ``log p(x_A | x_B)`` sum out only ``A`` and ``C = (A u B)^c``
(:mod:`approxcv.composite.binary_conditional`).

Data: an ``(n, m)`` array of 0/1 samples. As a component model it tells a
:class:`~approxcv.composite.SCLModel` its components (:meth:`full_components`,
:meth:`pseudo_components`, :meth:`check_items`), evaluates stacks of same-shaped
components for every sample (:meth:`stack_log_probs`), checks that the selected components
reach every parameter (:meth:`unidentified`) and counts their FLOPs
(:meth:`component_flops`).
"""
from __future__ import annotations

import functools
import itertools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .._runtime import jit
from .._validate import as_real_array, check_positive_int
from ..errors import ArgumentTypeError, InvalidArgumentError, InvalidDataError
from . import binary_conditional as bc

__all__ = ["BoltzmannMachine", "Stack", "MAX_ENUMERATION_NODES"]

#: most nodes whose ``2^m`` states are enumerated (the normaliser, held-out losses, sampling)
MAX_ENUMERATION_NODES = 20


class Stack(NamedTuple):
    """Components of one shape, evaluated together: ``index`` (their positions in the
    policy's component list), ``free`` ``(c, |A|+|C|)`` nodes summed out by the
    denominator (``A`` first), ``marginal`` ``(c, |C|)`` nodes summed out by the numerator,
    ``conditioned``: ``B`` is non-empty (else the denominator is ``log Z``)."""
    index: tuple
    free: tuple
    marginal: tuple
    conditioned: bool


class BoltzmannMachine:
    """Fully connected Boltzmann machine on ``n_nodes`` binary nodes (module docstring).

    Args:
        n_nodes: ``m``, between 2 and :data:`MAX_ENUMERATION_NODES`.
        biases: also a bias ``b_i`` per node.

    Raises:
        InvalidArgumentError: ``n_nodes`` above 20 (the ``2^m`` enumeration).

    Example:
        >>> import numpy as np, approxcv.composite as scl
        >>> bm = scl.BoltzmannMachine(5)
        >>> X = bm.sample(np.r_[-np.ones(5), np.ones(5)], 200, seed=0)
        >>> fit = scl.fit(bm, X, scl.Policy([scl.pseudo_likelihood(bm, 1)]))
    """

    def __init__(self, n_nodes: int, biases: bool = False):
        self.n_nodes = check_positive_int("n_nodes", n_nodes, 2)
        if self.n_nodes > MAX_ENUMERATION_NODES:
            raise InvalidArgumentError(
                f"`n_nodes` = {n_nodes} is too large for enumeration: the normaliser sums "
                f"2^{n_nodes} states; at most m = {MAX_ENUMERATION_NODES} is supported")
        self.biases = bool(biases)

    # ------------------------------------------------------------ identity
    def _key(self):
        return (self.n_nodes, self.biases)

    def __eq__(self, other):
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self):
        return hash((type(self), self._key()))

    def __repr__(self):
        return f"BoltzmannMachine(n_nodes={self.n_nodes}, biases={self.biases})"

    # ---------------------------------------------------------- parameters
    @property
    def pairs(self) -> tuple:
        """The coupled pairs ``(i, j)``, ``i < j``, in parameter order."""
        return tuple(itertools.combinations(range(self.n_nodes), 2))

    @property
    def n_params(self) -> int:
        return len(self.pairs) + (self.n_nodes if self.biases else 0)

    def param_names(self) -> list:
        names = [f"theta_{i}{j}" if self.n_nodes <= 10 else f"theta_{i},{j}"
                 for i, j in self.pairs]
        return names + ([f"b_{i}" for i in range(self.n_nodes)] if self.biases else [])

    def split(self, theta):
        """``(W (m, m) symmetric couplings, b (m,))`` of the flat ``theta``."""
        m, d = self.n_nodes, len(self.pairs)
        theta = jnp.asarray(theta, dtype=jnp.float64)
        weights = bc.coupling_matrix(theta[:d], m)
        biases = theta[d:] if self.biases else jnp.zeros(m, theta.dtype)
        return weights, biases

    def check_theta(self, theta, name: str = "params") -> np.ndarray:
        theta = np.asarray(theta, dtype=np.float64)
        if theta.shape != (self.n_params,):
            raise InvalidArgumentError(f"`{name}` must be a flat vector of {self.n_params} "
                                       f"parameters for {self!r}, got shape {theta.shape}")
        if not np.all(np.isfinite(theta)):
            raise InvalidArgumentError(f"`{name}` has NaN or inf entries")
        return theta

    # ---------------------------------------------------------------- data
    def prepare_samples(self, X) -> jnp.ndarray:
        """``X`` as a float ``(n, m)`` 0/1 array.

        Raises:
            InvalidDataError: not 2-D, ``m`` columns other than ``n_nodes``, or entries
                other than 0 and 1.
        """
        X = as_real_array("X", X)
        if X.ndim != 2 or X.shape[1] != self.n_nodes:
            raise InvalidDataError(f"`X` must be an (n, {self.n_nodes}) array (one column per "
                                   f"node), got shape {X.shape}")
        if X.shape[0] < 2:
            raise InvalidDataError(f"`X` needs at least 2 samples, got {X.shape[0]}")
        if not np.all((X == 0) | (X == 1)):
            bad = X[(X != 0) & (X != 1)]
            raise InvalidDataError(f"`X` must be binary (0/1 entries); it has {bad.size} other "
                                   f"values, e.g. {bad.flat[0]!r}")
        return jnp.asarray(X, dtype=jnp.float64)

    # ---------------------------------------------------------- components
    def full_components(self) -> tuple:
        return ((tuple(range(self.n_nodes)), ()),)

    def pseudo_components(self, order: int) -> tuple:
        order = check_positive_int("order", order, 1)
        if order > self.n_nodes:
            raise InvalidArgumentError(f"`order` must be at most n_nodes = {self.n_nodes}, "
                                       f"got {order}")
        nodes = range(self.n_nodes)
        return tuple((a, tuple(i for i in nodes if i not in a))
                     for a in itertools.combinations(nodes, order))

    def check_items(self, items) -> tuple:
        """``items`` as a tuple of ``(A, B)`` sorted node tuples.

        Raises:
            InvalidArgumentError: an empty ``A``, ``A`` and ``B`` sharing a node, a node
                outside ``[0, n_nodes)``, a repeated node or an empty list.
        """
        out = []
        if not isinstance(items, (list, tuple)) or len(items) == 0:
            raise InvalidArgumentError("components must be a non-empty list of (A, B) pairs")
        for j, item in enumerate(items):
            if not isinstance(item, (list, tuple)) or len(item) != 2:
                raise ArgumentTypeError(f"component {j} must be a pair (A, B) of node lists, "
                                        f"got {item!r}")
            a, b = (tuple(sorted(int(i) for i in np.atleast_1d(s))) for s in item)
            if not a:
                raise InvalidArgumentError(f"component {j}: A is empty (an m-pair needs A "
                                           "non-empty, seed Definition 1)")
            for s, name in ((a, "A"), (b, "B")):
                if len(set(s)) != len(s) or any(i < 0 or i >= self.n_nodes for i in s):
                    raise InvalidArgumentError(f"component {j}: {name} = {s} must hold distinct "
                                               f"nodes in [0, {self.n_nodes})")
            if set(a) & set(b):
                raise InvalidArgumentError(f"component {j}: A = {a} and B = {b} share nodes "
                                           f"{sorted(set(a) & set(b))}")
            out.append((a, b))
        return tuple(out)

    def stacks(self, items) -> tuple:
        """Components grouped by shape ``(|A|, |C|, B non-empty)`` into :class:`Stack` s."""
        shapes = {}
        for j, (a, b) in enumerate(items):
            c = tuple(i for i in range(self.n_nodes) if i not in a and i not in b)
            shapes.setdefault((len(a), len(c), bool(b)), []).append((j, a + c, c))
        return tuple(Stack(tuple(j for j, _, _ in rows), tuple(f for _, f, _ in rows),
                           tuple(c for _, _, c in rows), key[2])
                     for key, rows in sorted(shapes.items()))

    def stack_log_probs(self, theta, samples, stack: Stack):
        """``S_ij = log p(x^(i)_{A_j} | x^(i)_{B_j})`` for the stack's components, ``(n, c)``."""
        weights, biases = self.split(theta)
        free = jnp.asarray(np.array(stack.free, dtype=np.int32))
        marg = jnp.asarray(np.array(stack.marginal, dtype=np.int32).reshape(len(stack.free), -1))
        cfg_free = jnp.asarray(bc.all_states(free.shape[1]))
        cfg_marg = jnp.asarray(bc.all_states(marg.shape[1]))

        def one(x):
            """``L_C - L_{A u C}`` (conditioned) or ``L_C - E(x)`` per component."""
            num = jax.vmap(lambda c: bc.free_log_sum(weights, biases, x, c, cfg_marg))(marg)
            if not stack.conditioned:
                return num
            den = jax.vmap(lambda f: bc.free_log_sum(weights, biases, x, f, cfg_free))(free)
            return num - den

        out = jax.vmap(one)(samples)
        if not stack.conditioned:
            out = out + (bc.energy(weights, biases, samples)
                         - bc.log_partition(weights, biases))[:, None]
        return out

    def unidentified(self, items) -> list:
        """Names of parameters no component in ``items`` depends on: a coupling ``(i, j)``
        (bias ``i``) enters ``log p(x_A | x_B)`` only if ``i`` or ``j`` (``i``) lies in
        ``A u C``, the nodes the component sums over."""
        reach = set()
        for a, b in items:
            reach |= set(range(self.n_nodes)) - set(b)
        names = self.param_names()
        out = [names[k] for k, (i, j) in enumerate(self.pairs) if i not in reach and j not in reach]
        if self.biases:
            out += [f"b_{i}" for i in range(self.n_nodes) if i not in reach]
        return out

    def component_flops(self, item, samples=None) -> float:
        """FLOPs of one component's value and gradient on one sample (the counting rule).

        Each configuration summed over costs one multiply-add per energy term for the
        energy and one for its gradient: ``4 T (2^{|A u C|} + 2^{|C|})`` with ``T`` the
        number of energy terms (pairs and biases), as in the seed's §3.1 orders
        ``O(C(m,2) 2^k)`` per order-``k`` component and ``O(C(m,2) 2^m)`` for the full
        likelihood. The normaliser is charged per sample, as the seed's Figure 1 does (an
        implementation may share the full likelihood's over samples; ours does).
        """
        a, b = item
        c = self.n_nodes - len(a) - len(b)
        return 4.0 * self.n_params * (2.0 ** (len(a) + c) + 2.0 ** c)

    # ----------------------------------------------------------- likelihood
    def log_prob(self, params, X):
        """``log p_theta(x)`` of every row of ``X (n, m)``, by enumeration, ``(n,)``."""
        theta = jnp.asarray(self.check_theta(params))
        return _log_prob(self, theta, self.prepare_samples(X))

    def log_prob_samples(self, theta, samples):
        """``log p_theta(x)`` of prepared samples (traceable)."""
        weights, biases = self.split(theta)
        return bc.energy(weights, biases, samples) - bc.log_partition(weights, biases)

    def state_probabilities(self, params):
        """``(states (2^m, m), p (2^m,))``: every state and its probability."""
        theta = jnp.asarray(self.check_theta(params))
        states = bc.all_states(self.n_nodes)
        return states, np.exp(_log_prob(self, theta, jnp.asarray(states)))

    def sample(self, params, n: int, seed: int = 0) -> np.ndarray:
        """``n`` exact draws ``(n, m)`` (0/1 floats) from ``p_theta`` by enumeration."""
        n = check_positive_int("n", n, 1)
        states, p = self.state_probabilities(params)
        rng = np.random.default_rng(seed)
        return states[rng.choice(len(p), size=n, p=p / p.sum())]

    def zero_params(self, samples) -> np.ndarray:
        return np.zeros(self.n_params)


def _log_prob(model, theta, samples):
    return np.asarray(_log_prob_jit(model, theta, samples))


@functools.partial(jit, static_argnums=0)
def _log_prob_jit(model, theta, samples):
    return model.log_prob_samples(theta, samples)
