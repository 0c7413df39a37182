"""Shared machinery of hidden Markov models: weighted objective, held-out losses, fitting.

A concrete HMM supplies only its emission model: ``_emission_log_lik(params, x) -> (T, K)``,
``_emission_log_prior(params)``, the transforms of its emission parameters, data validation
and initialisations. Everything else — scheme A/B weighting, structure-level weights,
held-out losses in the full model, multi-start fitting — lives here once.

Data: one sequence (``level="within"``: the units are its time steps) or a list of
sequences of possibly different lengths (``level="structure"``: the units are sequences).
Sequences are padded to a common length; padded steps have emission log-likelihood 0 and,
the transition matrix being stochastic, contribute exactly nothing to ``log Z``. Fits and
cross-validation also pad the time axis to a size bucket (:meth:`HMM.padded_units`,
:func:`approxcv._runtime.sizes.length_bucket`), so that series of similar lengths share their
compiled programs; at level ``"within"`` the padded steps are null units of the engine.

A fitted model's uses, for every family, in the protocol's style ``model.method(params,
data)`` (data: one sequence, or a list of any number of them): :meth:`HMM.predict` (the
Viterbi path), :meth:`HMM.predict_proba` (posterior state marginals), :meth:`HMM.score`
(``log p(x)`` without the prior), :meth:`HMM.forecast` (the next steps' state distribution
and predictive mean, :class:`Forecast`) and :meth:`HMM.sample` (draws ``(x, z)`` from the
model). Each emission family supplies the draws (``_sample_emissions``) and the means
(``_state_emission_means`` or ``_forecast_mean``).
"""
from __future__ import annotations

import itertools
import warnings
from functools import partial
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from ...errors import user_stacklevel
from ..._validate import (as_real_array, check_counts as check_count_values, check_finite,
                          check_positive, check_positive_int)
from ...optim import batched_minimize
from ...optim.newton import polish_rows
from ...errors import (ArgumentTypeError, InvalidArgumentError, LocalOptimumWarning,
                      InvalidDataError)
from ..._runtime import SEQUENTIAL, jit, length_bucket, placed
from ...fitting import best_start, fit_method, padded, perturbation_restarts
from ...inference import chain
from .. import constraints as C
from .em import EM_MAX_DIM, em_fit
from .start_selection import select_starts
from .windows import ChainWindows
from ._occupancy import check_occupancy, min_occupancy, state_occupancy
from ._collapse import coinciding_states, describe_groups, split_starts
from .._transforms import dirichlet_log_prior, dirichlet_map
from ..base import Model, check_weights, left_out
from ...problem import flat_params, make_problem

LEVELS = ("within", "structure")


#: :meth:`HMM.known_optima` recognises relabelled optima (states permuted) up to this many
#: states (7! = 5,040 permutations); above it only an identical optimum counts as the same
MAX_RELABEL_STATES = 7


class Sequences(NamedTuple):
    """Prepared sequence data: ``x`` padded to ``(S, T_max, ...)`` and ``mask (S, T_max)``;
    ``data_scale``: the data's units for priors that depend on them
    (:class:`approxcv.models.hmm._data_scale.DataScale`), ``None`` for models without."""
    x: jax.Array
    mask: jax.Array
    data_scale: tuple | None = None

    @property
    def num_sequences(self) -> int:
        return int(self.x.shape[0])


class Forecast(NamedTuple):
    """What :meth:`HMM.forecast` returns for one sequence ``x_1..x_T`` (NumPy arrays).

    filtered: ``(K,)``, ``p(z_T = k | x_{1..T})``: the filtered distribution at the last
        observed step (forward algorithm).
    state_probs: ``(horizon, K)``; row ``h - 1`` is ``p(z_{T+h} = k | x_{1..T}) =
        (filtered A^h)_k``, the filtered distribution propagated ``h`` times through the
        transition matrix ``A``.
    mean: ``(horizon, ...)``; row ``h - 1`` is the emission predictive mean
        ``E[x_{T+h} | x_{1..T}]``, exact (no sampling): ``sum_k state_probs[h-1, k]
        E[x | z = k]`` for emissions without lags (PoissonHMM ``(horizon,)``, GaussianHMM
        ``(horizon, R)``, CategoricalHMM ``(horizon, V)``: the symbol probabilities, the
        mean of the one-hot encoding, TimeVaryingPoisson ``(horizon,)`` at the steps'
        own background rates), by the moment recursion of :func:`ar_forecast_mean` for
        linear autoregressive means (GaussianHMM with ``ar_order``, ARHMM), and ``None``
        where it has no closed form (NeuralARHMM's networks of the lags).
    """
    filtered: np.ndarray
    state_probs: np.ndarray
    mean: np.ndarray | None


