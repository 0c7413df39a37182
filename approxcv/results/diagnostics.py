"""``Diagnostics``: the record of what a cross-validation run can vouch for.

Every result's ``diagnostics`` is one of these. Its *common fields* mean the same for every
method and family and are typed attributes (a method that does not define one gives its
default, never a missing key); everything a particular method adds (``exact_converged``,
``grad_norm``, ``pareto_k``, ...) is in :attr:`Diagnostics.extras`. It is also a ``dict``
over both, so ``res.diagnostics["exact_converged"]`` reads an extra and saved results keep
their layout.

=====================  ====================================  ===============================
field                  type                                  meaning (default)
=====================  ====================================  ===============================
``unreliable_folds``   ``ndarray[int]`` (fold ids)           folds the method cannot vouch
                                                             for (none)
``unreliable_causes``  ``dict[str, ndarray[int]]``           the same folds by cause ({})
``error_estimate``     ``ndarray[float] (n_folds,)`` or None  estimated relative error of
                                                             each fold loss (``ij``, ``ns``)
``tol``                ``float`` or None                     the error estimate's threshold
``num_params``         ``int`` or None                       unconstrained parameters ``D``
``nonfinite_folds``    ``ndarray[int]``                      folds with a non-finite loss
``lpd_full``           ``ndarray[float]`` or None            in-sample log densities of the
                                                             left-out units (``in_sample``)
``audit``              ``dict`` or None                      exact refits of random folds
                                                             (``audit=k``)
=====================  ====================================  ===============================
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError

__all__ = ["Diagnostics", "COMMON_FIELDS"]

#: the common fields, in the order of the table above
COMMON_FIELDS = ("unreliable_folds", "unreliable_causes", "error_estimate", "tol",
                 "num_params", "nonfinite_folds", "lpd_full", "audit")


def _fold_ids(name, value) -> np.ndarray:
    ids = np.asarray(value)
    if ids.size == 0:
        return np.zeros(0, dtype=int)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
        raise InvalidArgumentError(f"diagnostics[{name!r}] must be a 1-D array of fold ids "
                                   f"(integers), got dtype {ids.dtype} shape {ids.shape}")
    return ids


class Diagnostics(dict):
    """What a run can vouch for: typed common fields (module docstring) and ``extras``.

    Args:
        values: a mapping of the run's diagnostics (common fields and extras together).
        n_folds: the number of folds, to check per-fold fields against (``None``: not
            checked).

    Raises:
        InvalidArgumentError: a common field of the wrong type or length (a per-fold array
            of another run's length is a mixed-up result, not a diagnostic).
    """

    def __init__(self, values=(), n_folds: int | None = None):
        super().__init__(values)
        for name in ("unreliable_folds", "nonfinite_folds"):
            if name in self:
                self[name] = _fold_ids(name, self[name])
        if "unreliable_causes" in self:
            self["unreliable_causes"] = {str(k): _fold_ids(f"unreliable_causes.{k}", v)
                                         for k, v in dict(self["unreliable_causes"]).items()}
        if self.get("error_estimate") is not None:
            est = np.asarray(self["error_estimate"], dtype=float)
            if est.ndim != 1 or (n_folds is not None and est.shape[0] != n_folds):
                raise InvalidArgumentError(
                    f"diagnostics['error_estimate'] must hold one value per fold "
                    f"({n_folds}), got shape {est.shape}")
            self["error_estimate"] = est
        if self.get("tol") is not None:
            self["tol"] = float(self["tol"])
        if self.get("num_params") is not None:
            self["num_params"] = int(self["num_params"])

    def __reduce__(self):             # pickles (Dask, checkpoints) as the record it is
        return (type(self), (dict(self),))

    @property
    def unreliable_folds(self) -> np.ndarray:
        return self.get("unreliable_folds", np.zeros(0, dtype=int))

    @property
    def unreliable_causes(self) -> dict:
        return self.get("unreliable_causes", {})

    @property
    def error_estimate(self) -> np.ndarray | None:
        return self.get("error_estimate")

    @property
    def tol(self) -> float | None:
        return self.get("tol")

    @property
    def num_params(self) -> int | None:
        return self.get("num_params")

    @property
    def nonfinite_folds(self) -> np.ndarray:
        return self.get("nonfinite_folds", np.zeros(0, dtype=int))

    @property
    def lpd_full(self) -> np.ndarray | None:
        return self.get("lpd_full")

    @property
    def audit(self) -> dict | None:
        return self.get("audit")

    @property
    def extras(self) -> dict:
        """The method-specific entries: everything but the common fields."""
        return {k: v for k, v in self.items() if k not in COMMON_FIELDS}

    def __repr__(self) -> str:
        bad = len(self.unreliable_folds)
        return (f"Diagnostics(unreliable_folds={bad}, error_estimate="
                f"{'None' if self.error_estimate is None else 'per fold'}, tol={self.tol}, "
                f"num_params={self.num_params}, extras={sorted(self.extras)})")
