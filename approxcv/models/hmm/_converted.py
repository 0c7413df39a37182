"""What a fit converted from another library is checked for: the pieces
:func:`~approxcv.models.from_hmmlearn` and :func:`~approxcv.models.from_dynamax` share.

* :func:`expected_counts`: the expected count of every row of each simplex at the fit
  (the data's weight behind each probability: an entry whose count is ~0 is one the data
  cannot move);
* :func:`simplex_hold`: the constraint that holds some entries of a simplex field fixed
  (:class:`~approxcv.models.constraints.Fixed` or
  :class:`~approxcv.models.constraints.PartlyFixedSimplex`);
* :func:`newton_step`: ``||H^{-1} g||`` of the converted objective at the fit, as
  ``cross_validate`` measures stationarity;
* :func:`poorer_optimum`: whether approxcv's own multi-start fit of the converted objective
  finds a lower optimum than the other library's fit (EM stops at the local optimum its
  start leads to: on the yearly discoveries counts, dynamax's ``PoissonHMM(2)`` EM from
  quantile starts stops 0.27 nats above the optimum, and refits of 16 of 20 folds leave its
  basin). Where it does, the fit is recorded as poorer (:meth:`HMM.mark_poorer_fit`), so
  cross-validation at it marks every approximate fold, and a
  :class:`~approxcv.errors.LocalOptimumWarning` says what to call.
"""
from __future__ import annotations

import warnings

import numpy as np

from ...errors import LocalOptimumWarning, user_stacklevel
from ...optim.newton import value_and_derivatives
from ...problem import make_problem
from .. import constraints as C

#: an entry of a simplex whose expected count at the fit is below this is held fixed
HOLD_COUNT = 1e-6
#: without the data, an entry below this probability is held fixed
HOLD_PROBABILITY = 1e-10
#: the fit is stationary when the Newton step is below this times ``1 + ||u||`` (as
#: :data:`approxcv.engine.diagnostics.INEXACT_FIT_RTOL`)
STATIONARY_RTOL = 1e-4
#: a converted fit is a poorer local optimum when its objective exceeds approxcv's own fit's
#: by more than this times ``1 + |objective|`` (two fits of one optimum agree to ~1e-10)
POORER_OPTIMUM_RTOL = 1e-6


def expected_counts(model, params, data) -> dict:
    """Expected count of every row of each simplex at the fit: sequences for
    ``initial_probs``, departures from each state for ``transition_matrix``, steps in each
    state for ``emission_probs``; and ``occupancy`` (steps per state)."""
    probs = model.predict_proba(params, data if isinstance(data, list) else [data])
    occupancy = sum(p.sum(0) for p in probs)
    departures = sum(p[:-1].sum(0) for p in probs)
    return {"initial_probs": np.float64(len(probs)), "transition_matrix": departures,
            "emission_probs": occupancy, "occupancy": occupancy}


def small_counts(p, rows) -> np.ndarray:
    """``bool`` mask of the entries of ``p`` (a simplex field) whose expected count ``p *
    rows`` (``rows``: each row's expected count, :func:`expected_counts`) is below
    :data:`HOLD_COUNT`."""
    p, rows = np.asarray(p), np.asarray(rows)
    return (p * rows[..., None] if p.ndim == rows.ndim + 1 else p * rows) < HOLD_COUNT


def simplex_hold(p, small):
    """The constraint holding the entries ``small`` (a ``bool`` mask) of the simplex field
    ``p`` at their values: :class:`~approxcv.models.constraints.Fixed` when no row keeps
    two free entries, else :class:`~approxcv.models.constraints.PartlyFixedSimplex` (a row
    of one free entry has no coordinate, so it is held whole)."""
    p = np.asarray(p)
    free = ~np.asarray(small)
    if p.ndim == 1:
        free = free[None]
    free[free.sum(-1) < 2] = False
    free = free.reshape(p.shape)
    if not free.any():
        return C.Fixed(C.nested_tuple(p))
    return C.PartlyFixedSimplex(bools(free), C.nested_tuple(p))


def listed(entries: list, limit: int = 6) -> str:
    """The first ``limit`` of ``entries`` joined, and how many more."""
    more = f" and {len(entries) - limit} more" if len(entries) > limit else ""
    return ", ".join(entries[:limit]) + more


def bools(mask):
    """``mask`` as nested tuples of Python bools (hashable, for a constraint)."""
    return tuple(bools(m) for m in mask) if np.ndim(mask) > 1 else tuple(bool(b) for b in mask)


def newton_step(model, params, data) -> dict:
    """``{"grad_norm", "newton_step_norm", "stationary"}`` of the model's objective at
    ``params`` on ``data``: the gradient ``g`` and Hessian ``H`` in unconstrained space at
    unit weights (the one compiled sweep of
    :func:`~approxcv.optim.newton.value_and_derivatives`), the step ``H^+ g`` (least squares), stationary when ``||H^+ g|| <=``
    :data:`STATIONARY_RTOL` ``(1 + ||u||)``."""
    problem = make_problem(model, data, params)
    ones = np.ones(problem.n_units)
    u = np.asarray(problem.u_full)
    _, grad, hess, _ = value_and_derivatives(problem.fun, u, ones, problem.data,
                                             with_jacobian=False)
    grad, hess = np.asarray(grad), np.asarray(hess)
    step = np.linalg.lstsq(hess, grad, rcond=None)[0]
    grad_norm, step_norm = float(np.linalg.norm(grad)), float(np.linalg.norm(step))
    stationary = step_norm <= STATIONARY_RTOL * (1.0 + float(np.linalg.norm(u)))
    return {"grad_norm": grad_norm, "newton_step_norm": step_norm,
            "stationary": bool(stationary)}


def poorer_optimum(model, params, data, source: str) -> dict:
    """``{"optimum_check": {"objective", "best_objective", "gap", "poorer"}}``: the
    converted objective ``F`` at ``params`` (the other library's fit) against approxcv's
    own fit of it, ``model.fit(data, init_params=params)`` (the model's ``n_init`` starts
    and ``params`` itself; its warnings and ``fit_result_`` are not the converted fit's and
    are dropped). Poorer when ``F(params) - F(best) >`` :data:`POORER_OPTIMUM_RTOL` ``(1 +
    |F(best)|)``: then ``model.mark_poorer_fit(params, ...)`` and a
    :class:`~approxcv.errors.LocalOptimumWarning` naming the gap and what to call
    (``source``: ``"dynamax's EM"``, ``"hmmlearn's EM"``)."""
    record = model.fit_result_
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        best = model.fit(data, init_params=params)
    model.fit_result_ = record
    n = model.prepare(data)[2]
    at_fit = float(model.objective(params, data, np.ones(n)))
    at_best = float(model.objective(best, data, np.ones(n)))
    gap = at_fit - at_best
    poorer = bool(gap > POORER_OPTIMUM_RTOL * (1.0 + abs(at_best)))
    if poorer:
        why = (f"{source} stopped at a local optimum {gap:.3g} nats above the one "
               f"approxcv's fit of the same objective found ({at_fit:.6g} against "
               f"{at_best:.6g})")
        model.mark_poorer_fit(params, why)
        warnings.warn(
            f"{why}. Cross-validation at these parameters marks every approximate fold as "
            "conditional on a fit that is not the optimum (exact refits may leave its "
            "basin). To cross-validate the better optimum: params = model.fit(data); or "
            "refit the other library from more starts", LocalOptimumWarning,
            stacklevel=user_stacklevel())
    return {"optimum_check": {"objective": at_fit, "best_objective": at_best, "gap": gap,
                              "poorer": poorer}}
