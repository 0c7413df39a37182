"""Hidden Markov models with vector-autoregressive Gaussian emissions (ARHMM).

Emission of state ``k`` given the ``p`` previous observations (seed eq. 17)::

    x_t | z_t = k, x_{t-p:t-1} ~ N(A_k s_t + b_k, Sigma_k),
    s_t = [x_{t-1}; ...; x_{t-p}] in R^{Rp}   (zero before the start of a sequence),

with full ``A_k (R, Rp)``, bias ``b_k (R,)`` and covariance ``Sigma_k = L_k L_k^T``.
The regression weights are stored together as ``W_k = [A_k b_k]`` of shape ``(R, Rp + 1)``
(column block ``l`` of ``A_k`` multiplies ``x_{t-l}``); the lags are those of
:func:`approxcv.models.hmm.gaussian_hmm.lagged`.

Priors are stated for the standardised data ``x~ = S^{-1} (x - m)``, ``S = diag(s)``, with
``m_r``, ``s_r`` the mean and standard deviation of channel ``r`` over every observed step of
every sequence (:mod:`approxcv.models.hmm._data_scale`). The same model for ``x~`` has
``A~_{k,l} = S^{-1} A_{k,l} S``, ``b~_k = S^{-1} (b_k - (I - sum_l A_{k,l}) m)`` and
``Sigma~_k = S^{-1} Sigma_k S^{-1}``; the priors below hold for these, so a fit of
``c x + d`` (per channel) is the fit of ``x`` in other units — exactly for ``order = 0``,
and for ``d = 0`` with lags (lags before the start are 0 in the data's units).

Weights (``weight_prior``), written in the data's units, with ``j`` a lag column and ``r(j)``
the channel it multiplies:

* ``"matrix_normal"`` (default): ``W~_k | Sigma~_k ~ MN(0, Sigma~_k, V)`` with column
  covariance ``V = diag(ar_prior_var 1_{Rp}, bias_prior_var)``, i.e.
  ``A_k[:, j] ~ N(0, ar_prior_var Sigma_k / s_{r(j)}^2)`` and
  ``b_k ~ N((I - sum_l A_{k,l}) m, bias_prior_var Sigma_k)``: the shrinkage is measured in
  units of the state's own noise. Conjugate to the Gaussian likelihood together with the
  inverse-Wishart below (the MNIW prior).
* ``"isotropic"``: ``A_k[i, j] ~ N(0, ar_prior_var s_i^2 / s_{r(j)}^2)`` and
  ``b_{k,i} ~ N(((I - sum_l A_{k,l}) m)_i, bias_prior_var s_i^2)``, independently of
  ``Sigma_k`` (GaussianHMM's prior, so with ``order=0`` and ``covariance="diag"`` the two
  models coincide).

Covariance (``covariance``): ``"full"`` with ``Sigma_k ~ IW(cov_dof, cov_scale S^2)``
(``cov_dof`` defaults to ``R + 2``), or ``"diag"`` with every variance
``sigma2_{k,r} ~ InvGamma(var_shape, var_scale s_r^2)``. In unconstrained space ``L_k`` is its
lower triangle with log diagonal (``R (R + 1) / 2`` numbers) or, for ``"diag"``, ``log sqrt``
of the variances.

Within-sequence CV (``level="within"``): a left-out ``x_t`` is marginalised as an emission but
still serves as a regressor of ``x_{t+1}, ..., x_{t+p}`` (the lags are covariates), the same
convention as :class:`~approxcv.models.GaussianHMM`.
"""
from __future__ import annotations

from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.linalg import solve_triangular

from ..._validate import as_real_array, check_choice, check_positive, check_positive_int
from ...optim import batched_minimize
from ...errors import InvalidArgumentError, InvalidDataError
from ._data_scale import loc_scale, with_data_scale
from ._occupancy import check_occupancy
from .._transforms import inverse_gamma_log_prior, normal_log_prior
from .gaussian_hmm import _kmeans, lagged
from .. import constraints as C
from ..._runtime import jit, placed
from ...fitting import fit_method
from .base import HMM, Sequences, ar_forecast_mean, check_array, recent_steps

COVARIANCES = ("full", "diag")
WEIGHT_PRIORS = ("matrix_normal", "isotropic")


