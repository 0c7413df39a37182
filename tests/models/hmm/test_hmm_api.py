"""A fitted HMM's uses: predict (Viterbi), predict_proba, score, sample and forecast.

Against hmmlearn on the same parameters (GaussianHMM diag and full, PoissonHMM,
CategoricalHMM), against NumPy forward-backward / Viterbi for every family, and sampling
and forecasting checked by their definitions (seeded, tiny problems).
"""

import jax
import numpy as np
import pytest
from scipy.special import logsumexp

import approxcv as acv
from approxcv.errors import ArgumentTypeError, InvalidArgumentError
from approxcv.models.hmm import Forecast

START = np.array([0.6, 0.3, 0.1])
TRANS = np.array([[0.85, 0.10, 0.05], [0.15, 0.75, 0.10], [0.20, 0.05, 0.75]])


def gaussian_diag():
    means = np.array([[-1.0, 0.5], [1.5, -0.5], [0.2, 2.0]])
    variances = np.array([[0.5, 1.2], [0.8, 0.4], [1.5, 0.6]])
    model = acv.models.GaussianHMM(3)
    return model, acv.models.GaussianHMMParams(START, TRANS, means, variances,
                                                np.zeros((3, 0, 2)))


def gaussian_full():
    means = np.array([[-1.0, 0.5], [1.5, -0.5], [0.2, 2.0]])
    covs = np.array([[[0.5, 0.2], [0.2, 1.2]], [[0.8, -0.3], [-0.3, 0.4]],
                     [[1.5, 0.5], [0.5, 0.6]]])
    model = acv.models.ARHMM(3, order=0, covariance="full")
    return model, acv.models.ARHMMParams(START, TRANS, means[..., None],
                                         np.linalg.cholesky(covs))


def poisson():
    return acv.models.PoissonHMM(3), acv.models.PoissonHMMParams(
        START, TRANS, np.array([1.0, 4.0, 9.0]))


def categorical():
    probs = np.array([[0.6, 0.3, 0.05, 0.05], [0.1, 0.2, 0.6, 0.1], [0.25, 0.25, 0.25, 0.25]])
    return acv.models.CategoricalHMM(3, 4), acv.models.CategoricalHMMParams(START, TRANS,
                                                                            probs)


def gaussian_ar():
    model, params = gaussian_diag()
    ar = np.array([[[0.5, -0.2]], [[-0.3, 0.4]], [[0.1, 0.7]]])
    return acv.models.GaussianHMM(3, ar_order=1), params._replace(ar_coeffs=ar)


def arhmm2():
    rng = np.random.default_rng(7)
    weights = np.concatenate([0.25 * rng.normal(size=(3, 2, 4)),
                              np.array([[[0.0], [1.0]], [[2.0], [-1.0]], [[-1.5], [0.5]]])],
                             axis=-1)
    trils = np.array([[[0.7, 0.0], [0.2, 0.9]], [[0.5, 0.0], [-0.1, 0.6]],
                      [[1.1, 0.0], [0.3, 0.4]]])
    return acv.models.ARHMM(3, order=2), acv.models.ARHMMParams(START, TRANS, weights, trils)


def neural():
    rng = np.random.default_rng(8)
    k, h, r = 3, 2, 2
    return acv.models.NeuralARHMM(k, order=1, hidden=h), acv.models.NeuralARHMMParams(
        START, TRANS, rng.normal(size=(k, h, r)), rng.normal(size=(k, h)),
        rng.normal(size=(k, r, h)), rng.normal(size=(k, r)),
        np.stack([0.5 * np.eye(r)] * k))


def event_model():
    model = acv.models.TimeVaryingPoisson(slots_per_day=6, days_per_week=2)
    params = acv.models.TimeVaryingPoissonParams(
        np.array([0.7, 0.3]), np.array([[0.9, 0.1], [0.3, 0.7]]), np.asarray(3.0),
        np.array([0.8, 1.2]), np.array([0.5, 0.8, 1.2, 1.5, 1.2, 0.8]), np.asarray(2.0),
        np.asarray(0.4))
    return model, params


CASES = {"gaussian_diag": gaussian_diag, "gaussian_full": gaussian_full, "poisson": poisson,
         "categorical": categorical, "gaussian_ar": gaussian_ar, "arhmm2": arhmm2,
         "neural": neural, "event": event_model}
HMMLEARN = ("gaussian_diag", "gaussian_full", "poisson", "categorical")


