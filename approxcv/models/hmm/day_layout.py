"""The day layout of a count series read off its timestamps: steps per day and days in the
weekly cycle (:meth:`approxcv.models.hmm.TimeVaryingPoisson.for_series`)."""
from __future__ import annotations

import warnings

import numpy as np

from ...errors import user_stacklevel
from ...errors import ApproxCVWarning, ArgumentTypeError, InvalidDataError

__all__ = ["timestamps", "day_layout"]


def timestamps(series):
    """The ``DatetimeIndex`` of ``series``, checked: unique, increasing, at least 2.

    Raises:
        ArgumentTypeError: ``series`` has no ``DatetimeIndex``.
        InvalidDataError: timestamps repeated, out of order or fewer than 2.
    """
    import pandas as pd
    index = getattr(series, "index", None)
    if not isinstance(index, pd.DatetimeIndex):
        raise ArgumentTypeError(
            "`series` must be a pandas Series with a DatetimeIndex, got "
            f"{type(series).__name__} indexed by {type(index).__name__}; pass "
            "slots_per_day and days_per_week to TimeVaryingPoisson instead")
    if len(index) < 2 or not index.is_monotonic_increasing or not index.is_unique:
        raise InvalidDataError("`series` timestamps must be unique and increasing, "
                               f"with at least 2 of them (got {len(index)})")
    return index


def day_layout(index) -> tuple[int, int]:
    """``(slots_per_day, days_per_week)`` of checked timestamps (:func:`timestamps`): the
    observations on each calendar date (equal on every date, starting at the same time of
    day) and the distinct weekdays. A date missing from the weekly cycle is reported by an
    :class:`~approxcv.errors.ApproxCVWarning` naming the first.

    Raises:
        InvalidDataError: dates with different numbers of slots or start times (named).
    """
    import pandas as pd
    dates = index.normalize()
    per_date = pd.Series(1, index=dates).groupby(level=0).size()
    slots = int(per_date.iloc[0])
    odd = per_date[per_date != slots]
    if len(odd):
        raise InvalidDataError(
            f"`series` has {slots} observations on {per_date.index[0].date()} but "
            f"{int(odd.iloc[0])} on {odd.index[0].date()}: every date needs the same "
            "number of slots (fill the missing slots or drop incomplete days)")
    starts = pd.Series(index - dates, index=dates).groupby(level=0).first()
    late = starts[starts != starts.iloc[0]]
    if len(late):
        raise InvalidDataError(
            f"`series` starts {late.index[0].date()} at {late.iloc[0]} after midnight, but "
            f"{starts.index[0].date()} at {starts.iloc[0]}: slot s must be the same time "
            "of day on every date")
    weekdays = np.unique(per_date.index.day_of_week)
    position = np.searchsorted(weekdays, per_date.index.day_of_week)
    step = np.diff(position) % weekdays.size
    expected = 1 % weekdays.size
    gaps = np.flatnonzero((step != expected) | (np.diff(per_date.index).astype(
        "timedelta64[D]").astype(int) > 7))
    if gaps.size:
        warnings.warn(
            f"`series` skips a day of its {weekdays.size}-day cycle after "
            f"{per_date.index[gaps[0]].date()} ({gaps.size} such gap(s)): the day effects "
            "after it are shifted", ApproxCVWarning, stacklevel=user_stacklevel())
    return slots, int(weekdays.size)
