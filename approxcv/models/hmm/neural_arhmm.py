"""HMM with neural autoregressive emissions: a one-hidden-layer tanh network per state.

Emission of state ``k`` (seed eq. 18)::

    x_t | z_t = k, s_t ~ N(f_k(s_t), Sigma_k),
    f_k(s) = W2_k tanh(W1_k s + c1_k) + c2_k,

with lag features ``s_t = [x_{t-1}; ...; x_{t-p}]`` (zero before the start, as in
:class:`~approxcv.models.ARHMM`), ``W1_k (H, R p)``, ``c1_k (H,)``, ``W2_k (R, H)``,
``c2_k (R,)``. Priors, as in :class:`~approxcv.models.ARHMM` stated for the standardised
data ``x~ = S^{-1} (x - m)`` (per-channel mean ``m`` and standard deviation ``s``,
``S = diag(s)``, of every observed step of every sequence): the same network for ``x~`` has
``W1~ = W1 S_p``, ``c1~ = c1 + W1 m_p``, ``W2~ = S^{-1} W2``, ``c2~ = S^{-1} (c2 - m)``
(``m_p``, ``S_p``: ``m``, ``S`` repeated over the ``p`` lags), and every weight of it is
``N(0, weight_prior_var)``, every bias ``N(0, bias_prior_var)`` (independent Gaussians), so in
the data's units ``W1[:, j] ~ N(0, weight_prior_var / s_{r(j)}^2)``,
``W2[r] ~ N(0, weight_prior_var s_r^2)``, ``c2_r ~ N(m_r, bias_prior_var s_r^2)``;
``Sigma_k`` as in ARHMM (inverse-Wishart for ``covariance="full"``, inverse-gamma per variance
for ``"diag"``, in units of ``s``). A fit of ``c x + d`` is the fit of ``x`` in other units
(up to the lags before the start, which are 0 in the data's units).

Initialisation (deterministic from ``seed``), on the standardised data and mapped back:
k-means states; per state a random hidden layer ``W1~_k ~ N(0, init_scale^2 / (R p))``,
``c1~_k ~ N(0, init_scale^2)`` (a different draw per state and per start, which breaks the
symmetry between hidden units and states) and the output layer by ridge regression of the
state's observations on ``[tanh(W1~_k s~_t + c1~_k), 1]``.

Dimension ``D = K(K-1) + (K-1) + K (H (R p + 1) + R (H + 1)) + K R (R + 1) / 2`` (full) —
in the thousands already for ``K = 4``, ``R = 6``, ``p = 1``, ``H = 48``, so fitting defaults
to ``n_init=2`` starts and exact CV is much more expensive than the IJ.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..._validate import check_positive, check_positive_int
from .._transforms import normal_log_prior
from .. import constraints as C
from .arhmm import AutoregressiveEmissions, ridge_fit


class NeuralARHMMParams(NamedTuple):
    """initial_probs (K,), transition_matrix (K, K), hidden_weights (K, H, R p),
    hidden_biases (K, H), output_weights (K, R, H), output_biases (K, R),
    scale_trils (K, R, R)."""
    initial_probs: jax.Array
    transition_matrix: jax.Array
    hidden_weights: jax.Array
    hidden_biases: jax.Array
    output_weights: jax.Array
    output_biases: jax.Array
    scale_trils: jax.Array


class NeuralARHMM(AutoregressiveEmissions):
    """HMM whose state means are one-hidden-layer tanh networks of the last ``p`` steps.

    Data: as :class:`~approxcv.models.ARHMM`.

    Args:
        n_states: ``K``.
        order: ``p >= 1`` lags fed to the networks.
        hidden: ``H``, hidden units per state.
        covariance: ``"full"`` or ``"diag"``.
        weight_prior_var, bias_prior_var: Gaussian prior variances of the weights and
            biases of the network for the standardised data (module docstring).
        init_scale: standard deviation scale of the random hidden layer at initialisation.
        n_init: starts of the multi-start fit (default 2; each start costs a BFGS run in
            ``D`` dimensions).
        **kwargs: covariance priors (``var_shape``, ``var_scale``, ``cov_dof``, ``cov_scale``)
            and :class:`~approxcv.models.hmm.HMM` options.

    Example:
        >>> import numpy as np, approxcv as acv
        >>> xs = [np.random.default_rng(i).normal(size=(50, 2)) for i in range(6)]
        >>> params = acv.models.NeuralARHMM(2, order=1, hidden=4).fit(xs)
    """
    params_type = NeuralARHMMParams
    numeric_hyperparameters = AutoregressiveEmissions.numeric_hyperparameters + (
        "weight_prior_var", "bias_prior_var")

    def __init__(self, n_states: int, order: int = 1, hidden: int = 16, *,
                 covariance: str = "full", weight_prior_var: float = 1.0,
                 bias_prior_var: float = 10.0, init_scale: float = 1.0, n_init: int = 2,
                 **kwargs):
        super().__init__(n_states, order, covariance=covariance, n_init=n_init, **kwargs)
        check_positive_int("order", order, 1)
        self.hidden = check_positive_int("hidden", hidden, 1)
        self.weight_prior_var = check_positive("weight_prior_var", weight_prior_var)
        self.bias_prior_var = check_positive("bias_prior_var", bias_prior_var)
        self.init_scale = check_positive("init_scale", init_scale)

    def __repr__(self):
        return (f"NeuralARHMM(n_states={self.n_states}, order={self.order}, "
                f"hidden={self.hidden}, covariance={self.covariance!r})")

    def _state_means(self, params, features):
        """``W2_k tanh(W1_k s_t + c1_k) + c2_k`` for every step and state, ``(T, K, R)``."""
        hid = jnp.tanh(jnp.einsum("tc,khc->tkh", features, params.hidden_weights)
                       + params.hidden_biases[None])
        return jnp.einsum("tkh,krh->tkr", hid, params.output_weights) + params.output_biases[None]

    def _mean_log_prior(self, params):
        """Independent Gaussian priors of the standardised network (module docstring)."""
        return (normal_log_prior(params.hidden_weights, 0.0, self.weight_prior_var)
                + normal_log_prior(params.output_weights, 0.0, self.weight_prior_var)
                + normal_log_prior(params.hidden_biases, 0.0, self.bias_prior_var)
                + normal_log_prior(params.output_biases, 0.0, self.bias_prior_var))

    def _standardised(self, params, loc, scale, inverse: bool = False):
        """``W1~ = W1 S_p``, ``c1~ = c1 + W1 m_p``, ``W2~ = S^{-1} W2``,
        ``c2~ = S^{-1} (c2 - m)``, ``L~ = S^{-1} L`` (``inverse``: back)."""
        lag_loc, lag_scale = jnp.tile(loc, self.order), jnp.tile(scale, self.order)
        w1, c1 = jnp.asarray(params.hidden_weights), jnp.asarray(params.hidden_biases)
        w2, c2 = jnp.asarray(params.output_weights), jnp.asarray(params.output_biases)
        if inverse:
            w1 = w1 / lag_scale
            c1, w2, c2 = c1 - w1 @ lag_loc, w2 * scale[:, None], c2 * scale + loc
        else:
            c1, w2, c2 = c1 + w1 @ lag_loc, w2 / scale[:, None], (c2 - loc) / scale
            w1 = w1 * lag_scale
        return params._replace(
            hidden_weights=w1, hidden_biases=c1, output_weights=w2, output_biases=c2,
            scale_trils=self._standardised_trils(params.scale_trils, scale, inverse))

    def _emission_constraints(self):
        return (C.Real(), C.Real(), C.Real(), C.Real(), self._tril_constraint())

    def _initial_means(self, x, s, labels, rng):
        """Random hidden layer per state, output layer by ridge regression (module docstring)."""
        num_in, hidden = s.shape[1], self.hidden
        penalty = np.concatenate([np.full(hidden, 1.0 / self.weight_prior_var),
                                  [1.0 / self.bias_prior_var]])
        out = {name: [] for name in ("w1", "c1", "w2", "c2")}
        resid = np.zeros_like(x)
        for j in range(self.n_states):
            w1 = rng.normal(size=(hidden, num_in)) * self.init_scale / np.sqrt(num_in)
            c1 = rng.normal(size=hidden) * self.init_scale
            sel = labels == j
            if sel.sum() == 0:
                sel = np.ones(len(x), bool)
            design = np.concatenate([np.tanh(s @ w1.T + c1), np.ones((len(s), 1))], axis=1)
            w = ridge_fit(design[sel], x[sel], penalty)
            resid[labels == j] = (x - design @ w.T)[labels == j]
            for name, value in zip(out, (w1, c1, w[:, :-1], w[:, -1])):
                out[name].append(value)
        return tuple(np.stack(out[name]) for name in out), resid