@partial(jit, static_argnums=0)
def _in_data_units(model, params, loc, scale):
    """``model._standardised(params, loc, scale, inverse=True)``: a start found on the
    standardised data in the data's units, as one program (run eagerly, its few dozen
    operations would each compile a small program of their own)."""
    return model._standardised(params, loc, scale, inverse=True)


def lagged_features(x: np.ndarray, order: int) -> np.ndarray:
    """``(S, T, R p)`` lag features of every sequence of ``x (S, T, R)`` in NumPy, as
    :meth:`ARHMM.features` gives one sequence's: ``[x_{t-1}; ...; x_{t-p}]``, zero before
    the start (for host-side starts; the programs use :func:`lagged`)."""
    n_seq, steps = x.shape[:2]
    padded = np.concatenate([np.zeros((n_seq, order) + x.shape[2:], x.dtype), x], axis=1)
    lags = [padded[:, order - l:order - l + steps] for l in range(1, order + 1)]
    return (np.stack(lags, axis=2) if lags else np.zeros((n_seq, steps, 0) + x.shape[2:])
            ).reshape(n_seq, steps, -1)


class ARHMMParams(NamedTuple):
    """initial_probs (K,), transition_matrix (K, K), weights (K, R, R p + 1) = ``[A_k b_k]``,
    scale_trils (K, R, R): lower Cholesky factors ``L_k`` of the covariances (diagonal for
    ``covariance="diag"``)."""
    initial_probs: jax.Array
    transition_matrix: jax.Array
    weights: jax.Array
    scale_trils: jax.Array


def _tril_inverse(trils):
    """``L_k^{-1}`` of a stack of lower-triangular factors ``(K, R, R)``."""
    eye = jnp.eye(trils.shape[-1], dtype=trils.dtype)
    return jax.vmap(lambda l: solve_triangular(l, eye, lower=True))(trils)


def covariances(params):
    """``Sigma_k = L_k L_k^T`` of an ARHMM/NeuralARHMM parameter set, shape ``(K, R, R)``."""
    trils = jnp.asarray(params.scale_trils)
    return jnp.einsum("kij,klj->kil", trils, trils)


