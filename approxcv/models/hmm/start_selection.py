"""Selecting an HMM fit's starts by EM on a subsample of the data.

:meth:`HMM.fit` runs EM from every start (``n_init`` of them, plus any ``init_params``) on
all the data, so on a long series each start costs a full EM run. On a series of ``N``
observed steps with ``N >= SUBSAMPLE_FACTOR * m`` (``m = start_subsample``), the starts are
first refined by EM to convergence on the subsample — the first ``m`` steps of the series
(a prefix keeps the position of every step, so a day or week layout stays aligned), or at
``level="structure"`` the first sequences holding ``m`` steps — and only the EM endpoints
that may still be the best optimum go on to the full data:

* the endpoint with the lowest subsample objective ``F_m``, and
* every other endpoint that is a *distinct* optimum (``F_m`` higher by more than
  ``DISTINCT_RTOL * m``: relabelled copies of one optimum, e.g. permuted states, have the
  same ``F_m``) and within ``SELECT_GAP_PER_STEP * m`` nats of the lowest.

The objective is a sum over steps, so a gap of ``g`` nats on ``m`` steps extrapolates to
about ``g N / m`` on the whole series: an optimum ``1e-3`` nats per step worse on the
subsample is expected ``1e-3 N`` nats worse on all of it (100 nats at ``N = 10^5``), while
optima closer than that are all kept and compete on the full data. Where the starts agree
(the common case: the data identify the states) one full EM run remains instead of
``n_init``; where basins compete the multi-start search is kept for them. The endpoints,
not the original starts, seed the full fit (they are already near an optimum).

Not used when the model is not fitted by EM (``fit_em=False`` or more than ``EM_MAX_DIM``
parameters), when there is one start, or when no subsample endpoint is finite (then every
start goes on, as without selection). The choice is recorded in
``fit_result_["start_selection"]``.
"""
from __future__ import annotations

import numpy as np

from .em import EM_MAX_STEPS, em_solver
from ...problem import flat_params, make_problem

#: selection runs when the data have at least this many times ``start_subsample`` steps
SUBSAMPLE_FACTOR = 4
#: endpoints more than this many nats per subsample step above the best are dropped
SELECT_GAP_PER_STEP = 1e-3
#: endpoints whose subsample objectives differ by at most this times the subsample's steps
#: are one optimum (e.g. the same states in another order)
DISTINCT_RTOL = 1e-7


def subsample(seqs, level: str, steps: int):
    """The first ``steps`` observed steps of the one series (``level="within"``), or the
    first sequences holding at least ``steps`` observed steps (``"structure"``); ``None``
    when the data have fewer than ``SUBSAMPLE_FACTOR * steps``."""
    mask = np.asarray(seqs.mask)
    if mask.sum() < SUBSAMPLE_FACTOR * steps:
        return None
    if level == "within":
        end = int(np.searchsorted(np.cumsum(mask[0] > 0), steps)) + 1
        return seqs._replace(x=seqs.x[:, :end], mask=seqs.mask[:, :end])
    count = int(np.searchsorted(np.cumsum(mask.sum(1)), steps)) + 1
    return seqs._replace(x=seqs.x[:count], mask=seqs.mask[:count])


def keep_endpoints(values, steps: int) -> np.ndarray:
    """Positions of the endpoints that go on to the full data (module docstring), lowest
    subsample objective first; every position when none is finite."""
    values = np.asarray(values, float)
    finite = np.flatnonzero(np.isfinite(values))
    if not finite.size:
        return np.arange(len(values))
    order = finite[np.argsort(values[finite], kind="stable")]
    best = values[order[0]]
    kept = [int(order[0])]
    for i in order[1:]:
        if values[i] - best > SELECT_GAP_PER_STEP * steps:
            break
        if all(values[i] - values[j] > DISTINCT_RTOL * steps for j in kept):
            kept.append(int(i))
    return np.asarray(kept)


def select_starts(model, seqs, level: str, starts: list) -> tuple[list, dict | None]:
    """``(starts for the full fit, record or None)``: EM from every start on the subsample
    and the endpoints :func:`keep_endpoints` keeps (module docstring); the starts unchanged
    and ``None`` where selection does not apply."""
    steps = model.start_subsample
    if steps is None or len(starts) < 2 or not model.fit_em:
        return starts, None
    sub = subsample(seqs, level, steps)
    if sub is None:
        return starts, None
    problem = make_problem(model, sub, starts[0], level=level, checked=True)
    if not model._uses_em(problem):
        return starts, None
    solve = em_solver(model, problem, level)
    u0s = np.stack([flat_params(model, p)[0] for p in starts])
    res = solve(u0s, np.ones((len(starts), problem.n_units)), problem.data, EM_MAX_STEPS)
    u = np.asarray(res.u)
    values = np.where(np.all(np.isfinite(u), axis=1), np.asarray(res.value), np.nan)
    kept = keep_endpoints(values, int(np.asarray(sub.mask).sum()))
    if not np.isfinite(values).any():
        return starts, {"steps": steps, "objective": values, "kept": kept, "used": False}
    record = {"steps": steps, "objective": values, "kept": kept, "used": True,
              "em_steps": np.asarray(res.num_steps)}
    return [model.params_type(*problem.unravel(u[i])) for i in kept], record


__all__ = ["select_starts", "keep_endpoints", "subsample", "SUBSAMPLE_FACTOR",
           "SELECT_GAP_PER_STEP", "DISTINCT_RTOL"]
