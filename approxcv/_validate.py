"""Small argument checks shared across modules (NumPy at the edge)."""
from __future__ import annotations

import numpy as np

from .errors import InvalidArgumentError, InvalidDataError


def check_choice(name: str, value, choices) -> str:
    """Return ``value`` if it is one of ``choices`` else raise naming ``name``."""
    if value not in choices:
        raise InvalidArgumentError(
            f"`{name}` must be one of {list(choices)!r}, got {value!r}")
    return value


def check_finite(name: str, array) -> np.ndarray:
    """Return ``array`` as a NumPy array; raise if it holds NaN or inf."""
    arr = np.asarray(array)
    if arr.dtype.kind in "fc" and not np.all(np.isfinite(arr)):
        bad = int(np.sum(~np.isfinite(arr)))
        raise InvalidDataError(f"`{name}` contains {bad} NaN or infinite value(s)")
    return arr


def check_positive_int(name: str, value, minimum: int = 1) -> int:
    """Return ``int(value)``; raise if it is not an integer ``>= minimum``."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(f"`{name}` must be an integer, got {value!r}")
    if value < minimum:
        raise InvalidArgumentError(f"`{name}` must be >= {minimum}, got {value}")
    return int(value)
