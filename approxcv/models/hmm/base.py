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
:func:`approxcv._sizes.length_bucket`), so that series of similar lengths share their
compiled programs; at level ``"within"`` the padded steps are null units of the engine.
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...errors import user_stacklevel
from ..._validate import (as_real_array, check_counts as check_count_values, check_finite,
                          check_positive, check_positive_int)
from ...optim import batched_minimize
from ...optim.newton import polish_rows
from ...errors import (ArgumentTypeError, InvalidArgumentError, LocalOptimumWarning,
                      InvalidDataError)
from ..._placement import SEQUENTIAL, placed
from ..._sizes import length_bucket
from ...fitting import best_start, fit_method, padded, perturbation_restarts
from ...inference import chain
from .. import constraints as C
from .em import EM_MAX_DIM, em_fit
from .start_selection import select_starts
from .windows import ChainWindows
from ._occupancy import check_occupancy, min_occupancy, state_occupancy
from ._collapse import coinciding_states, describe_groups, split_starts
from .._transforms import dirichlet_log_prior
from ..base import Model, check_weights, left_out
from ...problem import flat_params, make_problem

LEVELS = ("within", "structure")


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
                 fit_em: bool | None = None, start_subsample: int | None = 10_000):
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
        :func:`~approxcv._sizes.length_bucket` of its length by masked steps (emission
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
        """Simplexes for the initial distribution and transition rows, then the emissions'."""
        return self.params_type(C.Simplex(), C.Simplex(), *self._emission_constraints())

    def log_prior(self, params, data=None):
        """Dirichlet priors on the initial distribution and transition rows + emission prior.

        ``data``: the prepared data, for priors stated in the data's units (unused here)."""
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
        (:mod:`approxcv._placement`; ``APPROXCV_DEVICE`` chooses otherwise).

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
        """``{"coinciding_states": message}`` when states of ``params`` that carry data
        have the same emission parameters
        (:func:`~approxcv.models.hmm._collapse.coinciding_states`: a symmetric stationary
        point, whose derivatives describe the wrong basin), else ``{}``. Coinciding
        (almost) empty states — all at their prior's mode — are the empty states that
        :class:`~approxcv.errors.EmptyStateWarning` reports, not a concern here."""
        groups = coinciding_states(self, params)
        if groups and data is not None:
            seqs = self.prepare(data, level)[0]
            groups = occupied(groups, state_occupancy(self, params, seqs), seqs)
        if not groups:
            return {}
        return {"coinciding_states": f"{describe_groups(groups)} of the fit coincide (same "
                                     "emission parameters): a symmetric stationary point "
                                     "that may not be the optimum"}

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
            return check_occupancy(self, self.params_type(*obj.unravel(em.u)), seqs,
                                   em.occupancy)
        solve, limit = self._fit_solver(obj.fun, obj.scale, obj.u_full.size)
        # one batch shape for the starts and the perturbation rounds: one compilation
        solve = padded(solve, max(len(starts), self.n_perturb), obj.data,
                       threads=self.batch_rows == "map")
        if finished:
            best_u, self.fit_result_ = em.u, em.record
        else:       # BFGS from the starts (EM, if it ran, did not finish)
            res = solve(u0s, np.ones((len(starts), n)))
            best_u = self._best_start(res, limit, **({} if em is None else {
                "method": "bfgs", "em_steps": em.steps}))
        return check_occupancy(self, self._perturbation_restarts(solve, obj, best_u), seqs)

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
    #: accelerator (:mod:`approxcv._placement`)
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
