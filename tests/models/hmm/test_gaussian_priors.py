"""Unit-free default priors of the real-valued HMMs and the empty-state warning (issue 17.6).

A fit of ``c x + d`` must be the fit of ``x`` in other units: the same states, parameters
mapped by the change of units, and the objective shifted by the constant
``sum_t w_t sum_r log c_r`` of the likelihood.
"""
import warnings

import jax
import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import EmptyStateWarning, InvalidArgumentError
from approxcv.inference import chain
from approxcv.models.hmm._data_scale import data_scale
from approxcv.models.hmm._occupancy import check_occupancy, state_occupancy


def two_state_series(T=150, seed=0):
    """Sticky 2-state series in the hundreds-to-thousands (means 1000 and 1400, sd 150).

    Under the former absolute priors (``mu ~ N(0, 1e4)``, variance scale ``1e-2``) the MAP
    fit of ``GaussianHMM(2)`` to it had an empty state (mean 0, variance 0.005), 87 nats
    below the sensible fit in that objective, while the
    same series divided by 100 fitted sensibly."""
    rng = np.random.default_rng(seed)
    z = np.zeros(T, dtype=int)
    for t in range(1, T):
        z[t] = z[t - 1] if rng.random() < 0.95 else 1 - z[t - 1]
    return np.array([1000.0, 1400.0])[z] + 150.0 * rng.normal(size=T)


