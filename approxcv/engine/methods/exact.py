"""``"exact"``: refit every fold, warm-started at the full-data fit, with optional restarts.

Each fold is refitted from the fit ``u_1`` and from ``R`` starts of the model's own
initialisation (``problem.starts``; ``restarts=R``). The lowest converged fold objective is
kept; a fold whose starts reach different optima (fold objectives further apart than
``RESTART_RTOL * scale``) or that did not converge is *unreliable*: exact CV is the
reference approximations are checked against, and a refit that may sit in a worse local
optimum cannot serve as one. Refits run in batches of folds (one ``jit(vmap)`` each)
through the executor seam, and finished batches are appended to a checkpoint bound to
every input that determines them (:mod:`approxcv.engine.checkpoint`).

The full-data objective is also evaluated at every refit: a refit *lower* than the fit
shows the fit is not the best optimum (``better_optimum_folds``,
:class:`~approxcv.errors.LocalOptimumWarning`).
"""
from __future__ import annotations

import time
import warnings
from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from ...errors import ConvergenceWarning, InvalidArgumentError, LocalOptimumWarning
from ...executors import run_batches
from ...fitting import pad_rows
from ...optim import batched_minimize, batched_newton_minimize
from ..batching import heldout_batch_size
from ..checkpoint import Checkpoint, fingerprint, fold_digest
from ..diagnostics import fit_state
from ..fold_checks import with_fold_check
from . import register_method