def hmmlearn_model(name, params):
    hmm = pytest.importorskip("hmmlearn.hmm")
    k = len(params.initial_probs)
    if name == "gaussian_diag":
        est = hmm.GaussianHMM(k, covariance_type="diag")
        est.means_, est.covars_ = params.means, params.variances
    elif name == "gaussian_full":
        est = hmm.GaussianHMM(k, covariance_type="full")
        est.means_ = params.weights[..., 0]
        est.covars_ = np.einsum("kij,klj->kil", params.scale_trils, params.scale_trils)
    elif name == "poisson":
        est = hmm.PoissonHMM(k)
        est.lambdas_ = params.rates[:, None]
    else:
        est = hmm.CategoricalHMM(k, n_features=params.emission_probs.shape[1])
        est.emissionprob_ = params.emission_probs
    est.startprob_, est.transmat_ = params.initial_probs, params.transition_matrix
    return est


def as_hmmlearn_data(x):
    x = np.asarray(x)
    return x[:, None] if x.ndim == 1 else x


@pytest.fixture(scope="module", params=list(CASES))
def case(request):
    """``(name, model, params, [x1, x2])``: two sampled sequences of 203 and 61 steps
    (lengths off the size buckets, so the padded programs are what is checked)."""
    model, params = CASES[request.param]()
    x1, _ = model.sample(params, 203, seed=11)
    x2, _ = model.sample(params, 61, seed=12)
    return request.param, model, params, [x1, x2]


# ---------------------------------------------------------------- references
def numpy_potentials(model, params, x):
    """``(log pi, log A, log_lik (T, K))`` of one sequence, by the model's emissions."""
    seqs = model.prepare(x, "within")[0]
    log_lik = np.asarray(model._emission_log_lik(params, seqs.x[0]))
    return np.log(params.initial_probs), np.log(params.transition_matrix), log_lik


def numpy_forward_backward(log_pi, log_a, log_lik):
    """``(log Z, log filtered (T, K), log smoothed (T, K))`` in log space."""
    steps, k = log_lik.shape
    alpha, beta = np.zeros((steps, k)), np.zeros((steps, k))
    alpha[0] = log_pi + log_lik[0]
    for t in range(1, steps):
        alpha[t] = logsumexp(alpha[t - 1][:, None] + log_a, axis=0) + log_lik[t]
    for t in range(steps - 2, -1, -1):
        beta[t] = logsumexp(log_a + (log_lik[t + 1] + beta[t + 1])[None], axis=1)
    log_z = logsumexp(alpha[-1])
    filtered = alpha - logsumexp(alpha, axis=1, keepdims=True)
    return log_z, filtered, alpha + beta - log_z


def numpy_viterbi(log_pi, log_a, log_lik):
    steps, k = log_lik.shape
    delta, back = log_pi + log_lik[0], np.zeros((steps, k), int)
    for t in range(1, steps):
        cand = delta[:, None] + log_a
        back[t] = np.argmax(cand, axis=0)
        delta = cand.max(axis=0) + log_lik[t]
    path = [int(np.argmax(delta))]
    for t in range(steps - 1, 0, -1):
        path.append(int(back[t][path[-1]]))
    return np.array(path[::-1])


def stationary(trans):
    vals, vecs = np.linalg.eig(trans.T)
    v = np.real(vecs[:, np.argmin(np.abs(vals - 1.0))])
    return v / v.sum()


# ------------------------------------------------------------------- tests
def test_against_numpy_forward_backward_and_viterbi(case):
    """Every family: Viterbi path, posterior marginals and log-likelihood equal a NumPy
    forward-backward and Viterbi on the model's own emission log-likelihoods."""
    name, model, params, xs = case
    paths, probs = model.predict(params, xs), model.predict_proba(params, xs)
    assert isinstance(paths, list) and len(paths) == 2
    total = 0.0
    for x, path, prob in zip(xs, paths, probs):
        pots = numpy_potentials(model, params, x)
        log_z, _, smoothed = numpy_forward_backward(*pots)
        total += log_z
        assert path.shape == (len(x),) and path.dtype.kind == "i"
        np.testing.assert_array_equal(path, numpy_viterbi(*pots))
        np.testing.assert_allclose(prob, np.exp(smoothed), rtol=0, atol=1e-8)
        np.testing.assert_allclose(prob.sum(1), 1.0, atol=1e-12)
    np.testing.assert_allclose(model.score(params, xs), total, rtol=1e-10)
    # one sequence: arrays and a float, not lists
    np.testing.assert_array_equal(model.predict(params, xs[0]), paths[0])
    np.testing.assert_allclose(model.predict_proba(params, xs[0]), probs[0], atol=1e-12)
    assert isinstance(model.score(params, xs[0]), float)
    # a list of one sequence is a list of one
    assert len(model.predict(params, [xs[0]])) == 1


