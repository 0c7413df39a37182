"""Folds whose optimum may lie in another basin: a certificate from known local optima.

A derivative-based estimate ``u_o`` (IJ, NS, a chord step) follows the fit's basin of the
fold objective ``F(u, w_o)``. Where the objective has other local optima — the ends of the
fit's other starts, a poorer fit another library stopped at — a fold can make one of them
the lower: exact refits then land there and no local estimate can follow (yearly
discoveries counts, ``PoissonHMM(2)``, contiguous 5 % folds: three folds 4.6-6.5 % off,
where IJ, NS and the chord agree with each other and vouch). The check costs one objective
evaluation per fold and known optimum ``a``: the fold is marked ``"other_basin"`` when

    F(u_a, w_o) < F(u_o, w_o),

that is, a known point of another basin is already lower on the fold's objective than
the estimate: the fold's minimum is not (certainly) in the fit's basin. ``F(u_o, w_o)`` is
at least the basin's minimum, so a fold whose basin holds is marked only where two basins
compete within the estimate's own error.

``auto`` on leave-future-out folds makes the same check with the optima its refits found
(each refit and its runner-up start, :func:`~approxcv.engine.methods.auto.auto_future`):
the shortest training sets have basins the full data do not.
"""
from __future__ import annotations

import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .._runtime import jit, map_in_batches
from .batching import fold_batch_size, fold_weights
from .diagnostics import unreliable_causes

__all__ = ["other_basin_folds", "mark_other_basins"]


@partial(jit, static_argnums=(0, 4, 5))
def _fold_objectives(fun, params_flat, index, others, n: int, batch_size: int, data):
    """``(F(u_o, w_o) (F,), F(u_a, w_o) (F, A))``: every fold's objective at its estimate
    and at each known optimum ``others (A, D)``."""
    def one(args):
        u, idx = args
        w = fold_weights(idx, n)
        return fun(u, w, data), jax.vmap(lambda a: fun(a, w, data))(others)
    return map_in_batches(one, (params_flat, index), batch_size)


def other_basin_folds(problem, params_flat, index, others) -> dict:
    """``{"mask": (F,) bool, "gap": (F,)}`` for the folds (padded ``index (F, m)``) at
    their estimates ``params_flat (F, D)``: ``gap = min_a F(u_a, w_o) - F(u_o, w_o)``
    over the known optima ``others (A, D)`` (unconstrained, the problem's layout), the
    fold marked where it is negative (module docstring). ``others`` empty: nothing marked."""
    others = np.asarray(others, np.float64).reshape(-1, np.shape(problem.u_full)[0])
    n_folds = int(np.shape(index)[0])
    if others.shape[0] == 0 or n_folds == 0:
        return {"mask": np.zeros(n_folds, bool), "gap": np.full(n_folds, np.inf)}
    at_estimate, at_others = _fold_objectives(
        problem.fun, jnp.asarray(params_flat), jnp.asarray(index), jnp.asarray(others),
        int(problem.n_units), fold_batch_size(problem, n_folds), problem.data)
    at_others = np.where(np.isfinite(at_others), np.asarray(at_others), np.inf)
    gap = np.min(at_others, axis=1) - np.asarray(at_estimate)
    return {"mask": np.asarray(gap < 0.0), "gap": gap}


def mark_other_basins(diagnostics: dict, problem, params_flat, index, others, stages: dict):
    """Mark the folds whose estimate is above a known optimum ``others`` on the fold's
    objective (:func:`~approxcv.engine.other_basins.other_basin_folds`; cause
    ``"other_basin"``, ``diagnostics["other_basin_gap"]``); nothing when no other optimum
    is known or the method made the check itself (``auto``, whose refits start at the
    known optima and which refits such folds: its causes hold ``"other_basin"``)."""
    raw = diagnostics.get("unreliable")
    if not others or (isinstance(raw, dict) and "other_basin" in raw):
        return
    t = time.perf_counter()
    basins = other_basin_folds(problem, params_flat, index, np.stack(others))
    causes = unreliable_causes(raw, len(basins["mask"]))
    causes["other_basin"] = basins["mask"]
    diagnostics.update(unreliable=causes, other_basin_gap=basins["gap"])
    stages["other_basins"] = time.perf_counter() - t
