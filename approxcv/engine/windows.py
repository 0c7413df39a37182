"""Held-out losses of short folds on one long series, in windows: ``O(n W)`` for
leave-one-out instead of ``O(n^2)``.

The held-out loss of a fold is a pass over the whole series (``-log p(x_o | x_kept)`` needs
every kept observation), so leave-one-out on a series of length ``n`` costs ``n`` passes of
length ``n``. For a model that can summarise the series outside a window by boundary
messages (``Problem.windows``: an HMM's filtered and backward messages of the full fit,
:meth:`approxcv.models.hmm.HMM.window_heldout_loss`), the loss of a fold spanning ``S``
steps is computed on a window of ``S + 2W`` steps around it, ``W`` on each side.

The boundary messages are the full fit's, not the fold's, so the result is exact only
as ``W -> infinity``; the filter forgets its start geometrically, and so does the error.
The window is therefore **doubled until the fold loss stops changing**: a fold is
accepted when doubling ``W`` changes its loss by at most :data:`WINDOW_RTOL` (relative),
and the larger window's loss is kept. A fold that has not settled when the window reaches
:data:`MAX_WINDOW_FRACTION` of the series gets the full pass. What was done is recorded
(``info["heldout_windows"]``: the half-widths used, the largest accepted change, how
many folds needed the full pass).
"""
from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np

from .._runtime import jit, map_in_batches
from .batching import fold_points, in_chunks, progress_chunk
from .chord import chord_step
from ..optim.hessian import sweep_chunk

__all__ = ["use_windows", "fold_spans", "windowed_heldout_losses", "use_taylor_chord_steps",
           "taylor_chord_steps", "WINDOW_RTOL"]

#: first half-width ``W`` of a window (then doubled until the fold losses settle)
WINDOW_START = 32
#: a fold loss is accepted when doubling the window changes it by at most this (relative)
WINDOW_RTOL = 1e-10
#: windows longer than this fraction of the series are not worth it: the full pass then
MAX_WINDOW_FRACTION = 0.125
#: windows are used when folds x series length exceeds this (below it the full passes are
#: cheap; tests lower it to exercise the windows on small series)
WINDOW_MIN_WORK = 2 ** 24
#: folds x window steps per vectorised batch
WINDOW_BATCH_STEPS = 2 ** 20


def fold_spans(index, n: int):
    """``(lo, hi)`` first and last left-out unit of every fold of the padded ``index``
    (padding ``>= n``)."""
    index = np.asarray(index)
    valid = index < n
    lo = np.where(valid, index, n).min(axis=1)
    hi = np.where(valid, index, -1).max(axis=1)
    return lo, hi


def use_windows(problem, index) -> bool:
    """Windows pay: the problem offers them, the work is large and the folds are short
    (their span plus two first windows within :data:`MAX_WINDOW_FRACTION` of the series)."""
    if problem.windows is None:
        return False
    n = problem.n_units
    index = np.asarray(index)
    if index.shape[0] * n <= WINDOW_MIN_WORK:
        return False
    lo, hi = fold_spans(index, n)
    return int(np.max(hi - lo + 1)) + 4 * WINDOW_START <= MAX_WINDOW_FRACTION * n


@partial(jit, static_argnums=(0, 6, 7, 8))
def _window_pass(heldout, params, index, starts, context, data, n: int, length: int,
                 batch_size: int):
    """``(fold_loss, points (n_folds, m))`` of every fold in its window of ``length`` steps
    from ``starts``. Leave-one-out folds take the point loss from the fold loss (as
    :func:`approxcv.engine.batching._heldout`)."""
    single = index.shape[1] == 1

    def one(args):
        u, idx, start = args
        local = idx - start                     # padding lands beyond the window
        return fold_points(*heldout(u, start, _window_weights(local, length, u.dtype),
                                    context, data), idx, local, n, single)
    return map_in_batches(one, (params, index, starts), batch_size)


def _window_weights(local, length: int, dtype):
    """``(length,)`` weights of a window: 0 at the fold's units (``local``, their positions
    in the window; padding beyond it dropped), 1 elsewhere."""
    return jnp.ones(length, dtype).at[local].set(0.0, mode="drop")


