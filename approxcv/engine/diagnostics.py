"""Diagnostics of the supplied fit: is it a stationary point, is H well conditioned."""
from __future__ import annotations

import time
import warnings

import jax
import numpy as np

from ..errors import user_stacklevel
from ..optim.precondition import PRECONDITION_EIG_FLOOR
from ..errors import (ConvergenceWarning, InexactFitWarning, NotPositiveDefiniteError,
                      UnreliableFoldWarning)
from ..optim.pd import HessianFactor, factor_hessian, solve
from .derivatives import full_derivatives, gradient
from .matrix_free import newton_params_cg

#: relative Newton-step size above which the fit is reported as inexact
INEXACT_FIT_RTOL = 1e-4


def _stationarity(grad, step, u_full, warn: bool) -> dict:
    """``grad_norm``, ``newton_step_norm = ||H^{-1} g||`` and the inexact-fit flag.

    The fit is inexact when the Newton step to the optimum exceeds ``1e-4 (1 + ||u_1||)``;
    an :class:`InexactFitWarning` then gives the numbers (the IJ still applies at an
    inexact fit, but the user should know).
    """
    grad_norm = float(np.linalg.norm(np.asarray(grad)))
    step_norm = float(np.linalg.norm(np.asarray(step)))
    inexact = step_norm > INEXACT_FIT_RTOL * (1.0 + float(np.linalg.norm(np.asarray(u_full))))
    if inexact and warn:
        warnings.warn(
            f"the supplied parameters are not a stationary point: gradient norm {grad_norm:.3g}, "
            f"Newton step to the optimum {step_norm:.3g}; approximate CV is taken around "
            f"this inexact fit", InexactFitWarning, stacklevel=user_stacklevel())
    return {"grad_norm": grad_norm, "newton_step_norm": step_norm, "inexact_fit": bool(inexact)}


def fit_diagnostics(grad, factor: HessianFactor, u_full, warn: bool = True) -> dict:
    """Summarise the fit at ``u_1`` from the dense Hessian factor.

    Returns:
        dict with ``grad_norm``, ``newton_step_norm``, ``hessian_min_eig``,
        ``hessian_max_eig``, ``jitter``, ``condition_number``, ``inexact_fit``.
    """
    out = _stationarity(grad, solve(factor, np.asarray(grad)), u_full, warn)
    out.update({"hessian_min_eig": factor.min_eig, "hessian_max_eig": factor.max_eig,
                "jitter": factor.jitter, "condition_number": factor.condition_number,
                "solver": "dense", "hessian_pd": bool(factor.reliable)})
    return out


def cg_diagnostics(grad, step, cg, u_full, rtol: float, max_steps: int, warn: bool = True,
                   name: str = "Hessian", strict: bool = True) -> dict:
    """Summarise a matrix-free (CG) solve at ``u_1``.

    ``hessian_min_eig`` is the smallest curvature met by the CG run (``p'Hp / p'p`` for
    single-vector CG, ``lambda_min(P'HP)`` for block CG): an *upper bound* on the smallest
    eigenvalue (flagged by ``hessian_min_eig_is_bound``). ``strict=False``: non-positive
    curvature is recorded (``hessian_pd`` False), not raised.

    Raises:
        NotPositiveDefiniteError: (``strict``) CG met a direction of non-positive
            curvature, so ``H`` is not positive definite and the solve is meaningless.
    """
    min_curv = np.asarray(cg.min_curvature)
    if np.any(min_curv <= 0) and strict:
        raise NotPositiveDefiniteError(
            f"the {name} is not positive definite: conjugate gradients met a direction of "
            f"curvature {float(min_curv.min()):.3g} <= 0; is the fit at a minimum? "
            "(solver='dense' adds a recorded jitter instead)")
    converged = np.asarray(cg.converged)
    steps = np.asarray(cg.num_steps)
    if warn and not converged.all():
        warnings.warn(
            f"conjugate gradients did not reach rtol={rtol:g} in {max_steps} steps for "
            f"{int((~converged).sum())} of {converged.size} systems (largest relative residual "
            f"{float(np.max(cg.residual_norm)):.3g}); raise `cg_max_steps` "
            "(recorded in diagnostics['cg_converged'])", ConvergenceWarning, stacklevel=user_stacklevel())
    out = _stationarity(grad, step, u_full, warn)
    out.update({"hessian_min_eig": float(min_curv.min()), "hessian_min_eig_is_bound": True,
                "hessian_max_eig": float("nan"), "jitter": 0.0,
                "condition_number": float("nan"), "solver": "cg", "cg_rtol": float(rtol),
                "cg_max_steps": int(max_steps), "cg_num_steps": steps,
                "cg_residual": np.asarray(cg.residual_norm), "cg_converged": converged,
                "hessian_pd": bool(np.all(min_curv > 0))})
    return out


