"""``"exact"``: refit every fold, warm-started at the full-data fit, with optional restarts.

Each fold is refitted from the fit ``u_1`` and from ``R`` starts of the model's own
initialisation (``problem.starts``; ``restarts=R``), then from other folds' refits
(cross-fold starts; and, once a refit beats the fit on the full data, every fold from the
best refit: basin starts); the lowest converged fold objective is kept, the warm start winning
ties within ``RESTART_RTOL * scale`` (:mod:`approxcv.engine.exact_optima`). Exact CV is
the reference approximations are checked against, so a fold is *unreliable* when its
refit did not converge (``refit_unconverged``), when it is not the lowest fold objective
found (``worse_optimum``: a lower start or cross-fold candidate did not converge), or when
a competing optimum within ``OPTIMUM_GAP_NATS`` (2 nats) of it gives a held-out fold loss
more than ``HELDOUT_RTOL`` (1 %) different (``restart_disagreement``). Starts that only
reach clearly worse optima, or copies of the same optimum, flag nothing.

Refits are affine-invariant where the dense Hessian ``H`` at ``u_1`` is formed (``D <=
max_dense_dim``): they run in coordinates whitened by ``H``
(:mod:`approxcv.optim.precondition`; an ``H`` that is not positive definite is repaired and
the repair recorded), so the same model in other units gets the same refits. The
matrix-free path (L-BFGS, large ``D``) and a model's own solver keep the identity scaling.
Refits never solve with ``H``: ``params`` at which it is indefinite are accepted and its
state is recorded (``hessian_min_eig``, ``hessian_pd``), never raised.

Refits run in batches of folds (one ``jit(vmap)`` each) through the executor seam — in
process, one batch per core at once in threads (:func:`approxcv.executors.run_batches`) — and
finished batches are appended to a checkpoint bound to every input that determines them
(:mod:`approxcv.engine.checkpoint`); the cross-fold phase runs once every batch is done and
appends each improved record (a checkpoint keeps a fold's lowest-objective record).

The full-data objective is also evaluated at every refit: a refit *lower* than the fit
shows the fit is not the best optimum (``better_optimum_folds``,
:class:`~approxcv.errors.LocalOptimumWarning`).

Diagnostics, per fold: ``exact_objective``, ``exact_converged``, ``exact_num_steps``,
``exact_grad_norm`` (in the optimiser's coordinates: ``||dF/dv||`` when whitened),
``exact_warm_gap`` (warm refit minus the kept one), ``exact_start_spread`` (range over the
fold's own starts), ``exact_competing_objective`` / ``exact_competing_loss`` /
``exact_competing_u`` (the runner-up optimum; its held-out loss where within the gap; its
parameters, NaN where none), ``exact_lowest_objective``; per run:
``exact_cross_starts`` (folds refitted from another fold's optimum, listed in
``exact_improved_folds``), ``restart_disagreement_folds``, ``worse_optimum_folds``,
``exact_precondition`` (``"hessian"``, ``"repaired"`` or ``"identity"``) and
``exact_precondition_floored``.
"""
from __future__ import annotations

import time
import warnings

import jax.numpy as jnp
import numpy as np

from ...errors import user_stacklevel
from ..._runtime import pad_rows
from ...errors import (ConvergenceWarning, InvalidArgumentError, LocalOptimumWarning,
                       NoWorkersError)
from ...executors import check_executor, run_batches
from ...optim import batched_minimize, batched_newton_minimize, single_start
from ...optim.precondition import hessian_preconditioner, preconditioned
from ..checkpoint import Checkpoint, fingerprint, fold_digest
from ..diagnostics import fit_state
from ..exact_optima import (HELDOUT_RTOL, OPTIMUM_GAP_NATS, RESTART_RTOL, best_of_starts,
                            cross_fold_refits, full_objectives, unreliable_optima)
from ..fold_checks import with_fold_check
from .model_estimators import model_estimator, run_model_estimator
from ..registry import register_method

SOLVERS = ("bfgs", "newton", "lbfgs")
#: most parameters for which exact CV restarts by default; larger models refit only warm
AUTO_RESTART_MAX_DIM = 30
AUTO_RESTARTS = 2
_best_of_starts = best_of_starts      # the name earlier versions used


def default_restarts(dim: int, model_default: int | None) -> int:
    """Restarts used when ``restarts=None``: the model's declared default, else
    ``AUTO_RESTARTS`` for models with at most ``AUTO_RESTART_MAX_DIM`` parameters, else 0."""
    if model_default is not None:
        return int(model_default)
    return AUTO_RESTARTS if dim <= AUTO_RESTART_MAX_DIM else 0


