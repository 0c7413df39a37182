"""Causes of issue 37 in the GP LOO, one test each, on tiny synthetic data reproducing each
failure; hyperparameters fixed (one supplied draw) so nothing runs type-II MAP.

- options: every numeric option of the GP refused by name (``damping=0`` was accepted and
  EP "converged" after one sweep at the prior);
- tilted moments: Poisson counts up to 80 under a wide cavity (the mode search stopped at
  ``f ~ 17`` for ``y = 30``; mean 17.7, variance 0);
- EP: counts 0..80 converge to a finite fixed point, checked by one more undamped update;
- exact refits: refits started with the left-out ``a_i = 0`` stopped unconverged on counts
  0..80; from the full mode (then cold) every one converges, and agrees with LA/EP-LOO;
- estimators: Q-LOO / TQ-LOO far from refits are flagged, with a warning;
- repeated inputs: Student-t Laplace converges (jittered ``K``, the jitter recorded);
- refit-only options given to a fast method raise.
"""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

import approxcv as acv
from approxcv.inference.latent_gaussian import likelihoods as L
from approxcv.models.gp import refits
from approxcv.inference.latent_gaussian.covariance import kernel_matrix
from approxcv.inference.latent_gaussian.ep import ep_fit
from approxcv.inference.latent_gaussian.laplace import laplace_mode
from approxcv.inference.latent_gaussian.posterior import posteriors_at
from approxcv.inference.latent_gaussian.quadrature import tilted_moments
from approxcv.errors import InvalidArgumentError, UnreliableFoldWarning

N = 20
THETA_POISSON = np.array([np.log(4.0), np.log(0.1), np.log(4.0), 0.0])


def at(theta):
    """GP parameters at one fixed hyperparameter point."""
    return acv.models.GPParams(np.asarray(theta, float)[None], np.zeros(1))


def loo(model, X, y, theta, method, **kw):
    """Leave-one-out of ``model`` at fixed hyperparameters through cross_validate."""
    return acv.cross_validate(model, (X, y), acv.folds.leave_one_out(len(y)), method,
                              params=at(theta), progress=False, **kw)


