"""The result of one cross-validation run (:class:`CVResult`), as plain data."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import jax
import numpy as np

from ..errors import ArgumentTypeError, InvalidArgumentError
from ..folds import Folds
from ..plot import result as plot_result
from .diagnostics import Diagnostics
from .inputs import check_comparable
from .storage import save_result

if TYPE_CHECKING:                 # annotations only: pandas is imported when used
    import pandas as pd

__all__ = ["CVResult"]


@dataclass
class CVResult:
    """What one cross-validation run produced.

    Attributes:
        method: ``"ij"``, ``"ns"`` or ``"exact"``.
        scheme: weighting scheme (``None`` at the structure level).
        level: ``"within"`` or ``"structure"``.
        folds: the :class:`~approxcv.folds.Folds` used (their ``ids`` identify folds).
        fold_loss: ``(n_folds,)`` ``-log p(x_o | x_kept; theta_o)``, joint over each fold
            (for folds that remove more than they score, ``-log p(x_S | x_kept; theta_o)``
            over the scored units ``S``, the others marginalised out).
        point_loss: list of ``(|o_i|,)`` arrays ``-log p(x_t | x_kept; theta_o)``, one per
            scored unit (``folds.scored[i]``).
        params: per-fold model parameters, a stacked pytree with leading axis ``n_folds``.
        params_flat: ``(n_folds, D)`` unconstrained parameters.
        seconds: wall time after the initial fit.
        stage_seconds: wall time of each stage (derivatives, solve/refit, heldout).
        diagnostics: a :class:`~approxcv.results.diagnostics.Diagnostics` record: typed
            fields common to every method (``unreliable_folds``, ``unreliable_causes``,
            ``error_estimate``, ``tol``, ``num_params``, ...) and the method's own entries in
            ``diagnostics.extras``; a dict over both (a plain dict given here is converted).
        fit_seconds: time of the initial fit if ``cross_validate`` ran it, else ``None``.
        fingerprint: what the result was computed on,
            :func:`~approxcv.engine.fingerprint.result_fingerprint`: ``{"data": sha256 of
            the data, "level", "units": number of units, "folds": sha256 of the folds}``;
            ``None`` for a result built by hand. :func:`~approxcv.compare`,
            :func:`~approxcv.accuracy` and the report refuse to set side by side results of other inputs.
    """
    #: marks the saved-result types (:func:`approxcv.results.storage.is_result_class`)
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

    def __post_init__(self):
        if not isinstance(self.diagnostics, Diagnostics):
            self.diagnostics = Diagnostics(self.diagnostics, n_folds=len(self.fold_loss))

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
        bad = self.diagnostics.unreliable_folds
        return np.isin(self.fold_ids, bad) | ~_finite_folds(self)

    @property
    def elpd_unit(self) -> str:
        """``"point"`` when no unit is scored twice (leave-one-out, k-fold, h-block): the units
        of :attr:`lpd` are the scored units; else ``"fold"`` (overlapping folds, e.g.
        repeated i.i.d. folds): the units are the folds, each with its joint log density."""
        flat = np.concatenate([np.asarray(self.folds.scored[i]) for i in range(len(self))])
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
        or ``mean(lpd)`` per fold (``"fold"``); the ``elpd`` of :func:`~approxcv.compare`."""
        lpd = self.lpd
        return float(lpd.sum() if self.elpd_unit == "point" else lpd.mean())

    @property
    def se(self) -> float:
        """Standard error of :attr:`elpd`: ``sqrt(n) sd(lpd)`` (``"point"``) or
        ``sd(lpd) / sqrt(n)`` (``"fold"``), ``ddof=1``."""
        return paired_se(self.lpd, self.elpd_unit)

    def to_frame(self) -> pd.DataFrame:
        """One row per scored unit (the left-out units, unless the folds remove more than
        they score): ``fold_id``, ``unit``, ``loss``, the fold's ``fold_loss`` and whether
        the fold is ``unreliable``."""
        import pandas as pd     # here, not at the top: a fit and its CV need no pandas
        sizes = np.array([len(p) for p in self.point_loss])
        return pd.DataFrame({
            "fold_id": np.repeat(self.fold_ids, sizes),
            "unit": np.concatenate([self.folds.scored[i] for i in range(len(self))]),
            "loss": np.concatenate(self.point_loss),
            "fold_loss": np.repeat(self.fold_loss, sizes),
            "unreliable": np.repeat(self.unreliable, sizes)})

    def summary(self) -> dict:
        """Means over all folds and over the reliable folds, both counts, the unreliable
        folds (by cause), timings and the headline diagnostics as a flat dict.

        ``mean_fold_loss`` / ``mean_point_loss`` average every fold (nothing is dropped
        silently); ``mean_fold_loss_reliable`` / ``mean_point_loss_reliable`` average the
        ``n_reliable`` folds the method vouches for. To compare methods, average the same
        folds in each (:func:`~approxcv.accuracy` does).
        """
        ok = ~self.unreliable
        points = [p for p, good in zip(self.point_loss, ok) if good]

        def mean(values):
            return float(np.mean(values)) if len(values) else np.nan
        causes = self.diagnostics.unreliable_causes
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

    def to_arviz(self, unit: str = "auto"):
        """The result as an arviz-stats ``ELPDData`` (``kind="loo"``).

        ``unit="point"`` (what ``"auto"`` picks when no unit is left out twice: leave-one-out,
        k-fold): ``elpd_i`` is minus the point losses (one entry per left-out unit, in fold
        order, coordinate ``obs`` = the unit), ``elpd`` their sum. ``unit="fold"`` (what
        ``"auto"`` picks on overlapping folds — leave-future-out, repeated i.i.d. folds — where
        per-unit sums would count a unit up to once per fold): the observations are the
        folds, ``elpd_i = log p(x_o | x_kept)`` of each (coordinate ``obs`` = the fold id)
        and ``elpd`` their sum, ``n_data_points`` the number of folds; the attribute
        ``approxcv_unit`` of the returned object says which. ``unit="point"`` on overlapping folds is refused.
        Either way ``se = sqrt(n) sd(elpd_i)`` and ``warning`` is set if any fold is
        unreliable (:attr:`unreliable`, which includes folds whose loss is not finite).

        ``pareto_k`` is ``diagnostics["pareto_k"]`` where a method did importance sampling
        and reports it, else ``None``: no k-hat was computed, so none is shown (as "good" or
        otherwise) in arviz-stats' summary.
        ``arviz_stats.compare`` accepts the result beside results of any other model or
        method with the same observations.

        ``p`` (the effective number of parameters, ``p_loo = lpd - elpd``) is
        ``diagnostics["p_loo"]`` where a method reports it, else ``sum(lpd_full) - elpd``
        where ``diagnostics["lpd_full"]`` holds the in-sample log densities of the left-out
        units (``log p(x_t | x_kept; theta_full)``, one per unit in the order of
        ``elpd_i``): ``cross_validate(..., in_sample=True)`` records it (one more held-out
        pass, about a third of an IJ run, so it is not the default). Without either (and
        always with ``unit="fold"``) ``p`` is NaN ("not computed"), which
        ``arviz_stats.compare`` shows as its ``p`` column and uses for nothing else.

        Raises:
            InvalidArgumentError: ``unit`` is not ``"auto"``, ``"point"`` or ``"fold"``, or
                ``"point"`` on overlapping folds.
            ImportError: arviz-stats (a dependency of approxcv) is not installed.
        """
        try:
            import xarray as xr
            from arviz_stats.utils import ELPDData
        except ImportError as err:   # pragma: no cover - a declared dependency
            raise ImportError("to_arviz() needs arviz-stats: pip install 'arviz-stats[xarray]'"
                              ) from err
        if unit not in ("auto", "point", "fold"):
            raise InvalidArgumentError(f"`unit` must be 'auto', 'point' or 'fold', got "
                                       f"{unit!r}")
        natural = self.elpd_unit
        if unit == "point" and natural == "fold":
            raise InvalidArgumentError(
                "to_arviz(unit='point') needs every unit left out at most once, but these "
                "folds overlap (a unit is left out by several folds: leave-future-out, "
                "repeated i.i.d. folds), so a per-unit elpd would count it repeatedly; use "
                "unit='fold' (the folds as the observations) or 'auto'")
        unit = natural if unit == "auto" else unit
        k = self.diagnostics.get("pareto_k")
        if unit == "fold":
            elpd_i = -np.asarray(self.fold_loss, float)
            obs = np.asarray(self.fold_ids)
            k = None
            p = float("nan")
        else:
            elpd_i = self.lpd                    # minus the point losses, in fold order
            obs = np.concatenate([np.asarray(self.folds.scored[i]) for i in range(len(self))])
            k = None if k is None else np.asarray(k, float).reshape(-1)
            p = self._p_loo(float(elpd_i.sum()), elpd_i.size)
        n = elpd_i.size
        coords = {"obs": obs}
        out = ELPDData(
            kind="loo", elpd=float(elpd_i.sum()),
            se=float(np.sqrt(n) * np.std(elpd_i, ddof=1)) if n > 1 else float("nan"),
            p=p, n_samples=int(self.diagnostics.get("n_samples", 1)), n_data_points=n,
            scale="log", warning=bool(self.unreliable.any()), good_k=0.7,
            elpd_i=xr.DataArray(elpd_i, dims=("obs",), coords=coords),
            pareto_k=None if k is None else xr.DataArray(k, dims=("obs",), coords=coords))
        out.approxcv_unit = unit
        return out

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
        (``approxcv report``). Returns the ``.json`` path. See :mod:`approxcv.results.storage`."""
        return save_result(self, path, model=model)

    def plot(self, ax=None, exact=None, *, kind: str = "fold", title: str | None = None):
        """Plot the held-out losses (matplotlib; returns the Axes, shows nothing).

        With ``exact`` (a :class:`CVResult` of ``method="exact"`` on folds of the same ids,
        computed on the same data, level and units; another method's result is accepted as
        the reference too): this result's fold losses (``kind="fold"``) or point losses
        (``kind="point"``) against ``exact``'s on the folds both hold, with the ``y = x``
        line; folds unreliable in either are red crosses. Without it: the fold losses along
        the folds (``kind="fold"``), or every left-out unit's loss by unit index
        (``kind="point"``; for a series, along time), the unreliable folds marked with red
        crosses. See :func:`approxcv.plot.result`.

        Args:
            ax: the matplotlib Axes to draw on (``None``: a new figure).
            exact: the reference result, or ``None``.
            kind: ``"fold"`` or ``"point"``.
            title: the Axes' title (``None``: a default).

        Raises:
            IncomparableResultsError: ``exact`` was computed at another level, on another
                number of units or on other data.
            InvalidArgumentError: no fold id in common, or a shared fold leaves out other
                units.
        """
        if exact is not None:
            if not isinstance(exact, CVResult):
                raise ArgumentTypeError(f"`exact` must be a CVResult, got "
                                        f"{type(exact).__name__}")
            check_comparable({"result": self, "exact": exact}, purpose="plotted together")
        return plot_result(self, ax=ax, exact=exact, kind=kind, title=title)

    @property
    def error_estimate(self):
        """``(n_folds,)`` estimated relative error of each fold loss against exact CV
        (``diagnostics["error_estimate"]``), or ``None`` when the method gives none."""
        return self.diagnostics.error_estimate


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


def paired_se(values: np.ndarray, unit: str) -> float:
    """Standard error of the total (``unit="point"``: ``sqrt(n) sd``) or of the mean
    (``unit="fold"``: ``sd / sqrt(n)``) of ``values``."""
    n = values.size
    if n < 2:
        return float("nan")
    sd = float(np.std(values, ddof=1))
    return sd * np.sqrt(n) if unit == "point" else sd / np.sqrt(n)