class HMM(ChainWindows, Model):
    """Base class of HMMs with a weighted-objective interface (see module docstring).

    Subclasses set ``params_type`` (a NamedTuple whose first two fields are
    ``initial_probs (K,)`` and ``transition_matrix (K, K)``) and implement the emission
    hooks listed in the module docstring.

    Fit options: ``n_init`` starts (``seed``), ``max_steps`` BFGS steps, ``n_perturb``
    perturbation restarts dropping ``perturb_frac`` of the units, ``fit_em``: EM +
    Newton first (default; ``False`` fits by BFGS + Newton only, as earlier versions did —
    the two can end in different local optima from the same start), and
    ``start_subsample``: on data of at least 4 times this many steps the starts are first
    refined by EM on the first ``start_subsample`` steps and only the endpoints that may be
    the best optimum go on to all the data (:mod:`approxcv.models.hmm.start_selection`;
    ``None``: every start on all the data).
    """

    def __init__(self, n_states: int, *, initial_concentration: float = 1.1,
                 transition_concentration: float = 1.1, n_init: int = 4, seed: int = 0,
                 max_steps: int = 2000, n_perturb: int = 0, perturb_frac: float = 0.3,
                 fit_em: bool | None = None, start_subsample: int | None = 10_000,
                 prior=None):
        if prior is not None and getattr(prior, "family", None) != type(self).__name__:
            raise InvalidArgumentError(
                f"`prior` of {type(self).__name__} must be a prior of its family; got "
                f"{type(prior).__name__} (for {getattr(prior, 'family', 'no HMM')})")
        #: ``None`` (the priors of the concentrations and the family's own), or a prior
        #: object that replaces them all (its ``log_prior``, M-steps and held parameters:
        #: :mod:`approxcv.models.hmm.hmmlearn_prior`)
        self.prior = prior
        self.n_states = check_positive_int("n_states", n_states, 1)
        self.initial_concentration = check_positive("initial_concentration",
                                                    initial_concentration)
        self.transition_concentration = check_positive("transition_concentration",
                                                       transition_concentration)
        self.n_init = check_positive_int("n_init", n_init)
        self.seed = seed
        self.max_steps = check_positive_int("max_steps", max_steps)
        self.n_perturb = check_positive_int("n_perturb", n_perturb, 0)
        self.perturb_frac = float(perturb_frac)
        if not 0.0 < self.perturb_frac < 1.0:
            raise InvalidArgumentError(
                f"`perturb_frac` must lie in (0, 1), got {perturb_frac!r}")
        self.fit_em = type(self).fit_em if fit_em is None else bool(fit_em)
        self.start_subsample = (None if start_subsample is None else
                                check_positive_int("start_subsample", start_subsample))
        #: parameter sets known to be a poorer local optimum of this model's objective than
        #: another fit of it found, each with why (:meth:`mark_poorer_fit`)
        self.poorer_fits_ = []
        self.fit_result_: dict | None = None

    # ----------------------------------------------------------------- data
    def prepare(self, data, level: str | None = None):
        """Validate ``data`` and return ``(Sequences, level, num_units)``.

        A single array is one sequence (default level ``"within"``); a list/tuple of arrays
        is a set of sequences (level ``"structure"``).
        """
        if isinstance(data, Sequences):
            lvl = level or ("within" if data.num_sequences == 1 else "structure")
            n = int(data.x.shape[1]) if lvl == "within" else data.num_sequences
            return data, lvl, n
        is_list = isinstance(data, (list, tuple))
        if level is None:
            level = "structure" if is_list else "within"
        if level not in LEVELS:
            raise InvalidArgumentError(f"`level` must be one of {LEVELS}, got {level!r}")
        if level == "within":
            if is_list:
                raise InvalidArgumentError(
                    "`data` is a list of sequences; level='within' needs one sequence "
                    "(pass data[i], or use level='structure' to leave out whole sequences)")
            seqs = [self._validate_sequence(data, "data")]
        else:
            if not is_list:
                raise InvalidArgumentError(
                    "level='structure' needs `data` as a list of sequences")
            if len(data) < 2:
                raise InvalidArgumentError(
                    f"level='structure' needs at least 2 sequences in `data`, got {len(data)}")
            seqs = [self._validate_sequence(s, f"data[{i}]") for i, s in enumerate(data)]
        t_max = max(len(s) for s in seqs)
        x = np.zeros((len(seqs), t_max) + seqs[0].shape[1:], dtype=seqs[0].dtype)
        mask = np.zeros((len(seqs), t_max))
        for i, s in enumerate(seqs):
            x[i, :len(s)] = s
            mask[i, :len(s)] = 1.0
        n = len(seqs[0]) if level == "within" else len(seqs)
        return Sequences(jnp.asarray(x), jnp.asarray(mask)), level, n

    def _validate_sequence(self, x, name: str) -> np.ndarray:
        raise NotImplementedError

    def padded_units(self, data, level: str):
        """``(Sequences, n)``: the prepared ``data`` with the time axis padded to
        :func:`~approxcv._runtime.sizes.length_bucket` of its length by masked steps (emission
        log-likelihood 0: nothing added to ``log Z`` nor to any held-out loss, and weighted
        by 0 under scheme B, see :meth:`objective`), and its number of units: the padded
        length at level ``"within"``, the sequences at ``"structure"``."""
        seqs, level, n = self.prepare(data, level)
        steps = int(seqs.mask.shape[1])
        extra = length_bucket(steps) - steps
        if extra:      # NumPy: a pad of each new length would be a program of its own
            seqs = seqs._replace(x=self._padded_steps(seqs.x, extra),
                                 mask=pad_steps(seqs.mask, extra))
        return seqs, steps + extra if level == "within" else n

    def _padded_steps(self, x, extra: int):
        """``x (S, T, ...)`` with ``extra`` zero steps appended on the time axis."""
        return pad_steps(x, extra)

    def objective_scale(self, seqs: Sequences) -> float:
        """Number of observed time steps (normalises optimiser tolerances)."""
        return float(np.asarray(seqs.mask).sum())

    # ----------------------------------------------------------- parameters
    def param_constraints(self):
        """Simplexes for the initial distribution and transition rows, then the emissions';
        a ``prior`` may hold some of them fixed (its ``constraint(field, default)``)."""
        own = self.params_type(C.Simplex(), C.Simplex(), *self._emission_constraints())
        if self.prior is None:
            return own
        return self.params_type(*(self.prior.constraint(f, c)
                                  for f, c in zip(self.params_type._fields, own)))

    def chain_m_step(self, e_init, e_trans):
        """``(pi, A)``: the chain's EM M-step from the expected initial and transition
        counts (Dirichlet MAP; the ``prior``'s when there is one)."""
        if self.prior is not None:
            return self.prior.chain_m_step(e_init, e_trans)
        return (dirichlet_map(e_init, self.initial_concentration),
                dirichlet_map(e_trans, self.transition_concentration))

    def emission_m_step(self, params, r, x, data):
        """The emissions' EM M-step (:meth:`_emission_m_step`, the family's closed form),
        or the ``prior``'s when there is one."""
        if self.prior is not None:
            return self.prior.emission_m_step(params, r, x)
        return self._emission_m_step(params, r, x, data)

    def log_prior(self, params, data=None):
        """Dirichlet priors on the initial distribution and transition rows + emission prior
        (or the ``prior``'s ``log_prior``, which replaces them all).

        ``data``: the prepared data, for priors stated in the data's units (unused here)."""
        if self.prior is not None:
            return self.prior.log_prior(params)
        return (dirichlet_log_prior(jnp.log(params[0]), self.initial_concentration)
                + dirichlet_log_prior(jnp.log(params[1]), self.transition_concentration)
                + self._emission_log_prior(params))

    def log_potentials(self, params, x, mask):
        """``(log_init (K,), log_trans (K, K), log_lik (T, K))`` of one padded sequence."""
        log_lik = self._emission_log_lik(params, x) * mask[:, None]
        return jnp.log(params[0]), jnp.log(params[1]), log_lik

    # ------------------------------------------------------ objective & loss
    def objective(self, params, data, weights, scheme: str = "A", level: str | None = None):
        """Weighted negative log joint ``F(theta, w) = -log Z_scheme(w) - log p(theta)``.

        ``level="within"``: ``w`` has one entry per time step and ``Z`` is the weighted
        marginal likelihood of :func:`approxcv.inference.chain.weighted_log_marginal`.
        ``level="structure"``: ``w`` has one entry per sequence and
        ``F = -sum_i w_i log p(x_i) - log p(theta)`` (``scheme`` is ignored).
        Masked (padded) steps are weighted by 0, which under scheme B removes their latents
        too (exactly: see :mod:`approxcv.inference.chain`).
        """
        seqs, level, n = self.prepare(data, level)
        weights = check_weights(weights, n)
        if level == "within":
            pots = self.log_potentials(params, seqs.x[0], seqs.mask[0])
            ll = chain.weighted_log_marginal(*pots, weights * seqs.mask[0], scheme)
        else:
            ll = jnp.dot(weights, self.sequence_log_likelihoods(params, seqs))
        return -ll - self.log_prior(params, seqs)

    def sequence_log_likelihoods(self, params, seqs: Sequences):
        """``(S,)`` marginal log-likelihoods ``log p(x_i; theta)`` of every sequence."""
        def one(x, mask):
            return chain.log_normalizer(*self.log_potentials(params, x, mask))
        return jax.vmap(one)(seqs.x, seqs.mask)

    def objective_splits(self, scheme: str, level: str) -> bool:
        """Scheme A and leave-structure-out remove the left-out emissions: ``F(u, w_o) =
        -log p(x_kept) = F(u, 1) - L_o(u)``; scheme B's weighted latent terms do not."""
        return scheme == "A" or level == "structure"

    def heldout_loss(self, params, data, weights, level: str | None = None):
        """Held-out losses of the units with weight 0: ``(fold_loss, point_losses (n,))``.

        Within: ``-log p(x_o | x_kept)`` and ``-log p(x_t | x_kept)`` (zero where kept),
        in the full model. Structure: ``-log p(x_i)`` for every left-out sequence.
        """
        seqs, level, n = self.prepare(data, level)
        weights = check_weights(weights, n)
        if level == "within":
            return chain.heldout_losses(*self.log_potentials(params, seqs.x[0], seqs.mask[0]),
                                        weights)
        losses = jnp.where(left_out(weights), -self.sequence_log_likelihoods(params, seqs), 0.0)
        return jnp.sum(losses), losses

    # ----------------------------------------------- a fitted model's uses
    def predict(self, params, data):
        """The most probable state path (Viterbi): ``argmax_z p(z | x; theta)``.

        Args:
            params: parameters of this model (e.g. from :meth:`fit`).
            data: one sequence, or a list of sequences (any number, of any lengths).

        Returns:
            ``(T,)`` int array of states in ``0..K-1``; a list of them (one per sequence)
            when ``data`` is a list. Ties go to the lowest state index
            (:func:`approxcv.inference.chain.viterbi`).
        """
        with placed(self.compute_profile):
            seqs, lengths, many = self._given_sequences(data)
            paths = np.asarray(_viterbi_paths(self, _as_float(self, params), seqs))
        return _per_sequence([p[:n] for p, n in zip(paths, lengths)], many)

    def predict_proba(self, params, data):
        """Posterior state marginals ``p(z_t = k | x_{1..T}; theta)`` (forward-backward,
        :func:`approxcv.inference.chain.posterior_marginals`).

        Returns:
            ``(T, K)`` float array whose rows sum to 1; a list of them when ``data`` is a
            list (arguments as :meth:`predict`).
        """
        with placed(self.compute_profile):
            seqs, lengths, many = self._given_sequences(data)
            log_gamma = np.asarray(_smoothed(self, _as_float(self, params), seqs))
        return _per_sequence([np.exp(g[:n]) for g, n in zip(log_gamma, lengths)], many)

    def score(self, params, data) -> float:
        """Log-likelihood ``log p(x; theta) = sum_i log p(x_i; theta)`` summed over the
        sequences, by the forward algorithm; **without** the log prior (the fit's
        objective is ``-score - log_prior``, at unit weights). As hmmlearn's ``score``.
        Arguments as :meth:`predict`."""
        with placed(self.compute_profile):
            seqs, _, _ = self._given_sequences(data)
            return float(np.sum(np.asarray(
                _log_likelihoods(self, _as_float(self, params), seqs))))

    def forecast(self, params, data, horizon: int = 1):
        """The predictive distribution of the ``horizon`` steps after the end of ``data``.

        With the filtered distribution ``f = p(z_T | x_{1..T})`` at the last step, the state
        distribution ``h`` steps ahead is ``f A^h`` (:func:`approxcv.inference.chain.
        propagate_states`), and the emission predictive mean ``E[x_{T+h} | x_{1..T}]``
        follows from it (:class:`Forecast` says how, by family). Each step's distribution is
        a marginal: the steps' joint distribution is the chain's, not a product.

        Args:
            params, data: as :meth:`predict`.
            horizon: number of steps ahead, ``>= 1``.

        Returns:
            :class:`Forecast` ``(filtered (K,), state_probs (horizon, K), mean (horizon,
            ...) or None)``; a list of them, one per sequence, when ``data`` is a list.
        """
        horizon = check_positive_int("horizon", horizon, 1)
        with placed(self.compute_profile):
            seqs, _, many = self._given_sequences(data)
            out = _forecast(self, _as_float(self, params), seqs, horizon)
        filtered, probs, mean = (None if a is None else np.asarray(a) for a in out)
        return _per_sequence([Forecast(filtered[i], probs[i], None if mean is None else mean[i])
                              for i in range(len(filtered))], many)

    def sample(self, params, n_steps: int, seed=0):
        """One sequence of ``n_steps`` steps drawn from the model: ``z_1 ~ pi``, ``z_t ~
        A(z_{t-1}, .)``, ``x_t ~ p(x_t | z_t, x_{<t})`` (lags before the start are 0, as in
        the likelihood).

        Args:
            params: parameters of this model.
            n_steps: ``T >= 1``.
            seed: an int (the JAX key ``jax.random.PRNGKey(seed)``), a JAX PRNG key, or a
                NumPy ``Generator`` (one 63-bit seed is drawn from it, so it advances).
                The same seed gives the same draws.

        Returns:
            ``(x, z)``: observations ``(T, ...)`` as the family's data (Gaussian ``(T, R)``
            floats, counts and symbols ``(T,)`` ints) and states ``(T,)`` ints.
        """
        n_steps = check_positive_int("n_steps", n_steps, 1)
        key = prng_key_data(seed)
        with placed(self.compute_profile):
            x, z = _sample(self, _as_float(self, params), key, n_steps)
        return np.asarray(x), np.asarray(z)

    def check_params(self, params, data=None, level: str | None = None, name: str = "params"):
        """:meth:`Model.check_params`; a list of one sequence (which the methods of a
        fitted model take) is checked as that sequence."""
        if (isinstance(data, (list, tuple)) and not isinstance(data, Sequences)
                and len(data) < 2 and level is None):
            data = data[0] if data else _no_sequences()
        return super().check_params(params, data, level, name)

    def _given_sequences(self, data):
        """``(Sequences, lengths (S,), many)`` of ``data`` for the methods of a fitted model:
        one sequence or a list of any number of them (``many``: ``data`` is a list), the
        time axis padded to a size bucket (:meth:`padded_units`) so that data of similar
        lengths share the compiled programs; ``lengths`` counts each one's observed steps."""
        many = isinstance(data, (list, tuple)) and not isinstance(data, Sequences)
        if isinstance(data, Sequences):
            seqs = data
        elif many and not len(data):
            _no_sequences()
        elif many and len(data) > 1:
            seqs = self.prepare(data, "structure")[0]
        else:
            seqs = self.prepare(data[0] if many else data, "within")[0]
        seqs, _ = self.padded_units(seqs, "within" if seqs.num_sequences == 1 else "structure")
        return seqs, np.asarray(seqs.mask).sum(axis=1).astype(int), many

    # emission hooks of the methods above (pure, traced)
    def _state_emission_means(self, params):
        """``E[x_t | z_t = k]`` of every state, ``(K, ...)``, for emissions without lags;
        ``None`` where a family has none (then :meth:`_forecast_mean` decides)."""
        return None

    def _forecast_mean(self, params, x, length, filtered, probs):
        """``E[x_{T+h} | x_{1..T}]``, ``(horizon, ...)``, or ``None``: ``probs @``
        :meth:`_state_emission_means` by default.

        Args:
            x: one padded sequence; length: its observed steps ``T`` (traced);
            filtered: ``(K,)`` ``p(z_T | x_{1..T})``; probs: ``(horizon, K)``.
        """
        means = self._state_emission_means(params)
        return None if means is None else jnp.tensordot(probs, means, axes=1)

    def _sample_emissions(self, params, z, key):
        """Observations ``(T, ...)`` drawn given the states ``z (T,)`` from the JAX ``key``."""
        raise NotImplementedError

    # ------------------------------------------------------------------ fit
    def init_params(self, data, level: str | None = None, n: int = 1, seed: int = 0) -> list:
        """``n`` starting parameter sets: sticky transitions and data-based emissions."""
        seqs, _, _ = self.prepare(data, level)
        return self._init_params(seqs, n, seed)

    def _init_params(self, seqs: Sequences, n_init: int, seed: int) -> list:
        rng = np.random.default_rng(seed)
        x = np.asarray(seqs.x)[np.asarray(seqs.mask) > 0]
        k = self.n_states
        inits = []
        for i in range(n_init):
            trans = np.full((k, k), 0.1 / max(k - 1, 1)) if k > 1 else np.ones((1, 1))
            np.fill_diagonal(trans, 0.9 if k > 1 else 1.0)
            inits.append(self.params_type(np.full(k, 1.0 / k), trans,
                                          *self._initial_emissions(x, rng, i)))
        return inits

    def fit(self, data, level: str | None = None, init_params=None):
        """MAP fit on all data from ``n_init`` starts, best kept: EM + Newton polish, or
        BFGS + Newton polish. Beside an accelerator it runs on the host's CPU
        (:mod:`approxcv._runtime.placement`; ``APPROXCV_DEVICE`` chooses otherwise).

        Up to ``EM_MAX_DIM`` parameters (and unless ``fit_em`` is False) every start is
        refined by generalised EM in one compiled loop and the best EM point is polished
        by exact Newton steps (:mod:`approxcv.models.hmm.em`); when EM does not converge
        from every start, or the polish misses the gradient tolerance, the BFGS path runs
        from the same starts. That path refines the starts by BFGS + Newton together
        in one compiled batched loop (padded to one batch shape shared with the
        perturbation rounds, so a fit compiles once per model and data shape); above
        ``approxcv.optim.MAX_DENSE_DIM`` parameters by L-BFGS without Newton polish
        (nothing of size ``D x D`` is formed). With ``n_perturb > 0`` the best fit is then
        improved by perturbation restarts (:func:`approxcv.fitting.perturbation_restarts`).
        On data of at least 4 x ``start_subsample`` steps, the starts are first refined by EM
        on a subsample and only those that may end in the best optimum go on
        (:mod:`approxcv.models.hmm.start_selection`, recorded in
        ``fit_result_["start_selection"]``). The run is recorded in ``self.fit_result_``
        (objective, gradient norm and convergence of every start — with EM only the best start is polished, so only it
        is ``converged`` —, ``"method"``: ``"em"`` when EM fitted it, ``"bfgs"`` with
        ``"em_steps"`` when EM ran but left the fit to BFGS, ``final_objective`` and
        ``final_grad_norm`` of the returned fit).

        Args:
            data, level: as in :meth:`prepare`.
            init_params: a parameter set (or list of them), e.g. a refit's parameters, tried
                as extra starts before the model's own ``n_init``.

        Raises:
            FitError: no start reached a finite objective.
        """
        with placed(self.compute_profile):
            seqs, level, _ = self.prepare(data, level)
            seqs, n = self.padded_units(seqs, level)
            starts, selection = select_starts(self, seqs, level,
                                              self._starts(seqs, level, init_params))
            params = self._fit_from(seqs, level, n, starts)
            if selection is not None:
                self.fit_result_["start_selection"] = selection
            return self._leave_coinciding_states(seqs, level, n, params)

    def _leave_coinciding_states(self, seqs, level, n, params):
        """``params``, or a better fit from split starts where states of ``params``
        coincide (:mod:`approxcv.models.hmm._collapse`).

        At a fit whose states coincide and carry data (each at least
        :func:`~approxcv.models.hmm._occupancy.min_occupancy`: coinciding empty states are
        reported by :class:`~approxcv.errors.EmptyStateWarning`), the fit is rerun from
        :func:`~approxcv.models.hmm._collapse.split_starts`; the lower of the two fits is
        kept. ``fit_result_["split_restart"]`` records the groups, both objectives and
        whether the split fit was kept; ``fit_result_["coinciding_states"]`` the groups of
        the returned fit. Where states still coincide, :class:`LocalOptimumWarning`: the
        fit is a symmetric stationary point, and cross-validation at it marks every fold
        (:meth:`fit_concerns`).
        """
        groups = occupied(coinciding_states(self, params),
                          self.fit_result_.get("state_occupancy"), seqs)
        if not groups:
            self.fit_result_["coinciding_states"] = []
            return params
        record, before = self.fit_result_, float(self.fit_result_["final_objective"])
        starts = split_starts(self, params, groups,
                              self._init_params(seqs, self.n_init, self.seed))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            split = self._fit_from(seqs, level, n, starts)
        after = float(self.fit_result_["final_objective"])
        kept = bool(after < before - 1e-9 * max(1.0, abs(before)))
        if kept:
            params = split
            for w in caught:                 # the kept fit's own warnings (empty states)
                warnings.warn(w.message, w.category, stacklevel=user_stacklevel())
        else:
            self.fit_result_ = record
        remaining = occupied(coinciding_states(self, params),
                             self.fit_result_.get("state_occupancy"), seqs)
        self.fit_result_["split_restart"] = {
            "groups": groups, "objective_before": before, "objective_after": after,
            "kept": kept, "starts": len(starts)}
        self.fit_result_["coinciding_states"] = remaining
        if remaining:
            warnings.warn(
                f"{type(self).__name__}.fit: {describe_groups(remaining)} have the same "
                "emission parameters — a symmetric stationary point (the fit of a model "
                f"with fewer states), not an estimate of {self.n_states} states — and "
                f"{len(starts)} split starts found no lower optimum. Cross-validation at "
                "these parameters marks every fold as conditional on a fit that may not "
                "be the optimum; try more starts (n_init), other starts (init_params) or "
                "fewer states", LocalOptimumWarning, stacklevel=user_stacklevel())
        return params

    def fit_concerns(self, params, data=None, level: str | None = None) -> dict:
        """``{"poorer_local_optimum": message}`` when ``params`` were recorded as a poorer
        local optimum (:meth:`mark_poorer_fit`); ``{"coinciding_states": message}`` when
        states of ``params`` that carry data have the same emission parameters
        (:func:`~approxcv.models.hmm._collapse.coinciding_states`: a symmetric stationary
        point, whose derivatives describe the wrong basin), else ``{}``. Coinciding
        (almost) empty states — all at their prior's mode — are the empty states that
        :class:`~approxcv.errors.EmptyStateWarning` reports, not a concern here."""
        concerns = {"poorer_local_optimum": why for p, why in self.poorer_fits_
                    if _same_params(_flat_params(p), params)}
        groups = coinciding_states(self, params)
        if groups and data is not None:
            seqs = self.prepare(data, level)[0]
            groups = occupied(groups, state_occupancy(self, params, seqs), seqs)
        if groups:
            concerns["coinciding_states"] = (f"{describe_groups(groups)} of the fit coincide "
                                             "(same emission parameters): a symmetric "
                                             "stationary point that may not be the optimum")
        return concerns

    def mark_poorer_fit(self, params, why: str) -> None:
        """Record ``params`` as a poorer local optimum of this model's objective (``why``:
        how much poorer, than what): :meth:`fit_concerns` at these parameters then reports
        ``"poorer_local_optimum"`` and cross-validation at them marks every approximate
        fold (an estimate around a local optimum describes that basin, while refits may
        leave it). :func:`~approxcv.models.from_hmmlearn` and
        :func:`~approxcv.models.from_dynamax` call it when approxcv's own fit of the
        converted objective is lower."""
        self.poorer_fits_.append((type(params)(*(np.asarray(a, np.float64) for a in params)),
                                  str(why)))

    #: fields of ``params_type`` holding one row of emission parameters per state (state
    #: axis first); states whose rows coincide are found by
    #: :func:`~approxcv.models.hmm._collapse.coinciding_states`. Default: every field after
    #: the initial distribution and the transition matrix.
    @property
    def state_emission_fields(self) -> tuple:
        return tuple(self.params_type._fields[2:])

    def _fit_from(self, seqs, level, n, starts):
        """The fit of :meth:`fit` from ``starts`` (constrained parameter sets)."""
        obj, u0s = self._fit_problem(seqs, level, starts)
        em = em_fit(self, obj, u0s, seqs, level) if self._uses_em(obj) else None
        finished = em is not None and em.u is not None
        if finished and not self.n_perturb:
            self.fit_result_ = em.record
            self._keep_start_optima(obj, em.ends, em.record["em_converged"])
            return check_occupancy(self, self.params_type(*obj.unravel(em.u)), seqs,
                                   em.occupancy)
        solve, limit = self._fit_solver(obj.fun, obj.scale, obj.u_full.size)
        # one batch shape for the starts and the perturbation rounds: one compilation
        solve = padded(solve, max(len(starts), self.n_perturb), obj.data,
                       threads=self.batch_rows == "map")
        if finished:
            best_u, self.fit_result_ = em.u, em.record
            self._keep_start_optima(obj, em.ends, em.record["em_converged"])
        else:       # BFGS from the starts (EM, if it ran, did not finish)
            res = solve(u0s, np.ones((len(starts), n)))
            best_u = self._best_start(res, limit, **({} if em is None else {
                "method": "bfgs", "em_steps": em.steps}))
            self._keep_start_optima(obj, res.u, self.fit_result_["converged"])
        return check_occupancy(self, self._perturbation_restarts(solve, obj, best_u), seqs)

    def _keep_start_optima(self, obj, ends, converged) -> None:
        """``fit_result_["start_optima"]``: the end points ``ends (S, D)`` (unconstrained,
        the fit problem ``obj``'s layout) of the starts that ``converged`` (EM, or BFGS +
        Newton), as parameter sets."""
        ends = np.asarray(ends, np.float64)
        keep = np.asarray(converged, bool) & np.all(np.isfinite(ends), axis=1)
        self.fit_result_["start_optima"] = [
            self.params_type(*(np.asarray(a, np.float64) for a in obj.unravel(u)))
            for u in ends[keep]]

    def known_optima(self, params, data=None, level: str | None = None) -> list:
        """Other local optima of the objective known besides ``params``: where the last
        fit's converged starts ended (``fit_result_["start_optima"]``) and the poorer fits
        recorded by :meth:`mark_poorer_fit`, each once, those at ``params`` left out (their
        end points differ from it by more than 1e-3 of its scale in some entry)."""
        record = self.fit_result_ or {}
        here = _flat_params(params)
        out, seen = [], [self._relabellings(params)]
        for p in list(record.get("start_optima", [])) + [p for p, _ in self.poorer_fits_]:
            flat = _flat_params(p)
            if flat.shape != here.shape or not np.all(np.isfinite(flat)):
                continue
            if any(_near(flat, other) for group in seen for other in group):
                continue
            seen.append(self._relabellings(p))
            out.append(p)
        return out

    def _relabellings(self, params) -> list:
        """``params`` under every permutation of the states (flattened; the identity alone
        above :data:`MAX_RELABEL_STATES` states): the same optimum, relabelled — the
        initial distribution, the rows and columns of the transition matrix and every
        :attr:`state_emission_fields` permuted together."""
        k = self.n_states
        perms = (itertools.permutations(range(k)) if k <= MAX_RELABEL_STATES
                 else [tuple(range(k))])
        emission = set(self.state_emission_fields)
        out = []
        for perm in perms:
            perm = np.asarray(perm)
            fields = []
            for i, (name, a) in enumerate(zip(type(params)._fields, params)):
                a = np.asarray(a, np.float64)
                if i == 1:
                    a = a[np.ix_(perm, perm)]
                elif i == 0 or name in emission:
                    a = a[perm]
                fields.append(a)
            out.append(_flat_params(fields))
        return out

    def _uses_em(self, problem) -> bool:
        """EM first (:mod:`approxcv.models.hmm.em`) unless the model opts out
        (``fit_em = False``) or has more than ``EM_MAX_DIM`` parameters."""
        return self.fit_em and problem.u_full.size <= EM_MAX_DIM

    def _fit_problem(self, seqs, level, starts):
        """``(Problem at starts[0], (len(starts), D) unconstrained starts)`` of a fit."""
        obj = make_problem(self, seqs, starts[0], level=level, checked=True)
        return obj, np.stack([flat_params(self, p)[0] for p in starts])

    def _starts(self, seqs: Sequences, level, init_params) -> list:
        """The starts of :meth:`fit`: ``init_params`` (one parameter set or a list of them,
        validated), then the model's ``n_init`` starts from :meth:`init_params`."""
        many = isinstance(init_params, (list, tuple)) and not isinstance(
            init_params, self.params_type)
        extra = [] if init_params is None else list(init_params) if many else [init_params]
        for p in extra:
            if not isinstance(p, self.params_type):
                raise ArgumentTypeError(
                    f"`init_params` must be {self.params_type.__name__} (or a list of them), "
                    f"got {type(p).__name__}")
        return ([self.check_params(p, seqs, level, "init_params") for p in extra]
                + self._init_params(seqs, self.n_init, self.seed))

    def _perturbation_restarts(self, solve, obj, best_u):
        """:func:`approxcv.fitting.perturbation_restarts` with this model's ``n_perturb``,
        ``perturb_frac`` and ``seed``; returns the best parameters (constrained)."""
        best_u = perturbation_restarts(solve, obj, best_u, self.fit_result_, self.n_perturb,
                                       self.perturb_frac, self.seed)
        return self.params_type(*obj.unravel(np.asarray(best_u, dtype=np.float64)))

    def _fit_solver(self, fun, scale: float, dim: int):
        """``(solve, limit)``: the batched optimiser refining the starts of :meth:`fit`
        (BFGS + Newton polish, L-BFGS above ``MAX_DENSE_DIM``) and its step limit, in words.

        BFGS runs as one compiled batched loop; the Newton polish of every run follows in
        Python (:func:`~approxcv.optim.newton.polish_rows`) on the one compiled
        ``(F, g, H, J)`` sweep of :func:`~approxcv.optim.newton.value_and_derivatives`,
        which derivative-based CV at the fit can reuse, instead of a second Hessian program
        compiled inside the loop.
        """
        newton_steps, method = fit_method(dim)
        bfgs = batched_minimize(fun, scale, self.max_steps, 0, method, self.batch_rows)

        def solve(u0s, weights, data):
            res = bfgs(u0s, weights, data)
            if not newton_steps:
                return res
            return polish_rows(fun, res, np.asarray(weights), data, scale, newton_steps)
        return solve, f"{self.max_steps} optimiser steps"

    def _best_start(self, res, limit: str, **record):
        """:func:`approxcv.fitting.best_start`; the run is recorded in ``fit_result_``."""
        best_u, self.fit_result_ = best_start(res, type(self).__name__, limit, **record)
        return best_u

    # -------------------------------------------------------- to implement
    params_type: type = None
    #: fit by EM + Newton polish first (:mod:`approxcv.models.hmm.em`); BFGS otherwise
    fit_em: bool = True
    #: the Dirichlet priors' concentrations are arguments of the compiled programs
    #: (:attr:`approxcv.models.base.Model.numeric_hyperparameters`): a model at other prior
    #: values (``select`` over a prior) reuses them
    numeric_hyperparameters = ("initial_concentration", "transition_concentration")
    #: batched fits and refits evaluate their rows in sequence on CPU: a ``vmap``ped
    #: forward pass carries the batch through every time step (twice slower)
    batch_rows: str = "map"
    #: a recursion over time: fits and cross-validation run on the host's CPU beside an
    #: accelerator (:mod:`approxcv._runtime.placement`)
    compute_profile: str | None = SEQUENTIAL

    def _emission_log_lik(self, params, x):
        raise NotImplementedError

    def _emission_log_prior(self, params):
        raise NotImplementedError

    def closed_form_m_step(self) -> bool:
        """Whether :meth:`_emission_m_step` is implemented (EM then needs no Newton M-step)."""
        return False

    def _emission_m_step(self, params, r, x, data):
        """Emission parameters maximising ``sum_t sum_k r_tk log p(x_t | z_t = k) + log
        prior`` (or at least not lowering it: one conditional-maximisation sweep), given
        posterior marginals ``r (N, K)`` of the observed steps ``x (N, ...)``; returns
        ``params`` with the emission fields replaced. Optional (see
        :meth:`closed_form_m_step`)."""
        raise NotImplementedError

    def _emission_constraints(self) -> tuple:
        """Constraints of the emission fields of ``params_type`` (in order)."""
        raise NotImplementedError

    def _initial_emissions(self, x, rng, i):
        raise NotImplementedError

    def params_template(self, data, level: str | None = None):
        """Parameters of the right structure and shapes (the first start), no fit."""
        seqs, _, _ = self.prepare(data, level)
        return self._init_params(seqs, 1, self.seed)[0]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_states={self.n_states})"


