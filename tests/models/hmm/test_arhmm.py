"""ARHMM and NeuralARHMM: reductions, brute-force marginal likelihoods, IJ vs exact LOSO."""
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import approxcv as acv
from approxcv import engine
from approxcv.errors import ArgumentTypeError, InvalidArgumentError, InvalidDataError
from approxcv.models.hmm.arhmm import covariances
from tests.conftest import simulate_gaussian_hmm


def simulate_arhmm(T, seed, R=2):
    """Two-state sticky VAR(1) with state-dependent dynamics and offsets."""
    rng = np.random.default_rng(seed)
    A = np.array([[[0.6, 0.2], [-0.1, 0.5]], [[-0.3, 0.0], [0.2, -0.4]]])[:, :R, :R]
    b = np.array([[1.0, -0.5], [-1.0, 1.0]])[:, :R]
    z, x = 0, np.zeros((T, R))
    for t in range(T):
        if t and rng.random() > 0.9:
            z = 1 - z
        prev = x[t - 1] if t else np.zeros(R)
        x[t] = A[z] @ prev + b[z] + 0.5 * rng.normal(size=R)
    return x


def brute_force_log_marginal(params, x, order):
    """``log p(x)`` by enumerating all ``K^T`` state paths, emissions from scipy's MVN."""
    K, (T, R) = len(params.initial_probs), x.shape
    cov = np.asarray(covariances(params))
    lags = np.zeros((T, R * order))
    for t in range(T):
        for l in range(1, order + 1):
            if t - l >= 0:
                lags[t, (l - 1) * R:l * R] = x[t - l]
    W = np.asarray(params.weights)
    emis = np.array([[stats.multivariate_normal.logpdf(x[t], W[k, :, :-1] @ lags[t] + W[k, :, -1],
                                                       cov[k]) for k in range(K)]
                     for t in range(T)])
    pi, A = np.asarray(params.initial_probs), np.asarray(params.transition_matrix)
    terms = []
    for path in itertools.product(range(K), repeat=T):
        lp = np.log(pi[path[0]]) + emis[0, path[0]]
        for t in range(1, T):
            lp += np.log(A[path[t - 1], path[t]]) + emis[t, path[t]]
        terms.append(lp)
    return float(np.logaddexp.reduce(terms))


# ---------------------------------------------------------------- reductions
def test_order_zero_diag_isotropic_equals_gaussian_hmm():
    xs = [simulate_gaussian_hmm(40, seed=9), simulate_gaussian_hmm(25, seed=10)]
    gauss = acv.models.GaussianHMM(2)
    p_g = gauss.params_type(np.array([.4, .6]), np.array([[.9, .1], [.2, .8]]),
                            np.array([[-1.0, -0.8], [1.4, 1.6]]), np.array([[.3, .4], [.5, .35]]),
                            np.zeros((2, 0, 2)))
    ar = acv.models.ARHMM(2, order=0, covariance="diag", weight_prior="isotropic",
                          bias_prior_var=gauss.mean_prior_var, var_shape=gauss.var_shape,
                          var_scale=gauss.var_scale)
    p_a = ar.params_type(p_g[0], p_g[1], np.asarray(p_g.means)[:, :, None],
                         np.stack([np.diag(np.sqrt(v)) for v in p_g.variances]))
    # each evaluation one jitted program (on prepared data), not dozens of eager operations
    def objective(mdl, p, x, w, **kw):
        prepared = mdl.prepare(x, kw.get("level"))[0]
        return float(jax.jit(lambda q, d, v: mdl.objective(q, d, v, **kw))(p, prepared, w))

    w = np.ones(2)
    np.testing.assert_allclose(objective(ar, p_a, xs, w, level="structure"),
                               objective(gauss, p_g, xs, w, level="structure"), rtol=1e-12)
    w_in = np.ones(40)
    w_in[10:15] = 0.0
    for scheme in ("A", "B"):
        np.testing.assert_allclose(objective(ar, p_a, xs[0], w_in, scheme=scheme),
                                   objective(gauss, p_g, xs[0], w_in, scheme=scheme), rtol=1e-12)
    heldout = [jax.jit(mdl.heldout_loss)(p, mdl.prepare(xs[0])[0], w_in)[1]
               for mdl, p in ((ar, p_a), (gauss, p_g))]
    np.testing.assert_allclose(heldout[0], heldout[1], rtol=1e-12)
    # same gradient in the shared coordinates (means, log variances = 2 log sqrt-variances)
    grads = [jax.jit(jax.grad(lambda e, d, mdl=mdl, p=p: mdl.objective(
        mdl.params_type(*p[:2], *e), d, w, level="structure")))(
        tuple(p[2:]), mdl.prepare(xs, "structure")[0]) for mdl, p in ((gauss, p_g), (ar, p_a))]
    np.testing.assert_allclose(np.asarray(grads[1][0])[:, :, 0], grads[0][0], rtol=1e-10)


