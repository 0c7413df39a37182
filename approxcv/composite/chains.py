"""Chain models with exact small conditionals (seed §8.3): the generative Boltzmann chain
(Figure 8) and the linear-chain CRF's composite components, as component models of
:class:`~approxcv.composite.SCLModel`.

Their components are whole-sentence sums over positions, one per group: ``("full",)``
(the full likelihood, by the forward algorithm of :mod:`approxcv.inference.crf`) and
``("window", k)`` (every window of ``k`` positions conditioned on its neighbours,
:mod:`approxcv.composite.chain_windows`). Data: a list of sentences, padded into one array.

* :class:`BoltzmannChain` ``(n_labels K, vocab_size V)``: tokens ``x_t`` and labels ``y_t``,
  ``p(x, y) = exp(start[y_1] + sum_t A[y_{t-1}, y_t] + sum_t B[y_t, x_t]) / Z_T`` with
  ``Z_T = sum_{y, x} exp(...)`` over all sentences of the same length (summing the tokens
  out leaves ``log sum_v exp B[k, v]`` as each position's label score). A constant added to
  all of ``start``, ``A`` or ``B`` leaves ``p`` unchanged, so ``start[0] = A[0, 0] =
  B[0, 0] = 0`` are fixed (not parameters). Data: ``(tokens (T,), labels (T,))`` pairs.
* :class:`CRFComponents` ``(crf)``: ``p(y | x)`` of a
  :class:`~approxcv.models.LinearChainCRF` (its scores, without its prior; the SCL fit's
  ``prior_var`` plays that part), windows ``P(y_W | y_{t-1}, y_{t+k}, x)``. Data:
  ``(features (T, F), labels (T,))`` pairs.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.scipy.special import logsumexp

from .._validate import check_positive_int
from ..errors import ArgumentTypeError, InvalidArgumentError, InvalidDataError
from ..inference import crf as crf_kernels
from .chain_windows import label_configs, window_log_prob_sum
from ..models.crf.linear_chain import LinearChainCRFParams

__all__ = ["BoltzmannChain", "CRFComponents", "ChainSamples"]


class ChainSamples(NamedTuple):
    """Padded sentences: ``obs`` (``(N, T)`` tokens or ``(N, T, F)`` features), ``labels
    (N, T)``, ``mask (N, T)``."""
    obs: jax.Array
    labels: jax.Array
    mask: jax.Array

    @property
    def num_samples(self) -> int:
        return int(self.labels.shape[0])


class ChainStack(NamedTuple):
    """One component: ``index`` (its position in the policy, a 1-tuple) and ``item``."""
    index: tuple
    item: tuple


class _Chain:
    """Shared parts of the chain component models (subclasses give ``scores``)."""

    def __eq__(self, other):
        return type(self) is type(other) and self._key() == other._key()

    def __hash__(self):
        return hash((type(self), self._key()))

    # ---------------------------------------------------------- components
    def full_components(self) -> tuple:
        return (("full",),)

    def pseudo_components(self, order: int) -> tuple:
        return (("window", check_positive_int("order", order, 1)),)

    def check_items(self, items) -> tuple:
        out = []
        for item in items:
            item = tuple(item)
            if item == ("full",) or (len(item) == 2 and item[0] == "window"
                                     and isinstance(item[1], int) and 1 <= item[1] <= 3):
                out.append(item)
            else:
                raise InvalidArgumentError(f"a chain component must be ('full',) or ('window', "
                                           f"k) with 1 <= k <= 3, got {item!r}")
        return tuple(out)

    def stacks(self, items) -> tuple:
        return tuple(ChainStack((j,), item) for j, item in enumerate(items))

    def unidentified(self, items) -> list:
        """Every window and the full likelihood reach every parameter."""
        return []

    def stack_log_probs(self, theta, samples, stack):
        """``(n, 1)``: the stack's one component summed over each sentence's positions."""
        item = stack.item
        emit, emit_all, trans, start, stop = self.scores(theta, samples)
        if item[0] == "full":
            score = jax.vmap(crf_kernels.path_score, (0, None, None, None, 0, 0))(
                emit, trans, start, stop, samples.mask, samples.labels)
            log_z = jax.vmap(crf_kernels.log_partition, (0, None, None, None, 0))(
                emit_all, trans, start, stop, samples.mask)
            return (score - log_z)[:, None]
        configs = jnp.asarray(label_configs(self.n_labels, item[1]))
        out = jax.vmap(window_log_prob_sum, (0, 0, None, None, None, 0, 0, None))(
            emit, emit_all, trans, start, stop, samples.mask, samples.labels, configs)
        return out[:, None]

    def log_prob_samples(self, theta, samples):
        """Full log-likelihood of every sentence, ``(n,)``."""
        return self.stack_log_probs(theta, samples, ChainStack((0,), ("full",)))[:, 0]

    def component_flops(self, item, samples=None) -> float:
        """FLOPs of a component's value and gradient on one sentence of the mean length ``T``
        of ``samples`` (1 without)
        (the counting rule): each labelling summed over costs one multiply-add per score
        term and one for the gradient, ``4 (k + 1) K^k`` per window of order ``k`` (its
        ``K^k`` labellings, ``k`` emissions and ``k + 1`` transitions, roughly) times
        ``T`` windows; the forward algorithm ``4 T K^2``. Emission partitions of the
        Boltzmann chain add ``4 K V`` per sentence."""
        t = 1.0 if samples is None else float(np.mean(np.sum(np.asarray(samples.mask), 1)))
        k = self.n_labels
        extra = 4.0 * k * getattr(self, "vocab_size", 0)
        if item[0] == "full":
            return 4.0 * t * k * k + extra
        order = item[1]
        return 4.0 * t * (2 * order + 1) * k ** order + extra

    def _pad(self, sentences, obs_of):
        if not isinstance(sentences, (list, tuple)) or len(sentences) < 2:
            raise InvalidDataError("`X` must be a list of at least 2 sentences")
        lengths = [len(s[1]) for s in sentences]
        if min(lengths) < 1:
            raise InvalidDataError("`X` has an empty sentence")
        t_max, n = max(lengths), len(sentences)
        labels = np.zeros((n, t_max), dtype=np.int32)
        mask = np.zeros((n, t_max))
        obs = []
        for i, (x, y) in enumerate(sentences):
            y = np.asarray(y)
            if y.min() < 0 or y.max() >= self.n_labels:
                raise InvalidDataError(f"sentence {i}: labels must lie in [0, {self.n_labels})")
            labels[i, :len(y)] = y
            mask[i, :len(y)] = 1
            obs.append(obs_of(i, x, len(y), t_max))
        return ChainSamples(jnp.asarray(np.stack(obs)), jnp.asarray(labels), jnp.asarray(mask))


class BoltzmannChain(_Chain):
    """Generative Boltzmann chain over tokens and labels (module docstring).

    Args:
        n_labels: ``K >= 2``; vocab_size: ``V >= 2`` (tokens are integers in ``[0, V)``).
    """

    def __init__(self, n_labels: int, vocab_size: int):
        self.n_labels = check_positive_int("n_labels", n_labels, 2)
        self.vocab_size = check_positive_int("vocab_size", vocab_size, 2)

    def _key(self):
        return (self.n_labels, self.vocab_size)

    def __repr__(self):
        return f"BoltzmannChain(n_labels={self.n_labels}, vocab_size={self.vocab_size})"

    @property
    def n_params(self) -> int:
        k, v = self.n_labels, self.vocab_size
        return (k - 1) + (k * k - 1) + (k * v - 1)

    def split(self, theta):
        """``(start (K,), A (K, K), B (K, V))`` with the fixed zeros put back."""
        k, v = self.n_labels, self.vocab_size
        theta = jnp.asarray(theta, jnp.float64)
        zero = jnp.zeros(1, theta.dtype)
        start = jnp.concatenate([zero, theta[:k - 1]])
        trans = jnp.concatenate([zero, theta[k - 1:k - 1 + k * k - 1]]).reshape(k, k)
        emis = jnp.concatenate([zero, theta[k * k + k - 2:]]).reshape(k, v)
        return start, trans, emis

    def scores(self, theta, samples):
        start, trans, emis = self.split(theta)
        emit = jnp.moveaxis(emis[:, samples.obs], 0, -1)                # (N, T, K)
        emit_all = jnp.broadcast_to(logsumexp(emis, axis=1), emit.shape)
        return emit, emit_all, trans, start, jnp.zeros_like(start)

    def prepare_samples(self, X) -> ChainSamples:
        """``X``: a list of ``(tokens (T,), labels (T,))`` integer pairs."""
        def obs(i, x, length, t_max):
            x = np.asarray(x)
            if x.shape != (length,) or x.min() < 0 or x.max() >= self.vocab_size:
                raise InvalidDataError(f"sentence {i}: tokens must be ({length},) integers in "
                                       f"[0, {self.vocab_size})")
            out = np.zeros(t_max, dtype=np.int32)
            out[:length] = x
            return out
        if isinstance(X, ChainSamples):
            return X
        return self._pad(X, obs)

    def zero_params(self, samples) -> np.ndarray:
        return np.zeros(self.n_params)


class CRFComponents(_Chain):
    """The composite components of a :class:`~approxcv.models.LinearChainCRF` (module
    docstring); parameters: the CRF's, flattened in its field order."""

    def __init__(self, crf):
        if not all(callable(getattr(crf, m, None)) for m in ("scores", "_shapes")) or not \
                hasattr(crf, "n_labels"):
            raise ArgumentTypeError(f"`crf` must be an approxcv.models.LinearChainCRF, got "
                                    f"{type(crf).__name__}")
        self.crf = crf
        self.n_labels = crf.n_labels
        self.n_features_ = None

    def _key(self):
        return (self.crf,)

    def __repr__(self):
        return f"CRFComponents({self.crf!r})"

    def _shapes(self):
        return self.crf._shapes(self.n_features_)

    @property
    def n_params(self) -> int:
        return int(sum(np.prod(s) for s in self._shapes()))

    def split(self, theta):
        theta = jnp.asarray(theta, jnp.float64)
        parts, i = [], 0
        for s in self._shapes():
            size = int(np.prod(s))
            parts.append(theta[i:i + size].reshape(s))
            i += size
        return LinearChainCRFParams(*parts)

    def scores(self, theta, samples):
        unary, trans, start, stop = self.crf.scores(self.split(theta), samples.obs)
        return unary, unary, trans, start, stop

    def prepare_samples(self, X) -> ChainSamples:
        """``X``: a list of ``(features (T, F), labels (T,))`` pairs."""
        if isinstance(X, ChainSamples):
            return X
        width = np.asarray(X[0][0]).shape[1]

        def obs(i, x, length, t_max):
            x = np.asarray(x, dtype=np.float64)
            if x.shape != (length, width) or not np.all(np.isfinite(x)):
                raise InvalidDataError(f"sentence {i}: features must be finite ({length}, "
                                       f"{width})")
            out = np.zeros((t_max, width))
            out[:length] = x
            return out
        samples = self._pad(X, obs)
        self.n_features_ = int(width)
        return samples

    def zero_params(self, samples) -> np.ndarray:
        return np.zeros(self.n_params)
