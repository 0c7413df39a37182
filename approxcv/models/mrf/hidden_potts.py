"""Hidden Potts model: a K-state Markov random field on a graph with per-state emissions
(structured-CV paper, §5 "Beyond chain-structured graphs" and Appendix L.3).

For sites ``t`` of a graph with edges ``E`` (an adjacency matrix, a hyperparameter)::

    p(z) = exp(beta * sum_{(s,t) in E} 1{z_s = z_t}) / Z(beta)
    x_t | z_t = k ~ Poisson(e_t lambda_k)          (emission="poisson", exposure e_t)
    x_t | z_t = k ~ Normal(mu_k, sigma_k^2)       (emission="gaussian")

with the connection strength ``beta`` fixed. Priors: ``lambda_k ~ Gamma(a, b)``;
``mu_k ~ Normal(0, mean_prior_variance)``, ``sigma_k^2 ~ InvGamma(a, b)``. Parameters
are only the emissions'; the latent field is marginalised exactly by variable
elimination (:mod:`approxcv.inference.elimination`, the narrowest of several orders,
one compiled plan per graph).

Weighted objective (one weight per site, ``level="within"``; seed eq. 4-5)::

    F(theta, w) = -log p_scheme(x; theta, w) - log p(theta)

scheme A weights the emissions ``w_t log p(x_t | z_t)`` and keeps every latent; scheme B
also weights each edge factor by ``w_s w_t``, so a dropped site is marginalised with its
latent; the latent field's normaliser ``Z(beta, w)`` depends on the weights under B and is
included. Held-out losses, in the full model: ``-log p(x_o | x_kept)`` per fold and
``-log p(x_t | x_kept)`` per left-out site. Fitting: EM with the analytic M-step (the
seed's), then Newton steps on ``F`` (:mod:`approxcv.models.mrf.fit`); or BFGS + Newton.
"""
from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np
from jax.scipy.special import gammaln
from scipy import sparse

from ..._validate import (as_real_array, check_adjacency, check_choice, check_counts,
                          check_finite, check_positive, check_positive_int)
from ...errors import InvalidArgumentError, InvalidDataError, InvalidGraphError
from ...inference import elimination
from .. import constraints as C
from .._transforms import gamma_log_prior, inverse_gamma_log_prior, normal_log_prior
from ..base import Model, check_weights
from .fit import fit_potts

__all__ = ["HiddenPotts", "HiddenPottsParams", "HiddenPottsGaussianParams", "FieldData"]

EMISSIONS = ("poisson", "gaussian")


class HiddenPottsParams(NamedTuple):
    """Poisson emissions: ``rates (K,)`` (per unit of exposure)."""
    rates: np.ndarray


class HiddenPottsGaussianParams(NamedTuple):
    """Gaussian emissions: ``means (K,)``, ``variances (K,)``."""
    means: np.ndarray
    variances: np.ndarray


class FieldData(NamedTuple):
    """Prepared data: observations ``x (n,)`` and exposures ``exposure (n,)`` (ones for
    Gaussian emissions or when none are given)."""
    x: jnp.ndarray
    exposure: jnp.ndarray


def _graph_edges(adjacency) -> tuple:
    """``(n, edges)`` of an adjacency given dense, as ``scipy.sparse`` or as a ``networkx``
    graph; edges ``(s, t)``, ``s < t``, sorted. A sparse matrix is checked without making it
    dense: square, entries 0/1, symmetric, no self-loops, no site without a neighbour.

    Raises:
        InvalidGraphError: as :func:`approxcv._validate.check_adjacency`.
    """
    if type(adjacency).__module__.split(".")[0] == "networkx":
        import networkx              # an optional dependency: only for a graph passed as one
        adjacency = networkx.to_scipy_sparse_array(adjacency, dtype=np.float64, weight=None)
    if not sparse.issparse(adjacency):
        adj = check_adjacency("adjacency", adjacency)
        s, t = np.nonzero(np.triu(adj))
        return int(adj.shape[0]), tuple((int(a), int(b)) for a, b in zip(s, t))
    coo = sparse.coo_matrix(adjacency)
    n = coo.shape[0]
    if coo.ndim != 2 or coo.shape[0] != coo.shape[1] or n < 2:
        raise InvalidGraphError(f"`adjacency` must be a square (n, n) matrix with n >= 2, got "
                                f"shape {coo.shape}")
    coo.sum_duplicates()
    coo.eliminate_zeros()
    values = np.asarray(coo.data)
    if not (np.issubdtype(values.dtype, np.number) or values.dtype == bool):
        raise InvalidGraphError(f"`adjacency` must hold numbers, got dtype {values.dtype}")
    if not np.all(values == 1):
        raise InvalidGraphError("`adjacency` must hold only 0 and 1 (or booleans)")
    row, col = coo.row.astype(np.int64), coo.col.astype(np.int64)
    if np.any(row == col):
        raise InvalidGraphError(f"`adjacency` has self-loops at nodes "
                                f"{np.unique(row[row == col])[:5].tolist()}")
    fwd = set(zip(row.tolist(), col.tolist()))
    odd = [(s, t) for s, t in fwd if (t, s) not in fwd]
    if odd:
        s, t = min(odd)
        raise InvalidGraphError(f"`adjacency` is not symmetric: entry ({s}, {t}) is 1 but "
                                f"({t}, {s}) is 0")
    lonely = np.setdiff1d(np.arange(n), row)
    if lonely.size:
        raise InvalidGraphError(f"`adjacency` has {lonely.size} disconnected site(s) without "
                                f"neighbours (e.g. {lonely[:5].tolist()}); drop them or join "
                                "them to the graph")
    return int(n), tuple(sorted((s, t) for s, t in fwd if s < t))


