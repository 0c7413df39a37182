"""Time-varying Poisson process with Markov-modulated bursts of events (Ihler et al. 2006).

The model of Ihler, Hutchins & Smyth (2006) for loop-sensor / call counts, as in Ghosh et al.
(2020, Appendix L.1), with a binary event state (0 normal, 1 event)::

    lambda_t = lambda_0 * delta_{day(t)} * h_{slot(t)}              (background rate)
    z_t | z_{t-1} ~ A[z_{t-1}, .]                                    (Markov event state)
    x_t = n_t + e_t,  n_t ~ Poisson(lambda_t),  e_t = 0 if z_t = 0,
                      e_t ~ NegBinomial(a, p = b / (1 + b)) if z_t = 1 (mean a / b)

so the emission probabilities are ``p(x | z = 0) = Poisson(x; lambda_t)`` and the exact
convolution (a Delaporte distribution)::

    p(x | z = 1) = sum_{e=0}^{x} Poisson(x - e; lambda_t) NB(e; a, p),
    NB(e; a, p) = Gamma(e + a) / (Gamma(a) e!) p^a (1 - p)^e.

Time index: a series starts at slot 0 of day 0; ``slot(t) = t mod slots_per_day`` and
``day(t) = floor(t / slots_per_day) mod days_per_week``. Identifiability: ``sum_d delta_d =
days_per_week`` and ``sum_s h_s = slots_per_day`` (both average 1), so ``lambda_0`` is the mean
background rate. With ``time_of_day=False`` ``h = 1``.

Priors (MAP): ``lambda_0 ~ Gamma``, ``a ~ Gamma``, ``b ~ Gamma``, ``A_00 ~ Beta``,
``A_11 ~ Beta``, ``delta / days_per_week ~ Dirichlet``, a Gaussian random walk on
``log h`` (``log h_{s+1} - log h_s ~ N(0, profile_scale^2)``), Dirichlet on the initial
state. Unconstrained parameters: ``log lambda_0``, ``K-1`` logits of ``delta`` and of ``h``
(last logit fixed at 0), the transition logits ``logit A_00``, ``-logit A_11``,
``log a``, ``log b``.

**The convolution.** The sum over the excess ``e`` runs over the fixed grid ``0..cap``
(``cap = max_count``, by default the largest count in the data) with the terms ``e > x_t``
masked, vectorised over time. It is evaluated as a polynomial in ``lambda_t`` by Horner's
rule, ``p(x | z = 1) = e^{-lambda} sum_j lambda^j / j! NB(x - j)`` (all coefficients are
non-negative, so the recursion is stable and needs no exponentials of a ``T x cap`` array).
Its first and second derivatives are posterior moments of ``e`` (the same Horner sums with
``e``, ``e^2``, ``psi(e + a)``, ... in the coefficients), supplied through ``jax.custom_jvp`` so
that Hessians and cross-Jacobians never push ``D`` tangents through the ``T x cap`` sum.
A count above the cap raises :class:`~approxcv.errors.InvalidDataError` naming both.
"""
from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.scipy.special import gammaln

from ...optim import batched_newton_minimize
from ...errors import (
    InvalidArgumentError,
    InvalidDataError,
)
from .._transforms import (
    dirichlet_log_prior,
    gamma_log_prior,
)
from .. import constraints as C
from ._delaporte import event_log_likelihood
from .base import HMM, Sequences, pad_steps, check_counts
from .day_layout import day_layout, timestamps
from ..._validate import check_positive, check_positive_int

__all__ = [
    "CountSeries",
    "TimeVaryingPoisson",
    "TimeVaryingPoissonParams",
    "event_log_likelihood",
]


class TimeVaryingPoissonParams(NamedTuple):
    """initial_probs (2,), transition_matrix (2, 2), base_rate () ``lambda_0``,
    day_effect (days_per_week,) ``delta`` (sums to days_per_week), slot_profile
    (slots_per_day,) or (1,) ``h`` (sums to its length), excess_shape () ``a``,
    excess_rate () ``b`` (event excess NB(a, b/(1+b)), mean a/b)."""
    initial_probs: jax.Array
    transition_matrix: jax.Array
    base_rate: jax.Array
    day_effect: jax.Array
    slot_profile: jax.Array
    excess_shape: jax.Array
    excess_rate: jax.Array