def _window_layout(lo, span: int, half: int, n: int):
    """``(length, starts)``: windows of ``span + 2 half`` steps (at most ``n``) starting
    ``half`` before each fold's first unit, shifted to lie inside the series."""
    length = min(n, span + 2 * half)
    return length, np.clip(lo - half, 0, n - length).astype(np.int64)


def _settle(compute, settled, rows, span: int, n: int):
    """Evaluate ``compute(rows, half)`` (a tuple of row-indexed arrays, the first compared)
    at half-widths ``WINDOW_START, 2 WINDOW_START, ...``; a row is accepted when
    ``settled(new, previous)`` holds for it, with the larger window's outputs, until the
    windows reach :data:`MAX_WINDOW_FRACTION` of the series.

    Returns:
        ``(accepted, todo, widths)``: a list of ``(rows, outputs)`` per width, the rows
        that never settled, and the half-widths compared.
    """
    half, todo, accepted, widths = WINDOW_START, rows, [], []
    prev = compute(todo, half)[0] if todo.size else None
    while todo.size and span + 4 * half <= MAX_WINDOW_FRACTION * n:
        half *= 2
        widths.append(half)
        out = compute(todo, half)
        ok = settled(out[0], prev)
        accepted.append((todo[ok], tuple(o[ok] for o in out)))
        todo, prev = todo[~ok], out[0][~ok]
    return accepted, todo, widths


