"""``cross_validate``: problem -> method -> held-out losses -> :class:`CVResult`."""
from __future__ import annotations

import dataclasses
import functools
import time

import numpy as np

from ._runtime import length_bucket, placed
from ._progress import counting_first
from ._validate import check_choice
from .engine.audit import audit_folds
from .engine.diagnostics import mark_fit_concerns, record_unreliable
from .engine.error_estimate import finish_error_estimate
from .engine.fingerprint import result_fingerprint
from .engine.fold_buckets import bucketed, unpad_folds
from .engine.heldout import in_sample_lpd, method_heldout_losses, scored_points
from .engine.options import Options
from .engine.registry import get_method
from .engine.methods.exact import default_restarts
from .engine.other_basins import mark_other_basins
from .errors import ArgumentTypeError, InvalidArgumentError
from .folds import as_folds, future_origins
from .models.base import check_model
from .problem import flat_params, make_problem
from .results import CVResult

__all__ = ["cross_validate"]


_OPTION_NAMES = tuple(f.name for f in dataclasses.fields(Options) if f.name != "level")
#: local methods whose per-fold programs run on fold sets padded to a few sizes
#: (:mod:`approxcv.engine.fold_buckets`)
_BUCKETED_METHODS = ("ij", "ns")


def _in_problem_units(problem, folds, n_units: int):
    """``folds`` as the engine runs them on ``problem``: when the model padded its data with
    null units (``problem.n_units > n_units``,
    :meth:`~approxcv.models.base.Model.padded_units`), taken over the padded units with
    their rows padded to :func:`~approxcv._runtime.sizes.length_bucket` of the widest fold, so
    that data and folds of similar sizes share one shape of every program; else
    ``folds``."""
    if problem.n_units == n_units:
        return folds
    return folds.in_units(problem.n_units, length_bucket(int(folds.sizes.max())))


def _run_folds(method, model, problem, folds, opts):
    """The folds the method runs on: ``folds`` padded to a bucket size
    (:func:`~approxcv.engine.fold_buckets.bucketed`) for the engine's dense ``ij`` and
    ``ns`` — so that another number of folds on the same data reuses their compiled
    programs — else ``folds``. Not padded: as many folds as units (leave-one-out on data
    that is not padded to a size bucket: another count means other data anyway), models
    that compute their own methods or check folds (a check's warning counts folds), and
    matrix-free solves."""
    dim = int(problem.u_full.shape[0])
    if (method not in _BUCKETED_METHODS or problem.estimators is not None
            or getattr(model, "checks_folds", True) or len(folds) >= problem.n_units
            or not opts.dense(dim, problem.n_units)):
        return folds
    return bucketed(folds)


def _checked_options(options: dict, scheme: str, level) -> Options:
    """The run's :class:`~approxcv.engine.options.Options`, every option, ``scheme`` and
    ``level`` checked (unknown names refused by name)."""
    unknown = sorted(set(options) - set(_OPTION_NAMES))
    if unknown:
        raise ArgumentTypeError(f"cross_validate() got unknown option(s) {unknown}; "
                                f"options are {list(_OPTION_NAMES)}")
    check_choice("scheme", scheme, ("A", "B"))
    check_choice("level", level, ("within", "structure", None))
    return Options(**options)


def _check_method_options(opts, method: str, local: bool, refits: bool, future: bool):
    """Refuse, by name, options that do not apply to ``method`` (on these folds:
    ``future``, leave-future-out)."""
    for name in ("checkpoint", "restarts"):
        if getattr(opts, name) is not None and not refits:
            raise InvalidArgumentError(f"`{name}` applies to methods that refit folds "
                                       f"(e.g. 'exact'); method={method!r} does not use it")
    if opts.audit and not local and refits:
        raise InvalidArgumentError("`audit` measures an approximate method against exact "
                                   f"refits; method={method!r} refits every fold itself")
    if opts.refit_every is not None and (method != "auto" or not future):
        raise InvalidArgumentError(
            "`refit_every` applies to method='auto' on leave-future-out folds "
            "(acv.folds.leave_future_out: every fold removes a suffix of the units); got "
            f"method={method!r}" + ("" if future else " and folds that are not "
                                    "leave-future-out"))