@jax.tree_util.register_pytree_node_class
class CountSeries:
    """Prepared counts: ``counts (..., T)``, ``log_factorial (..., T)`` = ``log x_t!`` and the
    excess grid ``grid (..., cap + 1)`` = ``0..cap``. Leading axes index sequences;
    ``series[i]`` indexes every field, so it can stand in for the ``x`` array of
    :class:`~approxcv.models.hmm.Sequences`."""

    def __init__(self, counts, log_factorial, grid):
        self.counts, self.log_factorial, self.grid = counts, log_factorial, grid

    def tree_flatten(self):
        return (self.counts, self.log_factorial, self.grid), None

    @classmethod
    def tree_unflatten(cls, aux, children):
        return cls(*children)

    def __getitem__(self, index):
        return CountSeries(self.counts[index], self.log_factorial[index], self.grid[index])

    @property
    def shape(self):
        return self.counts.shape

    def __repr__(self) -> str:
        return f"CountSeries(shape={tuple(self.shape)}, cap={self.grid.shape[-1] - 1})"


# ----------------------------------------------------------- the event convolution
class TimeVaryingPoisson(HMM):
    """Time-varying Poisson process with a binary Markov event state (module docstring).

    Data: a 1-D array of non-negative integer counts starting at slot 0 of day 0 (or a list
    of such series, ``level="structure"``), e.g. :func:`approxcv.datasets.load_calls`.

    Args:
        slots_per_day: time steps per day (required: 169 five-minute slots for the shipped
            calls data, 288 for round-the-clock five-minute freeway counts). No default: a
            wrong one silently misspecifies the profile. :meth:`for_series` infers it (and
            ``days_per_week``) from a pandas Series with a ``DatetimeIndex``.
        days_per_week: days in the weekly cycle of ``delta`` (required: 5 for the calls data,
            which are weekdays only, 7 for every day of the week; six weekdays are missing
            from the calls source, see ``approxcv/datasets/PROVENANCE.md``, so its day of week
            is approximate after the first gap, on 4 April 2003).
        time_of_day: estimate the within-day profile ``h`` (needed for real 5-minute data).
        max_count: cap of the excess grid ``0..cap``; ``None`` (default) uses the largest
            count of the data. A larger count raises ``InvalidDataError``.
        rate_prior: Gamma ``(shape, rate)`` prior on ``lambda_0``.
        excess_shape_prior, excess_rate_prior: Gamma priors on ``a`` and ``b``.
        normal_stay_prior, event_stay_prior: Beta priors on ``A_00`` and ``A_11``.
        day_concentration: Dirichlet concentration of ``delta / days_per_week``.
        profile_scale: standard deviation of the random-walk prior on ``log h``.
        n_init: number of starts of the fit.
        n_perturb: perturbation restarts per round after the starts (0 turns them off; see
            :meth:`~approxcv.models.hmm.HMM._perturbation_restarts`). The starts alone can
            end in a local optimum that is not the best: on the first 10,000 calls all
            three reach a full-data objective of 42,896.9 or 42,903.3; the perturbation
            restarts find 42,877.6, the optimum that exact-CV refits had jumped to
            (``docs/event_model.md``).
        max_newton_steps: Newton step limit of the fit.
        **kwargs: see :class:`~approxcv.models.hmm.HMM` (``initial_concentration``,
            ``seed``, ``max_steps``, ``perturb_frac``).

    Example:
        >>> import approxcv as acv
        >>> x = acv.datasets.load_calls(5000)
        >>> model = acv.models.TimeVaryingPoisson(slots_per_day=169, days_per_week=5)
        >>> params = model.fit(x)
        >>> res = acv.cross_validate(model, x, acv.folds.iid(len(x), 0.05, 100),
        ...                          params=params)
    """
    params_type = TimeVaryingPoissonParams
    numeric_hyperparameters = HMM.numeric_hyperparameters + ("day_concentration",
                                                             "profile_scale")
    #: exact-CV refits use damped Newton (a few dense-Hessian steps) instead of BFGS
    refit_solver = "newton"

    def __init__(self, *, slots_per_day: int | None = None, days_per_week: int | None = None,
                 time_of_day: bool = True, max_count: int | None = None,
                 rate_prior=(1.1, 1e-3), excess_shape_prior=(2.0, 0.1),
                 excess_rate_prior=(1.1, 0.1), normal_stay_prior=(10.0, 1.5),
                 event_stay_prior=(5.0, 1.5), day_concentration: float = 5.0,
                 profile_scale: float = 0.3, n_init: int = 3, n_perturb: int = 8,
                 max_newton_steps: int = 50, **kwargs):
        kwargs.pop("n_states", None)
        missing = [name for name, v in (("slots_per_day", slots_per_day),
                                        ("days_per_week", days_per_week)) if v is None]
        if missing:
            raise InvalidArgumentError(
                f"TimeVaryingPoisson needs `{'` and `'.join(missing)}`: the time steps per day "
                "and the days in the weekly cycle of your data (the shipped calls data: "
                "slots_per_day=169, days_per_week=5; five-minute counts round the clock every "
                "day: 288 and 7); TimeVaryingPoisson.for_series(series) infers both from a "
                "pandas Series with a DatetimeIndex")
        super().__init__(2, n_init=n_init, n_perturb=n_perturb, **kwargs)
        self.slots_per_day = check_positive_int("slots_per_day", slots_per_day)
        self.days_per_week = check_positive_int("days_per_week", days_per_week)
        self.time_of_day = bool(time_of_day)
        self.max_count = None if max_count is None else check_positive_int("max_count",
                                                                           max_count, 0)
        self.rate_prior = self._pair("rate_prior", rate_prior)
        self.excess_shape_prior = self._pair("excess_shape_prior", excess_shape_prior)
        self.excess_rate_prior = self._pair("excess_rate_prior", excess_rate_prior)
        self.normal_stay_prior = self._pair("normal_stay_prior", normal_stay_prior)
        self.event_stay_prior = self._pair("event_stay_prior", event_stay_prior)
        self.max_newton_steps = check_positive_int("max_newton_steps", max_newton_steps)
        self.day_concentration = check_positive("day_concentration", day_concentration)
        self.profile_scale = check_positive("profile_scale", profile_scale)

    @classmethod
    def for_series(cls, series, **kwargs) -> "TimeVaryingPoisson":
        """The model with ``slots_per_day`` and ``days_per_week`` read off the timestamps of
        ``series`` (a pandas Series of counts with a ``DatetimeIndex``); fit it to
        ``series.to_numpy()``.

        ``slots_per_day`` is the number of observations on each calendar date (every date
        must have the same number, starting at the same time of day, so slot ``s`` is the
        same clock time every day); ``days_per_week`` is the number of distinct weekdays
        present (5 for weekdays only, 7 for every day). The model's day cycle is
        ``day(t) = floor(t / slots_per_day) mod days_per_week`` from the first date, so a
        date missing from that cycle (a holiday, an outage) shifts every later day's effect:
        it is reported by an :class:`~approxcv.errors.ApproxCVWarning` naming the first one.

        Args:
            series: pandas Series with a ``DatetimeIndex``, increasing.
            **kwargs: the other arguments of :class:`TimeVaryingPoisson`.

        Raises:
            ArgumentTypeError: ``series`` has no ``DatetimeIndex``.
            InvalidDataError: timestamps not increasing, or dates with different numbers of
                slots or different start times (named).
        """
        index = timestamps(series)
        for name in ("slots_per_day", "days_per_week"):
            if name in kwargs:
                raise InvalidArgumentError(f"`{name}` is read from the series by for_series; "
                                           "to set it, call TimeVaryingPoisson(...) instead")
        slots, days = day_layout(index)
        return cls(slots_per_day=slots, days_per_week=days, **kwargs)

    @staticmethod
    def _pair(name, value):
        try:
            pair = tuple(float(v) for v in np.ravel(value))
        except (TypeError, ValueError):
            pair = ()
        if len(pair) != 2 or not all(np.isfinite(v) and v > 0 for v in pair):
            raise InvalidArgumentError(f"`{name}` must be two finite positive numbers, got "
                                       f"{value!r}")
        return pair

    @property
    def num_slots(self) -> int:
        """Length of the profile ``h``: ``slots_per_day``, or 1 without ``time_of_day``."""
        return self.slots_per_day if self.time_of_day else 1

    # ----------------------------------------------------------------- data
    def _validate_sequence(self, x, name):
        return check_counts(x, name)

    def prepare(self, data, level: str | None = None):
        """Validate ``data``; return ``(Sequences(CountSeries, mask), level, num_units)``.

        Raises:
            InvalidDataError: a count exceeds ``max_count`` (named with its position).
        """
        if isinstance(data, Sequences) and isinstance(data.x, CountSeries):
            return super().prepare(data, level)
        seqs, level, n = super().prepare(data, level)
        x = np.asarray(seqs.x)
        observed = np.asarray(seqs.mask) > 0
        top = int(x[observed].max()) if observed.any() else 0
        cap = top if self.max_count is None else self.max_count
        if top > cap:
            s, t = np.argwhere((x > cap) & observed)[0]
            where = f"data[{s}][{t}]" if x.shape[0] > 1 else f"data[{t}]"
            raise InvalidDataError(
                f"{where} = {int(x[s, t])} exceeds the excess-grid cap max_count={cap}; "
                f"pass max_count >= {top}")
        grid = np.broadcast_to(np.arange(cap + 1, dtype=np.float64), (x.shape[0], cap + 1))
        series = CountSeries(jnp.asarray(x), jnp.asarray(gammaln(x + 1.0)),
                             jnp.asarray(np.ascontiguousarray(grid)))
        return Sequences(series, seqs.mask), level, n

    def _padded_steps(self, x, extra: int):
        """The counts (and their log-factorials) with ``extra`` zero steps appended; the
        excess grid has no time axis."""
        return CountSeries(pad_steps(x.counts, extra), pad_steps(x.log_factorial, extra),
                           x.grid)

    # ----------------------------------------------------------- parameters
    def rates(self, params, num_steps: int):
        """Background rates ``lambda_t`` for ``t = 0..num_steps-1``, ``(T,)``."""
        return jnp.exp(self._log_rates(params, num_steps))

    def _log_rates(self, params, num_steps: int):
        t = jnp.arange(num_steps)
        day = (t // self.slots_per_day) % self.days_per_week
        slot = t % self.slots_per_day if self.time_of_day else jnp.zeros_like(t)
        return (jnp.log(params.base_rate) + jnp.log(params.day_effect)[day]
                + jnp.log(params.slot_profile)[slot])

    def _emission_log_lik(self, params, x: CountSeries):
        """``(T, 2)``: ``log Poisson(x_t; lambda_t)`` and the event convolution."""
        counts = x.counts
        log_rate = self._log_rates(params, counts.shape[0])
        normal = counts * log_rate - jnp.exp(log_rate) - x.log_factorial
        event = event_log_likelihood(log_rate, jnp.log(params.excess_shape),
                                     jnp.log(params.excess_rate), counts, x.grid)
        return jnp.stack([normal, event], axis=1)

    def log_prior(self, params, data=None):
        """Dirichlet on the initial state, Beta on ``A_00``, ``A_11``, emission priors."""
        log_trans = jnp.log(params.transition_matrix)
        (a0, b0), (a1, b1) = self.normal_stay_prior, self.event_stay_prior
        beta = ((a0 - 1.0) * log_trans[0, 0] + (b0 - 1.0) * log_trans[0, 1]
                + (a1 - 1.0) * log_trans[1, 1] + (b1 - 1.0) * log_trans[1, 0])
        return (dirichlet_log_prior(jnp.log(params.initial_probs), self.initial_concentration)
                + beta + self._emission_log_prior(params))

    def _emission_log_prior(self, params):
        log_profile = jnp.log(params.slot_profile)
        return (gamma_log_prior(jnp.log(params.base_rate), *self.rate_prior)
                + gamma_log_prior(jnp.log(params.excess_shape), *self.excess_shape_prior)
                + gamma_log_prior(jnp.log(params.excess_rate), *self.excess_rate_prior)
                + dirichlet_log_prior(jnp.log(params.day_effect / self.days_per_week),
                                      self.day_concentration)
                - 0.5 * jnp.sum(jnp.diff(log_profile) ** 2) / self.profile_scale ** 2)

    def _emission_constraints(self):
        """``lambda_0 > 0``; ``delta``, ``h`` on simplexes scaled to their lengths; ``a, b > 0``."""
        return (C.Positive(), C.Simplex(float(self.days_per_week)),
                C.Simplex(float(self.num_slots)), C.Positive(), C.Positive())

    def _forecast_mean(self, params, x, length, filtered, probs):
        """``E[x_{T+h} | x_{1..T}] = lambda_{T+h} + p(z_{T+h} = 1 | x_{1..T}) a / b``,
        ``(horizon,)``, at the background rate of each step ahead (its slot and day)."""
        horizon = probs.shape[0]
        rates = lax.dynamic_slice_in_dim(self.rates(params, x.shape[0] + horizon), length,
                                         horizon)
        return rates + probs[:, 1] * params.excess_shape / params.excess_rate

    def _sample_emissions(self, params, z, key):
        """``x_t = n_t + z_t e_t``: ``n_t ~ Poisson(lambda_t)`` and the excess ``e_t ~
        NB(a, b / (1 + b))`` drawn as ``Poisson(g_t)``, ``g_t ~ Gamma(a, rate b)``;
        ``(T,)`` ints."""
        k_normal, k_gamma, k_excess = jax.random.split(key, 3)
        steps = z.shape[0]
        normal = jax.random.poisson(k_normal, self.rates(params, steps))
        mixing = jax.random.gamma(k_gamma, params.excess_shape, (steps,)) / params.excess_rate
        return normal + jnp.where(z == 1, jax.random.poisson(k_excess, mixing), 0)

    #: the normal and the event state have emissions of different forms (the event adds
    #: an excess): they never coincide (:mod:`approxcv.models.hmm._collapse`)
    state_emission_fields = ()

    # ------------------------------------------------------------------ fit
    #: the damped Newton below converges in a few steps; no EM stage
    fit_em = False

    def _fit_solver(self, fun, scale: float, dim: int):
        """:meth:`HMM.fit` refines the starts by damped Newton (one ``vmap``), not BFGS.

        Each Newton step uses the dense Hessian (``D`` is about 180 with the time-of-day
        profile), which the custom derivatives of the convolution make cheap; far fewer
        steps than BFGS.
        """
        return (batched_newton_minimize(fun, scale, self.max_newton_steps, self.batch_rows),
                f"{self.max_newton_steps} Newton steps")

    def _init_params(self, seqs: Sequences, n_init: int, seed: int) -> list:
        """Starts from the data: day and slot means for ``delta`` and ``h`` (smoothed),
        ``lambda_0`` a little below the mean count, and event excesses (shape 2) of mean 10 %,
        15 %, 40 % ... of ``lambda_0`` with persistent to short-lived event states."""
        x = np.asarray(seqs.x.counts)
        mask = np.asarray(seqs.mask) > 0
        t = np.broadcast_to(np.arange(x.shape[1]), x.shape)[mask]
        counts = x[mask]
        mean = max(float(counts.mean()), 0.1)
        day = (t // self.slots_per_day) % self.days_per_week
        day_means = np.array([counts[day == d].mean() if np.any(day == d) else mean
                              for d in range(self.days_per_week)])
        delta = np.maximum(day_means, 0.1 * mean)
        delta = self.days_per_week * delta / delta.sum()
        if self.time_of_day:
            slot = t % self.slots_per_day
            resid = counts / delta[day]
            prof = np.array([resid[slot == s].mean() if np.any(slot == s) else np.nan
                             for s in range(self.slots_per_day)])
            prof = np.where(np.isfinite(prof), prof, np.nanmean(prof))
            kernel = np.ones(5) / 5.0
            prof = np.convolve(np.pad(prof, 2, mode="edge"), kernel, mode="valid")
            prof = np.maximum(prof, 0.05 * prof.mean())
            prof = self.slots_per_day * prof / prof.sum()
        else:
            prof = np.ones(1)
        # (excess mean / lambda_0, A_00, A_11): a persistent busy regime, short bursts, ...
        designs = [(0.1, 0.99, 0.99), (0.15, 0.98, 0.9), (0.4, 0.98, 0.7), (0.05, 0.995, 0.95),
                   (0.25, 0.95, 0.8), (0.6, 0.99, 0.5)]
        inits = []
        for i in range(n_init):
            frac, stay0, stay1 = designs[i % len(designs)]
            a = 2.0
            b = a / max(frac * mean, 0.5)
            trans = np.array([[stay0, 1.0 - stay0], [1.0 - stay1, stay1]])
            inits.append(TimeVaryingPoissonParams(
                np.array([0.5, 0.5]), trans, np.asarray(0.95 * mean), delta, prof,
                np.asarray(a), np.asarray(b)))
        return inits

    def __repr__(self) -> str:
        return (f"TimeVaryingPoisson(slots_per_day={self.slots_per_day}, "
                f"days_per_week={self.days_per_week}, time_of_day={self.time_of_day})")