def windowed_heldout_losses(problem, params_flat, index, progress: bool = False,
                            info: dict | None = None, full_pass=None):
    """Held-out losses of every fold by windows of doubling width (module docstring).

    Args:
        problem: a :class:`~approxcv.problem.Problem` with ``windows``.
        params_flat: ``(n_folds, D)``; index: ``(n_folds, m)`` padded left-out units.
        progress: progress bars (one per window width) with the remaining time.
        info: a dict to record ``"heldout_windows"`` in (diagnostics).
        full_pass: ``full_pass(params, index) -> (fold, points)`` for folds that did not
            settle (the ordinary held-out evaluation).

    Returns:
        ``(fold_loss (n_folds,), point_loss (n_folds, m))`` NumPy arrays.
    """
    params_flat, index = np.asarray(params_flat), np.asarray(index)
    n = problem.n_units
    windows = problem.windows()
    lo, hi = fold_spans(index, n)
    span = int(np.max(hi - lo + 1))

    def losses(rows, half):
        length, starts = _window_layout(lo[rows], span, half, n)
        batch = int(max(1, min(len(rows), WINDOW_BATCH_STEPS // length)))
        chunk = progress_chunk(len(rows), batch, None, work_per_fold=length)
        return in_chunks(lambda p, i, s: _window_pass(windows.heldout, p, i, s,
                                                      windows.context, problem.data, n,
                                                      length, batch),
                         (params_flat[rows], index[rows], starts), chunk,
                         f"held-out losses (windows of {length})", progress)

    changes = []

    def settled(new, prev):
        with np.errstate(divide="ignore", invalid="ignore"):
            change = np.abs(new - prev) / np.maximum(np.abs(new), np.finfo(float).tiny)
        ok = np.isfinite(new) & (change <= WINDOW_RTOL)
        changes.append(change[ok])
        return ok

    accepted, todo, widths = _settle(losses, settled, np.arange(len(index)), span, n)
    fold = np.full(len(index), np.nan)
    points = np.zeros(index.shape)
    for rows, (f, p) in accepted:
        fold[rows], points[rows] = f, p
    if todo.size:
        fold[todo], points[todo] = full_pass(params_flat[todo], index[todo])
    if info is not None:
        info["heldout_windows"] = {
            "half_widths": widths,
            "max_rel_change": float(np.max(np.concatenate(changes), initial=0.0)),
            "rtol": WINDOW_RTOL, "full_pass_folds": int(todo.size)}
    return fold, points


# --------------------------------------------------------------- error estimates
#: the chord steps of long series expand ``F(u, 1)`` to third order, which needs the
#: ``D x D x D`` third derivative: up to this many parameters
TAYLOR_MAX_DIM = 64
#: folds whose chord corrections are checked against the full passes in a round: half the
#: farthest moved below the round's step bound, half a seeded sample of the rest
TAYLOR_CHECK_FOLDS = 8
#: rounds of checks: a round that fails halves the step bound below its failing folds
#: (the expansion's remainder grows like the step cubed: on 1,200 calls its relative error
#: in the correction was 0.3 % at an ``M``-norm step of 0.04 and 20 % at 0.25, at
#: T = 10^5 below 2e-6 at every step up to 0.15); after the last, every fold takes the
#: full passes
TAYLOR_CHECK_ROUNDS = 4
#: accepted relative difference (``M``-norm) of a checked correction ...
TAYLOR_CHECK_RTOL = 0.05
#: ... above an absolute floor (``M``-norm; its square is a change of ``F`` in nats)
TAYLOR_CHECK_ATOL = 1e-6


#: relative step ``h_k = THIRD_FD_STEP (1 + |u_k|)`` of the central differences of the
#: Hessian that give the third derivative (:func:`_third_order_terms`). Error against the
#: forward-mode tensor, relative: on 1,200 calls 1.1e-3 at 1e-4, 1.1e-5 at 1e-5, 1.1e-7
#: at 1e-6 (truncation, ``h^2``); on T = 10^5 simulated counts 4e-8, 4e-10, 6e-11 and
#: 8e-10 at 1e-7 (round-off takes over)
THIRD_FD_STEP = 1e-6
#: the index permutations over which the differenced tensor is symmetrised
_PERMUTATIONS = ((0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 2, 0), (2, 0, 1), (2, 1, 0))


@partial(jit, static_argnums=(0, 2, 4))
def _third_order_terms(fun, u1, n: int, data, batch: int):
    """``(F_1, g_1, H_1, T_1)`` of ``F(., 1)`` at ``u_1``, ``T_1`` (``D x D x D``) by central
    differences of exact Hessians, symmetrised over its indices::

        T_1[:, :, k] = (H(u_1 + h_k e_k) - H(u_1 - h_k e_k)) / (2 h_k),
        h_k = THIRD_FD_STEP (1 + |u_1k|),

    error ``O(h^2)`` (truncation) plus ``O(eps / h)`` (round-off). ``2 D + 1`` Hessians,
    ``batch`` points per vectorised pass (:func:`third_order_batch`). Against one
    Hessian-JVP per coordinate (forward over forward over reverse), on a PoissonHMM(2):
    T = 10^5, 1.4 s against 2.4 s warm (4.7 s against 8.2 s with its compile), T = 10^6,
    37 s against 62 s (the tensors' difference: :data:`THIRD_FD_STEP`). The expansion
    that uses ``T_1`` is checked against full passes (:func:`verify_expansion`)."""
    ones = jnp.ones(n, u1.dtype)

    def f(v):
        return fun(v, ones, data)
    value, grad = jax.value_and_grad(f)(u1)
    dim = u1.shape[0]
    h = THIRD_FD_STEP * (1.0 + jnp.abs(u1))
    shifts = jnp.diag(h)
    hess = map_in_batches(jax.hessian(f), jnp.concatenate([u1[None], u1 + shifts,
                                                           u1 - shifts]), batch)
    third = jnp.moveaxis((hess[1:dim + 1] - hess[dim + 1:]) / (2.0 * h[:, None, None]), 0, -1)
    third = sum(jnp.transpose(third, p) for p in _PERMUTATIONS) / len(_PERMUTATIONS)
    return value, grad, hess[0], third


def third_order_batch(problem) -> int:
    """Points per pass of :func:`_third_order_terms`: all ``2 D + 1`` where their ``D``
    tangents each fit the sweep's memory budget together
    (:func:`approxcv.optim.hessian.sweep_chunk`), else as many as do (at least one)."""
    dim = int(problem.u_full.shape[0])
    points = 2 * dim + 1
    chunk = sweep_chunk(problem.fun, problem.u_full, np.ones(problem.n_units), problem.data,
                        points * dim)
    return int(max(1, min(points, chunk // dim)))


@partial(jit, static_argnums=(0, 9, 10))
def _taylor_chord_steps(heldout, chol, u1, terms, params, index, starts, context, data,
                        length: int, batch_size: int):
    """Chord corrections of every fold with ``grad F(u, w_o) = grad F(u, 1) - grad L_o(u)``,
    ``F(., 1)`` expanded to third order at ``u_1`` (``terms``) and ``L_o`` in its window."""
    value1, g1, h1, t1 = terms

    def one(args):
        u, idx, start = args
        w = _window_weights(idx - start, length, u.dtype)

        def fold_objective(v, w, data):
            """``F(v, 1)`` to third order about ``u_1`` minus the fold loss in its window:
            ``F(v, w_o)`` by the split (its gradient is the chord residual)."""
            d = v - u1
            taylor = value1 + g1 @ d + 0.5 * d @ h1 @ d + jnp.einsum("ijk,i,j,k", t1, d, d,
                                                                     d) / 6.0
            return taylor - heldout(v, start, w, context, data)[0]
        # reverse mode: with thousands of folds vmapped the tangents' vectorisation buys
        # nothing (leave-one-out, T = 2 x 10^5, 20,000 folds in windows of 129 steps,
        # D = 5: 2.70 s forward, 1.30 s reverse, the same corrections to 2e-14)
        return chord_step(fold_objective, chol, u, w, data, forward=False)
    return map_in_batches(one, (params, index, starts), batch_size)


def use_taylor_chord_steps(problem, index) -> bool:
    """The chord steps of :func:`taylor_chord_steps` apply: windows pay and ``D`` is at most
    :data:`TAYLOR_MAX_DIM`."""
    return use_windows(problem, index) and int(problem.u_full.shape[0]) <= TAYLOR_MAX_DIM


def _corrections_agree(new, ref, m_norm):
    """``(agree, diff)`` of chord corrections ``new`` against ``ref`` (rows): ``diff`` their
    ``M``-norm distance (0 where both are NaN), ``agree`` where it is within
    :data:`TAYLOR_CHECK_RTOL` of ``ref``'s norm above :data:`TAYLOR_CHECK_ATOL`."""
    diff = m_norm(new - ref)
    diff = np.where(np.isnan(new).any(axis=1) & np.isnan(ref).any(axis=1), 0.0, diff)
    return diff <= TAYLOR_CHECK_RTOL * m_norm(ref) + TAYLOR_CHECK_ATOL, diff


def verify_expansion(exact_steps, step, rate, taken, moved, m_norm, rng):
    """Check the expanded chord corrections against the full passes, round by round.

    A round checks :data:`TAYLOR_CHECK_FOLDS` folds among ``taken`` whose step ``moved``
    is within the bound (first: every fold): the half that moved farthest, where the
    expansion is weakest, and a seeded sample of the rest. When every checked correction
    is within :data:`TAYLOR_CHECK_RTOL` (``M``-norm, above :data:`TAYLOR_CHECK_ATOL`) of its
    full passes the bound stands; else it becomes half the smallest failing step, and the
    next round checks below it. The checked folds' full-pass steps replace theirs in
    ``step`` and ``rate`` (updated in place).

    Returns:
        ``(bound, checked, diffs, ok)``: folds with ``moved <= bound`` keep the expansion;
        ``ok`` is False when :data:`TAYLOR_CHECK_ROUNDS` rounds did not settle (every fold
        then needs the full passes).
    """
    bound, checked, diffs = np.inf, np.zeros(0, int), np.zeros(0)
    for _ in range(TAYLOR_CHECK_ROUNDS):
        pool = np.setdiff1d(taken[moved[taken] <= bound], checked)
        if not pool.size:
            return bound, checked, diffs, True
        worst = pool[np.argsort(-moved[pool], kind="stable")[:TAYLOR_CHECK_FOLDS // 2]]
        rest = np.setdiff1d(pool, worst)
        rows = np.union1d(worst, rng.choice(rest, min(TAYLOR_CHECK_FOLDS - worst.size,
                                                      rest.size), replace=False))
        ref_step, ref_rate = (np.asarray(a) for a in exact_steps(rows))
        agree, diff = _corrections_agree(step[rows], ref_step, m_norm)
        step[rows], rate[rows] = ref_step, ref_rate
        checked, diffs = np.union1d(checked, rows), np.concatenate([diffs, diff])
        failed = ~agree
        if not failed.any():
            return bound, checked, diffs, True
        bound = 0.5 * float(np.min(moved[rows[failed]]))
    return bound, checked, diffs, False


def taylor_chord_steps(problem, params, index, chol, exact_steps, progress: bool = False,
                       seed: int = 0, info: dict | None = None):
    """IJ chord corrections of short folds on a long series in ``O(n_folds W D + n D^3)``.

    By the split ``F(u, w_o) = F(u, 1) - L_o(u)`` (scheme A: the weighted objective of a
    fold is the full one minus the fold loss), the chord residual ``grad F(u_m, w_o)`` is
    ``grad F(u_m, 1)`` — expanded to third order about the fit, ``g_1 + H_1 d + T_1[d, d]
    / 2`` with ``d = u_m - u_1`` (remainder ``O(n |d|^3)``, against a residual of order
    ``n |d|^2``) — minus the gradient of the fold loss, computed in the fold's window.
    Windows double as for the held-out losses until a fold's correction changes by at
    most :data:`TAYLOR_CHECK_RTOL` (``M``-norm); folds that do not settle take the full
    passes (``exact_steps``). The expansion is checked against the full passes where it is
    weakest, the folds that moved farthest, and on a seeded sample
    (:func:`verify_expansion`): folds beyond the step bound the checks establish take the
    full passes, and every fold does when the checks do not settle. ``info`` records
    ``"error_estimate_windows"``: the window, the bound, the largest step, the checked
    folds, the largest checked difference, and whether the checks settled.

    Returns:
        ``(correction (n_folds, D), rho (n_folds,))``.
    """
    params, index = np.asarray(params), np.asarray(index)
    n, dim = problem.n_units, params.shape[1]
    windows = problem.windows()
    chol_np = np.asarray(chol)

    def m_norm(x):
        norm = np.linalg.norm(x @ chol_np, axis=-1)
        return np.where(np.isnan(norm), np.inf, norm)
    terms = _third_order_terms(problem.fun, problem.u_full, n, problem.data,
                               third_order_batch(problem))
    lo, hi = fold_spans(index, n)
    span = int(np.max(hi - lo + 1))

    def corrections(rows, half):
        length, starts = _window_layout(lo[rows], span, half, n)
        batch = int(max(1, min(len(rows), WINDOW_BATCH_STEPS // (length * max(dim, 1)))))
        chunk = progress_chunk(len(rows), batch, None, work_per_fold=length * dim)
        return in_chunks(lambda p, i, s: _taylor_chord_steps(
            windows.heldout, chol, problem.u_full, terms, p, i, s, windows.context,
            problem.data, length, batch), (params[rows], index[rows], starts), chunk,
            f"error estimates (windows of {length})", progress)

    def settled(new, prev):
        return _corrections_agree(prev, new, m_norm)[0]

    moved = m_norm(params - np.asarray(problem.u_full))
    near = np.flatnonzero(np.isfinite(moved))
    accepted, todo, widths = _settle(corrections, settled, near, span, n)
    step = np.full(params.shape, np.nan)
    rate = np.full(len(params), np.nan)
    for rows, (s, r) in accepted:
        step[rows], rate[rows] = s, r
    taken = np.setdiff1d(near, todo)
    bound, checked, diffs, ok = verify_expansion(
        lambda rows: exact_steps(params[rows], index[rows]), step, rate, taken, moved,
        m_norm, np.random.default_rng(seed))
    kept = taken[moved[taken] <= bound] if ok else np.zeros(0, int)
    exact = np.setdiff1d(np.arange(len(params)), np.union1d(kept, checked))
    if exact.size:                                # (the checks' full passes are kept)
        s, r = exact_steps(params[exact], index[exact])
        step[exact], rate[exact] = s, r
    if info is not None:
        info["error_estimate_windows"] = {
            "half_width": int(widths[-1] if widths else WINDOW_START),
            "full_pass_folds": int(exact.size + checked.size),
            "step_bound": float(bound) if ok else 0.0,
            "largest_step": float(np.max(moved[taken], initial=0.0)),
            "checked_folds": checked.tolist(),
            "max_check_diff": float(np.max(diffs, initial=0.0)), "accepted": ok}
    return step, rate
