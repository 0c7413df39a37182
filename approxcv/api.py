"""``cross_validate``: fit if needed -> engine -> held-out losses -> :class:`CVResult`."""
from __future__ import annotations

import time
import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from . import engine
from ._validate import check_choice, check_finite
from .errors import ArgumentTypeError, ConvergenceWarning, InvalidDataError, LocalOptimumWarning
from .folds import as_folds
from .results import CVResult

__all__ = ["cross_validate"]

METHODS = ("ij", "ns", "exact")
SCHEMES = ("A", "B")
SOLVERS = ("auto", "dense", "cg")
MAX_DENSE_DIM = engine.MAX_DENSE_DIM


def _block(tree):
    return jax.tree_util.tree_map(lambda x: x.block_until_ready() if hasattr(
        x, "block_until_ready") else x, tree)


def _objective_scale(model, prepared, num_units) -> float:
    """Normaliser of F for optimiser tolerances: ``model.objective_scale(data)`` or ``n``."""
    scale_fn = getattr(model, "objective_scale", None)
    return float(scale_fn(prepared)) if callable(scale_fn) else float(num_units)


def _heldout_batch_size(objective, num_folds: int) -> int:
    """Folds evaluated per vectorised batch: about 2e6 units (or 4e6 data entries) at once."""
    size = max(objective.num_units, engine.derivatives.data_entries(objective.data) // 2, 1)
    return int(max(1, min(num_folds, 2_000_000 // size)))


@partial(jax.jit, static_argnums=(0, 4))
def _heldout_batched(heldout, params_flat, weights, data, batch_size):
    return jax.lax.map(lambda uw: heldout(uw[0], uw[1], data), (params_flat, weights),
                       batch_size=batch_size)


def heldout_losses(objective: engine.WeightedObjective, params_flat, weights,
                   batch_size: int | None = None):
    """Evaluate ``objective.heldout`` for every fold: ``(fold_loss (F,), point_losses (F, n))``.

    Folds are processed by ``lax.map`` in vectorised batches of ``batch_size``.
    """
    batch_size = batch_size or _heldout_batch_size(objective, len(weights))
    return _block(_heldout_batched(objective.heldout, jnp.asarray(params_flat),
                                   jnp.asarray(weights), objective.data, int(batch_size)))


@partial(jax.jit, static_argnums=(0, 4))
def _objective_batched(fun, params_flat, weights, data, batch_size):
    return jax.lax.map(lambda u: fun(u, weights, data), params_flat, batch_size=batch_size)


def _record_better_optima(diagnostics, obj, refits, folds, batch_size, warn):
    """Compare the full-data objective at every exact refit with that at the full fit.

    A refit ``u_o`` with ``F(u_o; 1) < F(u_full; 1)`` shows that ``u_full`` is not the best
    local optimum: the refits can jump to a better one, which IJ and NS (expansions around
    ``u_full``) cannot follow, so the two disagree for a reason that is not the
    approximation's. Records ``full_objective``, ``exact_full_objective`` (per fold) and,
    when any fold is lower by more than ``1e-9 * scale``, ``better_optimum_folds`` and
    ``better_optimum_gap`` (the largest decrease), with a :class:`LocalOptimumWarning`
    (unless the fit is already flagged as inexact).
    """
    ones = jnp.ones(obj.num_units)
    at_fit = float(obj.fun(obj.u_full, ones, obj.data))
    at_refits = np.asarray(_objective_batched(obj.fun, refits, ones, obj.data,
                                              int(batch_size)))
    diagnostics["full_objective"] = at_fit
    diagnostics["exact_full_objective"] = at_refits
    better = at_refits < at_fit - 1e-9 * obj.scale
    if not better.any():
        return
    gap = float(at_fit - at_refits[better].min())
    diagnostics["better_optimum_folds"] = folds.ids[better]
    diagnostics["better_optimum_gap"] = gap
    if warn and not diagnostics.get("inexact_fit", False):
        first = int(folds.ids[better][np.argmin(at_refits[better])])
        warnings.warn(
            f"the full-data objective is lower at the exact refits of {int(better.sum())} of "
            f"{len(folds)} folds than at `params` (by up to {gap:.4g}, fold {first}): "
            "`params` is a local optimum but not the best, and refits that jump to a better "
            "one cannot be followed by IJ or NS. Refit, e.g. model.fit(data, init_params="
            f"result.fold_params({first})) or with perturbation restarts (n_perturb), and "
            "rerun. Listed in diagnostics['better_optimum_folds']", LocalOptimumWarning,
            stacklevel=3)


def _dense_derivatives(obj, level, with_jacobian, executor, structure_batch_size, progress,
                       warn):
    """``(g, HessianFactor, J or None)`` with the dense Hessian.

    At ``level="structure"`` (data with the structure axis first) they are accumulated over
    batches of structures through the executor seam; otherwise one forward-over-reverse
    sweep over all the data.
    """
    if level == "structure" and engine.accumulate.has_unit_axis(obj.data, obj.num_units):
        grad, hess, jac = engine.structure_derivatives(
            obj.fun, obj.u_full, obj.data, obj.num_units, batch_size=structure_batch_size,
            with_jacobian=with_jacobian, executor=executor, progress=progress)
    else:
        grad, hess, jac = _block(engine.gradient_hessian_jacobian(
            obj.fun, obj.u_full, jnp.ones(obj.num_units), obj.data, with_jacobian))
    return grad, engine.factor_hessian(hess, warn=warn), jac


#: CG tolerance of the full-data Newton system ``H s = g`` solved alongside the IJ folds'
#: systems: ``s`` only feeds the ``newton_step_norm`` diagnostic, and at an unconverged fit
#: ``g`` lies along low-curvature directions where CG is slowest, so it must not set the
#: step count of the whole block at the folds' (tighter) tolerance.
NEWTON_DIAGNOSTIC_RTOL = 1e-3


def _matrix_free_derivatives(obj, weights, method, rtol, max_steps, batch_size,
                             newton_rtol):
    """``(g, H^{-1} g, IJ parameters or None, CGResult of the full-data system)`` by CG;
    with ``method="ij"`` the Newton system is solved to ``newton_rtol``."""
    if method == "ij":
        hvp_batch = _heldout_batch_size(obj, len(weights) + 1)
        params, grad, step, cg = _block(engine.ij_params_cg(
            obj.fun, obj.u_full, weights, obj.data, rtol, max_steps,
            min(batch_size or 64, hvp_batch), hvp_batch, True, newton_rtol))
        return grad, step, params, cg
    ones = jnp.ones((1, obj.num_units))
    params, cg = _block(engine.newton_params_cg(obj.fun, obj.u_full, ones, obj.data, rtol,
                                                max_steps, 1))
    grad = engine.gradient(obj.fun, obj.u_full, ones[0], obj.data)
    return grad, obj.u_full - params[0], None, cg


def _record_ns_cg(diagnostics, cg, folds, warn):
    """Per-fold CG records of matrix-free Newton steps; folds whose ``H(w_o)`` showed
    non-positive curvature or whose CG did not converge are listed and warned about."""
    diagnostics["ns_cg_num_steps"] = np.asarray(cg.num_steps)
    diagnostics["ns_cg_converged"] = np.asarray(cg.converged)
    diagnostics["ns_hessian_min_eig"] = np.asarray(cg.min_curvature)
    bad = ~diagnostics["ns_cg_converged"]
    if np.any(bad):
        diagnostics["ns_unconverged_folds"] = folds.ids[bad]
        if warn:
            warnings.warn(
                f"matrix-free Newton steps: CG did not converge (or met non-positive "
                f"curvature) for {int(bad.sum())} of {len(bad)} folds; listed in "
                "diagnostics['ns_unconverged_folds']", ConvergenceWarning, stacklevel=3)


def cross_validate(model, data, folds, method: str = "ij", *, params=None, scheme: str = "A",
                   level: str = "within", executor=None, progress: bool = True,
                   checkpoint: str | None = None, batch_size: int | None = None,
                   exact_batch_size: int = 8, warn: bool = True, solver: str = "auto",
                   max_dense_dim: int = MAX_DENSE_DIM, cg_rtol: float = 1e-5,
                   cg_max_steps: int = 1000, structure_batch_size: int = 8,
                   exact_solver: str | None = None) -> CVResult:
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
        executor: where exact refits and, at ``level="structure"``, the per-batch
            derivatives run (see :mod:`approxcv.executors`).
        progress: show progress bars.
        checkpoint: ``.npz`` path to checkpoint/resume exact refits.
        batch_size: folds per vectorised held-out/Newton batch (default: by memory).
        exact_batch_size: folds refitted together by one ``vmap``.
        warn: emit warnings for inexact fits and jitter (they are always recorded).
        solver: how ``H`` is used. ``"dense"``: form and Cholesky-factor ``H`` (``D x D``);
            ``"cg"``: matrix-free Hessian-vector products and conjugate gradients, nothing
            of size ``D x D`` or ``D x n`` is formed; ``"auto"`` (default): ``"cg"`` when
            ``D > max_dense_dim``.
        max_dense_dim: largest ``D`` for which ``"auto"`` forms the dense Hessian.
        cg_rtol, cg_max_steps: CG relative residual tolerance and step limit (recorded in
            ``diagnostics``). The default ``1e-5`` (as in SciPy's and JAX's ``cg``) is far
            below the IJ's own error: on the ``D = 3,015`` problem of
            ``benchmarks/lscv_scale.py`` the fold losses move by at most 3e-6 nats between
            ``1e-5`` and ``1e-8``, while IJ and exact refits differ by 1-9 nats. With
            ``method="ij"`` the full-data Newton step (a diagnostic) is solved alongside to
            ``max(cg_rtol, 1e-3)``.
        structure_batch_size: structures per derivative batch at ``level="structure"``
            (dense solver: ``g``, ``H`` and ``J`` are accumulated batch by batch).
        exact_solver: optimiser of exact refits: ``"bfgs"``, ``"newton"`` (damped Newton,
            dense Hessian) or ``"lbfgs"``; default: the model's ``exact_solver`` attribute
            if it has one, else ``"lbfgs"`` when ``D > max_dense_dim`` and ``"bfgs"``
            otherwise (recorded in ``diagnostics["exact_solver"]``).

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
    check_choice("solver", solver, SOLVERS)
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
    dim = int(obj.u_full.shape[0])
    if solver == "auto":
        solver = "cg" if dim > max_dense_dim else "dense"
    t = time.perf_counter()
    if solver == "dense":
        grad, factor, cross_jac = _dense_derivatives(
            obj, level, method == "ij", executor, structure_batch_size, progress, warn)
        diagnostics = engine.fit_diagnostics(grad, factor, obj.u_full, warn=warn)
    else:
        newton_rtol = max(cg_rtol, NEWTON_DIAGNOSTIC_RTOL)
        grad, step, cg_fold, cg_full = _matrix_free_derivatives(
            obj, weights, method, cg_rtol, cg_max_steps, batch_size, newton_rtol)
        diagnostics = engine.cg_diagnostics(grad, step, cg_full, obj.u_full, cg_rtol,
                                            cg_max_steps, warn=warn)
        if method == "ij":  # last system: the Newton step, to its own tolerance
            diagnostics["cg_newton_rtol"] = newton_rtol
    diagnostics["num_params"] = dim
    stages["derivatives"] = time.perf_counter() - t
    t = time.perf_counter()
    if method == "ij" and solver == "dense":
        params_flat = _block(engine.ij_params(factor, cross_jac, obj.u_full, weights))
    elif method == "ij":
        params_flat = cg_fold  # solved together with the fit diagnostics, in "derivatives"
    elif method == "ns" and solver == "dense":
        params_flat, min_eigs, jitters = _block(engine.newton_params(
            obj.fun, obj.u_full, weights, obj.data, batch_size or 16))
        diagnostics["ns_hessian_min_eig"] = np.asarray(min_eigs)
        diagnostics["ns_jitter"] = np.asarray(jitters)
        if np.any(diagnostics["ns_jitter"] > 0):
            diagnostics["ns_jittered_folds"] = folds.ids[diagnostics["ns_jitter"] > 0]
    elif method == "ns":
        params_flat, cg = _block(engine.newton_params_cg(
            obj.fun, obj.u_full, weights, obj.data, cg_rtol, cg_max_steps, batch_size or 16))
        _record_ns_cg(diagnostics, cg, folds, warn)
    else:
        if exact_solver is None:
            exact_solver = getattr(model, "exact_solver", None) or (
                "lbfgs" if dim > max_dense_dim else "bfgs")
        check_choice("exact_solver", exact_solver, engine.exact.SOLVERS)
        diagnostics["exact_solver"] = exact_solver
        out = engine.exact_params(obj.fun, obj.u_full, weights, folds.ids, data=obj.data,
                                  executor=executor, batch_size=exact_batch_size,
                                  checkpoint=checkpoint, progress=progress, scale=obj.scale,
                                  solver=exact_solver)
        params_flat = jnp.asarray(out["u"])
        diagnostics.update({"exact_converged": out["converged"],
                            "exact_num_steps": out["num_steps"],
                            "exact_grad_norm": out["grad_norm"]})
        _record_better_optima(diagnostics, obj, params_flat, folds,
                              batch_size or _heldout_batch_size(obj, len(folds)), warn)
    stages["refit" if method == "exact" else "solve"] = time.perf_counter() - t
    t = time.perf_counter()
    fold_loss, point_all = heldout_losses(obj, params_flat, weights, batch_size)
    stages["heldout"] = time.perf_counter() - t
    seconds = time.perf_counter() - t_start

    fold_loss, point_all = np.asarray(fold_loss), np.asarray(point_all)
    if not np.all(np.isfinite(fold_loss)):
        bad = np.flatnonzero(~np.isfinite(fold_loss))
        diagnostics["nonfinite_folds"] = folds.ids[bad]
        if warn:
            warnings.warn(
                f"{len(bad)} of {len(folds)} folds have non-finite held-out losses ({method}; "
                f"fold ids {folds.ids[bad][:10].tolist()}); for 'ns' this means H(w_o) was "
                "far from positive definite (see diagnostics['ns_hessian_min_eig']). Listed in "
                "diagnostics['nonfinite_folds']", ConvergenceWarning, stacklevel=2)
    stacked = jax.vmap(obj.unravel)(params_flat)
    return CVResult(
        method=method, scheme=scheme if level == "within" else None, level=level, folds=folds,
        fold_loss=fold_loss, point_loss=[point_all[i, folds[i]] for i in range(len(folds))],
        params=jax.tree_util.tree_map(np.asarray, stacked), params_flat=np.asarray(params_flat),
        seconds=seconds, stage_seconds=stages, diagnostics=diagnostics, fit_seconds=fit_seconds)