def ar_forecast_mean(trans, filtered, probs, intercept, lag_map, recent):
    """Exact predictive means ``E[x_{T+h} | x_{1..T}]``, ``h = 1..H``, of an HMM whose
    state means are affine in the last ``p`` observations,
    ``x_t = mu_k + sum_{l=1}^p C_{k,l} x_{t-l} + e_t`` given ``z_t = k`` (noise of mean 0).

    The moments ``M_t(k, l) = E[x_{t-l} 1{z_t = k} | x_{1..T}]``, ``l = 0..p-1``, close
    under the recursion (``z_{t+1}`` depends on the past only through ``z_t``)::

        N(j, l)      = sum_i A(i, j) M_t(i, l)              = E[x_{t-l} 1{z_{t+1} = j}]
        M_{t+1}(j, 0) = P_{t+1}(j) mu_j + sum_{l=1}^p C_{j,l} N(j, l-1)
        M_{t+1}(j, l) = N(j, l-1),  l >= 1;     E[x_{t+1}] = sum_j M_{t+1}(j, 0)

    from ``M_T(k, l) = f(k) x_{T-l}`` (``f`` the filtered distribution; lags before the
    start are 0); ``P_t`` are the propagated state probabilities. One ``lax.scan`` over the
    horizon; with ``p = 0`` it is ``sum_k P_{T+h}(k) mu_k``.

    Args:
        trans: ``(K, K)``; filtered: ``(K,)``; probs: ``(H, K)`` ``P_{T+1..T+H}``.
        intercept: ``(K, R)`` ``mu_k``.
        lag_map: ``n (K, p, R) -> (K, R)``, ``sum_l C_{k,l} n[k, l-1]``.
        recent: ``(p, R)``, ``recent[l] = x_{T-l}``.
    """
    if recent.shape[0] == 0:
        return probs @ intercept
    moments = filtered[:, None, None] * recent[None]

    def step(m, p_next):
        n = jnp.einsum("ij,ilr->jlr", trans, m)
        new = p_next[:, None] * intercept + lag_map(n)
        return jnp.concatenate([new[:, None], n[:, :-1]], axis=1), jnp.sum(new, axis=0)

    return lax.scan(step, moments, probs)[1]


