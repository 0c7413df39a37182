"""Ranking models by cross-validated expected log predictive density: :func:`compare`
(paired standard errors, the layout of ``arviz_stats.compare``; model weights on request,
:mod:`~approxcv.results.weights`)."""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from ..errors import ArgumentTypeError, IncomparableResultsError, InvalidArgumentError
from .inputs import check_comparable
from .result import CVResult, paired_se
from .weights import BOOTSTRAP_DRAWS, BOOTSTRAP_SEED, WEIGHT_METHODS, model_weights

if TYPE_CHECKING:                 # annotations only: pandas is imported when used
    import pandas as pd

__all__ = ["compare", "check_weights"]


def check_weights(weights, units=None, unit: str = "point") -> str | None:
    """The method of :func:`compare`'s ``weights`` (``None`` for none), refused by name
    where it is not one of them, or, given the folds' ``units`` (one array of left-out units
    per fold), where pointwise elpd is not defined: on overlapping folds, or with
    ``unit="fold"``. :func:`approxcv.select` checks its ``weights`` here before any work."""
    if weights is None:
        return None
    method = WEIGHT_METHODS.get(weights.lower()) if isinstance(weights, str) else None
    if method is None:
        raise InvalidArgumentError(
            "`weights` must be 'stacking', 'pseudo-bma+', 'pseudo-bma' or None, got "
            f"{weights!r}")
    if units is None:
        return method
    flat = np.concatenate([np.asarray(u).ravel() for u in units]) if len(units) else np.zeros(0)
    distinct = np.unique(flat).size
    if distinct != flat.size:
        raise InvalidArgumentError(
            f"weights={weights!r} need the pointwise elpd of every left-out unit, which "
            f"these overlapping folds do not define (they leave out {distinct} distinct "
            f"units {flat.size} times: a unit has one log density per fold that leaves it "
            "out); rank them without weights (weights=None), or weigh models on folds "
            "that leave every unit out at most once (leave-one-out, k-fold)")
    if unit == "fold":
        raise InvalidArgumentError(
            f"weights={weights!r} need the pointwise elpd of every left-out unit, which "
            "unit='fold' does not use (it ranks the folds' joint densities); use "
            "unit='point' (or 'auto')")
    return method


def _same_units(results: dict) -> tuple:
    """The common fold ids and the per-fold units of ``results``, which must all hold the
    same folds (by id) leaving out the same units."""
    names = list(results)
    first = results[names[0]]
    ids = np.asarray(first.fold_ids)
    units = [np.asarray(first.folds.scored[i]) for i in range(len(first))]
    for name in names[1:]:
        r = results[name]
        if len(r) != len(first) or not np.array_equal(np.asarray(r.fold_ids), ids):
            raise IncomparableResultsError(
                f"results {names[0]!r} and {name!r} have different folds ({len(first)} and "
                f"{len(r)} folds, or other fold ids; field 'folds' differs): models are "
                "compared on the same folds")
        for i in range(len(r)):
            if not (np.array_equal(np.asarray(r.folds.scored[i]), units[i])
                    and np.array_equal(np.asarray(r.folds[i]), np.asarray(first.folds[i]))):
                raise IncomparableResultsError(
                    f"fold {int(ids[i])} leaves out different units in {names[0]!r} and "
                    f"{name!r} (field 'folds' differs): models are compared on the same "
                    "units")
    return ids, units


def compare(results, *, on: str = "all", unit: str = "auto", check_data: bool = True,
            weights: str | None = None, seed: int = BOOTSTRAP_SEED) -> pd.DataFrame:
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

    ``weights`` adds a ``weight`` column computed from the same pointwise ``elpd_i`` (the
    rows' left-out units, the folds ``on`` keeps) as ``arviz_stats.compare`` computes it
    (:mod:`~approxcv.results.weights`):

    * ``"stacking"``: the weights on the simplex that maximise ``sum_i log sum_k w_k
      exp(elpd_ik)`` (arviz's ``method="stacking"``, SciPy's SLSQP);
    * ``"pseudo-bma+"``: ``w_k ∝ exp(elpd_k)`` averaged over 1,000 Bayesian-bootstrap
      replicates drawn with ``seed`` (arviz's ``"BB-pseudo-BMA"``, whose seed is 124, the
      default here; ``"bb-pseudo-bma"`` is accepted too). Unlike arviz, ``se`` stays the
      standard error above, not the bootstrap's;
    * ``"pseudo-bma"``: ``w_k ∝ exp(elpd_k)`` (arviz's ``"pseudo-BMA"``).

    Weights need ``unit="point"``: on overlapping folds (``unit="fold"``) a unit's pointwise
    density is not defined (it has one per fold that leaves it out), and the request is
    refused; they need a finite ``elpd_i`` on every kept unit of every model, else it is
    refused naming ``on="reliable"``.

    Args:
        results: mapping ``{label: CVResult}`` (at least one).
        on: ``"all"`` or ``"reliable"``.
        unit: ``"auto"``, ``"point"`` or ``"fold"``.
        check_data: ``False`` to rank models that predict the same observations from
            different data (e.g. two feature sets of a regression), whose data digests
            differ by design; level, units and folds are checked all the same.
        weights: ``None`` (no ``weight`` column, the default), ``"stacking"``,
            ``"pseudo-bma+"`` or ``"pseudo-bma"`` (any case).
        seed: the seed of pseudo-BMA+'s Bayesian bootstrap (unused by the others).

    Returns:
        DataFrame indexed by label, best first, with columns ``rank``, ``elpd``, ``se``,
        ``elpd_diff``, ``dse``, ``n_units``, ``n_unreliable``, ``warning``, ``method``
        (and ``weight`` after ``dse`` when ``weights`` is given, summing to 1);
        ``attrs`` holds ``unit``, ``on`` and ``n_folds``, and with ``weights`` also
        ``weights`` (the method's name) and for ``"pseudo-bma+"`` ``weights_seed`` and
        ``weights_draws``.
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
    method = check_weights(weights)
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
    check_weights(weights, units, unit)
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
    if method is not None:
        table.insert(table.columns.get_loc("dse") + 1, "weight",
                     _weights(method, {name: values[name] for name in order}, seed))
        table.attrs["weights"] = method
        if method == "pseudo-bma+":
            table.attrs.update(weights_seed=int(seed), weights_draws=BOOTSTRAP_DRAWS)
    return table


def _weights(method: str, values: dict, seed: int) -> np.ndarray:
    """The weights of ``method`` for ``values`` (``{name: elpd_i}``, in the table's order),
    refused by name where an ``elpd_i`` is not finite."""
    broken = {name: int((~np.isfinite(v)).sum()) for name, v in values.items()
              if not np.isfinite(v).all()}
    if broken:
        raise InvalidArgumentError(
            f"weights={method!r} need a finite elpd_i on every unit, but "
            + ", ".join(f"{name!r} has {k} non-finite" for name, k in broken.items())
            + " (on folds whose loss is not finite, which count as unreliable); weigh the "
            "models on the folds every result vouches for with on='reliable'")
    return model_weights(method, np.column_stack(list(values.values())), seed)
