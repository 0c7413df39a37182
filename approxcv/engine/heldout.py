"""Held-out losses of every fold at its parameters, by the cheapest exact evaluation the
problem offers: windows of one long series, folds in lanes, or one full pass per fold."""
from __future__ import annotations

from .batching import _heldout, per_fold_chunks
from .lanes import lanes_heldout_losses, use_lanes
from .windows import use_windows, windowed_heldout_losses

__all__ = ["heldout_losses"]


def heldout_losses(problem, params_flat, index, batch_size: int | None = None,
                   progress: bool = False, info: dict | None = None):
    """Held-out losses of every fold at its parameters.

    Short folds on one long series (leave-one-out, say) are evaluated in windows of the
    series when the model offers them (:mod:`approxcv.engine.windows`: accepted only where
    doubling the window no longer changes the loss, else the full pass); many long folds of
    one series, with folds in lanes when the model offers them (:mod:`approxcv.engine.lanes`).

    Args:
        problem: the :class:`~approxcv.problem.Problem`.
        params_flat: ``(n_folds, D)`` per-fold unconstrained parameters.
        index: ``(n_folds, m)`` padded left-out indices (padding ``n``).
        batch_size: folds per vectorised batch (default: by memory).
        progress: a progress bar with the remaining time for long runs
            (:func:`progress_chunk`).
        info: a dict to record how windows were used in (``"heldout_windows"``).

    Returns:
        ``(fold_loss (n_folds,), point_loss (n_folds, m))`` NumPy arrays; padded entries 0.
    """
    def full(params, idx):
        return per_fold_chunks(problem, lambda b, p, i: _heldout(
            problem.heldout, p, i, problem.data, problem.n_units, b), (params, idx),
            batch_size, "held-out losses", progress)
    if use_windows(problem, index):
        return windowed_heldout_losses(problem, params_flat, index, progress, info, full)
    if use_lanes(problem, index):
        return lanes_heldout_losses(problem, params_flat, index, batch_size, progress)
    return full(params_flat, index)