def recent_steps(x, length, order: int):
    """``(order, R)`` the last ``order`` observed steps of the padded sequence ``x (T,
    R)`` of ``length`` observed steps, newest first (``[l] = x_{T-l}``; zeros before the
    start)."""
    padded = jnp.concatenate([jnp.zeros((order,) + x.shape[1:], x.dtype), x])
    return lax.dynamic_slice_in_dim(padded, length, order)[::-1]


def prng_key_data(seed) -> np.ndarray:
    """The raw ``uint32 (2,)`` JAX key of ``seed`` (:meth:`HMM.sample`), in NumPy: an int
    ``s >= 0`` gives ``jax.random.PRNGKey(s)`` (threefry's key ``[s >> 32, s & 0xffffffff]``),
    a NumPy ``Generator`` a draw of one such int, a JAX key its data.

    Raises:
        ArgumentTypeError: another kind of seed.
    """
    if isinstance(seed, np.random.Generator):
        seed = int(seed.integers(2 ** 63))
    if isinstance(seed, (int, np.integer)) and not isinstance(seed, bool):
        seed = check_positive_int("seed", seed, 0)
        return np.array([(seed >> 32) & 0xFFFFFFFF, seed & 0xFFFFFFFF], dtype=np.uint32)
    if isinstance(seed, jax.Array):
        if jax.dtypes.issubdtype(seed.dtype, jax.dtypes.prng_key):
            seed = jax.random.key_data(seed)
        data = np.asarray(seed)
        if data.dtype == np.uint32 and data.shape == (2,):
            return data
    raise ArgumentTypeError("`seed` must be a non-negative int, a JAX PRNG key or a NumPy "
                            f"Generator, got {type(seed).__name__}")


