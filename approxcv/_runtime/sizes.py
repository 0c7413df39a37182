"""Sizes rounded up to a few buckets, so that one compiled program serves a range of sizes.

Every JAX program is specialised to the shapes of its arguments: a series of 2,000 steps
and one of 2,100 compile the same fit and the same cross-validation twice (seconds each).
Rounding a size up to a number with few significant bits keeps the padding small and the
distinct sizes few: with ``bits`` significant bits a size grows by less than
``2^(1 - bits)`` (12.5 % for 4 bits) and each octave holds ``2^(bits - 1)`` sizes.
The padding itself is the caller's: null units of a weighted objective (an HMM's masked
steps, :meth:`approxcv.models.base.Model.padded_units`), fold rows padded with an
out-of-range index (:class:`approxcv.folds.Folds`' ``width``) or copies of a fold
(:mod:`approxcv.engine.fold_buckets`).
"""
from __future__ import annotations

__all__ = ["round_up_significant", "LENGTH_BITS", "length_bucket", "count_bucket"]

#: significant bits of a padded data length or fold width (at most 12.5 % padding)
LENGTH_BITS = 4


def round_up_significant(n: int, bits: int) -> int:
    """The least ``m >= n`` with at most ``bits`` significant binary digits:
    ``ceil(n / 2^s) 2^s`` with ``s = max(0, bitlength(n) - bits)``. Sizes below ``2^bits``
    are kept; ``round_up_significant(round_up_significant(n, b), b)`` is the same."""
    n = int(n)
    shift = max(n.bit_length() - bits, 0)
    return (-(-n >> shift)) << shift


def length_bucket(n: int) -> int:
    """A data length or fold width padded to :data:`LENGTH_BITS` significant bits
    (``n`` itself below 16; less than 12.5 % more above)."""
    return round_up_significant(n, LENGTH_BITS)


def count_bucket(n: int, least: int, pow2_max: int, bits: int = 3) -> int:
    """A count padded to the next power of two (at least ``least``) up to ``pow2_max``,
    above that to ``bits`` significant bits (3: ``q 2^k`` with ``q`` in 4..7, less than
    25 % more; 4: less than 12.5 % more): fold counts
    (:func:`approxcv.engine.fold_buckets.fold_bucket`, 3 bits) and the scikit-learn
    estimators' rows (:func:`approxcv.sklearn._models.padded_rows`, 4 bits)."""
    n = int(n)
    if n <= pow2_max:
        return max(least, 1 << (n - 1).bit_length())
    return round_up_significant(n, bits)

