"""``cross_validate``: fit if needed -> engine -> held-out losses -> :class:`CVResult`."""
from __future__ import annotations

import time
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from . import engine
from ._validate import check_choice, check_finite
from .errors import ArgumentTypeError, InvalidDataError
from .folds import as_folds
from .results import CVResult

__all__ = ["cross_validate"]

METHODS = ("ij", "ns", "exact")
SCHEMES = ("A", "B")


def _block(tree):
    return jax.tree_util.tree_map(lambda x: x.block_until_ready() if hasattr(
        x, "block_until_ready") else x, tree)


def _objective_scale(model, prepared, num_units) -> float:
    """Normaliser of F for optimiser tolerances: ``model.objective_scale(data)`` or ``n``."""
    scale_fn = getattr(model, "objective_scale", None)
    return float(scale_fn(prepared)) if callable(scale_fn) else float(num_units)


def _heldout_batch_size(num_units: int, num_folds: int) -> int:
    """Folds evaluated per vectorised batch: about 2e6 time steps at once."""
    return int(max(1, min(num_folds, 2_000_000 // max(num_units, 1))))


@partial(jax.jit, static_argnums=(0, 4))
def _heldout_batched(heldout, params_flat, weights, data, batch_size):
    return jax.lax.map(lambda uw: heldout(uw[0], uw[1], data), (params_flat, weights),
                       batch_size=batch_size)


def heldout_losses(objective: engine.WeightedObjective, params_flat, weights,
                   batch_size: int | None = None):
    """Evaluate ``objective.heldout`` for every fold: ``(fold_loss (F,), point_losses (F, n))``.

    Folds are processed by ``lax.map`` in vectorised batches of ``batch_size``.
    """
    batch_size = batch_size or _heldout_batch_size(objective.num_units, len(weights))
    return _block(_heldout_batched(objective.heldout, jnp.asarray(params_flat),
                                   jnp.asarray(weights), objective.data, int(batch_size)))


def cross_validate(model, data, folds, method: str = "ij", *, params=None, scheme: str = "A",
                   level: str = "within", executor=None, progress: bool = True,
                   checkpoint: str | None = None, batch_size: int | None = None,
                   exact_batch_size: int = 8, warn: bool = True) -> CVResult:
    """Estimate (``"ij"``, ``"ns"``) or compute (``"exact"``) cross-validation of ``model``.

    Args:
        model: an approxcv model (e.g. ``PoissonHMM(2)``).
        data: the model's data (one sequence for ``level="within"``, a list of sequences
            for ``level="structure"``).
        folds: :class:`~approxcv.folds.Folds` or a sequence of integer index arrays.
        method: ``"ij"`` (infinitesimal jackknife: one factorisation of H for all folds),
            ``"ns"`` (one Newton step per fold) or ``"exact"`` (refit per fold, warm-started).
        params: full-data parameters; fitted with ``model.fit`` when ``None``.
        scheme: ``"A"`` or ``"B"``, how left-out units are removed from the training
            objective (within-structure only).
        level: ``"within"`` (units are points of one structure) or ``"structure"``.
        executor: where exact refits run (see :mod:`approxcv.executors`).
        progress: show progress bars.
        checkpoint: ``.npz`` path to checkpoint/resume exact refits.
        batch_size: folds per vectorised held-out/Newton batch (default: by memory).
        exact_batch_size: folds refitted together by one ``vmap``.
        warn: emit warnings for inexact fits and jitter (they are always recorded).

    Returns:
        :class:`~approxcv.results.CVResult`.

    Example:
        >>> import approxcv as acv
        >>> x = acv.datasets.load_calls(1000)
        >>> model = acv.models.PoissonHMM(2)
        >>> res = acv.cross_validate(model, x, acv.folds.iid(1000, 0.1, 50), method="ij")
    """
    check_choice("method", method, METHODS)
    check_choice("scheme", scheme, SCHEMES)
    check_choice("level", level, ("within", "structure"))
    if not all(callable(getattr(model, a, None)) for a in ("objective", "heldout", "fit")):
        raise ArgumentTypeError(
            f"`model` must provide fit/objective/heldout, got {type(model).__name__}")
    prepared, level, num_units = model.prepare(data, level)
    folds = as_folds(folds, num_units)
    fit_seconds = None
    if params is None:
        t = time.perf_counter()
        params = model.fit(prepared, level)
        fit_seconds = time.perf_counter() - t
    for leaf in jax.tree_util.tree_leaves(params):
        check_finite("params", leaf)
    weights = jnp.asarray(folds.weights())
    t_start = time.perf_counter()
    stages = {}
    local = getattr(model, "local_model", None)
    if callable(local) and method in ("ij", "ns"):
        # non-smooth models (elastic net): differentiate their smooth local surrogate
        model, params, prepared = local(params, prepared)

    obj = engine.make_objective(model, prepared, params, scheme, level, num_units,
                                scale=_objective_scale(model, prepared, num_units))
    if not np.all(np.isfinite(np.asarray(obj.u_full))):
        raise InvalidDataError("`params` lie on the boundary of their domain (a probability "
                               "or rate of 0); the unconstrained parameters are infinite")
    ones = jnp.ones(num_units)
    t = time.perf_counter()
    grad, hess, cross_jac = _block(engine.gradient_hessian_jacobian(
        obj.fun, obj.u_full, ones, obj.data, method == "ij"))
    factor = engine.factor_hessian(hess, warn=warn)
    diagnostics = engine.fit_diagnostics(grad, factor, obj.u_full, warn=warn)
    stages["derivatives"] = time.perf_counter() - t
    t = time.perf_counter()
    if method == "ij":
        params_flat = _block(engine.ij_params(factor, cross_jac, obj.u_full, weights))
        stages["solve"] = time.perf_counter() - t
    elif method == "ns":
        params_flat, min_eigs, jitters = _block(engine.newton_params(
            obj.fun, obj.u_full, weights, obj.data, batch_size or 16))
        stages["solve"] = time.perf_counter() - t
        diagnostics["ns_hessian_min_eig"] = np.asarray(min_eigs)
        diagnostics["ns_jitter"] = np.asarray(jitters)
        if np.any(diagnostics["ns_jitter"] > 0):
            diagnostics["ns_jittered_folds"] = folds.ids[diagnostics["ns_jitter"] > 0]
    else:
        out = engine.exact_params(obj.fun, obj.u_full, weights, folds.ids, data=obj.data,
                                  executor=executor, batch_size=exact_batch_size,
                                  checkpoint=checkpoint, progress=progress, scale=obj.scale)
        params_flat = jnp.asarray(out["u"])
        stages["refit"] = time.perf_counter() - t
        diagnostics.update({"exact_converged": out["converged"],
                            "exact_num_steps": out["num_steps"],
                            "exact_grad_norm": out["grad_norm"]})
    t = time.perf_counter()
    fold_loss, point_all = heldout_losses(obj, params_flat, weights, batch_size)
    stages["heldout"] = time.perf_counter() - t
    seconds = time.perf_counter() - t_start

    fold_loss, point_all = np.asarray(fold_loss), np.asarray(point_all)
    if not np.all(np.isfinite(fold_loss)):
        bad = np.flatnonzero(~np.isfinite(fold_loss))
        diagnostics["nonfinite_folds"] = folds.ids[bad]
    stacked = jax.vmap(obj.unravel)(params_flat)
    return CVResult(
        method=method, scheme=scheme if level == "within" else None, level=level, folds=folds,
        fold_loss=fold_loss, point_loss=[point_all[i, folds[i]] for i in range(len(folds))],
        params=jax.tree_util.tree_map(np.asarray, stacked), params_flat=np.asarray(params_flat),
        seconds=seconds, stage_seconds=stages, diagnostics=diagnostics, fit_seconds=fit_seconds)