def _no_sequences():
    raise InvalidArgumentError("`data` is an empty list: pass one sequence or a list of "
                               "sequences")


def _as_float(model, params):
    """``params`` as ``model.params_type`` with float64 NumPy leaves (one program for
    parameters given as lists, float32 or JAX arrays)."""
    return model.params_type(*(np.asarray(p, dtype=np.float64) for p in params))


def _per_sequence(items: list, many: bool):
    """The list ``items`` for a list of sequences, its one item for one sequence."""
    return items if many else items[0]


@partial(jit, static_argnums=0)
def _viterbi_paths(model, params, seqs):
    """``(S, T)`` Viterbi paths of padded sequences (``-1`` on padding)."""
    def one(x, mask):
        return chain.viterbi(*model.log_potentials(params, x, mask), mask)
    return jax.vmap(one)(seqs.x, seqs.mask)


@partial(jit, static_argnums=0)
def _smoothed(model, params, seqs):
    """``(S, T, K)`` posterior log marginals of padded sequences."""
    def one(x, mask):
        return chain.posterior_marginals(*model.log_potentials(params, x, mask)
                                         ).log_smoothed_probs
    return jax.vmap(one)(seqs.x, seqs.mask)


@partial(jit, static_argnums=0)
def _log_likelihoods(model, params, seqs):
    """``(S,)`` ``log p(x_i)`` (:meth:`HMM.sequence_log_likelihoods`)."""
    return model.sequence_log_likelihoods(params, seqs)


