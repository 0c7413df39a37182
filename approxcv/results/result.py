"""Cross-validation results as plain data, and comparison of two runs."""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
import pandas as pd

from .errors import ArgumentTypeError, IncomparableResultsError, InvalidArgumentError
from .folds import Folds
from .results_io import save_result

__all__ = ["CVResult", "compare", "compare"]


@dataclass
class CVResult:
    """What one cross-validation run produced.

    Attributes:
        method: ``"ij"``, ``"ns"`` or ``"exact"``.
        scheme: weighting scheme (``None`` at the structure level).
        level: ``"within"`` or ``"structure"``.
        folds: the :class:`~approxcv.folds.Folds` used (their ``ids`` identify folds).
        fold_loss: ``(n_folds,)`` ``-log p(x_o | x_kept; theta_o)``, joint over each fold.
        point_loss: list of ``(|o_i|,)`` arrays ``-log p(x_t | x_kept; theta_o)``.
        params: per-fold model parameters, a stacked pytree with leading axis ``n_folds``.
        params_flat: ``(n_folds, D)`` unconstrained parameters.
        seconds: wall time after the initial fit.
        stage_seconds: wall time of each stage (derivatives, solve/refit, heldout).
        diagnostics: dict with at least ``grad_norm``, ``hessian_min_eig``, ``jitter``.
        fit_seconds: time of the initial fit if ``cross_validate`` ran it, else ``None``.
        fingerprint: what the result was computed on,
            :func:`~approxcv.engine.fingerprint.result_fingerprint`: ``{"data": sha256 of
            the data, "level", "units": number of units, "folds": sha256 of the folds}``;
            ``None`` for a result built by hand. :func:`compare`, :func:`compare`
            and the report refuse to set side by side results of other inputs.
    """
    #: marks the saved-result types (:func:`approxcv.results_io.is_result_class`)
    SAVED_RESULT = True
    method: str
    scheme: str | None
    level: str
    folds: Folds
    fold_loss: np.ndarray
    point_loss: list
    params: Any
    params_flat: np.ndarray
    seconds: float
    stage_seconds: dict = field(default_factory=dict)
    diagnostics: dict = field(default_factory=dict)
    fit_seconds: float | None = None
    fingerprint: dict | None = None

    @property
    def fold_ids(self) -> np.ndarray:
        return self.folds.ids

    def __len__(self) -> int:
        return len(self.fold_loss)

    def fold_params(self, fold_id: int):
        """The model parameters of the fold with id ``fold_id`` (e.g. to refit from them).

        Raises:
            InvalidArgumentError: no fold has that id.
        """
        hits = np.flatnonzero(self.fold_ids == fold_id)
        if hits.size == 0:
            raise InvalidArgumentError(f"no fold has id {fold_id!r}")
        i = int(hits[0])
        return jax.tree_util.tree_map(lambda leaf: np.asarray(leaf)[i], self.params)

    def __repr__(self) -> str:
        return (f"CVResult(method={self.method!r}, scheme={self.scheme!r}, level={self.level!r}, "
                f"n_folds={len(self)}, mean fold loss={np.mean(self.fold_loss):.6g}, "
                f"seconds={self.seconds:.3g})")

    @property
    def unreliable(self) -> np.ndarray:
        """``(n_folds,)`` bool: folds the method cannot vouch for
        (``diagnostics["unreliable_folds"]``) and folds whose fold loss or any point loss is
        not finite (a NaN is never an estimate, flagged or not)."""
        bad = np.asarray(self.diagnostics.get("unreliable_folds", []), dtype=int)
        return np.isin(self.fold_ids, bad) | ~_finite_folds(self)

    @property
    def elpd_unit(self) -> str:
        """``"point"`` when no unit is left out twice (leave-one-out, k-fold): the units of
        :attr:`lpd` are the left-out units; else ``"fold"`` (overlapping folds, e.g. repeated
        i.i.d. folds): the units are the folds, each with its joint log density."""
        flat = np.concatenate([np.asarray(self.folds[i]) for i in range(len(self))])
        return "point" if np.unique(flat).size == flat.size else "fold"

    @property
    def lpd(self) -> np.ndarray:
        """The cross-validated log predictive densities, higher is better (ArviZ's
        ``elpd_i``): ``log p(x_t | x_kept)`` of every left-out unit in fold order
        (:attr:`elpd_unit` ``"point"``), or ``log p(x_o | x_kept)`` of every fold
        (``"fold"``)."""
        if self.elpd_unit == "fold":
            return -np.asarray(self.fold_loss, float)
        return -np.concatenate([np.asarray(p, float) for p in self.point_loss])

    @property
    def elpd(self) -> float:
        """Expected log predictive density: ``sum(lpd)`` over left-out units (``"point"``),
        or ``mean(lpd)`` per fold (``"fold"``); the ``elpd`` of :func:`compare`."""
        lpd = self.lpd
        return float(lpd.sum() if self.elpd_unit == "point" else lpd.mean())

    @property
    def se(self) -> float:
        """Standard error of :attr:`elpd`: ``sqrt(n) sd(lpd)`` (``"point"``) or
        ``sd(lpd) / sqrt(n)`` (``"fold"``), ``ddof=1``."""
        return _paired_se(self.lpd, self.elpd_unit)

    def to_frame(self) -> pd.DataFrame:
        """One row per left-out unit: ``fold_id``, ``unit``, ``loss``, the fold's
        ``fold_loss`` and whether the fold is ``unreliable``."""
        sizes = np.array([len(p) for p in self.point_loss])
        return pd.DataFrame({
            "fold_id": np.repeat(self.fold_ids, sizes),
            "unit": np.concatenate([self.folds[i] for i in range(len(self))]),
            "loss": np.concatenate(self.point_loss),
            "fold_loss": np.repeat(self.fold_loss, sizes),
            "unreliable": np.repeat(self.unreliable, sizes)})

    def summary(self) -> dict:
        """Means over all folds and over the reliable folds, both counts, the unreliable
        folds (by cause), timings and the headline diagnostics as a flat dict.

        ``mean_fold_loss`` / ``mean_point_loss`` average every fold (nothing is dropped
        silently); ``mean_fold_loss_reliable`` / ``mean_point_loss_reliable`` average the
        ``n_reliable`` folds the method vouches for. To compare methods, average the same
        folds in each (:func:`accuracy` does).
        """
        ok = ~self.unreliable
        points = [p for p, good in zip(self.point_loss, ok) if good]

        def mean(values):
            return float(np.mean(values)) if len(values) else np.nan
        causes = self.diagnostics.get("unreliable_causes", {})
        return {"method": self.method, "scheme": self.scheme, "level": self.level,
                "n_folds": len(self), "n_reliable": int(ok.sum()),
                "n_unreliable": int((~ok).sum()),
                "unreliable_folds": self.fold_ids[~ok].tolist(),
                "unreliable_causes": {k: np.asarray(v).tolist() for k, v in causes.items()},
                "mean_fold_loss": mean(self.fold_loss),
                "mean_fold_loss_reliable": mean(self.fold_loss[ok]),
                "mean_point_loss": mean(np.concatenate(self.point_loss)),
                "mean_point_loss_reliable": mean(np.concatenate(points)) if points else np.nan,
                "seconds": self.seconds, **{f"seconds_{k}": v for k, v in
                                            self.stage_seconds.items()},
                **{k: v for k, v in self.diagnostics.items() if np.isscalar(v)}}

    def to_arviz(self):
        """The result as an arviz-stats ``ELPDData`` (``kind="loo"``): ``elpd_i`` is minus the
        point losses (one entry per left-out unit, in fold order, coordinate ``obs`` = the
        unit), ``elpd`` their sum, ``se = sqrt(n) sd(elpd_i)``, ``pareto_k`` from
        ``diagnostics["pareto_k"]`` where a method reports it (else zeros: no importance
        sampling happened), ``warning`` if any fold is unreliable (:attr:`unreliable`, which
        includes folds whose loss is not finite). ``arviz_stats.compare`` accepts it beside
        results of any other model or method with the same units.

        ``p`` (the effective number of parameters, ``p_loo = lpd - elpd``) is
        ``diagnostics["p_loo"]`` where a method reports it, else ``sum(lpd_full) - elpd``
        where ``diagnostics["lpd_full"]`` holds the in-sample log densities of the left-out
        units (``log p(x_t | x_kept; theta_full)``, one per unit in the order of
        ``elpd_i``): ``cross_validate(..., in_sample=True)`` records it (one more held-out
        pass, about a third of an IJ run, so it is not the default). Without either ``p``
        is NaN ("not computed"), which ``arviz_stats.compare`` shows as its ``p`` column and
        uses for nothing else (ranks, differences and standard errors do not depend on it).

        Raises:
            ImportError: arviz-stats (a dependency of approxcv) is not installed.
        """
        try:
            import xarray as xr
            from arviz_stats.utils import ELPDData
        except ImportError as err:   # pragma: no cover - a declared dependency
            raise ImportError("to_arviz() needs arviz-stats: pip install 'arviz-stats[xarray]'"
                              ) from err
        elpd_i = -np.concatenate([np.asarray(p, float) for p in self.point_loss])
        units = np.concatenate([np.asarray(self.folds[i]) for i in range(len(self))])
        k = self.diagnostics.get("pareto_k")
        k = np.zeros(elpd_i.size) if k is None else np.asarray(k, float).reshape(-1)
        n = elpd_i.size
        coords = {"obs": units}
        return ELPDData(
            kind="loo", elpd=float(elpd_i.sum()),
            se=float(np.sqrt(n) * np.std(elpd_i, ddof=1)) if n > 1 else float("nan"),
            p=self._p_loo(float(elpd_i.sum()), n),
            n_samples=int(self.diagnostics.get("n_samples", 1)), n_data_points=n,
            scale="log", warning=bool(self.unreliable.any()), good_k=0.7,
            elpd_i=xr.DataArray(elpd_i, dims=("obs",), coords=coords),
            pareto_k=xr.DataArray(k, dims=("obs",), coords=coords))

    def _p_loo(self, elpd: float, n: int) -> float:
        """``p_loo = lpd - elpd`` from ``diagnostics`` (see :meth:`to_arviz`), else NaN."""
        if "p_loo" in self.diagnostics:
            return float(self.diagnostics["p_loo"])
        lpd = self.diagnostics.get("lpd_full")
        if lpd is None:
            return float("nan")
        lpd = np.asarray(lpd, float).reshape(-1)
        if lpd.size not in (1, n):
            raise InvalidArgumentError(
                f"diagnostics['lpd_full'] holds {lpd.size} values; it must hold the total "
                f"in-sample log density or one per left-out unit ({n})")
        return float(lpd.sum() - elpd)

    def save(self, path, *, model=None):
        """Write the result to ``PATH.json`` (readable: method, timings, scalar diagnostics)
        and ``PATH.npz`` (every array); :func:`approxcv.load_result` reads it back exactly.
        ``model`` (a model or a string) is recorded as its ``repr`` for reports
        (``approxcv report``). Returns the ``.json`` path. See :mod:`approxcv.results_io`."""
        return save_result(self, path, model=model)

    @property
    def error_estimate(self):
        """``(n_folds,)`` estimated relative error of each fold loss against exact CV
        (``diagnostics["error_estimate"]``), or ``None`` when the method gives none."""
        return self.diagnostics.get("error_estimate")