def indefinite_diagnostics(grad, hess, u_full, warn: bool = True) -> dict:
    """:func:`fit_diagnostics` for a dense ``H`` that no jitter on the ladder makes positive
    definite (or that is not finite): the eigenvalues of ``H`` are recorded, ``jitter``
    and ``condition_number`` are NaN, ``hessian_pd`` is False, and the Newton step is
    taken with ``|H|`` (eigenvalues replaced by their absolute values, floored as in
    :mod:`approxcv.optim.precondition`)."""
    hess = np.asarray(hess, np.float64)
    nan = float("nan")
    if np.all(np.isfinite(hess)):
        eigs, vecs = np.linalg.eigh(0.5 * (hess + hess.T))
        floor = max(PRECONDITION_EIG_FLOOR * float(np.max(np.abs(eigs))), 1e-300)
        g = np.asarray(grad, np.float64)
        step = vecs @ ((vecs.T @ g) / np.maximum(np.abs(eigs), floor))
        min_eig, max_eig = float(eigs[0]), float(eigs[-1])
    else:
        step, min_eig, max_eig = np.full(len(hess), nan), nan, nan
    out = _stationarity(grad, step, u_full, warn)
    out.update({"hessian_min_eig": min_eig, "hessian_max_eig": max_eig, "jitter": nan,
                "condition_number": nan, "solver": "dense", "hessian_pd": False})
    return out


#: what each cause of an unreliable fold means (the warning names those that applied)
UNRELIABLE_CAUSES = {
    "hessian_not_pd": "the full-data Hessian needed jitter (not positive definite)",
    "fold_hessian_not_pd": "the fold's Hessian H(w_o) needed jitter (not positive definite)",
    "cg_unconverged": "conjugate gradients did not converge",
    "error_estimate_above_tol": "the estimated error of the fold loss exceeds `tol`",
    "chord_not_contracting": "the chord iteration behind the error estimate does not "
                             "contract (rho >= 1): the estimate is its first step's only "
                             "and cannot vouch for the fold",
    "refit_unconverged": "the exact refit did not converge",
    "restart_disagreement": "refit starts reach different optima with materially different "
                            "held-out losses",
    "worse_optimum": "the chosen refit is not the lowest fold objective found",
    "support_change": "the fold changes the L1 support the approximation assumes",
    "over_budget": "no method vouched for the fold within the `max_exact` refits",
    "nonfinite_loss": "the held-out loss is not finite",
    "method_flag": "the method flagged it",
    "fit_may_not_be_optimum": "the estimate is conditional on a fit that may not be the "
                              "optimum (diagnostics['fit_concerns'])",
    "fit_not_best_optimum": "an exact refit found a lower full-data objective than the fit "
                            "(diagnostics['better_optimum_folds'])",
    "other_basin": "a known local optimum of another basin (where another start of the fit "
                   "ended, or an exact refit of auto's) is lower on the fold's objective "
                   "than the estimate",
}

