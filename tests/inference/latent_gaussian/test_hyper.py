"""Type-II MAP, CCD points and importance weighting over hyperparameter points."""
import numpy as np
import pytest
from scipy import stats
from scipy.special import logsumexp

import approxcv as acv
from approxcv.inference.latent_gaussian.covariance import kernel_matrix
from approxcv.inference.latent_gaussian.importance import combine_points
from approxcv.inference.latent_gaussian.posterior import posteriors_at

N = 14


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(N, 1))
    return X, np.sin(2 * X[:, 0]) + 0.2 * rng.normal(size=N)


def _log_ml(X, y, theta, drop=None):
    """Exact Gaussian log marginal likelihood (NumPy), optionally without point ``drop``."""
    keep = np.arange(len(y)) != drop
    K = np.asarray(kernel_matrix(theta[:4], X))[np.ix_(keep, keep)]
    return stats.multivariate_normal(np.zeros(keep.sum()),
                                     K + np.exp(2 * theta[4]) * np.eye(keep.sum())
                                     ).logpdf(y[keep])


@pytest.fixture(scope="module")
def ccd_fit(data):
    X, y = data
    model = acv.models.GP("gaussian", prior_sd=3.0, hyper="ccd")
    return model, model.fit(data)


def test_map_maximises_the_exact_log_posterior(data, ccd_fit):
    """Laplace is exact for the Gaussian likelihood, so the fit's log marginal equals the
    closed form, and the MAP is a stationary point of the closed-form log posterior."""
    X, y = data
    model, params = ccd_fit
    theta = params.theta[0]
    post = posteriors_at(theta[None], X, y, model.lik, "laplace", 0.5)
    assert float(post.log_marginal[0]) == pytest.approx(_log_ml(X, y, theta), abs=1e-8)

    def log_post(t):
        return _log_ml(X, y, t) + stats.norm(0, 3).logpdf(t).sum()
    h = 1e-5
    grad = [(log_post(theta + h * e) - log_post(theta - h * e)) / (2 * h) for e in np.eye(5)]
    assert np.max(np.abs(grad)) < 1e-4


def test_ccd_design_and_weights(ccd_fit):
    _, params = ccd_fit
    p = 5                                          # 3 kernel variances, 1 scale, noise
    weights = np.exp(params.log_weights)
    assert len(params.theta) == 1 + 2 * p + 2 ** (p - 1)
    assert weights.sum() == pytest.approx(1.0)
    assert np.argmax(weights) == 0                  # the mode carries the largest weight


def _loo(data, ccd_fit, method):
    model, params = ccd_fit
    return acv.cross_validate(model, data, acv.folds.leave_one_out(N), method, params=params,
                              progress=False)


def test_importance_weighting_over_points_is_exact_hierarchical_loo(data, ccd_fit):
    """With exact conditional LOO densities, eq. 44 equals the mixture over the points
    with weights recomputed from the marginal likelihoods without y_i (deletion)."""
    X, y = data
    _, params = ccd_fit
    res = _loo(data, ccd_fit, "exact")
    lpd_s = np.array([[_log_ml(X, y, t) - _log_ml(X, y, t, drop=i) for i in range(N)]
                      for t in params.theta])
    logw = params.log_weights[:, None] - lpd_s            # w_s p(y_-i|th) / p(y|th)
    expected = logsumexp(logw - logsumexp(logw, 0) + lpd_s, 0)
    np.testing.assert_allclose(-res.fold_loss, expected, rtol=0, atol=1e-8)
    assert res.diagnostics["ess"].shape == (N, 1)
    # heldout_loss (refits from a cold start) combines the points the same way
    model, _ = ccd_fit
    w = np.ones(N)
    w[3] = 0.0
    fold = model.heldout_loss(params, model.prepare(data)[0], w)[0]
    assert float(fold) == pytest.approx(-expected[3], abs=1e-8)


def test_is_loo_reports_pareto_k_and_ess(data, ccd_fit):
    res = _loo(data, ccd_fit, "is")
    k, ess = res.diagnostics["pareto_k"], res.diagnostics["ess"]
    assert k.shape == (N,) and np.all(np.isfinite(k))
    assert np.all((ess >= 1) & (ess <= len(ccd_fit[1].theta)))
    np.testing.assert_array_equal(res.diagnostics["unreliable_causes"].get("pareto_k", []),
                                  np.flatnonzero(k > 0.7))


def test_pareto_smoothing_equals_arviz_stats_loo():
    """IS-LOO over S shared posterior draws of log p(y_i | theta_s) with equal weights is
    arviz-stats' PSIS-LOO on the same draws: same elpd_i and k_hat."""
    import arviz_base
    import arviz_stats
    rng = np.random.default_rng(7)
    S, n = 400, 9
    log_lik = stats.t(3).logpdf(rng.normal(size=n)[None] + 0.8 * rng.standard_t(
        3, size=(S, n)))
    lpd, k, _ = combine_points(log_lik, np.full(S, 1.0 / S), smooth=True)
    tree = arviz_base.from_dict({"posterior": {"mu": rng.normal(size=(1, S))},
                                 "log_likelihood": {"y": log_lik[None]},
                                 "observed_data": {"y": np.zeros(n)}})
    ref = arviz_stats.loo(tree, pointwise=True, reff=1.0)
    np.testing.assert_allclose(lpd, np.asarray(ref.elpd_i).ravel(), rtol=1e-10)
    np.testing.assert_allclose(k, np.asarray(ref.pareto_k).ravel(), rtol=1e-10)
