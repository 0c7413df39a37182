"""Ranking models by cross-validated expected log predictive density: :func:`compare`
(paired standard errors, the layout of ``arviz_stats.compare``)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ArgumentTypeError, IncomparableResultsError, InvalidArgumentError
from .inputs import check_comparable
from .result import CVResult, paired_se

if TYPE_CHECKING:                 # annotations only: pandas is imported when used
    import pandas as pd

__all__ = ["compare"]


def _same_units(results: dict) -> tuple:
    """The common fold ids and the per-fold units of ``results``, which must all hold the
    same folds (by id) leaving out the same units."""
    names = list(results)
    first = results[names[0]]
    ids = np.asarray(first.fold_ids)
    units = [np.asarray(first.folds[i]) for i in range(len(first))]
    for name in names[1:]:
        r = results[name]
        if len(r) != len(first) or not np.array_equal(np.asarray(r.fold_ids), ids):
            raise IncomparableResultsError(
                f"results {names[0]!r} and {name!r} have different folds ({len(first)} and "
                f"{len(r)} folds, or other fold ids; field 'folds' differs): models are "
                "compared on the same folds")
        for i in range(len(r)):
            if not np.array_equal(np.asarray(r.folds[i]), units[i]):
                raise IncomparableResultsError(
                    f"fold {int(ids[i])} leaves out different units in {names[0]!r} and "
                    f"{name!r} (field 'folds' differs): models are compared on the same "
                    "units")
    return ids, units


def compare(results, *, on: str = "all", unit: str = "auto",
            check_data: bool = True) -> pd.DataFrame:
    """Rank models by cross-validated expected log predictive density, with paired
    standard errors (the layout of ``arviz_stats.compare``).

    Every result must have been computed on the same inputs: the same ``level``, the same
    number of units, the same data (by the digest in :attr:`CVResult.fingerprint`, where
    both results have one) and the same folds leaving out the same units; otherwise an
    :class:`~approxcv.errors.IncomparableResultsError` names the field that differs
    (``level``, ``units``, ``data``, ``folds``). A fold whose loss is not finite is
    unreliable (:attr:`CVResult.unreliable`) whether or not its method flagged it. With
    ``elpd_i = -loss_i`` for each unit ``i``:

    * ``unit="point"`` (the default when no unit is left out twice, e.g. leave-one-out or
      k-fold): ``elpd = sum_i elpd_i`` over the left-out units, ``se = sqrt(n) sd(elpd_i)``,
      ``elpd_diff = elpd_best - elpd`` and ``dse = sqrt(n) sd(elpd_best,i - elpd_i)`` — the
      paired standard error of the difference, which is what decides between models (it is
      much smaller than either ``se`` when the models err on the same units). Variances
      are taken with ``ddof=1`` as in R's ``loo`` (``arviz_stats.compare`` uses ``ddof=0``
      for ``dse``: a factor ``sqrt(n / (n - 1))``). It needs every unit left out at most
      once; asked for on overlapping folds it is refused (use ``"fold"``).
    * ``unit="fold"`` (the default when folds overlap, e.g. repeated i.i.d. folds, where the
      units are not independent draws): the same quantities with ``elpd_i`` the fold's joint
      ``-fold_loss`` and means in place of sums: ``elpd = mean_i elpd_i``,
      ``se = sd / sqrt(n)``, ``dse = sd(difference) / sqrt(n)``.

    ``on="reliable"`` keeps only the folds every result vouches for (the same folds in each);
    ``on="all"`` keeps every fold and sets ``warning`` where a model's unreliable folds
    differ from the best model's, or the row rests on any unreliable fold.

    Args:
        results: mapping ``{label: CVResult}`` (at least one).
        on: ``"all"`` or ``"reliable"``.
        unit: ``"auto"``, ``"point"`` or ``"fold"``.
        check_data: ``False`` to rank models that predict the same observations from
            different data (e.g. two feature sets of a regression), whose data digests
            differ by design; level, units and folds are checked all the same.

    Returns:
        DataFrame indexed by label, best first, with columns ``rank``, ``elpd``, ``se``,
        ``elpd_diff``, ``dse``, ``n_units``, ``n_unreliable``, ``warning``, ``method``;
        ``attrs`` holds ``unit``, ``on`` and ``n_folds``.
    """
    if not isinstance(results, Mapping) or not results:
        raise ArgumentTypeError("`results` must be a non-empty mapping {label: CVResult}, "
                                f"got {type(results).__name__}")
    for name, r in results.items():
        if not isinstance(r, CVResult):
            raise ArgumentTypeError(f"results[{name!r}] must be a CVResult, "
                                    f"got {type(r).__name__}")
    if on not in ("all", "reliable"):
        raise InvalidArgumentError(f"`on` must be 'all' or 'reliable', got {on!r}")
    if unit not in ("auto", "point", "fold"):
        raise InvalidArgumentError(f"`unit` must be 'auto', 'point' or 'fold', got {unit!r}")
    check_comparable(results, check_data=bool(check_data), purpose="ranked")
    ids, units = _same_units(results)
    flat = np.concatenate(units)
    distinct = np.unique(flat).size
    if unit == "auto":
        unit = "point" if distinct == flat.size else "fold"
    elif unit == "point" and distinct != flat.size:
        raise InvalidArgumentError(
            f"unit='point' needs every unit left out at most once, but these {len(ids)} "
            f"folds leave out {distinct} distinct units {flat.size} times (the folds "
            "overlap): per-unit sums would count units repeatedly and their standard errors "
            "treat dependent values as independent; use unit='fold' (or 'auto')")
    bad = {name: r.unreliable for name, r in results.items()}
    keep = np.ones(len(ids), bool)
    if on == "reliable":
        for b in bad.values():
            keep &= ~b
        if not keep.any():
            raise InvalidArgumentError("no fold is reliable in every result; use on='all'")

    def elpd_i(r):
        if unit == "fold":
            return -np.asarray(r.fold_loss, float)[keep]
        return -np.concatenate([np.asarray(r.point_loss[i], float) for i in np.flatnonzero(keep)])
    values = {name: elpd_i(r) for name, r in results.items()}
    total = {name: float(v.sum() if unit == "point" else v.mean()) for name, v in values.items()}
    order = sorted(values, key=lambda name: -total[name]
                   if np.isfinite(total[name]) else np.inf)
    best = order[0]
    rows = []
    for rank, name in enumerate(order):
        diff = values[best] - values[name]
        differs = not np.array_equal(bad[name][keep], bad[best][keep])
        rows.append({"rank": rank, "elpd": total[name], "se": paired_se(values[name], unit),
                     "elpd_diff": total[best] - total[name],
                     "dse": 0.0 if name == best else paired_se(diff, unit),
                     "n_units": int(values[name].size),
                     "n_unreliable": int(bad[name][keep].sum()),
                     "warning": bool(differs or bad[name][keep].any()),
                     "method": results[name].method})
    import pandas as pd     # here, not at the top: a fit and its CV need no pandas
    table = pd.DataFrame(rows, index=pd.Index(order, name="model"))
    table.attrs.update(unit=unit, on=on, n_folds=int(keep.sum()))
    return table