@partial(jit, static_argnums=(0, 3))
def _forecast(model, params, seqs, horizon: int):
    """``(filtered (S, K), state_probs (S, H, K), mean (S, H, ...) or None)``."""
    lengths = jnp.sum(seqs.mask, axis=1).astype(jnp.int32)
    trans = jnp.asarray(params.transition_matrix)

    def one(x, mask, length):
        log_filtered = chain.filtered_marginals(*model.log_potentials(params, x, mask))
        filtered = jnp.exp(log_filtered[length - 1])
        probs = chain.propagate_states(filtered, trans, horizon)
        return filtered, probs, model._forecast_mean(params, x, length, filtered, probs)
    return jax.vmap(one)(seqs.x, seqs.mask, lengths)


@partial(jit, static_argnums=(0, 3))
def _sample(model, params, key, n_steps: int):
    """``(x (T, ...), z (T,))`` drawn from the model (:meth:`HMM.sample`)."""
    k_states, k_obs = jax.random.split(key)
    z = chain.sample_states(k_states, jnp.log(params.initial_probs),
                            jnp.log(params.transition_matrix), n_steps)
    return model._sample_emissions(params, z, k_obs), z


def occupied(groups, occupancy, seqs) -> list:
    """The ``groups`` of states each of which carries at least
    :func:`~approxcv.models.hmm._occupancy.min_occupancy` expected observed steps
    (``occupancy (K,)``; every group when it is ``None``)."""
    if occupancy is None or not groups:
        return list(groups)
    occupancy = np.asarray(occupancy)
    threshold = min_occupancy(float(np.sum(np.asarray(seqs.mask))))
    return [g for g in groups if np.all(occupancy[list(g)] >= threshold)]