class AutoregressiveEmissions(HMM):
    """Shared part of :class:`ARHMM` and ``NeuralARHMM``: data checks, lag features,
    the Gaussian emission density given state means, the covariance prior and transforms.

    Subclasses implement ``_state_means(params, features) -> (T, K, R)``, the mean prior
    ``_mean_log_prior`` (in standardised units), ``_standardised`` and the
    transforms/initialisation of their mean parameters.
    """
    #: the covariance priors are arguments of the compiled programs (``cov_dof`` is not:
    #: ``None`` picks a default by the data)
    numeric_hyperparameters = HMM.numeric_hyperparameters + ("var_shape", "var_scale",
                                                             "cov_scale")

    def __init__(self, n_states: int, order: int, *, covariance: str = "full",
                 var_shape: float = 1.1, var_scale: float = 1e-2, cov_dof: float | None = None,
                 cov_scale: float = 1e-2, newton_max_dim: int = 400, **kwargs):
        super().__init__(n_states, **kwargs)
        self.newton_max_dim = check_positive_int("newton_max_dim", newton_max_dim, 0)
        self.order = check_positive_int("order", order, 0)
        self.covariance = check_choice("covariance", covariance, COVARIANCES)
        self.var_shape = check_positive("var_shape", var_shape)
        self.var_scale = check_positive("var_scale", var_scale)
        self.cov_dof = None if cov_dof is None else check_positive("cov_dof", cov_dof)
        self.cov_scale = check_positive("cov_scale", cov_scale)

    # ----------------------------------------------------------------- data
    def _validate_sequence(self, x, name):
        arr = as_real_array(name, x)
        if arr.ndim == 1:
            arr = arr[:, None]
        arr = check_array(arr, name, 2)
        if arr.shape[0] < self.order + 1:
            raise InvalidDataError(f"`{name}` has {arr.shape[0]} time steps; order={self.order} "
                                   f"needs at least {self.order + 1}")
        return arr

    def prepare(self, data, level: str | None = None):
        """As :meth:`HMM.prepare`; also checks that all sequences have the same channels and
        adds the data's location and scale for the priors (``Sequences.data_scale``, from
        all sequences), and that ``cov_dof > R - 1`` (a proper inverse-Wishart prior)."""
        if (isinstance(data, (list, tuple)) and not isinstance(data, Sequences)
                and level != "within"):
            channels = [self._validate_sequence(s, f"data[{i}]").shape[1]
                        for i, s in enumerate(data)]
            bad = [i for i, c in enumerate(channels) if c != channels[0]]
            if bad:
                raise InvalidDataError(
                    f"`data[{bad[0]}]` has {channels[bad[0]]} channel(s) but `data[0]` has "
                    f"{channels[0]}; every sequence needs the same number of channels")
        seqs, level, n = super().prepare(data, level)
        channels = int(seqs.x.shape[-1])
        if self.covariance == "full" and self.cov_dof is not None and \
                self.cov_dof <= channels - 1:
            raise InvalidArgumentError(
                f"`cov_dof` must exceed R - 1 = {channels - 1} for data with R = {channels} "
                f"channels (else the inverse-Wishart prior is improper), got {self.cov_dof}")
        return with_data_scale(seqs), level, n

    def features(self, x):
        """Lag features ``s_t = [x_{t-1}; ...; x_{t-p}]`` of one sequence: ``(T, R p)``."""
        if self.order == 0:
            return jnp.zeros((x.shape[0], 0), x.dtype)
        return lagged(x, self.order).reshape(x.shape[0], -1)

    # ------------------------------------------------------------ emissions
    def _emission_log_lik(self, params, x):
        """``log N(x_t; mu_k(s_t), L_k L_k^T)`` for every step and state, ``(T, K)``."""
        resid = x[:, None, :] - self._state_means(params, self.features(x))   # (T, K, R)
        trils = params.scale_trils
        diag = jnp.diagonal(trils, axis1=-2, axis2=-1)                          # (K, R)
        if self.covariance == "diag":
            z = resid / diag[None]
        else:  # K small R x R inverses, then one einsum (faster than batched solves)
            z = jnp.einsum("krs,tks->tkr", _tril_inverse(trils), resid)
        return (-0.5 * jnp.sum(z ** 2, axis=-1) - jnp.sum(jnp.log(diag), axis=-1)[None]
                - 0.5 * x.shape[1] * jnp.log(2 * jnp.pi))

    def _covariance_log_prior(self, trils):
        """Inverse-Wishart (full) or inverse-gamma per variance (diag), without normalisers."""
        diag = jnp.diagonal(trils, axis1=-2, axis2=-1)
        if self.covariance == "diag":
            return inverse_gamma_log_prior(2.0 * jnp.log(diag), self.var_shape, self.var_scale)
        num_channels = trils.shape[-1]
        dof = num_channels + 2.0 if self.cov_dof is None else self.cov_dof
        inv = _tril_inverse(trils)
        log_det = 2.0 * jnp.sum(jnp.log(diag))
        return -0.5 * (dof + num_channels + 1.0) * log_det - 0.5 * self.cov_scale * jnp.sum(
            inv ** 2)

    def _emission_log_prior(self, params):
        """Prior of standardised emission parameters (module docstring)."""
        return self._mean_log_prior(params) + self._covariance_log_prior(params.scale_trils)

    def log_prior(self, params, data=None):
        """Log prior on prepared ``data``: :meth:`HMM.log_prior` of the parameters of the
        standardised data (:meth:`_standardised`; module docstring).

        Raises:
            InvalidArgumentError: ``data`` is missing (the prior depends on its units).
        """
        return super().log_prior(self._standardised(params, *loc_scale(data,
                                                                       type(self).__name__)))

    def _standardised(self, params, loc, scale, inverse: bool = False):
        """The parameters of the same model for ``(x - loc) / scale`` (``inverse``: back);
        ``loc``, ``scale`` are ``(R,)``."""
        raise NotImplementedError

    @staticmethod
    def _standardised_trils(trils, scale, inverse: bool = False):
        """``L~ = S^{-1} L`` (``inverse``: ``S L~``), so ``Sigma~ = S^{-1} Sigma S^{-1}``."""
        return trils * scale[:, None] if inverse else trils / scale[:, None]

    def _tril_constraint(self):
        """Covariance factors: ``(K, R)`` log-sqrt variances (diag) or ``(K, R(R+1)/2)``
        packed triangles with log diagonal, unconstrained."""
        return C.LowerCholesky(diagonal=self.covariance == "diag")

    def _sample_emissions(self, params, z, key):
        """``x_t = mu_{z_t}(s_t) + L_{z_t} eps_t``, ``eps_t ~ N(0, I)``, ``(T, R)``: the state
        means of the lag features ``s_t`` of the draws so far (zero before the start), one
        ``lax.scan`` over time with the lags in the carry."""
        trils = jnp.asarray(params.scale_trils)
        steps, channels = z.shape[0], trils.shape[-1]
        noise = jnp.einsum("trs,ts->tr", trils[z], jax.random.normal(key, (steps, channels)))
        if not self.order:
            means = self._state_means(params, jnp.zeros((steps, 0)))
            return jnp.take_along_axis(means, z[:, None, None], axis=1)[:, 0] + noise

        def step(lags, inputs):
            k, e = inputs
            x = self._state_means(params, lags.reshape(1, -1))[0, k] + e
            return jnp.concatenate([x[None], lags[:-1]]), x

        return lax.scan(step, jnp.zeros((self.order, channels)), (z, noise))[1]

    # ------------------------------------------------------------------ fit
    def fit(self, data, level: str | None = None, init_params=None):
        """MAP fit as :meth:`HMM.fit` (and placed as it is), but the starts are refined one
        after another.

        ``HMM.fit`` refines all starts in one ``vmap`` and polishes each with two exact
        Newton steps; the dense Hessian of these models costs memory proportional to
        ``D`` times the data size per start, so here the starts (and the perturbation
        restarts, ``n_perturb``) run sequentially and the Newton polish is used only when
        ``D <= newton_max_dim`` (default 400), and L-BFGS replaces BFGS above
        ``approxcv.engine.MAX_DENSE_DIM`` parameters. These fits do not run EM, so there is
        no start selection on a subsample (``start_subsample`` is not used).
        """
        with placed(self.compute_profile):
            seqs, level, _ = self.prepare(data, level)
            seqs, n = self.padded_units(seqs, level)
            starts = self._starts(seqs, level, init_params)
            obj, u0s = self._fit_problem(seqs, level, starts)
            scale = obj.scale
            newton, method = fit_method(
                obj.u_full.size, 2 if obj.u_full.size <= self.newton_max_dim else 0)
            solve = batched_minimize(obj.fun, scale, self.max_steps, newton, method)

            def one_by_one(u0s, weights):
                # NumPy between the runs: eager JAX operations each compile a program
                u0s, weights = np.asarray(u0s), np.asarray(weights)
                runs = [solve(u[None], w[None], obj.data) for u, w in zip(u0s, weights)]
                return jax.tree_util.tree_map(lambda *r: np.concatenate(r), *runs)

            res = one_by_one(u0s, np.ones((len(starts), n)))
            best = self._best_start(res, f"{self.max_steps} optimiser steps",
                                    newton_steps=newton)
            return check_occupancy(self, self._perturbation_restarts(one_by_one, obj, best),
                                   seqs)

    # ------------------------------------------------------------------ init
    def _init_params(self, seqs: Sequences, n_init: int, seed: int) -> list:
        """``n_init`` starts: sticky transitions; k-means states (seed varies per start) and
        per-state least-squares emissions from :meth:`_initial_means`, all computed on the
        standardised data and mapped back (:meth:`_standardised`), so that the starts do not
        depend on the data's units."""
        rng = np.random.default_rng(seed)
        mask = np.asarray(seqs.mask) > 0
        # NumPy throughout: eager JAX operations would each compile a small program
        scaled = with_data_scale(seqs).data_scale
        loc, scale = np.asarray(scaled.loc)[0], np.asarray(scaled.scale)[0]
        x = (np.asarray(seqs.x)[mask] - loc) / scale
        s = ((lagged_features(np.asarray(seqs.x), self.order)[mask] - np.tile(loc, self.order))
             / np.tile(scale, self.order))
        k = self.n_states
        inits = []
        for i in range(n_init):
            _, labels = _kmeans(x, k, rng, 20)
            trans = np.full((k, k), 0.1 / max(k - 1, 1)) if k > 1 else np.ones((1, 1))
            np.fill_diagonal(trans, 0.9 if k > 1 else 1.0)
            means_params, resid = self._initial_means(x, s, labels, rng)
            start = _in_data_units(
                self, self.params_type(np.full(k, 1.0 / k), trans, *means_params,
                                       self._initial_trils(x, resid, labels)), loc, scale)
            inits.append(self.params_type(*[np.asarray(v) for v in start]))
        return inits

    def _initial_trils(self, x, resid, labels):
        """Cholesky factors of each cluster's residual covariance (shrunk towards ``var(x)``)."""
        num_channels = x.shape[1]
        floor = 1e-3 * np.diag(x.var(0)) + 1e-8 * np.eye(num_channels)
        trils = []
        for j in range(self.n_states):
            r = resid[labels == j]
            n = len(r)
            cov = (r.T @ r + np.cov(x.T, ddof=0).reshape(num_channels, num_channels)) / (n + 1)
            cov = cov + floor
            if self.covariance == "diag":
                cov = np.diag(np.diag(cov))
            trils.append(np.linalg.cholesky(cov))
        return np.stack(trils)

    # -------------------------------------------------------- to implement
    def _state_means(self, params, features):
        raise NotImplementedError

    def _mean_log_prior(self, params):
        raise NotImplementedError

    def _initial_means(self, x, s, labels, rng):
        raise NotImplementedError


