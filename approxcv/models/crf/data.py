"""Prepared data of a linear-chain CRF: sentences padded in length buckets.

Each bucket holds sentences of similar length padded to its longest and runs as one batched
forward pass; the fewest buckets are made whose padding stays within ``max_padding`` of the
tokens (:func:`bucket_lengths`). Units are addressed through index arrays (``sentence``,
``token``), so the data need no unit axis.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import numpy as np

__all__ = ["CRFBucket", "CRFData", "bucket_lengths", "MAX_BUCKETS", "MIN_PADDING_CELLS"]


class CRFBucket(NamedTuple):
    """Sentences of similar length, padded: ``features (N_b, T_b, F)``, ``labels (N_b,
    T_b)``, ``mask (N_b, T_b)``, ``sentence (N_b,)`` (index in the data) and ``token (N_b,
    T_b)`` (index of each label among all labels; the number of labels on padding)."""
    features: jax.Array
    labels: jax.Array
    mask: jax.Array
    sentence: jax.Array
    token: jax.Array


class CRFData(NamedTuple):
    """Prepared sentences: a tuple of :class:`CRFBucket`, the label counts ``lengths (N,)``
    and the sentence of every label ``token_sentence (n_tokens,)`` (their shapes give the
    numbers of units, static under ``jit``)."""
    buckets: tuple
    lengths: jax.Array
    token_sentence: jax.Array

    @property
    def num_sentences(self) -> int:
        return int(self.lengths.shape[0])

    @property
    def num_tokens(self) -> int:
        return int(self.token_sentence.shape[0])

    @property
    def num_features(self) -> int:
        return int(self.buckets[0].features.shape[2])


#: most length buckets :func:`bucket_lengths` makes (each is compiled on its own)
MAX_BUCKETS = 32
#: padding cells always allowed: below this, another bucket's compile time costs more
#: than the padding's work
MIN_PADDING_CELLS = 16384


def bucket_lengths(lengths, max_padding: float) -> np.ndarray:
    """Bucket id of every sentence: the fewest buckets (sentences split by length rank into
    groups of equal count) whose padding is at most ``max_padding`` times the tokens (or
    :data:`MIN_PADDING_CELLS`, if more), or :data:`MAX_BUCKETS`. Each bucket is one
    compiled forward pass, so fewer buckets compile faster and more waste less work on
    padding."""
    lengths = np.asarray(lengths)
    order = np.argsort(lengths, kind="stable")
    budget = lengths.sum() + max(max_padding * lengths.sum(), MIN_PADDING_CELLS)
    for num in range(1, min(MAX_BUCKETS, len(lengths)) + 1):
        groups = np.array_split(order, num)
        if sum(len(g) * lengths[g].max() for g in groups) <= budget:
            break
    bucket = np.empty(len(lengths), dtype=int)
    for b, g in enumerate(groups):
        bucket[g] = b
    return bucket