def refit_solver(problem, options) -> str:
    """The refit optimiser: the option, else the model's own solver (``"model"``,
    ``problem.refit``), else the model's preference, else by size."""
    if options.exact_solver is None and problem.refit is not None:
        return "model"
    solver = options.exact_solver or problem.refit_solver or (
        "lbfgs" if problem.u_full.shape[0] > options.max_dense_dim else "bfgs")
    if solver not in SOLVERS:
        raise InvalidArgumentError(f"`exact_solver` must be one of {SOLVERS}, got {solver!r}")
    return solver


class RefitBatch:
    """Picklable task refitting a batch of (fold, start) pairs with one jitted call.

    ``__call__(u0s (b, D), weights (b, n), data) -> dict of (b,)/(b, D) NumPy arrays``:
    ``u``, ``converged``, ``num_steps``, ``grad_norm`` and ``objective`` (the fold
    objective at ``u``). Batches are padded to ``pad_to`` rows so every batch has one shape
    and compiles once. With a ``precondition``
    (:class:`~approxcv.optim.precondition.Preconditioner`) the optimiser runs in whitened
    coordinates ``v`` and ``grad_norm`` is ``||dF/dv||``, the gradient in the metric of
    ``H / scale`` (unit-free); without, ``||dF/du||``.
    """

    def __init__(self, fun, scale: float, solver: str, pad_to: int, max_steps: int | None = None,
                 newton_steps: int = 2, refit=None, rows: str = "vmap", precondition=None):
        self.fun, self.scale, self.solver, self.pad_to = fun, scale, solver, pad_to
        self.rows = rows            # how a batch's rows are evaluated (optim.over_rows)
        self.refit = refit          # the model's own solver, used when solver == "model"
        self.max_steps = max_steps or (50 if solver == "newton" else 1000)
        self.newton_steps = newton_steps
        self.precondition = None if solver == "model" else precondition

    def _solve(self):
        if self.solver == "model":
            return self.refit
        fun = self.fun if self.precondition is None else preconditioned(self.fun)
        # whitened coordinates (H ~ I at the fit) are well scaled: Newton steps take the
        # forward-difference Hessian of the exact gradient, a program that compiles two to
        # three times faster than one with Hessian-vector products (optim.hessian)
        hessian = "hvp" if self.precondition is None else "fd"
        if self.solver == "newton":
            return batched_newton_minimize(fun, self.scale, self.max_steps, self.rows,
                                           hessian)
        return batched_minimize(fun, self.scale, self.max_steps,
                                0 if self.solver == "lbfgs" else self.newton_steps, self.solver,
                                self.rows, hessian)

    def __call__(self, u0s, weights, data):
        size = len(weights)
        u0s, weights = pad_rows(self.pad_to, u0s, weights)
        pre = self.precondition
        if pre is not None:
            u0s = pre.to_whitened(u0s)
            data = (data, jnp.asarray(pre.shift), jnp.asarray(pre.matrix))
        res = self._solve()(jnp.asarray(u0s), jnp.asarray(weights), data)
        u = np.asarray(res.u)[:size]
        return {"u": u if pre is None else pre.from_whitened(u),
                "converged": np.asarray(res.converged)[:size],
                "num_steps": np.asarray(res.num_steps)[:size],
                "grad_norm": np.asarray(res.grad_norm)[:size],
                "objective": np.asarray(res.value)[:size]}


def _objective_at_fit(problem) -> float:
    """``F(u_1, 1)``, the full-data objective at the fit, through the jitted evaluation of
    :func:`~approxcv.engine.exact_optima.full_objectives` (compiled once per model and data
    shape; a plain call would trace and compile the objective's scan again on every run)."""
    return float(full_objectives(problem, problem.u_full[None])[0])


def _record_better_optima(diagnostics, problem, refits, folds, warn, at_fit):
    """The full-data objective at every refit; refits below the fit ``at_fit`` by more than
    ``1e-9 * scale`` show the fit is a local optimum that is not the best."""
    at_refits = full_objectives(problem, refits)
    diagnostics["full_objective"] = at_fit
    diagnostics["exact_full_objective"] = at_refits
    better = at_refits < at_fit - 1e-9 * problem.scale
    if not better.any():
        return
    gap = float(at_fit - at_refits[better].min())
    diagnostics["better_optimum_folds"] = folds.ids[better]
    diagnostics["better_optimum_gap"] = gap
    if warn and not diagnostics.get("inexact_fit", False):
        first = int(folds.ids[better][np.argmin(at_refits[better])])
        warnings.warn(better_optimum_message(int(better.sum()), len(folds), gap, first),
                      LocalOptimumWarning, stacklevel=user_stacklevel())