def _finite_folds(result: CVResult) -> np.ndarray:
    """``(n_folds,)`` bool: the fold loss and every point loss of the fold are finite."""
    ok = np.isfinite(np.asarray(result.fold_loss, float))
    sizes = np.array([len(p) for p in result.point_loss], dtype=np.int64)
    if len(sizes) != len(ok) or not sizes.size:
        return ok
    flat = np.isfinite(np.concatenate([np.asarray(p, float).ravel() for p in result.point_loss]))
    starts = np.cumsum(sizes) - sizes
    nonempty = sizes > 0
    all_finite = np.ones(len(sizes), bool)
    all_finite[nonempty] = np.logical_and.reduceat(flat, starts[nonempty]) if flat.size else True
    return ok & all_finite


# what a level's units are: single observations ("within" a structure, or the "point"s of
# a GP's leave-one-out) or whole structures; results compare only on the same kind
_UNIT_KIND = {"within": "observation", "point": "observation", "structure": "structure"}


def _inputs(result: CVResult) -> dict:
    """What ``result`` was computed on, for comparisons: its ``level`` and number of
    ``units`` (from the result itself) and the digest of its ``data`` (from its
    :attr:`~CVResult.fingerprint`; ``None``, unknown, for a result built by hand)."""
    fp = result.fingerprint if isinstance(result.fingerprint, Mapping) else {}
    return {"level": result.level, "units": int(result.folds.n), "data": fp.get("data")}