def _problem(model, prepared, params, scheme, level, local: bool, refits: bool, opts,
             known: list):
    """The engine's :class:`~approxcv.problem.Problem` of ``model`` at ``params``: with
    the exact refits' restarts (``opts.restarts``, else by size) and, for a method that
    refits beside a local surrogate (``auto``) or for ``audit``, ``for_refits``: the
    problem of the model itself with its starts, the model's ``known`` optima among them
    (``auto`` refits the folds that lie above one of them)."""
    dim = int(flat_params(model, params)[0].shape[0])
    default = default_restarts(dim, getattr(model, "refit_restarts", None))
    restarts = 0 if not refits else default if opts.restarts is None else int(opts.restarts)
    problem = make_problem(model, prepared, params, scheme=scheme, level=level, local=local,
                           restarts=restarts, checked=True)
    if (opts.audit or opts.in_sample) and problem.estimators is not None:
        raise InvalidArgumentError(
            f"`{'audit' if opts.audit else 'in_sample'}` evaluates the engine's refits or "
            f"held-out losses; {model!r} computes its own methods (method='exact' refits "
            "every fold, 'auto' the folds it cannot vouch for)")
    if opts.audit or (local and refits):     # exact refits of the model itself, with starts
        problem = problem._replace(for_refits=functools.partial(
            make_problem, model, prepared, params, scheme=scheme, level=level, checked=True,
            restarts=restarts if refits else default,
            known_optima=np.stack(known) if known else None))
    return problem


