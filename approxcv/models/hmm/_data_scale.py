"""The data's location and scale, so that priors of real-valued models are free of units.

A prior stated in absolute units means something different for a series in millimetres and
the same series in metres: ``mu ~ N(0, 1e4)`` is flat for data near 1 and a strong pull
towards 0 for data near 1000, and an inverse-gamma variance prior with scale ``1e-2`` lets a
state that generates no data collapse to variance ``0.005`` for free. The real-valued HMMs
(:class:`~approxcv.models.GaussianHMM`, :class:`~approxcv.models.ARHMM`,
:class:`~approxcv.models.NeuralARHMM`) therefore state their default priors in
*standardised units*: per channel ``r``,

    m_r = mean of x_{t,r},   s_r = standard deviation of x_{t,r},   x~_t = (x_t - m) / s,

over every observed step of every sequence (at ``level="structure"`` all sequences,
including those a fold leaves out: the scale is a fixed property of the data set, not a
parameter). The model's parameters are mapped to the parameters of the same model for
``x~`` (a linear map with a constant Jacobian) and the prior is evaluated there. Fitting
``c x + d`` then gives the fit of ``x`` mapped by the same change of units, and the same
objective up to the constant ``N sum_r log |c_r|`` of the likelihood.

``(m, s)`` travel in the prepared data (:class:`DataScale` in
``Sequences.data_scale``), tiled over the sequences so that every leaf keeps the sequence
axis first (a batch of sequences carries the scale of the whole data set).
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...errors import InvalidArgumentError


class DataScale(NamedTuple):
    """Per-channel location ``m`` and scale ``s`` of the data, each ``(S, R)`` (one identical
    row per sequence)."""
    loc: jax.Array
    scale: jax.Array


def data_scale(x, mask) -> DataScale:
    """Mean and standard deviation per channel over the observed steps of all sequences.

    Args:
        x: ``(S, T, R)`` padded sequences; mask: ``(S, T)``, 1 at observed steps.

    Returns:
        :class:`DataScale` with ``(S, R)`` rows. A constant channel gets ``s = |m|`` (or 1
        when ``m = 0``), so that ``s > 0`` always.
    """
    x, mask = np.asarray(x, np.float64), np.asarray(mask, np.float64)   # NumPy: no compiles
    loc, sd = observed_loc_scale(x[mask > 0])
    rows = x.shape[0]
    return DataScale(jnp.asarray(np.tile(loc, (rows, 1))), jnp.asarray(np.tile(sd, (rows, 1))))


def observed_loc_scale(x):
    """``(m (R,), s (R,))`` of the observed steps ``x (N, R)`` (NumPy), as in
    :func:`data_scale`."""
    loc = np.mean(x, axis=0)
    sd = np.sqrt(np.mean((x - loc) ** 2, axis=0))
    return loc, np.where(sd > 0, sd, np.where(loc != 0, np.abs(loc), 1.0))


def with_data_scale(seqs):
    """``seqs`` (a :class:`~approxcv.models.hmm.Sequences`) with its ``data_scale`` set."""
    if seqs.data_scale is not None:
        return seqs
    return seqs._replace(data_scale=data_scale(seqs.x, seqs.mask))


def loc_scale(data, model_name: str):
    """``(m (R,), s (R,))`` carried by prepared ``data``.

    Raises:
        InvalidArgumentError: ``data`` is ``None`` or carries no scale.
    """
    scale = getattr(data, "data_scale", None)
    if scale is None:
        raise InvalidArgumentError(
            f"{model_name}'s prior is stated in the data's units: pass `data` (the prepared "
            "data, from model.prepare(data)[0]) to log_prior")
    return scale.loc[0], scale.scale[0]