#: what a user can do about each cause, said in the unreliable-fold warning
UNRELIABLE_REMEDIES = {
    "error_estimate_above_tol": "method='auto' refines such folds (NS, then exact refits, "
                                "at most `max_exact`); smaller folds or a larger `tol` "
                                "also help",
    "over_budget": "raise `max_exact` (or None) to refit them",
    "chord_not_contracting": "method='auto' refines such folds (NS, then exact refits, "
                             "at most `max_exact`); smaller folds also help",
    "hessian_not_pd": "the fit may not be a minimum: refit (more starts) or use "
                      "method='exact'",
    "fold_hessian_not_pd": "method='exact' refits such folds; method='auto' does so "
                           "within `max_exact`",
    "cg_unconverged": "raise `cg_max_steps` or use solver='dense'",
    "refit_unconverged": "raise the refit's step limit or try exact_solver='newton'",
    "restart_disagreement": "the fold has several optima: more `restarts` or smaller folds",
    "worse_optimum": "more `restarts`",
    "nonfinite_loss": "check the data of those folds; method='exact' refits them",
    "fit_may_not_be_optimum": "refit the model with more or other starts (n_init, "
                              "init_params) or fewer states, or use method='exact'",
    "fit_not_best_optimum": "refit the model from the better refit (model.fit(data, "
                            "init_params=result.fold_params(i))) and rerun",
    "other_basin": "method='exact' refits such folds (their optimum may lie in the other "
                   "basin, which no local estimate follows)",
}


#: the advice for leave-future-out folds (:func:`~approxcv.folds.future_origins`), where
#: it differs: the origins are walked by ``method="auto"``, and the horizon sets the folds
UNRELIABLE_REMEDIES_FUTURE = {
    "error_estimate_above_tol": "method='auto' walks the origins and refits exactly where "
                                "the estimate exceeds `tol` (each refit the expansion "
                                "point of the next origins; at most `max_exact`); a "
                                "shorter `horizon` (leave_future_out(..., horizon=M)) or "
                                "a larger `tol` also help",
    "over_budget": "raise `max_exact` (or None) to refit them, or pass refit_every=k to "
                   "refit every k-th origin; a shorter `horizon` needs fewer refits",
    "fold_hessian_not_pd": "method='auto' refits such folds along its walk of the "
                           "origins, within `max_exact`",
}


def estimate_causes(estimate, rate, tol) -> dict:
    """The causes an error estimate gives its folds (``(n_folds,)`` masks):
    ``"chord_not_contracting"`` where the chord iteration behind it does not contract
    (``rate``, its ``rho``, not below 1 or NaN: the estimate then says nothing however
    small) and ``"error_estimate_above_tol"`` where it contracts and the estimate is
    above ``tol`` or not finite."""
    contracts = np.asarray(rate, np.float64) < 1.0
    return {"chord_not_contracting": ~contracts,
            "error_estimate_above_tol": contracts & ~(np.asarray(estimate) <= tol)}


