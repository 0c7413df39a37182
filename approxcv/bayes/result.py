"""``BayesLOOResult``: a Bayesian LOO estimate as a :class:`~approxcv.results.CVResult`.

Folds are leave-one-out (``folds = approxcv.folds.leave_one_out(n)``); each fold's loss is
the point's ``-log p(y_i | x_i, D_-i)``, so ``to_frame()``, ``summary()``, ``approxcv.compare`` and
``to_arviz()`` work as for every other result.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..results import CVResult

__all__ = ["BayesLOOResult"]


@dataclass(repr=False)
class BayesLOOResult(CVResult):
    """A LOO estimate of a fitted GP.

    Extra attributes: ``estimator`` ("la", "ep", ...), ``inference`` ("laplace"/"ep"),
    ``lpd_points`` (``(S, n)`` conditional LOO log densities at each hyperparameter point).
    ``diagnostics`` holds ``unreliable_folds`` (points the estimator cannot vouch for, with
    ``unreliable_causes``), and where defined ``pareto_k`` and ``ess`` (``"is"``),
    ``converged`` / ``iterations`` (``"brute"``).
    """
    estimator: str = ""
    inference: str = ""
    lpd_points: np.ndarray | None = None

    @property
    def pointwise(self) -> np.ndarray:
        """``(n,)`` per-point losses ``-log p(y_i | x_i, D_-i)``."""
        return np.asarray(self.fold_loss, float)

    def to_frame(self):
        """One row per point (``CVResult.to_frame``) plus ``lpd`` and, where defined,
        ``pareto_k`` and ``ess``."""
        df = super().to_frame()
        df["lpd"] = -df["loss"]
        for key in ("pareto_k", "ess"):
            if key in self.diagnostics:
                df[key] = np.asarray(self.diagnostics[key])
        return df

    def __repr__(self) -> str:
        return (f"BayesLOOResult(estimator={self.estimator!r}, inference={self.inference!r}, "
                f"n={len(self)}, elpd={self.elpd:.4f}, se={self.se:.4f}, "
                f"unreliable={int(self.unreliable.sum())}, seconds={self.seconds:.3g})")