def better_optimum_message(count: int, n_folds: int, gap: float, first: int) -> str:
    """The :class:`LocalOptimumWarning` of refits below the fit: ``count`` of ``n_folds``
    refits lower, by up to ``gap``, e.g. at fold ``first``."""
    return (f"the full-data objective is lower at the exact refits of {count} of "
            f"{n_folds} folds than at `params` (by up to {gap:.4g}, fold {first}): "
            "`params` is a local optimum but not the best, and refits that jump to a better "
            "one cannot be followed by IJ or NS. Refit, e.g. model.fit(data, init_params="
            f"result.fold_params({first})) or with perturbation restarts (n_perturb), and "
            "rerun. Listed in diagnostics['better_optimum_folds']")


def _open_checkpoint(path, problem, task, starts, dim):
    vec, num = ("f8", (dim,)), ("f8", ())
    fields = {"u": vec, "converged": ("?", ()), "num_steps": ("i8", ()), "grad_norm": num,
              "objective": num, "start_spread": num, "warm_gap": num, "alt_u": vec,
              "alt_objective": num, "lowest_objective": num}
    model, scheme, level = problem.key
    print_ = fingerprint(data=problem.data, model=model, scheme=scheme, level=level,
                         params=problem.u_full, starts=starts,
                         options={"solver": task.solver, "max_steps": task.max_steps,
                                  "newton_steps": task.newton_steps, "scale": problem.scale,
                                  "precondition": _precondition_kind(task.precondition)})
    return Checkpoint(path, print_, fields)


def _workers_lost(err, n_done: int, n_folds: int, checkpoint, cross: bool = False):
    """The :class:`NoWorkersError` of a run whose Dask workers all left mid-run (``err``
    from :func:`~approxcv.executors.run_batches`), saying how many folds are done and whether
    ``checkpoint`` keeps them."""
    if checkpoint is None:
        kept = ("without `checkpoint=` they are lost when this call returns: pass "
                "checkpoint='<dir>' to keep finished folds across a rerun")
    elif cross:
        kept = (f"the checkpoint {str(checkpoint)!r} holds them; the refits from other folds' "
                "optima (cross-fold starts) were interrupted: start workers and rerun the "
                "same call, which redoes only those")
    else:
        kept = (f"the checkpoint {str(checkpoint)!r} holds them: start workers and rerun the "
                f"same call, which refits only the {n_folds - n_done} missing folds")
    lost = NoWorkersError(f"exact CV stopped with {n_done} of {n_folds} folds done; {kept}. "
                          f"{err}")
    lost.done, lost.total = n_done, n_folds
    return lost


def _precondition_kind(pre) -> str:
    return "identity" if pre is None else "repaired" if pre.floored else "hessian"


def _fit_state(problem, options, solver):
    """``(diagnostics of the fit, preconditioner or None)``; never raises on an indefinite
    Hessian (refits do not solve with it)."""
    if problem.refit is not None:
        # the model's own solver (e.g. a non-smooth objective, whose gradient means
        # nothing): its stationarity measure at the fit, from one full-data solve there
        fit = single_start(problem.refit, problem.u_full, np.ones(problem.n_units),
                           problem.data)
        state = {"grad_norm": float(fit.grad_norm), "fit_converged": bool(fit.converged),
                 "stage_seconds": {}}
        return state, None
    state, hess = fit_state(problem, options, strict=False, with_hessian=True)
    pre = None if hess is None or solver == "model" else hessian_preconditioner(
        hess, np.asarray(problem.u_full), problem.scale)
    state["exact_precondition"] = _precondition_kind(pre)
    state["exact_precondition_floored"] = 0 if pre is None else pre.floored
    return state, pre


