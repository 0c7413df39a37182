"""Cross-validation results as plain data, and comparison of two runs."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import jax
import numpy as np
import pandas as pd

from .errors import ArgumentTypeError, InvalidArgumentError
from .folds import Folds

__all__ = ["CVResult", "compare"]


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
    """
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
        (``diagnostics["unreliable_folds"]``)."""
        bad = np.asarray(self.diagnostics.get("unreliable_folds", []), dtype=int)
        return np.isin(self.fold_ids, bad)

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
        folds in each (:func:`compare` does).
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
        sampling happened), ``warning`` if any fold is unreliable. ``arviz_stats.compare``
        accepts it beside results of any other model or method with the same units.

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
            p=float(self.diagnostics.get("p_loo", np.nan)),
            n_samples=int(self.diagnostics.get("n_samples", 1)), n_data_points=n,
            scale="log", warning=bool(self.unreliable.any()), good_k=0.7,
            elpd_i=xr.DataArray(elpd_i, dims=("obs",), coords=coords),
            pareto_k=xr.DataArray(k, dims=("obs",), coords=coords))

    @property
    def error_estimate(self):
        """``(n_folds,)`` estimated relative error of each fold loss against exact CV
        (``diagnostics["error_estimate"]``), or ``None`` when the method gives none."""
        return self.diagnostics.get("error_estimate")


def compare(approx: CVResult, exact: CVResult) -> pd.DataFrame:
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