def ridge_fit(design, targets, penalty):
    """``argmin_W |targets - design W^T|^2 + sum_c penalty_c |W_c|^2``:
    ``design (N, C), targets (N, R), penalty (C,) -> W (R, C)`` (initialisation only)."""
    gram = design.T @ design + np.diag(penalty)
    return np.linalg.solve(gram, design.T @ targets).T


class ARHMM(AutoregressiveEmissions):
    """HMM with vector-autoregressive Gaussian emissions of order ``p`` (module docstring).

    Data: a ``(T, R)`` float array (``(T,)`` is read as ``R = 1``) or a list of them with the
    same ``R``; every sequence needs at least ``p + 1`` steps.

    Args:
        n_states: ``K``.
        order: ``p >= 0`` (``p = 0``: a Gaussian HMM with full or diagonal covariances).
        covariance: ``"full"`` or ``"diag"``.
        weight_prior: ``"matrix_normal"`` or ``"isotropic"`` (module docstring).
        ar_prior_var, bias_prior_var: prior variances of ``A_k`` and ``b_k`` (relative to
            ``Sigma_k`` for the matrix-normal prior).
        var_shape, var_scale: inverse-gamma prior of each variance (``covariance="diag"``).
        cov_dof, cov_scale: inverse-Wishart ``IW(cov_dof, cov_scale I)`` (``"full"``);
            ``cov_dof=None`` means ``R + 2``.
        newton_max_dim: largest ``D`` for which :meth:`fit` polishes with exact Newton steps.
        **kwargs: :class:`~approxcv.models.hmm.HMM` options (``n_init``, ``seed``,
            ``max_steps``, Dirichlet concentrations).

    Example:
        >>> import numpy as np, approxcv as acv
        >>> xs = [np.random.default_rng(i).normal(size=(50, 2)) for i in range(6)]
        >>> model = acv.models.ARHMM(2, order=1)
        >>> res = acv.cross_validate(model, xs, acv.folds.leave_one_out(6), level="structure")
    """
    params_type = ARHMMParams
    numeric_hyperparameters = AutoregressiveEmissions.numeric_hyperparameters + (
        "ar_prior_var", "bias_prior_var")

    def __init__(self, n_states: int, order: int = 1, *, covariance: str = "full",
                 weight_prior: str = "matrix_normal", ar_prior_var: float = 1.0,
                 bias_prior_var: float = 1e4, **kwargs):
        super().__init__(n_states, order, covariance=covariance, **kwargs)
        self.weight_prior = check_choice("weight_prior", weight_prior, WEIGHT_PRIORS)
        self.ar_prior_var = check_positive("ar_prior_var", ar_prior_var)
        self.bias_prior_var = check_positive("bias_prior_var", bias_prior_var)

    def __repr__(self):
        return (f"ARHMM(n_states={self.n_states}, order={self.order}, "
                f"covariance={self.covariance!r})")

    def _state_means(self, params, features):
        """``A_k s_t + b_k`` for every step and state, ``(T, K, R)``."""
        return (jnp.einsum("tc,krc->tkr", features, params.weights[..., :-1])
                + params.weights[None, :, :, -1])

    def _mean_log_prior(self, params):
        """Matrix-normal or isotropic prior of standardised weights (module docstring)."""
        weights = params.weights
        col_var = jnp.concatenate([jnp.full(weights.shape[-1] - 1, self.ar_prior_var),
                                   jnp.array([self.bias_prior_var])])
        if self.weight_prior == "isotropic":
            return normal_log_prior(weights / jnp.sqrt(col_var), 0.0, 1.0)
        trils = params.scale_trils
        # column c of W_k ~ N(0, V_c Sigma_k): -1/2 sum_c |L_k^{-1} w_kc|^2 / V_c - C/2 log|Sigma_k|
        if self.covariance == "diag":
            white = weights / jnp.diagonal(trils, axis1=-2, axis2=-1)[..., None]
        else:
            white = jnp.einsum("krs,ksc->krc", _tril_inverse(trils), weights)
        log_det = 2.0 * jnp.sum(jnp.log(jnp.diagonal(trils, axis1=-2, axis2=-1)))
        return (-0.5 * jnp.sum(white ** 2 / col_var) - 0.5 * weights.shape[-1] * log_det)

    def _standardised(self, params, loc, scale, inverse: bool = False):
        """``A~_l = S^{-1} A_l S``, ``b~ = S^{-1} (b - (I - sum_l A_l) loc)``,
        ``L~ = S^{-1} L`` (``inverse``: back to the data's units)."""
        weights = jnp.asarray(params.weights)
        num_states, num_channels = weights.shape[:2]
        lag_scale = jnp.tile(scale, self.order)
        if inverse:
            lags = weights[..., :-1] * scale[:, None] / lag_scale
        else:
            lags = weights[..., :-1]
        # (I - sum_l A_l) loc of the data-unit A
        drift = loc - jnp.einsum("krlc,c->kr", lags.reshape(
            num_states, num_channels, self.order, num_channels), loc)
        if inverse:
            bias = weights[..., -1] * scale + drift
        else:
            lags = lags * lag_scale / scale[:, None]
            bias = (weights[..., -1] - drift) / scale
        return params._replace(
            weights=jnp.concatenate([lags, bias[..., None]], axis=-1),
            scale_trils=self._standardised_trils(params.scale_trils, scale, inverse))

    def _emission_constraints(self):
        return C.Real(), self._tril_constraint()

    def _forecast_mean(self, params, x, length, filtered, probs):
        """``E[x_{T+h} | x_{1..T}]``, ``(horizon, R)``, exactly: the means are affine in the
        lags (``mu_k = b_k``, ``C_{k,l}`` the ``l``-th column block of ``A_k``), so the
        moment recursion of :func:`~approxcv.models.hmm.base.ar_forecast_mean` applies."""
        weights = jnp.asarray(params.weights)
        return ar_forecast_mean(
            jnp.asarray(params.transition_matrix), filtered, probs, weights[..., -1],
            lambda n: jnp.einsum("krc,kc->kr", weights[..., :-1],
                                 n.reshape(n.shape[0], -1)),
            recent_steps(x, length, self.order))

    def _initial_means(self, x, s, labels, rng):
        """Per-cluster ridge regression of ``x_t`` on ``[s_t, 1]``; returns ``((W,), resid)``."""
        design = np.concatenate([s, np.ones((len(s), 1))], axis=1)
        penalty = np.concatenate([np.full(s.shape[1], 1.0 / self.ar_prior_var),
                                  [1.0 / self.bias_prior_var]])
        weights, resid = [], np.zeros_like(x)
        for j in range(self.n_states):
            sel = labels == j
            if sel.sum() == 0:
                sel = np.ones(len(x), bool)
            w = ridge_fit(design[sel], x[sel], penalty)
            weights.append(w)
            resid[labels == j] = x[labels == j] - design[labels == j] @ w.T
        return (np.stack(weights),), resid