def exact(problem, folds, options):
    """Refit every fold (module docstring); returns ``(params (n_folds, D), diagnostics)``."""
    if model_estimator(problem, "exact") is not None:    # the model's own (a GP)
        return run_model_estimator(problem, folds, options, "exact")
    check_executor(options.executor)        # a closed client, before the fit's derivatives
    solver = refit_solver(problem, options)
    state, pre = _fit_state(problem, options, solver)
    t = time.perf_counter()
    u_full = np.asarray(problem.u_full)
    dim, n = u_full.shape[0], problem.n_units
    extra = np.zeros((0, dim)) if problem.starts is None else np.asarray(problem.starts)
    starts = np.concatenate([u_full[None], extra.reshape(-1, dim)])
    n_starts = len(starts)
    digests = [fold_digest(folds[i]) for i in range(len(folds))]
    ids = [int(i) for i in folds.ids]
    digest_of = dict(zip(ids, digests))
    per = max(1, options.exact_batch_size // n_starts)
    task = RefitBatch(problem.fun, problem.scale, solver, per * n_starts, refit=problem.refit,
                      rows=problem.batch_rows, precondition=pre)
    ckpt = (None if options.checkpoint is None else
            _open_checkpoint(options.checkpoint, problem, task, starts, dim))
    done = {} if ckpt is None else ckpt.load(ids, digests)

    def weights_of(positions):
        w = np.ones((len(positions), n))
        for r, k in enumerate(positions):
            w[r, folds[k]] = 0.0
        return w

    def save(records):
        if ckpt is not None and records:
            ckpt.append(records, {fid: digest_of[fid] for fid in records})

    todo = [k for k, fid in enumerate(ids) if fid not in done]
    groups = [todo[s:s + per] for s in range(0, len(todo), per)]
    batches = [(np.tile(starts, (len(g), 1)), np.repeat(weights_of(g), n_starts, 0),
                problem.data) for g in groups]

    def record(i, out):
        rec = best_of_starts(out, len(groups[i]), n_starts, problem.scale)
        new = {ids[k]: {f: v[j] for f, v in rec.items()} for j, k in enumerate(groups[i])}
        done.update(new)
        save(new)

    try:
        run_batches(task, batches, executor=options.executor, progress=options.progress,
                    desc="exact CV", sizes=[len(g) for g in groups], on_result=record,
                    threads=True)
    except NoWorkersError as err:
        if not hasattr(err, "done"):        # no workers from the start: refused as it is
            raise
        raise _workers_lost(err, len(done), len(ids), options.checkpoint) from err
    rec = {f: np.stack([np.asarray(done[fid][f]) for fid in ids]) for f in done[ids[0]]}

    def refit_from(u0s, positions):
        """Refits of the folds at ``positions``, one start each, in batches of the task's
        shape (the program already compiled)."""
        chunks = [np.arange(s, min(s + task.pad_to, len(positions)))
                  for s in range(0, len(positions), task.pad_to)]
        try:
            outs = run_batches(task, [(u0s[c], weights_of(positions[c]), problem.data)
                                      for c in chunks], executor=options.executor,
                               progress=options.progress, desc="exact CV (cross-fold starts)",
                               sizes=[len(c) for c in chunks], threads=True)
        except NoWorkersError as err:
            if not hasattr(err, "done"):
                raise
            raise _workers_lost(err, len(done), len(ids), options.checkpoint, True) from err
        return {f: np.concatenate([o[f] for o in outs]) for f in outs[0]}

    index = folds.padded()
    at_fit = _objective_at_fit(problem)
    improved = cross_fold_refits(
        problem, index, rec, refit_from, at_fit=at_fit,
        on_improved=lambda at: save({ids[k]: {f: v[k] for f, v in rec.items()} for k in at}))
    params = rec["u"]
    converged = rec["converged"].astype(bool) & np.all(np.isfinite(params), axis=1)
    rec["converged"] = converged
    flags = unreliable_optima(problem, index, rec, options.batch_size,
                              unscored=folds.unscored_padded())
    disagree = flags["restart_disagreement"]
    diagnostics = {**state, "exact_solver": solver, "exact_restarts": n_starts - 1,
                   "exact_converged": converged, "exact_num_steps": rec["num_steps"],
                   "exact_grad_norm": rec["grad_norm"], "exact_objective": rec["objective"],
                   "exact_start_spread": rec["start_spread"], "exact_warm_gap": rec["warm_gap"],
                   "exact_competing_objective": rec["alt_objective"],
                   "exact_competing_u": rec["alt_u"],
                   "exact_competing_loss": flags["competing_loss"],
                   "exact_lowest_objective": rec["lowest_objective"],
                   "exact_cross_starts": int(improved.sum()),
                   "exact_improved_folds": folds.ids[improved],
                   "exact_optimum_gap": OPTIMUM_GAP_NATS, "exact_heldout_rtol": HELDOUT_RTOL,
                   "unreliable": {"refit_unconverged": ~converged,
                                  "worse_optimum": flags["worse_optimum"],
                                  "restart_disagreement": disagree}}
    if disagree.any():
        diagnostics["restart_disagreement_folds"] = folds.ids[disagree]
    if flags["worse_optimum"].any():
        diagnostics["worse_optimum_folds"] = folds.ids[flags["worse_optimum"]]
    if not converged.all() and options.warn:
        warnings.warn(f"exact refits of {int((~converged).sum())} fold(s) did not converge "
                      f"(fold ids {folds.ids[~converged][:10].tolist()}); their results are "
                      "kept and listed in diagnostics['unreliable_folds']",
                      ConvergenceWarning, stacklevel=user_stacklevel())
    _record_better_optima(diagnostics, problem, params, folds, options.warn, at_fit)
    diagnostics["stage_seconds"]["refit"] = time.perf_counter() - t
    return jnp.asarray(params), diagnostics


register_method("exact", with_fold_check(exact, exact=True), local=False, refits=True)
__all__ = ["exact", "RefitBatch", "SOLVERS", "default_restarts", "RESTART_RTOL"]