@pytest.mark.parametrize("name", HMMLEARN)
def test_equal_to_hmmlearn_on_the_same_parameters(name):
    """Viterbi path identical, marginals to 1e-8, score to 1e-8 (one sequence and two
    sequences with ``lengths``), on hmmlearn's GaussianHMM diag/full, PoissonHMM and
    CategoricalHMM with the same parameters set by hand."""
    model, params = CASES[name]()
    est = hmmlearn_model(name, params)
    xs = [model.sample(params, 203, seed=21)[0], model.sample(params, 61, seed=22)[0]]
    X = np.concatenate([as_hmmlearn_data(x) for x in xs])
    lengths = [len(x) for x in xs]
    np.testing.assert_array_equal(model.predict(params, xs[0]),
                                  est.predict(as_hmmlearn_data(xs[0])))
    np.testing.assert_array_equal(np.concatenate(model.predict(params, xs)),
                                  est.predict(X, lengths))
    np.testing.assert_allclose(np.concatenate(model.predict_proba(params, xs)),
                               est.predict_proba(X, lengths), rtol=0, atol=1e-8)
    assert abs(model.score(params, xs) - est.score(X, lengths)) < 1e-8
    assert abs(model.score(params, xs[0]) - est.score(as_hmmlearn_data(xs[0]))) < 1e-8


def test_sample_shapes_and_seeding(case):
    name, model, params, _ = case
    x, z = model.sample(params, 50, seed=3)
    assert z.shape == (50,) and z.dtype.kind == "i"
    assert z.min() >= 0 and z.max() < len(params.initial_probs)
    if name in ("poisson", "event", "categorical"):
        assert x.shape == (50,) and x.dtype.kind == "i" and x.min() >= 0
    else:
        assert x.shape == (50, 2) and x.dtype.kind == "f"
    again = model.sample(params, 50, seed=3)
    np.testing.assert_array_equal(x, again[0])
    np.testing.assert_array_equal(z, again[1])
    other = model.sample(params, 50, seed=4)
    assert not np.array_equal(x, other[0])
    # an int seed is the JAX key PRNGKey(seed); a Generator gives reproducible draws
    keyed = model.sample(params, 50, seed=jax.random.PRNGKey(3))
    np.testing.assert_array_equal(x, keyed[0])
    a = model.sample(params, 50, seed=np.random.default_rng(5))
    b = model.sample(params, 50, seed=np.random.default_rng(5))
    np.testing.assert_array_equal(a[0], b[0])
    assert np.isfinite(model.score(params, x))


@pytest.mark.parametrize("name", ["poisson", "gaussian_ar"])
def test_long_sample_has_the_model_s_statistics(name):
    """Empirical transition frequencies of a long seeded sample are near ``A`` (within 5
    standard errors), and the emissions near each state's mean."""
    model, params = CASES[name]()
    x, z = model.sample(params, 20_000, seed=0)
    counts = np.zeros((3, 3))
    np.add.at(counts, (z[:-1], z[1:]), 1.0)
    rows = counts.sum(1, keepdims=True)
    freq = counts / rows
    se = np.sqrt(TRANS * (1 - TRANS) / rows)
    assert np.all(np.abs(freq - TRANS) < 5 * se), (freq, TRANS)
    if name == "poisson":
        for k, rate in enumerate(params.rates):
            assert abs(x[z == k].mean() - rate) < 5 * np.sqrt(rate / np.sum(z == k))
    else:       # residual of the AR(1) regression has each state's mean and variance
        resid = x[1:] - params.ar_coeffs[z[1:], 0] * x[:-1] - params.means[z[1:]]
        for k in range(3):
            r = resid[z[1:] == k]
            np.testing.assert_allclose(r.mean(0), 0.0, atol=5 * np.sqrt(
                params.variances[k] / len(r)).max())
            np.testing.assert_allclose(r.var(0), params.variances[k], rtol=0.1)


def test_forecast_propagates_the_filtered_distribution(case):
    """Horizon 1: ``filtered @ A`` with ``filtered`` of a NumPy forward pass; a long
    horizon approaches the stationary distribution; a list gives a list."""
    name, model, params, xs = case
    fc = model.forecast(params, xs[0], horizon=200)
    assert isinstance(fc, Forecast)
    _, filtered, _ = numpy_forward_backward(*numpy_potentials(model, params, xs[0]))
    f = np.exp(filtered[-1])
    np.testing.assert_allclose(fc.filtered, f, atol=1e-10)
    trans = params.transition_matrix
    np.testing.assert_allclose(fc.state_probs[0], f @ trans, atol=1e-10)
    np.testing.assert_allclose(fc.state_probs[4], f @ np.linalg.matrix_power(trans, 5),
                               atol=1e-10)
    np.testing.assert_allclose(fc.state_probs[-1], stationary(trans), atol=1e-8)
    assert fc.state_probs.shape == (200, len(f))
    both = model.forecast(params, xs, horizon=3)
    assert isinstance(both, list) and len(both) == 2
    np.testing.assert_allclose(both[0].state_probs, fc.state_probs[:3], atol=1e-12)
    if name == "neural":
        assert fc.mean is None
    else:
        assert fc.mean.shape[0] == 200


