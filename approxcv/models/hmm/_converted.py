"""What a fit converted from another library is checked for: the pieces
:func:`~approxcv.models.from_hmmlearn` and :func:`~approxcv.models.from_dynamax` share.

* :func:`expected_counts`: the expected count of every row of each simplex at the fit
  (the data's weight behind each probability: an entry whose count is ~0 is one the data
  cannot move);
* :func:`simplex_hold`: the constraint that holds some entries of a simplex field fixed
  (:class:`~approxcv.models.constraints.Fixed` or
  :class:`~approxcv.models.constraints.PartlyFixedSimplex`);
* :func:`newton_step`: ``||H^{-1} g||`` of the converted objective at the fit, as
  ``cross_validate`` measures stationarity.
"""
from __future__ import annotations

import numpy as np

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
