"""Held-out losses of an HMM in windows of one long series (``approxcv.engine.windows``),
and of many folds of it at once with folds in lanes (``approxcv.engine.lanes``).

A mixin of :class:`~approxcv.models.hmm.HMM`: the optional protocol methods with which
a model offers windows (``Problem.windows``) and lanes (``Problem.lanes``) to the engine.
The series outside a window is summarised by the full fit's filtered and backward messages
(:func:`approxcv.inference.chain.window_heldout_losses`); only models whose emission
log-likelihood of a step depends on that step's observation alone (``rowwise_emissions``:
no lags, no absolute time) can evaluate a window from the window's data.
"""
from __future__ import annotations

import jax
import jax.numpy as jnp

from ...inference import chain

__all__ = ["ChainWindows"]


class ChainWindows:
    """Window methods of an HMM; needs ``prepare``, ``log_potentials`` and
    ``_emission_log_lik`` of :class:`~approxcv.models.hmm.HMM`."""

    #: the emission log-likelihood of a step depends on that step's observation only (no
    #: lags, no absolute time), so a window of the data has the window's emissions
    rowwise_emissions: bool = False

    def supports_windows(self, data, level: str | None = None) -> bool:
        """Whether held-out losses of short folds can be computed in windows of the series
        (:meth:`window_heldout_loss`): one sequence, ``level="within"``, row-wise emissions."""
        seqs, level, _ = self.prepare(data, level)
        return level == "within" and seqs.num_sequences == 1 and self.rowwise_emissions

    def window_context(self, params, data):
        """The boundary messages of the full series at ``params``
        (:func:`approxcv.inference.chain.boundary_messages`): ``(T, K)`` log filtered and
        log backward messages."""
        seqs, _, _ = self.prepare(data, "within")
        return chain.boundary_messages(*self.log_potentials(params, seqs.x[0], seqs.mask[0]))

    def window_heldout_loss(self, params, data, start, weights, context):
        """Held-out losses of the units with weight 0 in the window ``[start, start + L)``
        (``L = len(weights)``), the series outside it summarised by ``context``
        (:meth:`window_context`, usually of the full fit): ``(fold_loss, points (L,))``
        as :meth:`heldout_loss` restricted to the window
        (:func:`approxcv.inference.chain.window_heldout_losses`); masked (padded) steps
        have emission log-likelihood 0."""
        seqs, _, _ = self.prepare(data, "within")
        length = weights.shape[0]
        x, mask = jax.tree_util.tree_map(
            lambda leaf: jax.lax.dynamic_slice_in_dim(leaf, start, length, axis=0),
            (seqs.x[0], seqs.mask[0]))
        log_filtered, log_backward = context
        log_lik = self._emission_log_lik(params, x) * mask[:, None]
        return chain.window_heldout_losses(
            jnp.log(params[0]), jnp.log(params[1]), log_lik, weights,
            log_filtered[jnp.maximum(start - 1, 0)], log_backward[start + length - 1],
            start == 0)

    def lane_potentials(self, params):
        """``(log pi (K,), log A (K, K), emission parameters)`` of one fold's parameters, for
        the passes with folds in lanes (:mod:`approxcv.inference.chain_lanes`; same
        conditions as :meth:`supports_windows`). The emission parameters are ``params``."""
        return jnp.log(params[0]), jnp.log(params[1]), params

    def lane_emission(self, params, series):
        """``(C, K)`` emission log-likelihoods of the steps of ``series`` (a chunk of
        :meth:`lane_series`; row-wise emissions), 0 at masked (padded) steps."""
        x, mask = series
        return self._emission_log_lik(params, x) * mask[:, None]

    def lane_series(self, data):
        """The one sequence of the prepared data and its mask, ``((T, ...), (T,))``."""
        return data.x[0], data.mask[0]