def test_full_covariance_emissions_match_scipy_and_transforms_round_trip():
    x = simulate_arhmm(7, seed=3)
    model = acv.models.ARHMM(2, order=2)
    rng = np.random.default_rng(0)
    trils = np.tril(rng.normal(size=(2, 2, 2)) * 0.3) + np.eye(2) * 0.8
    params = model.params_type(np.array([.3, .7]), np.array([[.8, .2], [.4, .6]]),
                               rng.normal(size=(2, 2, 5)), trils)
    log_lik = np.asarray(model._emission_log_lik(params, jnp.asarray(x)))
    lags = np.concatenate([np.vstack([np.zeros((l, 2)), x[:-l]]) for l in (1, 2)], axis=1)
    cov = trils @ np.swapaxes(trils, 1, 2)
    expected = np.array([[stats.multivariate_normal.logpdf(
        x[t], params.weights[k, :, :-1] @ lags[t] + params.weights[k, :, -1], cov[k])
        for k in range(2)] for t in range(7)])
    np.testing.assert_allclose(log_lik, expected, rtol=1e-12)
    back = model.constrain(model.unconstrain(params))
    for a, b in zip(back, params):
        np.testing.assert_allclose(np.asarray(a), b, rtol=1e-12, atol=1e-14)


# ------------------------------------------------ leave-one-sequence-out CV
@pytest.fixture(scope="module")
def loso():
    """10 sequences (the first only 5 steps long), ARHMM(2, order=1): IJ leave-one-sequence-out
    on all folds, exact refits on the first four."""
    lengths = [5] + [30] * 9
    seqs = [simulate_arhmm(T, seed=s) for s, T in enumerate(lengths)]
    model = acv.models.ARHMM(2, order=1, n_init=1)
    params = model.fit(seqs)
    folds = acv.folds.leave_one_out(len(seqs))
    ij = acv.cross_validate(model, seqs, folds, method="ij", params=params, level="structure",
                            progress=False)
    ex = acv.cross_validate(model, seqs, acv.folds.Folds([folds[i] for i in range(4)], 10),
                            method="exact", params=params, level="structure", progress=False,
                            exact_batch_size=4, restarts=0)
    return model, seqs, params, ij, ex


def test_lscv_heldout_equals_brute_force_marginal_under_fold_params(loso):
    model, seqs, params, ij, ex = loso
    assert ex.diagnostics["exact_converged"].all()
    p0 = type(params)(*[np.asarray(leaf[0]) for leaf in ex.params])
    assert not np.allclose(p0.weights, params.weights)  # the fold's parameters, not the fit's
    np.testing.assert_allclose(ex.fold_loss[0], -brute_force_log_marginal(p0, seqs[0], 1),
                               rtol=1e-10)
    np.testing.assert_allclose(ex.point_loss[0], ex.fold_loss[0])
    assert ij.scheme is None and ij.level == "structure"


def test_ij_close_to_exact_leave_one_sequence_out(loso):
    model, seqs, params, ij, ex = loso
    prepared = model.prepare(seqs)[0]
    in_sample = -np.asarray(model.sequence_log_likelihoods(params, prepared))[:4]
    # the IJ recovers most of the gap between the in-sample and the exact held-out loss
    # (on this problem about 85-95 %); plugging in the full-data fit would score 0 %
    gap_ij = np.abs(ij.fold_loss[:4] - ex.fold_loss)
    gap_fit = np.abs(in_sample - ex.fold_loss)
    assert np.all(gap_ij < 0.3 * gap_fit), (gap_ij, gap_fit)
    assert np.all(np.abs(ij.fold_loss[:4] - ex.fold_loss) < 0.02 * np.abs(ex.fold_loss) + 0.1)