def unreliable_causes(raw, n_folds: int) -> dict:
    """A method's ``diagnostics["unreliable"]`` as ``{cause: (n_folds,) bool}``: a dict of
    masks keyed by cause (:data:`UNRELIABLE_CAUSES`), or one mask (cause ``"method_flag"``)."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raw = {"method_flag": raw}
    return {k: np.asarray(v, bool).reshape(n_folds) for k, v in raw.items()}


def remedies(causes: dict, future: bool = False) -> str:
    """`` To fix: ...`` — the :data:`UNRELIABLE_REMEDIES` of the causes that apply (on
    leave-future-out folds, ``future``, those of :data:`UNRELIABLE_REMEDIES_FUTURE` where it
    has one), or ``""``."""
    table = {**UNRELIABLE_REMEDIES, **UNRELIABLE_REMEDIES_FUTURE} if future \
        else UNRELIABLE_REMEDIES
    said = [table[k] for k, m in causes.items() if np.any(m) and k in table]
    return f" To fix: {'; '.join(dict.fromkeys(said))}." if said else ""


def mark_fit_concerns(diagnostics: dict, concerns: dict, n_folds: int, local: bool):
    """Record a model's ``fit_concerns`` in ``diagnostics["fit_concerns"]`` and, for an
    approximate (``local``) method, whose every estimate is derived from the fit, mark
    every fold unreliable (cause ``"fit_may_not_be_optimum"``); exact refits (``"exact"``,
    and the folds ``"auto"`` refitted) do not depend on the fit being the optimum and are
    left to their own checks."""
    diagnostics["fit_concerns"] = dict(concerns)
    if not local:
        return
    causes = unreliable_causes(diagnostics.get("unreliable"), n_folds)
    method = diagnostics.get("fold_method")          # auto: its exact refits stand alone
    causes["fit_may_not_be_optimum"] = (np.ones(n_folds, bool) if method is None
                                        else np.asarray(method) != "exact")
    diagnostics["unreliable"] = causes


def record_unreliable(diagnostics: dict, fold_loss, folds, method: str, warn: bool,
                      future: bool = False) -> None:
    """Turn a method's per-fold ``diagnostics["unreliable"]`` (one mask or ``{cause:
    mask}``, :func:`unreliable_causes`) and non-finite losses into
    ``diagnostics["unreliable_folds"]`` (fold ids), ``diagnostics["unreliable_causes"]``
    (``{cause: fold ids}``, the causes that applied) and one warning naming them, with
    the advice for leave-future-out folds where ``future``."""
    causes = unreliable_causes(diagnostics.pop("unreliable", None), len(folds))
    nonfinite = ~np.isfinite(fold_loss)
    if nonfinite.any():
        diagnostics["nonfinite_folds"] = folds.ids[nonfinite]
        causes["nonfinite_loss"] = nonfinite
    bad = np.zeros(len(folds), bool)
    for mask in causes.values():
        bad |= mask
    diagnostics["unreliable_folds"] = folds.ids[bad]
    diagnostics["unreliable_causes"] = {k: folds.ids[m] for k, m in causes.items() if m.any()}
    if warn and bad.any():
        named = "; ".join(f"{int(m.sum())} {UNRELIABLE_CAUSES.get(k, k)}"
                          for k, m in causes.items() if m.any())
        warnings.warn(
            f"{method}: {int(bad.sum())} of {len(folds)} folds are unreliable (fold ids "
            f"{folds.ids[bad][:10].tolist()}{' ...' if bad.sum() > 10 else ''}): {named}. "
            "Their numbers are kept but are not estimates; listed in "
            "diagnostics['unreliable_folds'] (by cause: diagnostics['unreliable_causes'])."
            f"{remedies(causes, future)}",
            UnreliableFoldWarning, stacklevel=user_stacklevel())


def fit_state(problem, options, strict: bool = True, with_hessian: bool = False):
    """Diagnostics of the fit at ``problem.u_full``: gradient, Newton step, Hessian.

    Dense (``D <= max_dense_dim`` or ``solver="dense"``): ``H`` formed and factored with the
    recorded jitter policy (:func:`fit_diagnostics`); matrix-free: the Newton step by CG
    (:func:`cg_diagnostics`). ``stage_seconds["derivatives"]`` records the time.

    Args:
        strict: raise :class:`~approxcv.errors.NotPositiveDefiniteError` when ``H`` is not
            positive definite even with the largest jitter (methods that solve with ``H``);
            ``False`` (exact CV, whose refits never solve with it): record the Hessian's
            state instead (:func:`indefinite_diagnostics`, ``hessian_pd`` False).
        with_hessian: also return the dense ``H`` (``None`` on the matrix-free path).

    Returns:
        the diagnostics dict, or ``(diagnostics, H or None)`` with ``with_hessian``.
    """
    t = time.perf_counter()
    hess = None
    if options.dense(int(problem.u_full.shape[0]), problem.n_units):
        grad, hess, _ = full_derivatives(problem, options, with_jacobian=False)
        try:
            out = fit_diagnostics(grad, factor_hessian(hess, warn=options.warn),
                                  problem.u_full, warn=options.warn)
        except NotPositiveDefiniteError:
            if strict:
                raise
            out = indefinite_diagnostics(grad, hess, problem.u_full, warn=options.warn)
    else:
        nothing_out = np.full((1, 1), problem.n_units)    # the full-data Newton step
        full, cg = jax.block_until_ready(newton_params_cg(
            problem.fun, problem.u_full, nothing_out, problem.data, problem.n_units,
            options.cg_rtol, options.cg_max_steps, 1, False))
        grad = gradient(problem.fun, problem.u_full, np.ones(problem.n_units), problem.data)
        out = cg_diagnostics(grad, problem.u_full - full[0], cg, problem.u_full,
                             options.cg_rtol, options.cg_max_steps, warn=options.warn,
                             strict=strict)
    out["stage_seconds"] = {"derivatives": time.perf_counter() - t}
    return (out, None if hess is None else np.asarray(hess)) if with_hessian else out