class HiddenPotts(Model):
    """Hidden Potts model on a graph (module docstring).

    Args:
        adjacency: ``(n, n)`` symmetric 0/1 matrix without self-loops — dense, a
            ``scipy.sparse`` matrix or array, or a ``networkx`` graph (nodes in its order);
            every site needs a neighbour.
        n_states: number of latent states ``K``.
        beta: connection strength (a hyperparameter; 0: an independent mixture).
        emission: ``"poisson"`` (counts) or ``"gaussian"``.
        rate_shape, rate_rate: Gamma prior on each Poisson rate.
        variance_shape, variance_scale, mean_prior_variance: Gaussian priors.
        n_init, seed: starts of the fit; fit_em: EM + Newton (default) or BFGS + Newton.
        max_steps: iterations of either optimiser.
        max_bytes: memory allowed for one elimination with its gradients
            (:func:`approxcv.inference.elimination.plan_bytes`).

    Data: ``x (n,)``, or a tuple ``(x, exposure)`` of two ``(n,)`` arrays with positive
    exposures (Poisson: expected counts ``e_t lambda_k``, e.g. births for death counts).

    Raises:
        InvalidGraphError: a bad adjacency (not symmetric, self-loops, a disconnected site).
        GraphTooWideError: exact elimination would need more than ``max_bytes`` (refused
            before anything is allocated; a graph far too wide in a few seconds).

    Example:
        >>> import approxcv as acv
        >>> d = acv.datasets.load_sids()
        >>> model = acv.models.HiddenPotts(d.adjacency, 2, beta=0.5)
        >>> params = model.fit((d.sids74, d.births74 / 1000))
    """

    #: exact-CV refits by damped Newton: the emission parameters are few (``K`` or ``2K``)
    refit_solver = "newton"

    def __init__(self, adjacency, n_states: int, beta: float, emission: str = "poisson", *,
                 rate_shape: float = 1.1, rate_rate: float = 1e-3, variance_shape: float = 1.1,
                 variance_scale: float = 1e-2, mean_prior_variance: float = 1e6,
                 n_init: int = 4, seed: int = 0, fit_em: bool = True, max_steps: int = 500,
                 max_bytes: float = elimination.DEFAULT_MAX_BYTES):
        self.n_sites, self.edges = _graph_edges(adjacency)
        self.n_states = check_positive_int("n_states", n_states, 1)
        self.beta = float(beta)
        if not np.isfinite(self.beta):
            raise InvalidArgumentError(f"`beta` must be a finite number, got {beta!r}")
        self.emission = check_choice("emission", emission, EMISSIONS)
        self.rate_shape = check_positive("rate_shape", rate_shape)
        self.rate_rate = check_positive("rate_rate", rate_rate)
        self.variance_shape = check_positive("variance_shape", variance_shape)
        self.variance_scale = check_positive("variance_scale", variance_scale)
        self.mean_prior_variance = check_positive("mean_prior_variance", mean_prior_variance)
        self.n_init = check_positive_int("n_init", n_init)
        self.seed = int(seed)
        self.fit_em = bool(fit_em)
        self.max_steps = check_positive_int("max_steps", max_steps)
        self.max_bytes = check_positive("max_bytes", max_bytes)
        # the fit and the IJ differentiate the elimination: its memory counts gradients
        self.plan_ = elimination.plan_within(self.n_sites, self.edges, self.n_states,
                                             self.max_bytes, differentiate=True)
        self.fit_result_: dict | None = None
        self._field_log_z: float | None = None

    #: beta and the priors are arguments of the compiled programs
    #: (:attr:`approxcv.models.base.Model.numeric_hyperparameters`): a model at another
    #: beta (a grid in ``select``) reuses every program of its structure
    numeric_hyperparameters = ("beta", "rate_shape", "rate_rate", "variance_shape",
                               "variance_scale", "mean_prior_variance")

    def numbers(self) -> dict:
        """The numeric hyperparameters and ``log Z(beta)`` of the latent field (scheme A's
        normaliser, computed here, once per model, so that the programs take it as an
        argument and never eliminate the field for it)."""
        return {**super().numbers(),
                "_field_log_z": np.asarray(self.field_log_normalizer(), np.float64)}

    @property
    def adjacency(self) -> np.ndarray:
        """The ``(n, n)`` 0/1 adjacency matrix."""
        adj = np.zeros((self.n_sites, self.n_sites), dtype=np.int8)
        for s, t in self.edges:
            adj[s, t] = adj[t, s] = 1
        return adj

    @property
    def induced_width(self) -> int:
        """Induced width of the elimination order used (the narrowest of those tried:
        :func:`approxcv.inference.elimination.narrowest_order`)."""
        return self.plan_.width

    @property
    def params_type(self):
        return HiddenPottsParams if self.emission == "poisson" else HiddenPottsGaussianParams

    # ----------------------------------------------------------------- data
    def prepare(self, data, level: str | None = None):
        """Validate ``data`` and return ``(FieldData, "within", n_sites)``.

        Raises:
            InvalidArgumentError: a level other than ``"within"``.
            InvalidDataError: another length than the graph; NaN/inf; Poisson counts that are
                negative or not integers; exposures that are not positive.
        """
        if level not in (None, "within"):
            raise InvalidArgumentError(f"`level` must be 'within' for {type(self).__name__} "
                                       f"(one field, the units are its sites), got {level!r}")
        if isinstance(data, FieldData):
            return data, "within", self.n_sites
        pair = (isinstance(data, tuple) and len(data) == 2
                and all(np.ndim(d) == 1 for d in data))
        x, exposure = data if pair else (data, None)
        x = check_finite("data", as_real_array("data", x)).astype(np.float64)
        if x.shape != (self.n_sites,):
            raise InvalidDataError(f"`data` must have shape ({self.n_sites},) (one value per "
                                   f"site of the graph), got {x.shape}")
        if self.emission == "poisson":
            check_counts("data", x, " for Poisson emissions")
        if exposure is None:
            exposure = np.ones(self.n_sites)
        else:
            exposure = check_finite("exposure", as_real_array("exposure", exposure))
            if exposure.shape != (self.n_sites,) or np.any(exposure <= 0):
                raise InvalidDataError(f"`exposure` must be ({self.n_sites},) positive values")
        return (FieldData(jnp.asarray(x), jnp.asarray(exposure, dtype=jnp.float64)),
                "within", self.n_sites)

    def objective_scale(self, data) -> float:
        """Number of sites (normalises optimiser tolerances)."""
        return float(self.n_sites)

    # ----------------------------------------------------------- parameters
    def param_constraints(self):
        if self.emission == "poisson":
            return HiddenPottsParams(C.Positive())
        return HiddenPottsGaussianParams(C.Real(), C.Positive())

    def log_prior(self, params):
        """Gamma prior on rates, or Normal on means and Inverse-Gamma on variances."""
        if self.emission == "poisson":
            return gamma_log_prior(jnp.log(params.rates), self.rate_shape, self.rate_rate)
        return (normal_log_prior(params.means, 0.0, self.mean_prior_variance)
                + inverse_gamma_log_prior(jnp.log(params.variances), self.variance_shape,
                                          self.variance_scale))

    def emission_log_lik(self, params, data: FieldData):
        """``l_t(k) = log p(x_t | z_t = k)``, shape ``(n, K)``: ``x log(e lambda_k) - e
        lambda_k - log x!`` or ``-log(2 pi sigma_k^2) / 2 - (x - mu_k)^2 / (2 sigma_k^2)``."""
        x = data.x[:, None]
        if self.emission == "poisson":
            mean = data.exposure[:, None] * params.rates[None]
            return x * jnp.log(mean) - mean - gammaln(x + 1.0)
        var = params.variances[None]
        return -0.5 * jnp.log(2 * jnp.pi * var) - 0.5 * (x - params.means[None]) ** 2 / var

    def field_potentials(self):
        """``(unary (n, K) zeros, pairwise (K, K) = beta * I)`` of the latent Potts field."""
        k = self.n_states       # NumPy: eager JAX operations would each compile a program
        return np.zeros((self.n_sites, k)), self.beta * np.eye(k)

    def field_log_normalizer(self) -> float:
        """``log Z(beta)`` of the latent field with every site kept (scheme A's normaliser,
        a constant of the model): one elimination, at the first call, then cached."""
        if self._field_log_z is None:
            import jax
            with jax.ensure_compile_time_eval():      # a constant even inside a trace
                unary, pair = self.field_potentials()
                self._field_log_z = float(elimination.log_partition(
                    self.plan_, unary, np.broadcast_to(pair, (len(self.edges),) + pair.shape)))
        return self._field_log_z

    def init_params(self, data, level: str | None = None, n: int = 1, seed: int = 0) -> list:
        """``n`` starts: emissions at (jittered, after the first) quantiles of the data."""
        data, _, _ = self.prepare(data, level)
        rng = np.random.default_rng(seed)
        x = np.asarray(data.x) / np.asarray(data.exposure)
        k = self.n_states
        out = []
        for i in range(n):
            qs = (np.arange(k) + 0.5) / k
            if i > 0:
                qs = np.sort(np.clip(qs + rng.uniform(-0.5, 0.5, k) / k, 0.01, 0.99))
            loc = np.quantile(x, qs) * (1.0 + 1e-3 * np.arange(k))
            if self.emission == "poisson":
                out.append(HiddenPottsParams(np.maximum(loc, 1e-3 * max(x.mean(), 1e-3))))
            else:
                out.append(HiddenPottsGaussianParams(loc + 1e-3 * np.arange(k),
                                                     np.full(k, max(x.var() / k, 1e-6))))
        return out

    # ------------------------------------------------------ objective & loss
    def objective(self, params, data, weights, scheme: str = "A", level: str | None = None):
        """``F(theta, w) = -log p_scheme(x; theta, w) - log p(theta)`` (module docstring;
        :func:`approxcv.inference.elimination.weighted_log_marginal`)."""
        data, _, n = self.prepare(data, level)
        weights = check_weights(weights, n, "site")
        unary, pair = self.field_potentials()
        ll = elimination.weighted_log_marginal(
            self.plan_, unary, pair, self.emission_log_lik(params, data), weights, scheme,
            self.field_log_normalizer() if scheme == "A" else None)
        return -ll - self.log_prior(params)

    def objective_splits(self, scheme: str, level: str) -> bool:
        """Scheme A removes the left-out sites' emissions: ``F(u, w_o) = -log p(x_kept) =
        F(u, 1) - L_o(u)``; scheme B's weighted latent terms do not."""
        return scheme == "A"

    def heldout_loss(self, params, data, weights, level: str | None = None):
        """``(-log p(x_o | x_kept), -log p(x_t | x_kept) per site (n,))`` for the sites with
        weight 0, in the full model (0 at kept sites)."""
        data, _, n = self.prepare(data, level)
        weights = check_weights(weights, n, "site")
        unary, pair = self.field_potentials()
        return elimination.heldout_losses(self.plan_, unary, pair,
                                          self.emission_log_lik(params, data), weights)

    def log_marginal_likelihood(self, params, data):
        """``log p(x; theta)`` (all weights 1): exact, by variable elimination."""
        data, _, n = self.prepare(data)
        return -self.objective(params, data, jnp.ones(n)) - self.log_prior(params)

    def posterior_marginals(self, params, data):
        """``(n, K)`` posterior site marginals ``p(z_t = k | x)``."""
        data, _, _ = self.prepare(data)
        unary, pair = self.field_potentials()
        return elimination.site_marginals(
            self.plan_, unary + self.emission_log_lik(params, data),
            jnp.broadcast_to(pair, (len(self.edges),) + pair.shape)).marginals

    # ------------------------------------------------------------------ fit
    def fit(self, data, level: str | None = None):
        """MAP fit from ``n_init`` starts: EM with the analytic M-step then Newton steps
        (``fit_em``), or BFGS + Newton (:func:`approxcv.models.mrf.fit.fit_potts`); the
        run is recorded in ``fit_result_``.

        Raises:
            FitError: no start reached a finite objective.
        """
        data, level, _ = self.prepare(data, level)
        return fit_potts(self, data)

    def __repr__(self) -> str:
        return (f"HiddenPotts(n_sites={self.n_sites}, n_edges={len(self.edges)}, "
                f"n_states={self.n_states}, beta={self.beta}, emission={self.emission!r})")