def _same_kind(a: str, b: str) -> bool:
    """Units at levels ``a`` and ``b`` are the same kind of thing (see ``_UNIT_KIND``)."""
    return a == b or _UNIT_KIND.get(a, a) == _UNIT_KIND.get(b, b)


def check_comparable(results: Mapping, *, check_data: bool = True,
                     purpose: str = "compared") -> None:
    """Raise :class:`~approxcv.errors.IncomparableResultsError` naming the first field
    (``level``, ``units``, ``data``) on which a result of ``results`` (``{label:
    CVResult}``) differs from the first one. Levels whose units are single observations
    (``"within"``, a GP's ``"point"``) compare with each other, not with ``"structure"``.
    A data digest that one side lacks (a result built by hand) is not compared;
    ``check_data=False`` skips the data."""
    names = list(results)
    ref = _inputs(results[names[0]])
    for name in names[1:]:
        got = _inputs(results[name])
        pair = f"results {names[0]!r} and {name!r}"
        if not _same_kind(got["level"], ref["level"]):
            raise IncomparableResultsError(
                f"{pair} were computed at different levels ({ref['level']!r} and "
                f"{got['level']!r}; field 'level' differs): their units are different things "
                f"(e.g. whole sentences and single labels), so they cannot be {purpose}; "
                "compute both at the same `level`")
        if got["units"] != ref["units"]:
            raise IncomparableResultsError(
                f"{pair} were computed on different numbers of units ({ref['units']} and "
                f"{got['units']}; field 'units' differs), so they cannot be {purpose} even "
                "where their fold indices agree; compute both on the same data")
        if check_data and None not in (ref["data"], got["data"]) and got["data"] != ref["data"]:
            raise IncomparableResultsError(
                f"{pair} were computed on different data (field 'data' differs: digest "
                f"{ref['data'][:12]}… and {got['data'][:12]}…), so they cannot be {purpose}; "
                "compute both on the same data"
                + (". If the models predict the same observations from different inputs "
                   "(e.g. two feature sets of a regression), pass check_data=False"
                   if purpose == "ranked" else ""))


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
    for name, r in (("approx", approx), ("exact", exact)):
        if not isinstance(r, CVResult):
            raise ArgumentTypeError(f"`{name}` must be a CVResult, got {type(r).__name__}")
    check_comparable({"approx": approx, "exact": exact})
    _, ia, ie = np.intersect1d(approx.fold_ids, exact.fold_ids, return_indices=True)
    if ia.size == 0:
        raise InvalidArgumentError("`approx` and `exact` have no fold ids in common")
    units_a = [approx.folds[i] for i in ia]
    units_e = [exact.folds[j] for j in ie]
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


def _paired_se(values: np.ndarray, unit: str) -> float:
    """Standard error of the total (``unit="point"``: ``sqrt(n) sd``) or of the mean
    (``unit="fold"``: ``sd / sqrt(n)``) of ``values``."""
    n = values.size
    if n < 2:
        return float("nan")
    sd = float(np.std(values, ddof=1))
    return sd * np.sqrt(n) if unit == "point" else sd / np.sqrt(n)


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
        rows.append({"rank": rank, "elpd": total[name], "se": _paired_se(values[name], unit),
                     "elpd_diff": total[best] - total[name],
                     "dse": 0.0 if name == best else _paired_se(diff, unit),
                     "n_units": int(values[name].size),
                     "n_unreliable": int(bad[name][keep].sum()),
                     "warning": bool(differs or bad[name][keep].any()),
                     "method": results[name].method})
    table = pd.DataFrame(rows, index=pd.Index(order, name="model"))
    table.attrs.update(unit=unit, on=on, n_folds=int(keep.sum()))
    return table
