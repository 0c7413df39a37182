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

    def to_frame(self) -> pd.DataFrame:
        """One row per left-out unit: ``fold_id``, ``unit``, ``loss``, and the fold's ``fold_loss``."""
        sizes = [len(p) for p in self.point_loss]
        return pd.DataFrame({
            "fold_id": np.repeat(self.fold_ids, sizes),
            "unit": np.concatenate([self.folds[i] for i in range(len(self))]),
            "loss": np.concatenate(self.point_loss),
            "fold_loss": np.repeat(self.fold_loss, sizes)})

    def summary(self) -> dict:
        """Mean losses, timings and the headline diagnostics as a flat dict."""
        return {"method": self.method, "scheme": self.scheme, "level": self.level,
                "n_folds": len(self), "mean_fold_loss": float(np.mean(self.fold_loss)),
                "mean_point_loss": float(np.mean(np.concatenate(self.point_loss))),
                "seconds": self.seconds, **{f"seconds_{k}": v for k, v in
                                            self.stage_seconds.items()},
                **{k: v for k, v in self.diagnostics.items() if np.isscalar(v)}}


def compare(approx: CVResult, exact: CVResult) -> pd.DataFrame:
    """Relative errors of ``approx`` against ``exact`` on the folds both contain.

    Folds are matched by ``fold_ids`` (so IJ on 1,000 folds compares with exact CV on a
    subset of them), and must leave out the same units.

    Returns:
        DataFrame with one row per left-out unit (``kind="point"``) and one per fold
        (``kind="fold"``): ``fold_id``, ``unit`` (-1 for folds), ``approx``, ``exact``,
        ``abs_error``, ``rel_error = |approx - exact| / |exact|``. ``attrs`` holds the
        mean relative errors.
    """
    for name, r in (("approx", approx), ("exact", exact)):
        if not isinstance(r, CVResult):
            raise ArgumentTypeError(f"`{name}` must be a CVResult, got {type(r).__name__}")
    pos_a = {int(f): i for i, f in enumerate(approx.fold_ids)}
    common = [(pos_a[int(f)], j) for j, f in enumerate(exact.fold_ids) if int(f) in pos_a]
    if not common:
        raise InvalidArgumentError("`approx` and `exact` have no fold ids in common")
    rows = []
    for i, j in common:
        fid = int(approx.fold_ids[i])
        units = approx.folds[i]
        if not np.array_equal(units, exact.folds[j]):
            raise InvalidArgumentError(f"fold {fid} leaves out different units in the two results")
        a, e = approx.point_loss[i], exact.point_loss[j]
        rows.append(pd.DataFrame({"kind": "point", "fold_id": fid, "unit": units,
                                  "approx": a, "exact": e}))
        rows.append(pd.DataFrame({"kind": "fold", "fold_id": [fid], "unit": [-1],
                                  "approx": [approx.fold_loss[i]],
                                  "exact": [exact.fold_loss[j]]}))
    df = pd.concat(rows, ignore_index=True)
    df["abs_error"] = (df["approx"] - df["exact"]).abs()
    df["rel_error"] = df["abs_error"] / df["exact"].abs()
    df.attrs["mean_rel_error_point"] = float(df.loc[df.kind == "point", "rel_error"].mean())
    df.attrs["mean_rel_error_fold"] = float(df.loc[df.kind == "fold", "rel_error"].mean())
    return df