@pytest.mark.parametrize("name", ["poisson", "gaussian_diag", "categorical", "event"])
def test_forecast_mean_without_lags(name):
    """The predictive mean of each step ahead is ``sum_k P(z_{T+h} = k) E[x | z = k]``."""
    model, params = CASES[name]()
    # the fixture's sample and the propagation test's horizon: programs compiled already
    x, _ = model.sample(params, 203, seed=11)
    fc = model.forecast(params, x, horizon=200)
    if name == "poisson":
        want = fc.state_probs @ params.rates
    elif name == "gaussian_diag":
        want = fc.state_probs @ params.means
    elif name == "categorical":
        want = fc.state_probs @ params.emission_probs
        np.testing.assert_allclose(fc.mean.sum(1), 1.0, atol=1e-12)
    else:
        rates = np.asarray(model.rates(params, 403))[203:]
        want = rates + fc.state_probs[:, 1] * params.excess_shape / params.excess_rate
    np.testing.assert_allclose(fc.mean, want, rtol=1e-12)


@pytest.mark.parametrize("name", ["gaussian_ar", "arhmm2"])
def test_forecast_mean_with_lags_matches_simulation(name):
    """Autoregressive means: the exact moment recursion against a seeded Monte Carlo
    continuation (z_T from the filtered distribution, then the model forward), within 5
    standard errors; horizon 1 also in closed form."""
    model, params = CASES[name]()
    x, _ = model.sample(params, 203, seed=11)        # the fixture's programs
    x = np.asarray(x)
    horizon, draws = 3, 40_000
    fc = model.forecast(params, x, horizon=200)
    fc = fc._replace(mean=fc.mean[:horizon])
    rng = np.random.default_rng(0)
    trans, k = params.transition_matrix, len(params.initial_probs)
    z = rng.choice(k, size=draws, p=fc.filtered)
    order = 1 if name == "gaussian_ar" else 2
    lags = np.repeat(x[::-1][:order][None], draws, axis=0)        # (draws, p, R)
    sims = []
    for _ in range(horizon):
        u = rng.random(draws)[:, None]
        z = np.minimum((u > np.cumsum(trans[z], axis=1)).sum(1), k - 1)
        if name == "gaussian_ar":
            mean = params.means[z] + params.ar_coeffs[z, 0] * lags[:, 0]
            new = mean + np.sqrt(params.variances[z]) * rng.normal(size=mean.shape)
        else:
            w = params.weights[z]
            mean = np.einsum("nrc,nc->nr", w[..., :-1], lags.reshape(draws, -1)) + w[..., -1]
            new = mean + np.einsum("nrs,ns->nr", params.scale_trils[z],
                                   rng.normal(size=mean.shape))
        sims.append(new)
        lags = np.concatenate([new[:, None], lags[:, :-1]], axis=1)
    sims = np.stack(sims, 1)
    se = sims.std(0) / np.sqrt(draws)
    assert np.all(np.abs(fc.mean - sims.mean(0)) < 5 * se), (fc.mean, sims.mean(0), se)
    p1 = fc.filtered @ trans
    if name == "gaussian_ar":
        want = p1 @ params.means + (p1[:, None] * params.ar_coeffs[:, 0]).sum(0) * x[-1]
    else:
        s = np.concatenate([x[-1], x[-2]])
        want = np.einsum("k,krc,c->r", p1, params.weights[..., :-1], s) + p1 @ params.weights[
            ..., -1]
    np.testing.assert_allclose(fc.mean[0], want, rtol=1e-10)


def test_entry_points_check_their_arguments():
    model, params = poisson()
    x, _ = model.sample(params, 30, seed=0)
    bad = params._replace(rates=np.array([1.0, np.nan, 2.0]))
    for call in (lambda: model.predict(bad, x), lambda: model.predict_proba(bad, x),
                 lambda: model.score(bad, x), lambda: model.forecast(bad, x, 2),
                 lambda: model.sample(bad, 10)):
        with pytest.raises(InvalidArgumentError, match="rates"):
            call()
    two = acv.models.PoissonHMM(2)
    with pytest.raises(InvalidArgumentError, match="shape"):
        two.predict(params, x)
    with pytest.raises(InvalidArgumentError, match="horizon"):
        model.forecast(params, x, 0)
    with pytest.raises(InvalidArgumentError, match="n_steps"):
        model.sample(params, 0)
    with pytest.raises(ArgumentTypeError, match="seed"):
        model.sample(params, 5, seed="one")
    with pytest.raises(InvalidArgumentError, match="empty"):
        model.predict(params, [])