def pad_steps(x, extra: int) -> jax.Array:
    """``x (S, T, ...)`` with ``extra`` zeros appended on axis 1 (in NumPy)."""
    x = np.asarray(x)
    return jnp.asarray(np.pad(x, ((0, 0), (0, extra)) + ((0, 0),) * (x.ndim - 2)))


def as_column_vector(x, name: str):
    """``x`` with a ``(T, 1)`` array read as ``(T,)`` (hmmlearn's layout of counts and
    symbols); anything else unchanged, for the family's own checks."""
    if isinstance(x, (np.ndarray, jax.Array)) or hasattr(x, "__array__"):
        arr = np.asarray(x)
        if arr.ndim == 2 and arr.shape[1] == 1:
            return arr[:, 0]
    return x


def check_counts(x, name: str) -> np.ndarray:
    """Validate a 1-D sequence of non-negative integer counts; return it as float64."""
    return check_count_values(name, check_array(x, name, 1, "i")).astype(np.float64)


def check_array(x, name: str, ndim: int, dtype_kind: str = "f") -> np.ndarray:
    """Validate an array's rank, emptiness and finiteness; return it as float or int."""
    arr = as_real_array(name, x)
    if arr.ndim != ndim:
        raise InvalidDataError(f"`{name}` must have {ndim} dimension(s), got shape {arr.shape}")
    if arr.shape[0] < 2:
        raise InvalidDataError(f"`{name}` needs at least 2 time steps, got {arr.shape[0]}")
    arr = check_finite(name, arr)
    return arr.astype(np.float64) if dtype_kind == "f" else arr


def _flat_params(params) -> np.ndarray:
    """Every leaf of ``params`` as float64, flattened and concatenated."""
    return np.concatenate([np.ravel(np.asarray(a, np.float64)) for a in params])


def _same_params(flat: np.ndarray, params) -> bool:
    """``params`` equal to the flattened set ``flat`` (to 1e-12 of each entry: the same
    fit, passed back as other arrays)."""
    other = _flat_params(params)
    return other.shape == flat.shape and bool(np.allclose(other, flat, rtol=1e-12, atol=0))


def _near(a: np.ndarray, b: np.ndarray) -> bool:
    """The same optimum: ``|a - b| <= 1e-3 (1 + max|b|)`` in every entry."""
    return a.shape == b.shape and bool(np.all(np.abs(a - b) <= 1e-3 * (1 + np.max(np.abs(b)))))
