"""Small argument checks shared across modules (NumPy at the edge)."""
from __future__ import annotations

import numpy as np

from .errors import ArgumentTypeError, InvalidArgumentError, InvalidDataError, InvalidGraphError


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


def check_counts(name: str, array, what: str = "") -> np.ndarray:
    """Return the finite real ``array`` unchanged; raise naming ``name`` unless it holds
    non-negative integer counts (``what``: e.g. " for Poisson emissions", said after)."""
    arr = np.asarray(array)
    if arr.dtype.kind == "f" and np.any(arr != np.round(arr)):
        raise InvalidDataError(f"`{name}` must hold integer counts{what}")
    if np.any(arr < 0):
        raise InvalidDataError(f"`{name}` must hold non-negative counts{what}, min is "
                               f"{arr.min()}")
    return arr


def check_positive_int(name: str, value, minimum: int = 1) -> int:
    """Return ``int(value)``; raise if it is not an integer ``>= minimum`` (a Python or NumPy
    integer, or a 0-d integer array)."""
    if isinstance(value, np.ndarray) and value.ndim == 0 and value.dtype.kind in "iu":
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
        raise InvalidArgumentError(f"`{name}` must be an integer, got {value!r}")
    if value < minimum:
        raise InvalidArgumentError(f"`{name}` must be >= {minimum}, got {value}")
    return int(value)


def as_real_array(name: str, x) -> np.ndarray:
    """Return ``x`` as a NumPy array of real numbers (bool, integer or float dtype).

    Raises ``ArgumentTypeError`` naming ``name`` for strings, dates, complex numbers and
    objects, and ``InvalidDataError`` for a ragged nesting of sequences.
    """
    if isinstance(x, (str, bytes)) or x is None:
        raise ArgumentTypeError(f"`{name}` must be a numeric array, got {type(x).__name__}")
    try:
        arr = np.asarray(x)
    except ValueError:
        raise InvalidDataError(f"`{name}` is ragged (nested sequences of different lengths); "
                               "it must be a rectangular numeric array") from None
    if arr.dtype.kind not in "biuf":
        raise ArgumentTypeError(f"`{name}` must be a numeric array of real numbers, got dtype "
                                f"{arr.dtype}")
    return arr


def real_number(name: str, value, what: str = "a real number") -> float:
    """``float(value)`` for one real number: a Python ``int`` or ``float``, a NumPy integer
    or floating scalar (``np.float32(0.01)``) or a 0-d array of one (NaN and inf pass: ranges
    are :func:`check_in_range`'s). Raises ``ArgumentTypeError`` naming ``name`` (``what``:
    what it must be) for booleans, strings, ``None``, complex numbers and arrays of more
    than one number."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    arr = None
    if not isinstance(value, (bool, np.bool_, str, bytes)) and value is not None:
        try:
            arr = np.asarray(value)
        except (TypeError, ValueError):
            arr = None
    if arr is None or arr.ndim != 0 or arr.dtype.kind not in "iuf":
        raise ArgumentTypeError(f"`{name}` must be {what}, got {value!r}")
    return float(arr)


def _interval(low: float, high: float, closed: str) -> str:
    """``[0, inf)``-style notation of an interval (``closed``: as :func:`check_in_range`)."""
    left = "[" if closed in ("both", "left") else "("
    right = "]" if closed in ("both", "right") else ")"
    return f"{left}{low:g}, {high:g}{right}"


def check_in_range(name: str, value, low: float = -np.inf, high: float = np.inf,
                   closed: str = "both", what: str = "") -> float:
    """Return ``value`` as a ``float`` (:func:`real_number`: NumPy scalars and 0-d arrays
    included) if it lies in the interval from ``low`` to ``high``, ``closed`` at ``"both"``
    ends, the ``"left"``, the ``"right"`` or ``"neither"`` (scikit-learn's ``Interval``
    convention; an infinite bound closed admits inf), else raise
    ``InvalidArgumentError`` naming ``name`` and the interval (``what``: said after it,
    e.g. " (inf: no penalty)"). NaN is never in range."""
    number = real_number(name, value, f"a number in {_interval(low, high, closed)}{what}")
    above = number >= low if closed in ("both", "left") else number > low
    below = number <= high if closed in ("both", "right") else number < high
    if not (above and below):
        raise InvalidArgumentError(f"`{name}` must be a number in "
                                   f"{_interval(low, high, closed)}{what}, got {value!r}")
    return number


def check_positive(name: str, value) -> float:
    """Return ``float(value)``; raise naming ``name`` unless it is a finite real number > 0
    (e.g. a prior's shape, rate, concentration or variance: otherwise the prior is improper)."""
    number = None
    if not isinstance(value, (str, bytes, bool, np.bool_)) and np.ndim(value) == 0:
        try:
            number = float(value)
        except (TypeError, ValueError):
            pass
    if number is None:
        raise InvalidArgumentError(f"`{name}` must be a positive number, got {value!r}")
    if not (np.isfinite(number) and number > 0):
        raise InvalidArgumentError(f"`{name}` must be a finite number > 0, got {value!r}")
    return number


def check_adjacency(name: str, adjacency, isolated: bool = False) -> np.ndarray:
    """Return ``adjacency`` as an ``(n, n)`` 0/1 int8 array of a simple undirected graph.

    Raises ``InvalidGraphError`` naming ``name`` when it is not square, holds values other
    than 0/1 (or booleans), is not symmetric, has self-loops, or — unless ``isolated`` —
    has a node without neighbours (a disconnected site).
    """
    try:
        arr = as_real_array(name, adjacency)
    except (ArgumentTypeError, InvalidDataError) as exc:
        raise InvalidGraphError(str(exc)) from None
    if arr.ndim != 2 or arr.shape[0] != arr.shape[1] or arr.shape[0] < 2:
        raise InvalidGraphError(f"`{name}` must be a square (n, n) matrix with n >= 2, got "
                                f"shape {arr.shape}")
    if not np.all((arr == 0) | (arr == 1)):
        raise InvalidGraphError(f"`{name}` must hold only 0 and 1 (or booleans)")
    arr = arr.astype(np.int8)
    if np.any(np.diag(arr)):
        raise InvalidGraphError(f"`{name}` has self-loops at nodes "
                                f"{np.flatnonzero(np.diag(arr))[:5].tolist()}")
    if not np.array_equal(arr, arr.T):
        s, t = (int(i[0]) for i in np.nonzero(arr != arr.T))
        raise InvalidGraphError(f"`{name}` is not symmetric: entry ({s}, {t}) is {arr[s, t]} "
                                f"but ({t}, {s}) is {arr[t, s]}")
    lonely = np.flatnonzero(arr.sum(1) == 0)
    if lonely.size and not isolated:
        raise InvalidGraphError(f"`{name}` has {lonely.size} disconnected site(s) without "
                                f"neighbours (e.g. {lonely[:5].tolist()}); drop them or join "
                                "them to the graph")
    return arr