def two_channel_series(T=60, seed=1):
    """Two channels in very different units (thousands and hundredths), AR(1)-like."""
    rng = np.random.default_rng(seed)
    x = np.zeros((T, 2))
    for t in range(T):
        state = (t // 15) % 2
        prev = x[t - 1] if t else np.zeros(2)
        x[t] = 0.5 * prev + [300.0 + 200.0 * state, 0.02 - 0.01 * state] \
            + [40.0, 0.004] * rng.normal(size=2)
    return x


def smoothed_probs(model, params, x):
    """``(T, K)`` posterior state probabilities of one series."""
    seqs = model.prepare(x)[0]
    post = chain.posterior_marginals(*model.log_potentials(params, seqs.x[0], seqs.mask[0]))
    return np.exp(np.asarray(post.log_smoothed_probs))


def state_order(x, probs):
    """States sorted by their posterior mean of the first channel (fits of the same data
    in other units may label the states differently)."""
    return np.argsort(probs.T @ np.asarray(x).reshape(len(x), -1)[:, 0] / probs.sum(0))


def fit_quietly(model, x):
    """Fit with every approxcv warning raised as an error."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", acv.errors.ApproxCVWarning)
        return model.fit(x)


# ------------------------------------------------------- change-of-units maps
def gaussian_hmm_in_units(params, c, d):
    """GaussianHMM parameters for ``c x + d``: ``mu -> c mu + (1 - sum_l a_l) d``."""
    drift = (1.0 - np.sum(params.ar_coeffs, axis=1)) * d
    return params._replace(means=c * params.means + drift, variances=c ** 2 * params.variances)


def arhmm_in_units(params, c, d, order):
    """ARHMM parameters for ``C x + d``: ``A_l -> C A_l C^{-1}``, ``b -> C b + (I - sum A) d``,
    ``L -> C L``."""
    lags = params.weights[..., :-1] * c[:, None] / np.tile(c, order)
    total = lags.reshape(lags.shape[0], len(c), order, len(c)).sum(2)
    bias = c * params.weights[..., -1] + d - total @ d
    return params._replace(weights=np.concatenate([lags, bias[..., None]], -1),
                           scale_trils=params.scale_trils * c[:, None])


def neural_in_units(params, c, order):
    """NeuralARHMM parameters for ``C x``: ``W1 -> W1 C_p^{-1}``, ``W2 -> C W2``,
    ``c2 -> C c2``, ``L -> C L``."""
    return params._replace(hidden_weights=params.hidden_weights / np.tile(c, order),
                           output_weights=params.output_weights * c[:, None],
                           output_biases=params.output_biases * c,
                           scale_trils=params.scale_trils * c[:, None])


def random_params(model, rng, R=2):
    """A random parameter set of ``model`` (2 states, ``R`` channels) on the scale of
    :func:`two_channel_series`."""
    k = 2
    pi, trans = np.array([0.3, 0.7]), np.array([[0.9, 0.1], [0.2, 0.8]])
    sd = np.array([150.0, 0.008])
    if isinstance(model, acv.models.GaussianHMM):
        p = model.ar_order
        return model.params_type(pi, trans, np.array([[100.0, 0.01], [300.0, 0.0]]),
                                 (sd * rng.uniform(0.5, 1.5, (k, R))) ** 2,
                                 rng.uniform(-0.5, 0.5, (k, p, R)))
    trils = np.tril(rng.normal(size=(k, R, R)) * 0.3) + np.eye(R) * 0.8
    if model.covariance == "diag":
        trils = trils * np.eye(R)
    trils = trils * sd[:, None]
    p = model.order
    if isinstance(model, acv.models.ARHMM):
        lags = rng.normal(size=(k, R, R * p)) * 0.3 * sd[:, None] / np.tile(sd, p)
        bias = np.array([[100.0, 0.01], [300.0, 0.0]])
        return model.params_type(pi, trans, np.concatenate([lags, bias[..., None]], -1),
                                 trils)
    h = model.hidden
    return model.params_type(pi, trans, rng.normal(size=(k, h, R * p)) / np.tile(sd, p),
                             rng.normal(size=(k, h)), rng.normal(size=(k, R, h)) * sd[:, None],
                             np.array([[300.0, 0.01], [500.0, 0.02]]), trils)


# ------------------------------------------------------------------- tests
@pytest.fixture(scope="module")
def gaussian():
    """One model for every Gaussian fit here (same configuration and length: one compile)."""
    return acv.models.GaussianHMM(2, n_init=2)


def test_gaussian_hmm_fits_the_same_states_on_x_and_on_1000_x(gaussian):
    x = two_state_series()
    model = gaussian
    base = fit_quietly(model, x)
    f_base = float(model.objective(base, x, np.ones(len(x))))
    probs = smoothed_probs(model, base, x)
    order = state_order(x, probs)
    # the sensible fit (the former priors gave a state with mean 0 that held no data)
    np.testing.assert_allclose(base.means.ravel()[order], [1000.0, 1400.0], rtol=0.05)
    assert model.fit_result_["state_occupancy"].min() > 20
    for c in (1e-2, 1e3):
        params = fit_quietly(model, c * x)
        probs_c = smoothed_probs(model, params, c * x)
        order_c = state_order(x, probs_c)
        np.testing.assert_allclose(probs_c[:, order_c], probs[:, order], atol=1e-5)
        np.testing.assert_allclose(params.means[order_c], c * base.means[order], rtol=1e-6)
        np.testing.assert_allclose(params.variances[order_c], c ** 2 * base.variances[order],
                                   rtol=1e-5)
        f = float(model.objective(params, c * x, np.ones(len(x))))
        np.testing.assert_allclose(f, f_base + len(x) * np.log(c), rtol=1e-9)


def test_arhmm_fits_the_same_states_on_x_and_on_1000_x():
    x = two_channel_series()       # its channels differ by a factor 1e4 already
    model = acv.models.ARHMM(2, order=1, n_init=1)
    base = fit_quietly(model, x)
    probs = smoothed_probs(model, base, x)
    order = state_order(x, probs)
    c = 1e3
    params = fit_quietly(model, c * x)
    probs_c = smoothed_probs(model, params, c * x)
    order_c = state_order(x, probs_c)
    mapped = arhmm_in_units(base, np.full(2, c), np.zeros(2), 1)
    np.testing.assert_allclose(probs_c[:, order_c], probs[:, order], atol=1e-5)
    for got, want in ((params.weights[order_c], mapped.weights[order]),
                      (params.scale_trils[order_c], mapped.scale_trils[order])):
        # entries of one row (channel) share its units: compare relative to the row's size
        row = np.abs(want).max(axis=(0, 2), keepdims=True)
        np.testing.assert_allclose(got / row, want / row, rtol=0, atol=1e-5)


MODELS = {
    "gaussian": (lambda: acv.models.GaussianHMM(2), True),
    "gaussian_ar": (lambda: acv.models.GaussianHMM(2, ar_order=2), False),
    "arhmm_order0": (lambda: acv.models.ARHMM(2, order=0), True),
    "arhmm_full": (lambda: acv.models.ARHMM(2, order=2), False),
    "arhmm_diag_isotropic": (lambda: acv.models.ARHMM(2, order=1, covariance="diag",
                                                      weight_prior="isotropic"), False),
    "neural": (lambda: acv.models.NeuralARHMM(2, order=1, hidden=3), False),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_objective_is_equivariant_to_a_change_of_units(name):
    """``F(theta', c x + d; w) = F(theta, x; w) + sum_t w_t sum_r log c_r`` under both schemes
    and at the structure level (``d = 0`` where lags before the start, 0 in the data's units,
    tie the model to the origin)."""
    make, affine = MODELS[name]
    model = make()
    rng = np.random.default_rng(0)
    params = random_params(model, rng)
    x = two_channel_series()
    c, d = np.array([1e3, 1e-2]), np.array([-250.0, 0.5]) if affine else np.zeros(2)
    if isinstance(model, acv.models.GaussianHMM):
        mapped = gaussian_hmm_in_units(params, c, d)
    elif isinstance(model, acv.models.ARHMM):
        mapped = arhmm_in_units(params, c, d, model.order)
    else:
        mapped = neural_in_units(params, c, model.order)
    w = np.ones(len(x))
    w[[3, 10, 11, 40]] = 0.0
    shift = w.sum() * np.sum(np.log(c))

    def objective(p, data, weights, scheme="A", level=None):
        """The objective on the prepared data, jitted: one program per scheme and level
        (both units share it), not dozens of eagerly compiled operations."""
        prepared = model.prepare(data, level)[0]
        return float(jax.jit(lambda q, dd, v: model.objective(q, dd, v, scheme, level))(
            p, prepared, weights))
    for scheme in "AB":
        f = objective(params, x, w, scheme)
        f_new = objective(mapped, x * c + d, w, scheme)
        np.testing.assert_allclose(f_new, f + shift, rtol=1e-10, atol=1e-8)
    xs = [x[:35], x[35:]]
    f = objective(params, xs, np.ones(2), level="structure")
    f_new = objective(mapped, [s * c + d for s in xs], np.ones(2), level="structure")
    np.testing.assert_allclose(f_new, f + len(x) * np.sum(np.log(c)), rtol=1e-10, atol=1e-8)


def test_data_scale_pools_every_observed_step_and_rides_along_with_batches():
    xs = [two_channel_series(40, seed=2), two_channel_series(25, seed=3)]
    seqs = acv.models.ARHMM(2, order=1).prepare(xs)[0]
    pooled = np.concatenate(xs)
    np.testing.assert_allclose(seqs.data_scale.loc, np.tile(pooled.mean(0), (2, 1)))
    np.testing.assert_allclose(seqs.data_scale.scale, np.tile(pooled.std(0), (2, 1)))
    one = jax.tree_util.tree_map(lambda a: a[np.array([1])], seqs)  # a batch of sequences
    np.testing.assert_allclose(one.data_scale.scale[0], pooled.std(0))
    const = data_scale(np.full((1, 5, 2), [3.0, 0.0]), np.ones((1, 5)))
    np.testing.assert_allclose(const.scale, [[3.0, 1.0]])   # s = |m|, or 1 when m = 0


def test_log_prior_needs_the_prepared_data():
    model = acv.models.GaussianHMM(2)
    params = random_params(model, np.random.default_rng(0))
    with pytest.raises(InvalidArgumentError, match="data's units"):
        model.log_prior(params)
    assert np.isfinite(float(model.log_prior(params, model.prepare(two_channel_series())[0])))


def test_fit_warns_when_a_state_holds_a_single_observation(gaussian):
    x = 1000.0 + 100.0 * np.random.default_rng(0).normal(size=150)
    x[70] = 5000.0       # an outlier that a second state takes alone
    model = gaussian
    with pytest.warns(EmptyStateWarning, match=r"state \d carries \(almost\) no data"):
        model.fit(x)
    occupancy = model.fit_result_["state_occupancy"]
    np.testing.assert_allclose(np.sort(occupancy), [1.0, 149.0], atol=1e-3)


def test_check_occupancy_names_an_empty_state():
    x = two_state_series(80)
    model = acv.models.GaussianHMM(3)
    seqs = model.prepare(x)[0]
    params = model.params_type(np.full(3, 1 / 3), np.full((3, 3), 1 / 3),
                               np.array([[1000.0], [1e5], [1400.0]]), np.full((3, 1), 150.0 ** 2),
                               np.zeros((3, 0, 1)))
    occupancy = state_occupancy(model, params, seqs)
    assert occupancy[1] < 1e-10 and np.isclose(occupancy.sum(), 80.0)
    model.fit_result_ = {}
    with pytest.warns(EmptyStateWarning, match=r"state 1 carries .* of 80 \(threshold 2\)"):
        check_occupancy(model, params, seqs)
    np.testing.assert_allclose(model.fit_result_["state_occupancy"], occupancy)
    with warnings.catch_warnings():
        warnings.simplefilter("error", EmptyStateWarning)
        check_occupancy(model, params._replace(means=np.array([[1000.0], [1200.0], [1400.0]])),
                        seqs)