@pytest.fixture(scope="module")
def counts():
    """Counts 0..80 on one input: the MASS ``quine`` range that broke EP and the refits."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, 1))
    y = np.round(np.linspace(0, 80, N))
    return X, y, {inf: acv.models.GP("poisson", inference=inf) for inf in ("laplace", "ep")}


@pytest.mark.parametrize("options", [dict(damping=0), dict(damping=1.5),
                                     dict(damping=float("nan")), dict(prior_sd=0.0),
                                     dict(prior_sd=float("inf")), dict(inference="vb"),
                                     dict(hyper="nuts"),
                                     dict(nu=-1.0), dict(likelihood="poison")])
def test_gp_numeric_options_are_refused_by_name(options):
    name = next(iter(options))
    with pytest.raises(InvalidArgumentError, match=name):
        acv.models.GP(**options)


def test_theta0_and_inner_options_are_refused_by_name():
    X, y = np.linspace(-1, 1, 6)[:, None], np.array([1., -1, 1, -1, 1, -1])
    with pytest.raises(InvalidArgumentError, match="theta0"):
        acv.models.GP("probit").fit((X, y), theta0=[0.0, 0.0, np.nan, 0.0])
    K, z = jnp.eye(3), jnp.zeros(3)
    lik, y3, phi = L.Probit(), jnp.array([1., -1, 1]), jnp.zeros(0)
    for kw, name in ((dict(damping=0.0), "damping"), (dict(tol=0.0), "tol"),
                     (dict(max_iter=0), "max_iter"), (dict(eta=2.0), "eta")):
        with pytest.raises(InvalidArgumentError, match=name):
            ep_fit(K, y3, lik, phi, jnp.ones(3), z, z, **kw)
    with pytest.raises(InvalidArgumentError, match="max_iter"):
        laplace_mode(K, y3, lik, phi, jnp.ones(3), z, max_iter=0)


def _scipy_tilted(y, m, v, centre):
    def g(f, k):
        return f ** k * np.exp(stats.poisson.logpmf(y, np.exp(f))
                               + stats.norm.logpdf(f, m, np.sqrt(v)))
    z, m1, m2 = (integrate.quad(g, centre - 8, centre + 8, args=(k,), limit=400)[0]
                 for k in range(3))
    return np.log(z), m1 / z, m2 / z - (m1 / z) ** 2


def test_poisson_tilted_moments_of_large_counts_equal_scipy_integrals():
    y, m, v = np.array([30.0, 81.0, 30.0]), np.array([0.0, -2.0, 0.0]), np.array([100., 400, 1])
    got = np.asarray(tilted_moments(L.Poisson(), jnp.asarray(y), jnp.zeros(0), jnp.asarray(m),
                                    jnp.asarray(v)))
    for i in range(3):
        ref = _scipy_tilted(y[i], m[i], v[i], np.log(y[i]))
        np.testing.assert_allclose(got[:, i], ref, rtol=1e-6)


def test_ep_on_large_counts_reaches_a_checked_fixed_point(counts):
    X, y, _ = counts
    post = posteriors_at(THETA_POISSON[None], jnp.asarray(X), jnp.asarray(y), L.Poisson(),
                         "ep", 0.5)
    post = jax.tree_util.tree_map(lambda a: a[0], post)
    assert bool(post.converged)
    assert np.all(np.isfinite(post.mean)) and np.all(post.var > 0)
    # one more sweep from the reported sites moves none of them: a fixed point
    K = kernel_matrix(jnp.asarray(THETA_POISSON), jnp.asarray(X))
    again = ep_fit(K, jnp.asarray(y), L.Poisson(), jnp.zeros(0), jnp.ones(N), post.tau,
                   post.nu, damping=1.0, max_iter=1)
    np.testing.assert_allclose(np.asarray(again.tau), np.asarray(post.tau), rtol=1e-6)
    # a run stopped after one sweep from the prior is not reported converged
    one = ep_fit(K, jnp.asarray(y), L.Poisson(), jnp.zeros(0), jnp.ones(N),
                 jnp.zeros(N), jnp.zeros(N), damping=0.5, max_iter=1)
    assert not bool(one.converged)


def test_exact_refits_converge_where_a_zeroed_start_did_not(counts):
    X, y, models = counts
    res = loo(models["laplace"], X, y, THETA_POISSON, "exact", warn=False)
    assert res.diagnostics["exact_converged"].all() and np.all(np.isfinite(res.fold_loss))
    assert len(res.diagnostics["unreliable_folds"]) == 0
    # the old start (full a with the left-out a_i = 0) leaves refits unconverged here
    post = posteriors_at(THETA_POISSON[None], jnp.asarray(X), jnp.asarray(y), L.Poisson(),
                         "laplace", 0.5)
    warm = jnp.asarray(post.warm[0])
    rows = jnp.arange(N)
    old = jax.vmap(lambda i: refits._refit_rows(
        jnp.asarray(THETA_POISSON), jnp.asarray(X), jnp.asarray(y), i[None, None],
        warm.at[i].set(0.0), lik=L.Poisson(), inference="laplace", damping=0.5))(rows)
    assert not np.asarray(old[1]).all()
    # the reference agrees with the two cavity estimators (LA: 0.18 nats at most, measured)
    la = loo(models["laplace"], X, y, THETA_POISSON, "la", warn=False)
    ep_exact = loo(models["ep"], X, y, THETA_POISSON, "exact", warn=False)
    assert ep_exact.diagnostics["exact_converged"].all()
    ep = loo(models["ep"], X, y, THETA_POISSON, "ep", warn=False)
    assert np.max(np.abs(la.fold_loss - res.fold_loss)) < 1.0
    assert np.max(np.abs(ep.fold_loss - ep_exact.fold_loss)) < 0.5
    # LA-LOO / EP-LOO points off their refits by more than 0.15 nats (LA: up to 0.18,
    # measured; the largest error at an unflagged point is EP's 0.11) are flagged: the
    # other sites move with the point left out
    for fast, ref in ((la, res), (ep, ep_exact)):
        far = np.flatnonzero(np.abs(fast.fold_loss - ref.fold_loss) > 0.15)
        assert set(far) <= set(fast.diagnostics["unreliable_causes"]["site_shift"])
        assert len(fast.diagnostics["unreliable_folds"]) < N // 2     # not every point
    assert len(np.flatnonzero(np.abs(la.fold_loss - res.fold_loss) > 0.15)) > 0


@pytest.mark.parametrize("method", ["q", "tq"])
def test_q_and_tq_points_far_from_refits_are_flagged_with_a_warning(counts, method):
    X, y, models = counts
    ref = loo(models["laplace"], X, y, THETA_POISSON, "exact", warn=False).fold_loss
    with pytest.warns(UnreliableFoldWarning, match=f"{method}: "):
        res = loo(models["laplace"], X, y, THETA_POISSON, method)
    far = np.flatnonzero(np.abs(res.fold_loss - ref) > 0.5)
    assert len(far) > 0                                  # the estimator is off somewhere
    assert set(far) <= set(res.diagnostics["unreliable_folds"].tolist())
    assert "pareto_k_marginal" in res.diagnostics


def test_probit_q_loo_far_off_is_flagged():
    """A probit GP with a large signal variance (MASS ``crabs``-like): Q-LOO off by hundreds
    of nats per point; every point off by more than 0.5 nats is flagged."""
    rng = np.random.default_rng(1)
    n = 24
    X = rng.normal(size=(n, 2))
    y = np.where(np.sin(1.5 * X[:, 0]) + 0.5 * X[:, 1] + 0.5 * rng.normal(size=n) > 0, 1., -1.)
    theta = np.log([0.5, 0.2, 45.0, 0.3, 0.4])
    model = acv.models.GP("probit")
    ref = loo(model, X, y, theta, "exact", exact_batch_size=n)
    assert ref.diagnostics["exact_converged"].all()
    for method in ("q", "tq"):
        res = loo(model, X, y, theta, method, warn=False)
        far = np.flatnonzero(np.abs(res.fold_loss - ref.fold_loss) > 0.5)
        assert len(far) > 0, method                      # reproduces the failure
        assert set(far) <= set(res.diagnostics["unreliable_folds"].tolist()), method
    assert abs(loo(model, X, y, theta, "la", warn=False).elpd - ref.elpd) < 1.0


def test_student_t_laplace_converges_on_repeated_inputs():
    rng = np.random.default_rng(0)
    x = np.repeat(rng.normal(size=8), 3)                # 8 distinct inputs of 24
    y = np.sin(2 * x) + 0.1 * rng.normal(size=24)
    y[[2, 9]] += [3.0, -4.0]
    theta = np.array([np.log(0.1), np.log(0.1), 0.0, np.log(0.7), np.log(0.1)])
    K = kernel_matrix(jnp.asarray(theta[:4]), jnp.asarray(x[:, None]))
    assert not np.all(np.isfinite(np.asarray(jnp.linalg.cholesky(K))))   # singular K
    post = posteriors_at(theta[None], jnp.asarray(x[:, None]), jnp.asarray(y),
                         L.StudentT(4.0), "laplace", 0.5)
    assert bool(post.converged[0]) and int(post.iterations[0]) <= 10
    assert 0 < float(post.jitter[0]) < 1e-6 * float(jnp.mean(jnp.diag(K)))
    # the mode: a small gradient of Psi for the jittered K
    Kj = np.asarray(K) + float(post.jitter[0]) * np.eye(24)
    f = np.asarray(post.mean[0])
    r = y - f
    g = 5.0 * r / (4.0 * 0.01 + r ** 2)
    assert np.max(np.abs(g - np.asarray(post.warm[0]))) < 1e-5 * (1 + np.abs(g).max())
    np.testing.assert_allclose(Kj @ np.asarray(post.warm[0]), f, atol=1e-8)


def test_refit_options_refused_by_fast_methods(counts, tmp_path):
    X, y, models = counts
    for kw in (dict(checkpoint=tmp_path / "c"), dict(restarts=2)):
        with pytest.raises(InvalidArgumentError, match="refit folds"):
            loo(models["laplace"], X, y, THETA_POISSON, "la", **kw)
    with pytest.raises(InvalidArgumentError, match="exact_batch_size"):
        loo(models["laplace"], X, y, THETA_POISSON, "exact", exact_batch_size=0)


def test_loo_warns_and_lists_points_it_cannot_vouch_for():
    """Repeated inputs with different targets and a noise sd of 1e-5: the full-data
    posterior's cavities are wider than the prior (digits lost); cross_validate says so in a
    warning, for the closed-form exact as for LA."""
    rng = np.random.default_rng(0)
    x = np.repeat(rng.normal(size=8), 3)
    y = np.sin(2 * x) + 0.3 * rng.normal(size=24)
    theta = np.array([np.log(0.1), np.log(0.1), 0.0, np.log(0.7), np.log(1e-5)])
    model = acv.models.GP("gaussian")
    for method in ("exact", "la"):
        with pytest.warns(UnreliableFoldWarning, match="24 of 24 folds are unreliable"):
            res = loo(model, x[:, None], y, theta, method)
        assert len(res.diagnostics["unreliable_folds"]) == 24