SOLVERS = ("bfgs", "newton", "lbfgs")
#: starts of one fold disagree when their converged fold objectives differ by more than
#: this times the objective's scale (number of observations): far above round-off
#: (~1e-12 per observation), far below a different local optimum
RESTART_RTOL = 1e-6
#: most parameters for which exact CV restarts by default; larger models refit only warm
AUTO_RESTART_MAX_DIM = 30
AUTO_RESTARTS = 2


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
    and compiles once.
    """

    def __init__(self, fun, scale: float, solver: str, pad_to: int, max_steps: int | None = None,
                 newton_steps: int = 2, refit=None, rows: str = "vmap"):
        self.fun, self.scale, self.solver, self.pad_to = fun, scale, solver, pad_to
        self.rows = rows            # how a batch's rows are evaluated (optim.over_rows)
        self.refit = refit          # the model's own solver, used when solver == "model"
        self.max_steps = max_steps or (50 if solver == "newton" else 1000)
        self.newton_steps = newton_steps

    def _solve(self):
        if self.solver == "model":
            return self.refit
        if self.solver == "newton":
            return batched_newton_minimize(self.fun, self.scale, self.max_steps, self.rows)
        return batched_minimize(self.fun, self.scale, self.max_steps,
                                0 if self.solver == "lbfgs" else self.newton_steps, self.solver,
                                self.rows)

    def __call__(self, u0s, weights, data):
        size = len(weights)
        u0s, weights = pad_rows(self.pad_to, u0s, weights)
        res = self._solve()(jnp.asarray(u0s), jnp.asarray(weights), data)
        return {"u": np.asarray(res.u)[:size], "converged": np.asarray(res.converged)[:size],
                "num_steps": np.asarray(res.num_steps)[:size],
                "grad_norm": np.asarray(res.grad_norm)[:size],
                "objective": np.asarray(res.value)[:size]}


def _best_of_starts(out: dict, n_folds: int, n_starts: int, scale: float) -> dict:
    """Per fold: the warm start (row 0) unless another converged start is lower by more than
    ``RESTART_RTOL * scale`` (then the lowest; a relabelled copy of the same optimum, e.g.
    permuted states, never replaces the warm start), and ``start_spread``, the range of
    converged objectives."""
    shaped = {k: v.reshape((n_folds, n_starts) + v.shape[1:]) for k, v in out.items()}
    ok = shaped["converged"] & np.isfinite(shaped["objective"])
    value = np.where(ok, shaped["objective"], np.inf)
    lowest = np.argmin(value, 1)
    warm_ok = ok[:, 0] & (value[:, 0] <= value.min(1) + RESTART_RTOL * scale)
    best = np.where(warm_ok | ~ok.any(1), 0, lowest)
    rows = np.arange(n_folds)
    rec = {k: v[rows, best] for k, v in shaped.items()}
    hi = np.where(ok, shaped["objective"], -np.inf).max(1)
    with np.errstate(invalid="ignore"):      # inf - inf where no start converged: masked
        rec["start_spread"] = np.where(ok.sum(1) > 1, hi - value.min(1), 0.0)
        rec["warm_gap"] = np.where(ok[:, 0] & ok.any(1), value[:, 0] - value.min(1), 0.0)
    return rec


@partial(jax.jit, static_argnums=(0, 4))
def _full_objective(fun, us, ones, data, batch_size):
    return jax.lax.map(lambda u: fun(u, ones, data), us, batch_size=batch_size)


def _record_better_optima(diagnostics, problem, refits, folds, warn):
    """The full-data objective at every refit; refits below the fit by more than
    ``1e-9 * scale`` show the fit is a local optimum that is not the best."""
    ones = jnp.ones(problem.n_units)
    at_fit = float(problem.fun(problem.u_full, ones, problem.data))
    batch = heldout_batch_size(problem.n_units, problem.data, len(refits))
    at_refits = np.asarray(_full_objective(problem.fun, jnp.asarray(refits), ones,
                                           problem.data, batch))
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
        warnings.warn(
            f"the full-data objective is lower at the exact refits of {int(better.sum())} of "
            f"{len(folds)} folds than at `params` (by up to {gap:.4g}, fold {first}): "
            "`params` is a local optimum but not the best, and refits that jump to a better "
            "one cannot be followed by IJ or NS. Refit, e.g. model.fit(data, init_params="
            f"result.fold_params({first})) or with perturbation restarts (n_perturb), and "
            "rerun. Listed in diagnostics['better_optimum_folds']", LocalOptimumWarning,
            stacklevel=4)


def _open_checkpoint(path, problem, task, starts, dim):
    fields = {"u": ("f8", (dim,)), "converged": ("?", ()), "num_steps": ("i8", ()),
              "grad_norm": ("f8", ()), "objective": ("f8", ()), "start_spread": ("f8", ()),
              "warm_gap": ("f8", ())}
    model, scheme, level = problem.key
    print_ = fingerprint(data=problem.data, model=model, scheme=scheme, level=level,
                         params=problem.u_full, starts=starts,
                         options={"solver": task.solver, "max_steps": task.max_steps,
                                  "newton_steps": task.newton_steps, "scale": problem.scale})
    return Checkpoint(path, print_, fields)


def exact(problem, folds, options):
    """Refit every fold (module docstring); returns ``(params (n_folds, D), diagnostics)``."""
    solver = refit_solver(problem, options)
    if problem.refit is None:
        state = fit_state(problem, options)
    else:   # the model's own solver (e.g. a non-smooth objective, whose gradient means
        # nothing): its stationarity measure at the fit, from one full-data solve there
        fit = problem.refit(problem.u_full[None], jnp.ones((1, problem.n_units)), problem.data)
        state = {"grad_norm": float(fit.grad_norm[0]), "fit_converged": bool(fit.converged[0]),
                 "stage_seconds": {}}
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
                      rows=problem.batch_rows)
    ckpt = (None if options.checkpoint is None else
            _open_checkpoint(options.checkpoint, problem, task, starts, dim))
    done = {} if ckpt is None else ckpt.load(ids, digests)
    todo = [k for k, fid in enumerate(ids) if fid not in done]
    groups = [todo[s:s + per] for s in range(0, len(todo), per)]
    batches = []
    for group in groups:
        w = np.ones((len(group), n))
        for r, k in enumerate(group):
            w[r, folds[k]] = 0.0
        batches.append((np.tile(starts, (len(group), 1)), np.repeat(w, n_starts, 0),
                        problem.data))

    def record(i, out):
        rec = _best_of_starts(out, len(groups[i]), n_starts, problem.scale)
        new = {ids[k]: {f: v[j] for f, v in rec.items()} for j, k in enumerate(groups[i])}
        done.update(new)
        if ckpt is not None:
            ckpt.append(new, {fid: digest_of[fid] for fid in new})

    run_batches(task, batches, executor=options.executor, progress=options.progress,
                desc="exact CV", sizes=[len(g) for g in groups], on_result=record)
    rows = [done[fid] for fid in ids]
    get = lambda f: np.array([r[f] for r in rows])  # noqa: E731
    params = np.stack([r["u"] for r in rows])
    converged = get("converged").astype(bool) & np.all(np.isfinite(params), axis=1)
    spread = get("start_spread")
    disagree = spread > RESTART_RTOL * problem.scale
    diagnostics = {**state, "exact_solver": solver, "exact_restarts": n_starts - 1,
                   "exact_converged": converged, "exact_num_steps": get("num_steps"),
                   "exact_grad_norm": get("grad_norm"), "exact_objective": get("objective"),
                   "exact_start_spread": spread, "exact_warm_gap": get("warm_gap"),
                   "unreliable": {"refit_unconverged": ~converged,
                                  "restart_disagreement": disagree}}
    if disagree.any():
        diagnostics["restart_disagreement_folds"] = folds.ids[disagree]
    if not converged.all() and options.warn:
        warnings.warn(f"exact refits of {int((~converged).sum())} fold(s) did not converge "
                      f"(fold ids {folds.ids[~converged][:10].tolist()}); their results are "
                      "kept and listed in diagnostics['unreliable_folds']",
                      ConvergenceWarning, stacklevel=3)
    _record_better_optima(diagnostics, problem, params, folds, options.warn)
    diagnostics["stage_seconds"]["refit"] = time.perf_counter() - t
    return jnp.asarray(params), diagnostics


register_method("exact", with_fold_check(exact, exact=True), local=False, refits=True)
__all__ = ["exact", "RefitBatch", "SOLVERS", "default_restarts"]