# ---------------------------------------------------------------- neural
def test_neural_arhmm_shapes_gradients_and_unit_weights():
    seqs = [simulate_arhmm(T, seed=s) for s, T in enumerate([30, 25, 35])]
    model = acv.models.NeuralARHMM(2, order=2, hidden=3)
    prepared, level, n = model.prepare(seqs)
    start = model.init_params(prepared, level, 1, 0)[0]
    assert start.hidden_weights.shape == (2, 3, 4) and start.output_weights.shape == (2, 2, 3)
    assert not np.allclose(start.hidden_weights[0], start.hidden_weights[1])
    assert model.init_params(prepared, level, 1, 0)[0].hidden_weights.tolist() == \
        start.hidden_weights.tolist()                           # deterministic from the seed
    params = start
    obj = acv.make_problem(model, prepared, params, level=level)
    # D = (K-1) + K(K-1) + K (H (R p + 1) + R (H + 1)) + K R (R + 1) / 2
    assert obj.u_full.shape == (1 + 2 + 2 * (3 * 5 + 2 * 4) + 2 * 3,)
    g = engine.gradient(obj.fun, obj.u_full, jnp.ones(n), obj.data)
    assert np.all(np.isfinite(np.asarray(g)))
    # jitted evaluations: one program each, not dozens of eagerly compiled operations
    f1 = float(obj.fun(obj.u_full, jnp.ones(3), obj.data))
    lls, prior = jax.jit(lambda p, d: (model.sequence_log_likelihoods(p, d),
                                       model.log_prior(p, d)))(params, prepared)
    np.testing.assert_allclose(f1, -float(np.sum(lls)) - float(prior), rtol=1e-12)
    # means against a direct NumPy evaluation of W2 tanh(W1 s + c1) + c2
    x = seqs[0]
    s = np.concatenate([np.vstack([np.zeros((l, 2)), x[:-l]]) for l in (1, 2)], axis=1)
    means = np.asarray(model._state_means(params, jnp.asarray(s)))
    k = 1
    direct = np.tanh(s @ params.hidden_weights[k].T + params.hidden_biases[k]) @ \
        params.output_weights[k].T + params.output_biases[k]
    np.testing.assert_allclose(means[:, k], direct, rtol=1e-12)
    # within one sequence, w = 1 gives the same objective under schemes A and B
    w = np.ones(30)
    one = model.prepare(seqs[0])[0]
    fa, fb = (float(jax.jit(lambda p, d, sc=sc: model.objective(p, d, w, sc))(params, one))
              for sc in "AB")
    np.testing.assert_allclose(fa, fb, rtol=1e-12)


# ---------------------------------------------------------------- errors
@pytest.mark.parametrize("data,err,match", [
    ([np.zeros((3, 2)), np.ones((10, 2))], InvalidDataError, r"data\[0\].*order=3"),
    ([np.ones((10, 2)), np.ones((10, 3))], InvalidDataError, r"data\[1\].*channel"),
    ([np.ones((10, 2)), np.full((10, 2), np.nan)], InvalidDataError, r"data\[1\].*NaN"),
    (["abc", np.ones((10, 2))], ArgumentTypeError, r"data\[0\]"),
])
def test_bad_sequences_are_rejected_with_named_errors(data, err, match):
    with pytest.raises(err, match=match):
        acv.models.ARHMM(2, order=3).prepare(data)


def test_invalid_hyperparameters():
    with pytest.raises(InvalidArgumentError, match="order"):
        acv.models.ARHMM(2, order=-1)
    with pytest.raises(InvalidArgumentError, match="covariance"):
        acv.models.ARHMM(2, covariance="spherical")
    with pytest.raises(InvalidArgumentError, match="weight_prior"):
        acv.models.ARHMM(2, weight_prior="laplace")
    with pytest.raises(InvalidArgumentError, match="order"):
        acv.models.NeuralARHMM(2, order=0)
    with pytest.raises(InvalidArgumentError, match="hidden"):
        acv.models.NeuralARHMM(2, hidden=0)
    x = np.random.default_rng(0).normal(size=(20, 3))
    with pytest.raises(InvalidArgumentError, match=r"`cov_dof` must exceed R - 1 = 2"):
        acv.models.ARHMM(2, cov_dof=1.5).prepare(x)
    acv.models.ARHMM(2, cov_dof=2.5).prepare(x)


# ---------------------------------------------------------------- data
def test_load_basic_motions():
    data = acv.datasets.load_basic_motions()
    assert "basic_motions" in acv.datasets.available()
    assert len(data.sequences) == 80 and all(s.shape == (100, 6) for s in data.sequences)
    assert data.class_names == ("Standing", "Running", "Walking", "Badminton")
    assert np.bincount(data.labels).tolist() == [20] * 4
    assert data.is_train[:40].all() and not data.is_train[40:].any()
    assert data.class_names[data.labels[0]] == "Standing"
    np.testing.assert_allclose(data.sequences[0][0, :2], [0.079106, 0.394032])
    z = np.concatenate(acv.datasets.load_basic_motions(standardize=True).sequences)
    np.testing.assert_allclose(z.mean(0), 0, atol=1e-12)
    np.testing.assert_allclose(z.std(0), 1, rtol=1e-12)
    data.sequences[0][:] = 0.0  # fresh copies
    assert acv.datasets.load_basic_motions().sequences[0][0, 0] != 0.0


@pytest.mark.parametrize("order", [0, 1, 3])
def test_host_lag_features_are_the_models_features(order):
    """The starts' NumPy lag features (``lagged_features``) equal what the model's programs
    use (``features``), for every autoregressive family."""
    from approxcv.models.hmm.arhmm import lagged_features
    x = np.random.default_rng(order).normal(size=(2, 9, 2))
    for model in (acv.models.ARHMM(2, order=order),
                  acv.models.NeuralARHMM(2, order=max(order, 1))):
        expected = np.asarray(jax.vmap(model.features)(x))
        np.testing.assert_array_equal(lagged_features(x, model.order), expected)
