"""TimeVaryingPoisson: the event convolution against brute force, the weighted objective,
IJ against exact refits, scheme A == B on leave-future-out folds, input errors."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.scipy.special import gammaln, logsumexp
from scipy import stats

import approxcv as acv
from approxcv import engine
from approxcv.optim import batched_newton_minimize
from approxcv.errors import InvalidArgumentError, InvalidDataError
from approxcv.models.hmm.time_varying_poisson import (
    TimeVaryingPoisson,
    TimeVaryingPoissonParams,
    event_log_likelihood,
)
from tests.conftest import fit_derivatives

SLOTS, DAYS = 12, 3


def simulate(T, seed=0):
    """Counts from the model: daily profile, 3-day week, sticky bursts of NB excess."""
    rng = np.random.default_rng(seed)
    t = np.arange(T)
    profile = 1.0 + 0.5 * np.sin(2 * np.pi * (t % SLOTS) / SLOTS)
    day = np.array([1.2, 0.9, 0.9])[(t // SLOTS) % DAYS]
    z = np.zeros(T, dtype=int)
    for i in range(1, T):
        z[i] = z[i - 1] if rng.random() < (0.95 if z[i - 1] else 0.97) else 1 - z[i - 1]
    excess = rng.negative_binomial(3.0, 0.3 / 1.3, size=T) * z          # mean a / b = 10
    return rng.poisson(6.0 * profile * day) + excess


def small_model(**kw):
    """Two starts and two perturbation restarts per round (the default 8 is for long data)."""
    kw = {"n_init": 2, "n_perturb": 2, **kw}
    return TimeVaryingPoisson(slots_per_day=SLOTS, days_per_week=DAYS, **kw)


@pytest.fixture(scope="module")
def fitted():
    x = simulate(240, seed=1)
    model = small_model()
    return model, x, model.fit(x)


def test_event_emission_equals_brute_force_convolution():
    rng = np.random.default_rng(0)
    x = np.array([0, 1, 2, 5, 9, 17, 30, 30])
    rates = rng.uniform(0.3, 20.0, x.size)
    a, b = 2.5, 0.4
    brute = [np.log(sum(stats.poisson.pmf(k - e, lam) * stats.nbinom.pmf(e, a, b / (1 + b))
                        for e in range(k + 1))) for k, lam in zip(x, rates)]
    got = event_log_likelihood(jnp.log(rates), jnp.log(a), jnp.log(b), jnp.asarray(x, float),
                               jnp.arange(31.0))
    np.testing.assert_allclose(np.asarray(got), brute, rtol=1e-12, atol=1e-12)
    # NB(a, b / (1 + b)) has mean a / b (the parametrisation of Ihler et al.)
    assert np.isclose(stats.nbinom.mean(a, b / (1 + b)), a / b)


def test_event_derivatives_match_autodiff_of_a_plain_log_sum_exp():
    """The custom first and second derivatives equal autodiff through the masked sum."""
    rng = np.random.default_rng(1)
    x = jnp.asarray(rng.integers(0, 25, 15), float)
    grid = jnp.arange(25.0)

    def plain(v):
        lr, la, lb = v[:15], v[15], v[16]
        a = jnp.exp(la)
        nb = (gammaln(grid + a) - gammaln(a) - gammaln(grid + 1) + a * jax.nn.log_sigmoid(lb)
              + grid * jax.nn.log_sigmoid(-lb))
        j = x[:, None] - grid[None]
        tau = j * lr[:, None] - jnp.exp(lr)[:, None] - gammaln(jnp.maximum(j, 0) + 1) + nb
        return logsumexp(jnp.where(j >= 0, tau, -jnp.inf), axis=1)

    def custom(v):
        return event_log_likelihood(v[:15], v[15], v[16], x, grid)

    v = jnp.concatenate([jnp.log(jnp.asarray(rng.uniform(1, 15, 15))), jnp.array([0.7, -0.5])])
    c = jnp.asarray(rng.normal(size=15))
    f_plain, f_custom = (lambda v: c @ plain(v)), (lambda v: c @ custom(v))
    # each side one compiled program (op by op, every primitive compiled on its own)
    np.testing.assert_allclose(jax.jit(custom)(v), jax.jit(plain)(v), rtol=1e-12)
    np.testing.assert_allclose(jax.jit(jax.grad(f_custom))(v), jax.jit(jax.grad(f_plain))(v),
                               atol=1e-10)
    np.testing.assert_allclose(jax.jit(jax.hessian(f_custom))(v),
                               jax.jit(jax.hessian(f_plain))(v), atol=1e-9)


def test_count_above_cap_is_a_clear_error():
    x = simulate(60)
    x[17] = 500
    with pytest.raises(InvalidDataError, match=r"data\[17\] = 500 exceeds .*max_count=100"):
        small_model(max_count=100).prepare(x)
    seqs, _, _ = small_model().prepare(x)          # default cap: the largest count
    assert seqs.x.grid.shape[-1] == 501


@pytest.mark.parametrize("bad, match", [(-1, "non-negative"), (np.nan, "NaN|finite"),
                                        (2.5, "integer")])
def test_bad_counts_raise(bad, match):
    x = simulate(40).astype(float)
    x[3] = bad
    with pytest.raises(InvalidDataError, match=match):
        small_model().fit(x)


def test_fit_is_stationary_and_w1_reproduces_the_objective(fitted):
    model, x, params = fitted
    obj = acv.make_problem(model, x, params)
    seqs, n = obj.data.data, obj.n_units           # the prepared data, without the numbers
    ones = np.ones(n)
    # F and its gradient from the fit's compiled (F, g, H, J) sweep (its Newton polish's)
    full, grad = fit_derivatives(obj)[:2]
    assert float(jnp.linalg.norm(grad)) < 1e-6
    # w = 1: both schemes are the unweighted negative log joint (forward algorithm; one
    # jitted program, not dozens of eagerly compiled operations)
    ll = jax.jit(lambda p, x, m: acv.inference.chain.log_normalizer(
        *model.log_potentials(p, x, m)) + model.log_prior(p))(params, seqs.x[0], seqs.mask[0])
    assert np.isclose(float(full), -float(ll), rtol=1e-12)
    scheme_b = acv.make_problem(model, x, params, scheme="B")
    assert np.isclose(float(full), float(scheme_b.fun(scheme_b.u_full, ones, scheme_b.data)),
                      rtol=1e-12)


def test_ij_tracks_exact_refits(fitted):
    model, x, params = fitted
    folds = acv.folds.iid(len(x), 0.02, n_folds=4, seed=3)
    res = {m: acv.cross_validate(model, x, folds, method=m, params=params, progress=False,
                                 exact_batch_size=2) for m in ("ij", "exact")}
    assert res["exact"].diagnostics["exact_converged"].all()
    assert res["exact"].diagnostics["exact_num_steps"].max() <= 10   # Newton refits
    for m in ("ij",):
        df = acv.accuracy(res[m], res["exact"])
        assert df.attrs["mean_rel_error_point"] < 0.02, (m, df.attrs)


def test_ij_error_is_second_order_in_the_fold_weight(fitted):
    """Down-weighting a fold by eps: the IJ error against the exact reweighted refit is
    O(eps^2), so its ratio to the parameter change shrinks with eps."""
    model, x, params = fitted
    obj = acv.make_problem(model, x, params)
    n = obj.n_units
    _, _, H, J = fit_derivatives(obj)
    refit = batched_newton_minimize(obj.fun, obj.scale, 50)
    drop = np.zeros(n)
    drop[[30, 31, 32, 100, 170]] = 1.0
    ratios = []
    for eps in (0.2, 0.05):
        w = 1.0 - eps * drop
        u_ij = np.asarray(obj.u_full) - np.linalg.solve(np.asarray(H), np.asarray(J) @ (w - 1))
        u_ex = np.asarray(refit(obj.u_full[None], jnp.asarray(w)[None], obj.data).u)[0]
        ratios.append(np.linalg.norm(u_ij - u_ex) / np.linalg.norm(u_ex - obj.u_full))
    assert ratios[1] < 0.5 * ratios[0], ratios


def test_schemes_agree_on_leave_future_out(fitted):
    """On leave-future-out folds F_A(theta, w_o) = F_B(theta, w_o) for every theta, so the
    refits (exact, NS) of both schemes coincide: check values and gradients."""
    model, x, params = fitted
    seqs, level, n = model.prepare(x)
    w = acv.folds.leave_future_out(n, [200]).weights()[0]
    grads = {}
    for scheme in ("A", "B"):
        obj = acv.make_problem(model, seqs, params, scheme=scheme, level=level)
        u = obj.u_full + 0.01
        grads[scheme] = (float(obj.fun(u, jnp.asarray(w), obj.data)),
                         np.asarray(engine.gradient(obj.fun, u, jnp.asarray(w), obj.data)))
    assert np.isclose(grads["A"][0], grads["B"][0], rtol=1e-12)
    np.testing.assert_allclose(grads["A"][1], grads["B"][1], rtol=1e-9, atol=1e-9)


def test_params_and_rates_are_normalised(fitted):
    model, x, params = fitted
    assert isinstance(params, TimeVaryingPoissonParams)
    assert np.isclose(params.day_effect.sum(), DAYS)
    assert np.isclose(params.slot_profile.sum(), SLOTS)
    rates = np.asarray(model.rates(params, 2 * SLOTS))
    assert np.isclose(rates[SLOTS + 3], params.base_rate * params.day_effect[1]
                      * params.slot_profile[3])
    flat = TimeVaryingPoisson(slots_per_day=SLOTS, days_per_week=1, time_of_day=False)
    p = flat.init_params(x, None, 1, 0)[0]
    assert p.slot_profile.shape == (1,) and p.day_effect.shape == (1,)


def test_day_layout_is_required_or_read_from_timestamps():
    """No default that fits the shipped data only: the layout is required, or inferred from
    a DatetimeIndex (freeway-like 288 x 7, call-centre-like weekdays 169 x 5)."""
    import pandas as pd

    from approxcv.errors import ApproxCVWarning, ArgumentTypeError
    with pytest.raises(InvalidArgumentError, match="slots_per_day.*days_per_week.*for_series"):
        TimeVaryingPoisson()
    with pytest.raises(InvalidArgumentError, match="`days_per_week`"):
        TimeVaryingPoisson(slots_per_day=288)
    freeway = pd.Series(1, index=pd.date_range("2024-01-01", periods=3 * 7 * 288, freq="5min"))
    model = TimeVaryingPoisson.for_series(freeway, n_init=1)
    assert (model.slots_per_day, model.days_per_week, model.n_init) == (288, 7, 1)
    days = pd.bdate_range("2003-03-03", periods=12)
    calls = pd.DatetimeIndex([d + pd.Timedelta(minutes=420 + 5 * s) for d in days
                              for s in range(169)])
    model = TimeVaryingPoisson.for_series(pd.Series(1, index=calls))
    assert (model.slots_per_day, model.days_per_week) == (169, 5)
    with pytest.warns(ApproxCVWarning, match="skips a day.*2003-03-06"):
        TimeVaryingPoisson.for_series(pd.Series(1, index=calls[~calls.normalize().isin(
            [pd.Timestamp("2003-03-07")])]))
    with pytest.raises(InvalidDataError, match="same\\s+number of slots|number of slots"):
        TimeVaryingPoisson.for_series(pd.Series(1, index=calls[:-1]))
    with pytest.raises(InvalidDataError, match="time\\s+of day|same time"):
        TimeVaryingPoisson.for_series(pd.Series(1, index=calls[:338].append(
            calls[338:507] + pd.Timedelta(minutes=5))))
    with pytest.raises(ArgumentTypeError, match="DatetimeIndex"):
        TimeVaryingPoisson.for_series(np.ones(10))