def cross_validate(model, data, folds, method: str | None = None, *, params=None,
                   scheme: str = "A",
                   level: str | None = None, **options) -> CVResult:
    """Estimate (``"ij"``, ``"ns"``) or compute (``"exact"``) cross-validation of ``model``.

    Args:
        model: an approxcv model (e.g. ``PoissonHMM(2)``).
        data: the model's data (one sequence for ``level="within"``, a list of sequences
            for ``level="structure"``).
        folds: :class:`~approxcv.folds.Folds` or a sequence of integer index arrays.
        method: a registered method: ``"ij"`` (infinitesimal jackknife: one factorisation
            of ``H`` for all folds), ``"ns"`` (one Newton step per fold), ``"exact"``
            (refit per fold), ``"auto"`` (IJ, then NS where the IJ's error estimate exceeds
            ``tol``, then exact refits where NS's still does) or one added with
            :func:`~approxcv.engine.registry.register_method`; default: the model's
            ``default_method`` (``"ij"``; ``"ns"`` — ALOOCV — for regularised ERM, where the
            IJ under-corrects at weak regularisation, see ``docs/erm.md``).
        params: full-data parameters (validated against ``model``); fitted when ``None``.
        scheme: ``"A"`` or ``"B"``, how left-out units are removed from the training
            objective (within-structure only).
        level: ``"within"`` (units are points of one structure) or ``"structure"``;
            default: the model's reading of ``data``.
        **options: fields of :class:`~approxcv.engine.options.Options`: ``solver``
            (``"auto"``/``"dense"``/``"cg"``), ``max_dense_dim``, ``cg_rtol``,
            ``cg_max_steps``, ``batch_size``, ``exact_batch_size``, ``exact_solver``,
            ``restarts`` (exact: extra refits per fold from the model's own starts;
            default 2 for models with at most 30 parameters, else 0), ``executor``,
            ``checkpoint`` (exact: a directory; resumes and is refused if written for
            other inputs), ``progress``, ``warn``, ``structure_batch_size``; ``tol``
            (default 0.01): folds whose estimated relative error of the fold loss
            (``diagnostics["error_estimate"]``, ``ij``/``ns``) exceeds it are unreliable,
            and ``"auto"`` refines them; ``error_estimate``: ``"screened"`` (default: the
            IJ screens each fold from one chord step where the objective splits and takes
            the second step only where the screen cannot vouch;
            ``diagnostics["error_estimate_screened"]`` says which folds kept it) or
            ``"full"`` (two chord steps on every fold); ``max_exact``: most refits
            ``"auto"`` may spend; on leave-future-out folds (every fold removes a suffix of
            the units, :func:`~approxcv.folds.leave_future_out`) ``"auto"`` walks the
            origins, expanding each fold from the nearest refit and refitting exactly
            where no estimate vouches for it (``diagnostics["refit_origins"]``,
            ``["lfo_reference"]``; :func:`~approxcv.engine.methods.auto.auto_future`);
            ``refit_every=k`` also refits the ``k``-th, ``2k``-th, ... origin of that walk
            regardless of the estimates (``"auto"`` on such folds only);
            ``audit=k``: exact refits of ``k`` random folds, the measured error with a 95 %
            confidence interval in ``diagnostics["audit"]``; ``in_sample=True``: also the
            held-out losses at the full-data fit, ``diagnostics["lpd_full"]`` (one more
            held-out pass), from which ``to_arviz()`` reports ``p = lpd - elpd``;
            ``device``: where the fit and the method run — ``"auto"`` (default: a model
            whose work is a recursion over time, an HMM, on the host's CPU when JAX's
            default backend is an accelerator, every other model on JAX's default device),
            ``"default"`` or ``"cpu"``; the environment variable ``APPROXCV_DEVICE`` sets
            the default; the platform used is ``diagnostics["device"]``.

    Returns:
        :class:`~approxcv.results.CVResult`; folds a method cannot vouch for are listed in
        ``diagnostics["unreliable_folds"]`` (and warned about).

    Example:
        >>> import approxcv as acv
        >>> x = acv.datasets.load_calls(1000)
        >>> model = acv.models.PoissonHMM(2)
        >>> res = acv.cross_validate(model, x, acv.folds.iid(1000, 0.1, 50), method="ij")
    """
    opts = _checked_options(options, scheme, level)   # before the data are touched
    check_model(model)
    # the model's work on its device (:mod:`approxcv._runtime.placement`); warnings keep pointing
    # at the caller (no extra frame)
    with placed(getattr(model, "compute_profile", None), opts.device) as platform:
        method = method or getattr(model, "default_method", "ij")
        fn, local, refits = get_method(method)
        prepared, level, n_units = model.prepare(data, level)
        opts = dataclasses.replace(opts, level=level)
        folds = as_folds(folds, n_units)
        future = future_origins(folds) is not None
        _check_method_options(opts, method, local, refits, future)
        fit_seconds = None
        if params is None:
            t = time.perf_counter()
            params = model.fit(prepared, level)
            fit_seconds = time.perf_counter() - t
        params = model.check_params(params, prepared, level)
        concerns = dict(getattr(model, "fit_concerns", lambda *a: {})(params, prepared, level))
        known = [flat_params(model, p)[0] for p in getattr(   # approximate methods' check
            model, "known_optima", lambda *a: [])(params, prepared, level)] if local else []
        t_start = time.perf_counter()
        problem = _problem(model, prepared, params, scheme, level, local, refits, opts, known)
        run_folds = _run_folds(method, model, problem,
                               _in_problem_units(problem, folds, n_units), opts)
        with counting_first(len(folds)):     # bars count the user's folds, not padding
            params_flat, diagnostics = fn(problem, run_folds, opts)
            stages = dict(diagnostics.pop("stage_seconds", {}))
            fold_loss, points = method_heldout_losses(problem, params_flat, run_folds,
                                                      diagnostics, opts, stages)
            finish_error_estimate(problem, params_flat, fold_loss, run_folds, diagnostics,
                                  opts, stages)
            params_flat, fold_loss, points = unpad_folds(len(folds), diagnostics,
                                                         params_flat, fold_loss, points)
            if local and problem.estimators is None:
                mark_other_basins(diagnostics, problem, params_flat,
                                  run_folds.padded()[:len(folds)], known, stages)
            if opts.in_sample:               # log p(x_o | x_kept; theta_full): p = lpd - elpd
                diagnostics["lpd_full"] = in_sample_lpd(problem, run_folds, len(folds),
                                                        opts, stages)
        if opts.audit:
            t_audit = time.perf_counter()
            diagnostics["audit"] = audit_folds(problem, run_folds[:len(folds)], fold_loss,
                                               opts)
            stages["audit"] = time.perf_counter() - t_audit
        seconds = time.perf_counter() - t_start
        diagnostics.update(num_params=int(problem.u_full.shape[0]), device=platform)
        if concerns:
            mark_fit_concerns(diagnostics, concerns, len(folds), local)
        record_unreliable(diagnostics, fold_loss, folds, method, opts.warn, future=future)
        params_flat = np.asarray(params_flat)
        return CVResult(method=method, scheme=scheme if level == "within" else None,
                        level=level, folds=folds, fold_loss=fold_loss,
                        point_loss=scored_points(points, run_folds, len(folds)),
                        params=problem.unravel(params_flat), params_flat=params_flat,
                        seconds=seconds, stage_seconds=stages, diagnostics=diagnostics,
                        fit_seconds=fit_seconds,
                        fingerprint=result_fingerprint(model.comparable_data(data), folds,
                                                        level))

