"""How far an approximate result is from a reference (exact CV): :func:`accuracy`, the
table of relative errors on the folds both results hold."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..errors import ArgumentTypeError, InvalidArgumentError
from .inputs import check_comparable
from .result import CVResult

if TYPE_CHECKING:                 # annotations only: pandas is imported when used
    import pandas as pd

__all__ = ["accuracy"]


def accuracy(approx: CVResult, exact: CVResult) -> pd.DataFrame:
    """Relative errors of ``approx`` against ``exact`` on the folds both contain.

    Folds are matched by ``fold_ids`` (so IJ on 1,000 folds compares with exact CV on a
    subset of them), and must leave out the same units.

    Returns:
        DataFrame with one row per left-out unit (``kind="point"``) and one per fold
        (``kind="fold"``): ``fold_id``, ``unit`` (-1 for folds), ``approx``, ``exact``,
        ``abs_error``, ``rel_error = |approx - exact| / |exact|`` and ``unreliable`` (the
        fold is unreliable in either result). ``attrs`` holds the mean relative errors
        over the reliable folds (``mean_rel_error_point``, ``mean_rel_error_fold``) and
        ``n_unreliable``.
    """
    import pandas as pd     # here, not at the top: a fit and its CV do not need pandas (0.2 s)
    for name, r in (("approx", approx), ("exact", exact)):
        if not isinstance(r, CVResult):
            raise ArgumentTypeError(f"`{name}` must be a CVResult, got {type(r).__name__}")
    check_comparable({"approx": approx, "exact": exact})
    _, ia, ie = np.intersect1d(approx.fold_ids, exact.fold_ids, return_indices=True)
    if ia.size == 0:
        raise InvalidArgumentError("`approx` and `exact` have no fold ids in common")
    units_a = [approx.folds.scored[i] for i in ia]      # the units of the point losses
    units_e = [exact.folds.scored[j] for j in ie]
    sizes = np.array([len(u) for u in units_a])
    same = sizes == np.array([len(u) for u in units_e])
    flat_a, flat_e = np.concatenate(units_a), np.concatenate(units_e)
    if not same.all() or not np.array_equal(flat_a, flat_e):
        pos = np.cumsum(sizes) - sizes
        diff = np.flatnonzero(~same) if not same.all() else np.unique(np.searchsorted(
            pos, np.flatnonzero(flat_a != flat_e), side="right") - 1)
        raise InvalidArgumentError(f"fold {int(approx.fold_ids[ia[diff[0]]])} leaves out "
                                   "different units in the two results")
    fids = approx.fold_ids[ia]
    bad = approx.unreliable[ia] | exact.unreliable[ie]
    points = pd.DataFrame({
        "kind": "point", "fold_id": np.repeat(fids, sizes), "unit": flat_a,
        "approx": np.concatenate([approx.point_loss[i] for i in ia]),
        "exact": np.concatenate([exact.point_loss[j] for j in ie]),
        "unreliable": np.repeat(bad, sizes)})
    folds = pd.DataFrame({"kind": "fold", "fold_id": fids, "unit": -1,
                          "approx": approx.fold_loss[ia], "exact": exact.fold_loss[ie],
                          "unreliable": bad})
    df = pd.concat([points, folds], ignore_index=True)
    df["abs_error"] = (df["approx"] - df["exact"]).abs()
    df["rel_error"] = df["abs_error"] / df["exact"].abs()
    good = ~df["unreliable"]
    df.attrs["mean_rel_error_point"] = float(df.loc[good & (df.kind == "point"),
                                                    "rel_error"].mean())
    df.attrs["mean_rel_error_fold"] = float(df.loc[good & (df.kind == "fold"),
                                                   "rel_error"].mean())
    df.attrs["n_unreliable"] = int(bad.sum())
    return df
