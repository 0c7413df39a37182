"""Hidden Markov model with diagonal Gaussian (optionally autoregressive) emissions.

``x_t | z_t = k ~ N(mu_k + sum_{l=1}^p a_{k,l} * x_{t-l}, diag(sigma2_k))`` with per-channel
(diagonal) AR coefficients ``a_{k,l} in R^R``; lags before the first step are zero (as in
dynamax's autoregressive HMMs).

Priors, in the data's units (:mod:`approxcv.models.hmm._data_scale`: ``m_r``, ``s_r`` are the
mean and standard deviation of channel ``r`` over every observed step of every sequence)::

    mu_{k,r} ~ N((1 - sum_l a_{k,l,r}) m_r, mean_prior_var s_r^2),
    sigma2_{k,r} ~ InvGamma(var_shape, var_scale s_r^2),      a_{k,l,r} ~ N(0, ar_prior_var),

i.e. the standardised state mean ``(mu - (1 - sum_l a) m) / s`` (the state's intercept for
``(x - m) / s``) is ``N(0, mean_prior_var)``, the standardised variance ``sigma2 / s^2`` is
``InvGamma(var_shape, var_scale)`` and the AR coefficients are unit-free. Fitting ``c x + d``
therefore gives the states of ``x`` with ``mu -> c mu + (1 - sum a) d``,
``sigma2 -> c^2 sigma2`` (exactly for ``ar_order = 0``; with lags, exactly for ``d = 0``,
since lags before the start are 0 in the data's units).

For held-out losses with ``ar_order > 0`` the lagged values are covariates: a left-out
``x_t`` is marginalised as an emission but still conditions ``x_{t+1}`` as a regressor.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ..._validate import as_real_array, check_positive, check_positive_int
from ._data_scale import loc_scale, observed_loc_scale, with_data_scale
from .._transforms import inverse_gamma_log_prior, normal_log_prior
from .. import constraints as C
from .base import HMM, ar_forecast_mean, check_array, recent_steps


class GaussianHMMParams(NamedTuple):
    """initial_probs (K,), transition_matrix (K, K), means (K, R), variances (K, R),
    ar_coeffs (K, p, R) (``p = 0`` gives an empty array)."""
    initial_probs: jax.Array
    transition_matrix: jax.Array
    means: jax.Array
    variances: jax.Array
    ar_coeffs: jax.Array


def lagged(x, order: int):
    """``(T, p, R)`` array whose ``[t, l-1]`` entry is ``x_{t-l}`` (zero before the start)."""
    num_timesteps = x.shape[0]
    padded = jnp.concatenate([jnp.zeros((order,) + x.shape[1:], x.dtype), x])
    return jnp.stack([padded[order - l:order - l + num_timesteps] for l in range(1, order + 1)],
                     axis=1)


class GaussianHMM(HMM):
    """Gaussian HMM with diagonal covariances; AR(p) means when ``ar_order > 0``.

    Data: ``(T, R)`` float array (a ``(T,)`` array is read as ``R = 1``), or a list of them.

    Args:
        n_states: ``K``.
        ar_order: ``p >= 0`` lags in the state means.
        mean_prior_var, var_shape, var_scale, ar_prior_var: the priors of the module
            docstring, in units of the data's standard deviation (``mean_prior_var``,
            ``var_scale``) — a fit of ``c x + d`` is the fit of ``x`` in other units.
        **kwargs: :class:`~approxcv.models.hmm.HMM` options (``n_init``, ``seed``, ...).

    Example:
        >>> import numpy as np, approxcv as acv
        >>> x = np.random.default_rng(0).normal(size=(300, 2))
        >>> params = acv.models.GaussianHMM(2).fit(x)
    """
    params_type = GaussianHMMParams
    numeric_hyperparameters = HMM.numeric_hyperparameters + (
        "mean_prior_var", "ar_prior_var", "var_shape", "var_scale")

    def __init__(self, n_states: int, ar_order: int = 0, *, mean_prior_var: float = 1e4,
                 var_shape: float = 1.1, var_scale: float = 1e-2, ar_prior_var: float = 1.0,
                 **kwargs):
        super().__init__(n_states, **kwargs)
        self.ar_order = check_positive_int("ar_order", ar_order, 0)
        self.mean_prior_var = check_positive("mean_prior_var", mean_prior_var)
        self.ar_prior_var = check_positive("ar_prior_var", ar_prior_var)
        self.var_shape = check_positive("var_shape", var_shape)
        self.var_scale = check_positive("var_scale", var_scale)

    def __repr__(self):
        return f"GaussianHMM(n_states={self.n_states}, ar_order={self.ar_order})"

    def _validate_sequence(self, x, name):
        arr = as_real_array(name, x)
        if arr.ndim == 1:
            arr = arr[:, None]
        return check_array(arr, name, 2)

    def prepare(self, data, level: str | None = None):
        """As :meth:`HMM.prepare`, with the data's location and scale for the priors
        (``Sequences.data_scale``, from all sequences)."""
        seqs, level, n = super().prepare(data, level)
        return with_data_scale(seqs), level, n

    def log_prior(self, params, data=None):
        """Log prior (module docstring) on prepared ``data``: :meth:`HMM.log_prior` of
        :meth:`_standardised` parameters.

        With a ``prior`` (:mod:`approxcv.models.hmm.hmmlearn_prior`), its log prior, in the
        data's own units.

        Raises:
            InvalidArgumentError: ``data`` is missing (the prior depends on its units).
        """
        if self.prior is not None:
            return self.prior.log_prior(params)
        return super().log_prior(self._standardised(params, *loc_scale(data, "GaussianHMM")))

    def _standardised(self, params, loc, scale, inverse: bool = False):
        """The parameters of the same model for ``(x - loc) / scale`` (``inverse``: back).

        ``mu~ = (mu - (1 - sum_l a_l) loc) / scale``, ``sigma2~ = sigma2 / scale^2``,
        ``a~ = a``; ``loc``, ``scale`` are ``(R,)``.
        """
        drift = (1.0 - jnp.sum(jnp.asarray(params.ar_coeffs), axis=1)) * loc     # (K, R)
        if inverse:
            return params._replace(means=params.means * scale + drift,
                                   variances=params.variances * scale ** 2)
        return params._replace(means=(params.means - drift) / scale,
                               variances=params.variances / scale ** 2)

    @property
    def rowwise_emissions(self) -> bool:
        """Windows of the series (HMM.supports_windows) need emissions without lags."""
        return self.ar_order == 0

    def _emission_log_lik(self, params, x):
        """Diagonal Gaussian log density of ``x_t`` under each state's (AR) mean, ``(T, K)``."""
        means = jnp.broadcast_to(params.means[None], (x.shape[0],) + params.means.shape)
        if self.ar_order:
            means = means + jnp.einsum("tlr,klr->tkr", lagged(x, self.ar_order),
                                       params.ar_coeffs)
        var = params.variances[None]
        return -0.5 * jnp.sum((x[:, None, :] - means) ** 2 / var + jnp.log(2 * jnp.pi * var),
                              axis=-1)

    def _emission_log_prior(self, params):
        return (normal_log_prior(params.means, 0.0, self.mean_prior_var)
                + inverse_gamma_log_prior(jnp.log(params.variances), self.var_shape,
                                          self.var_scale)
                + normal_log_prior(params.ar_coeffs, 0.0, self.ar_prior_var))

    def _emission_constraints(self):
        return C.Real(), C.Positive(), C.Real()

    def closed_form_m_step(self) -> bool:
        """Closed form without lags (``ar_order = 0``); AR means use the Newton M-step."""
        return self.ar_order == 0

    def _emission_m_step(self, params, r, x, data):
        """One conditional-maximisation sweep (ECM) of the MAP emissions (``ar_order = 0``):
        with ``N_k = sum_t r_tk``, the prior's ``m, s`` (module docstring), ``V =
        mean_prior_var s^2``, ``a = var_shape``, ``b = var_scale s^2``,

            mu_k = (sum_t r_tk x_t / sigma2_k + m / V) / (N_k / sigma2_k + 1 / V),
            sigma2_k = (sum_t r_tk (x_t - mu_k)^2 / 2 + b) / (N_k / 2 + a + 1),

        the exact maximiser in ``mu`` given ``sigma2`` and then in ``sigma2`` given ``mu``."""
        loc, scale = loc_scale(data, "GaussianHMM")
        nk = jnp.sum(r, 0)[:, None]
        sx, sxx = r.T @ x, r.T @ x ** 2
        prec0 = 1.0 / (self.mean_prior_var * scale ** 2)
        var = params.variances
        mu = (sx / var + loc * prec0) / (nk / var + prec0)
        ss = jnp.maximum(sxx - 2.0 * mu * sx + nk * mu ** 2, 0.0)
        var = (0.5 * ss + self.var_scale * scale ** 2) / (0.5 * nk + self.var_shape + 1.0)
        return params._replace(means=mu, variances=var)

    def _forecast_mean(self, params, x, length, filtered, probs):
        """``E[x_{T+h} | x_{1..T}]``, ``(horizon, R)``: ``sum_k P_{T+h}(k) mu_k`` without
        lags, the exact moment recursion of
        :func:`~approxcv.models.hmm.base.ar_forecast_mean` with them (diagonal ``C_{k,l} =
        diag(a_{k,l})``)."""
        return ar_forecast_mean(
            jnp.asarray(params.transition_matrix), filtered, probs, params.means,
            lambda n: jnp.sum(params.ar_coeffs * n, axis=1),
            recent_steps(x, length, self.ar_order))

    def _sample_emissions(self, params, z, key):
        """``x_t = mu_{z_t} + sum_l a_{z_t,l} * x_{t-l} + sigma_{z_t} * eps_t``, ``eps_t ~
        N(0, I)``, ``(T, R)``; one ``lax.scan`` over time with the lags (zero before the
        start) in the carry."""
        sd = jnp.sqrt(params.variances)
        noise = sd[z] * jax.random.normal(key, (z.shape[0], params.means.shape[1]))
        if not self.ar_order:
            return params.means[z] + noise

        def step(lags, inputs):
            k, e = inputs
            x = params.means[k] + jnp.sum(params.ar_coeffs[k] * lags, axis=0) + e
            return jnp.concatenate([x[None], lags[:-1]]), x

        lags = jnp.zeros((self.ar_order, params.means.shape[1]))
        return lax.scan(step, lags, (z, noise))[1]

    def _initial_emissions(self, x, rng, i):
        """k-means (k-means++ seeding, 20 Lloyd iterations; seed varies per start) on the
        standardised observations, so the starts do not depend on the data's units."""
        k = self.n_states
        loc, scale = observed_loc_scale(x)
        z = (x - loc) / scale
        centers, labels = _kmeans(z, k, rng, 20)
        var = np.stack([z[labels == j].var(0) if np.sum(labels == j) > 1 else z.var(0)
                        for j in range(k)])
        var = np.maximum(var, 1e-3 * z.var(0) + 1e-8)
        return loc + scale * centers, var * scale ** 2, np.zeros((k, self.ar_order, x.shape[1]))


def _kmeans(x, k, rng, iters):
    """Plain k-means with k-means++ seeding (NumPy; initialisation only): at most ``iters``
    Lloyd iterations, fewer once the labels stop changing."""
    centers = x[rng.integers(len(x))][None].astype(float)
    d2 = np.sum((x - centers[0]) ** 2, 1)
    for _ in range(1, k):
        p = d2 / d2.sum() if d2.sum() > 0 else None
        centers = np.vstack([centers, x[rng.choice(len(x), p=p)]])
        d2 = np.minimum(d2, np.sum((x - centers[-1]) ** 2, 1))
    labels = None
    for _ in range(iters):
        new = _nearest(x, centers)
        if labels is not None and np.array_equal(new, labels):
            break
        labels = new
        onehot = (labels[:, None] == np.arange(k)).astype(float)
        counts = onehot.sum(0)[:, None]
        centers = np.where(counts > 0, onehot.T @ x / np.maximum(counts, 1.0), centers)
    centers = centers + 1e-6 * np.arange(k)[:, None]
    return centers, _nearest(x, centers)


def _nearest(x, centers):
    """Index of the nearest center of every row of ``x``."""
    return np.argmin(np.sum(centers ** 2, 1)[None] - 2.0 * x @ centers.T, 1)
