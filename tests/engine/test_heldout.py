"""Folds that remove more than they score (``Folds(scored=)``, ``leave_future_out(horizon=)``,
``hblock``, ``neighbourhood(buffer=)``): the held-out loss ``-log p(x_S | x_K)`` of
:func:`approxcv.engine.heldout.heldout_losses` against refits by hand and the loss written
here (forward algorithm, enumeration, closed forms) with NumPy/SciPy; IJ and NS within a few
% of exact or flagged."""
import itertools
import warnings

import jax.numpy as jnp
import jax.scipy.stats as jst
import numpy as np
import pytest
from scipy import special, stats

import approxcv as acv
from approxcv.engine import error_estimate
from approxcv.optim import batched_newton_minimize
from tests.conftest import simulate_poisson_hmm

#: approximate folds must be within this of exact, or flagged unreliable
APPROX_RTOL = 0.03


def refit(problem, folds):
    """Exact minimisers of the model's weighted objective with zero weights on every fold's
    removed units (damped Newton from the fit), as constrained parameters."""
    w = np.ones((len(folds), problem.n_units))
    for i in range(len(folds)):
        w[i, folds[i]] = 0.0
    solve = batched_newton_minimize(problem.fun, problem.scale, 100)
    res = solve(jnp.tile(problem.u_full, (len(folds), 1)), jnp.asarray(w), problem.data)
    assert np.asarray(res.converged).all()
    return np.asarray(res.u), problem.unravel(np.asarray(res.u))


def check_approximations(model, data, folds, exact, **kw):
    """IJ and NS fold losses within :data:`APPROX_RTOL` of ``exact`` or flagged; returns
    the largest errors of the unflagged folds."""
    worst = {}
    for m in ("ij", "ns"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            r = acv.cross_validate(model, data, folds, m, progress=False, **kw)
        err = np.abs(r.fold_loss - exact.fold_loss) / np.abs(exact.fold_loss)
        assert np.all((err <= APPROX_RTOL) | r.unreliable), (m, err, r.unreliable)
        assert np.all(np.isfinite(r.diagnostics["error_estimate"])
                      | r.unreliable), m
        worst[m] = float(np.max(err[~r.unreliable], initial=0.0))
    return worst


# ------------------------------------------------------------------------- PoissonHMM

T_HMM = 60


@pytest.fixture(scope="module")
def hmm():
    """The table test's PoissonHMM (shapes shared with tests/test_protocol.py)."""
    model = acv.models.PoissonHMM(2, n_init=1)
    x = simulate_poisson_hmm(T_HMM, seed=1)
    return model, x, model.fit(x)


def hmm_log_marginal(p, x, observed):
    """``log p(x_observed)`` of a Poisson HMM by the scaled forward algorithm, the steps
    not ``observed`` marginalised out (emission probability 1)."""
    init, trans, rates = (np.asarray(a, float)
                          for a in (p.initial_probs, p.transition_matrix, p.rates))
    lik = stats.poisson.pmf(x[:, None], rates[None, :])
    lik[~observed] = 1.0
    alpha, total = init * lik[0], 0.0
    for t in range(1, len(x) + 1):
        c = alpha.sum()
        total += np.log(c)
        if t < len(x):
            alpha = (alpha / c) @ trans * lik[t]
    return total


def hmm_scored_loss(p, x, removed, scored):
    """``-log p(x_S | x_K)``, ``K`` the complement of ``removed``."""
    kept = np.ones(len(x), bool)
    kept[removed] = False
    with_s = kept.copy()
    with_s[scored] = True
    return -(hmm_log_marginal(p, x, with_s) - hmm_log_marginal(p, x, kept))


def _row(params, i):
    return type(params)(*(np.asarray(a)[i] for a in params))


@pytest.mark.parametrize("scheme", ["A", "B"])
@pytest.mark.parametrize("kind", ["hblock", "horizon"])
def test_hmm_exact_equals_refit_and_forward_algorithm(hmm, scheme, kind):
    model, x, params = hmm
    folds = (acv.folds.hblock(T_HMM, 6, 2) if kind == "hblock"
             else acv.folds.leave_future_out(T_HMM, [30, 42, 54], horizon=3))
    assert folds.partial
    ex = acv.cross_validate(model, x, folds, "exact", params=params, scheme=scheme,
                            progress=False, restarts=0)
    assert not ex.unreliable.any()
    u, ref_params = refit(acv.make_problem(model, x, params, scheme=scheme), folds)
    ref = np.array([hmm_scored_loss(_row(ref_params, i), x, folds[i], folds.scored[i])
                    for i in range(len(folds))])
    np.testing.assert_allclose(ex.fold_loss, ref, rtol=5e-14)      # measured 3.1e-15
    # the point losses are the scored units', -log p(x_t | x_K) each
    assert [len(p) for p in ex.point_loss] == [len(s) for s in folds.scored]
    i = 1
    pts = [hmm_scored_loss(_row(ref_params, i), x, folds[i], [t]) for t in folds.scored[i]]
    np.testing.assert_allclose(ex.point_loss[i], pts, rtol=5e-14)
    # removing more than is scored changes the loss (the unscored units are not kept)
    plain = acv.cross_validate(model, x, acv.folds.Folds(folds.scored, T_HMM), "exact",
                               params=params, scheme=scheme, progress=False, restarts=0)
    assert np.all(np.abs(plain.fold_loss - ex.fold_loss) > 1e-4)
    worst = check_approximations(model, x, folds, ex, params=params, scheme=scheme)
    assert set(worst) == {"ij", "ns"}


def test_leave_future_out_horizon_one_is_one_step_ahead_prediction(hmm):
    """``horizon=1``: fold loss ``-log p(x_s | x_{<s})`` at the refit on ``x_{<s}``, by the
    filter's one-step prediction."""
    model, x, params = hmm
    starts = [20, 35, 50, 59]
    folds = acv.folds.leave_future_out(T_HMM, starts, horizon=1)
    ex = acv.cross_validate(model, x, folds, "exact", params=params, progress=False,
                            restarts=0)
    _, ref_params = refit(acv.make_problem(model, x, params), folds)
    for i, s in enumerate(starts):
        p = _row(ref_params, i)
        init, trans, rates = (np.asarray(a, float)
                          for a in (p.initial_probs, p.transition_matrix, p.rates))
        filt = init * stats.poisson.pmf(x[0], rates)
        filt /= filt.sum()
        for t in range(1, s):
            filt = (filt @ trans) * stats.poisson.pmf(x[t], rates)
            filt /= filt.sum()
        pred = filt @ trans                         # p(z_s | x_{<s})
        want = -np.log(pred @ stats.poisson.pmf(x[s], rates))
        np.testing.assert_allclose(ex.fold_loss[i], want, rtol=2e-13)   # measured 1.2e-14
        np.testing.assert_allclose(ex.point_loss[i], [want], rtol=2e-13)
    # the last start removes and scores one unit: the same as leave_future_out without horizon
    whole = acv.cross_validate(model, x, acv.folds.leave_future_out(T_HMM, [59]), "exact",
                               params=params, progress=False, restarts=0)
    np.testing.assert_allclose(whole.fold_loss, ex.fold_loss[-1:], rtol=1e-10)


def test_auto_and_audit_score_the_scored_units(hmm):
    model, x, params = hmm
    folds = acv.folds.hblock(T_HMM, 6, 2)
    ex = acv.cross_validate(model, x, folds, "exact", params=params, progress=False,
                            restarts=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto = acv.cross_validate(model, x, folds, "auto", params=params, progress=False)
        ij = acv.cross_validate(model, x, folds, "ij", params=params, progress=False,
                                audit=3, in_sample=True)
    err = np.abs(auto.fold_loss - ex.fold_loss) / np.abs(ex.fold_loss)
    assert np.all((err <= APPROX_RTOL) | auto.unreliable), err
    np.testing.assert_allclose(ij.diagnostics["audit"]["exact_fold_loss"],
                               ex.fold_loss[np.isin(ex.fold_ids, ij.diagnostics["audit"]
                                                    ["folds"])], rtol=1e-10)
    assert ij.diagnostics["lpd_full"].shape == (T_HMM,)        # one per scored unit
    assert ij.elpd_unit == "point"                             # h-block scores a partition
    frame = ij.to_frame()
    np.testing.assert_array_equal(frame["unit"], np.arange(T_HMM))
    assert ij.to_arviz().elpd_i.shape == (T_HMM,)


# ------------------------------------------------------------------------ i.i.d. model


def _gauss_loglik(p, u):
    return jst.norm.logpdf(u["y"], p["mu"], p["sigma"])


@pytest.fixture(scope="module")
def iid():
    y = np.random.default_rng(3).normal(1.0, 2.0, size=30)
    model = acv.models.Pointwise(_gauss_loglik, init={"mu": 0.0, "sigma": 1.0},
                                 constraints={"sigma": "positive"})
    return model, {"y": y}, model.fit({"y": y})


@pytest.mark.parametrize("kind", ["hblock", "horizon", "scored"])
def test_iid_exact_is_the_closed_form_refit(iid, kind):
    """A Gaussian's MLE on the kept units (mean, standard deviation): the fold loss is the
    scored units' negative log densities only."""
    model, data, params = iid
    y = data["y"]
    n = len(y)
    if kind == "hblock":
        folds = acv.folds.hblock(n, 5, 2)
    elif kind == "horizon":
        folds = acv.folds.leave_future_out(n, [15, 22, 27], horizon=2)
    else:
        folds = acv.folds.Folds([np.arange(0, 8), [3, 10, 11, 20]], n,
                                scored=[[2, 5], [10]])
    ex = acv.cross_validate(model, data, folds, "exact", params=params, progress=False,
                            restarts=0)
    for i in range(len(folds)):
        kept = np.setdiff1d(np.arange(n), folds[i])
        mu, sd = y[kept].mean(), y[kept].std()
        pts = -stats.norm.logpdf(y[folds.scored[i]], mu, sd)
        np.testing.assert_allclose(ex.point_loss[i], pts, rtol=2e-14)    # measured 1.3e-15
        np.testing.assert_allclose(ex.fold_loss[i], pts.sum(), rtol=2e-14)
    check_approximations(model, data, folds, ex, params=params)


def test_iid_matrix_free_ij_and_ridge_newton_step_on_partial_folds(iid, monkeypatch):
    """The matrix-free IJ equals the dense one on partial folds; ridge's NS (the GLM fast
    path, exact for a quadratic objective) equals its exact refits, and its fold loss is the
    scored samples' losses only. The dense estimate's second round for slow folds
    (``error_estimate.SLOW_RATE``) has no matrix-free counterpart yet, so it is switched
    off here: the test compares the same two chord steps, solved two ways."""
    monkeypatch.setattr(error_estimate, "SLOW_RATE", np.inf)
    model, data, params = iid
    folds = acv.folds.hblock(len(data["y"]), 5, 2)
    kw = dict(params=params, progress=False, warn=False)
    dense = acv.cross_validate(model, data, folds, "ij", **kw)
    cg = acv.cross_validate(model, data, folds, "ij", solver="cg", cg_rtol=1e-12, **kw)
    np.testing.assert_allclose(cg.fold_loss, dense.fold_loss, rtol=1e-14)     # 3.0e-16
    np.testing.assert_allclose(cg.error_estimate, dense.error_estimate, rtol=1e-12)  # 4e-14
    rng = np.random.default_rng(5)
    X = rng.normal(size=(40, 3))
    y = X @ np.array([1.0, -0.5, 0.25]) + 0.3 + 0.5 * rng.normal(size=40)
    ridge = acv.models.Ridge(1.0)
    folds = acv.folds.hblock(40, 8, 2)
    ns = acv.cross_validate(ridge, (X, y), folds, "ns", progress=False)
    ex = acv.cross_validate(ridge, (X, y), folds, "exact", progress=False, restarts=0)
    np.testing.assert_allclose(ns.fold_loss, ex.fold_loss, rtol=1e-14)        # 8.8e-16
    plain = acv.cross_validate(ridge, (X, y), acv.folds.Folds(list(folds), 40), "exact",
                               progress=False, restarts=0)
    np.testing.assert_allclose(ex.fold_loss,
                               [np.sum(plain.point_loss[i][np.isin(folds[i], folds.scored[i])])
                                for i in range(len(folds))], rtol=1e-14)  # 3.8e-16


# ----------------------------------------------------------------- hidden Potts model


def _potts_case():
    adj = np.zeros((8, 8), dtype=int)
    for s, t in [(0, 1), (1, 2), (2, 3), (3, 0), (2, 4), (4, 5), (5, 6), (6, 7), (7, 4),
                 (1, 5)]:
        adj[s, t] = adj[t, s] = 1
    x = np.random.default_rng(10).poisson([2, 2, 3, 2, 9, 8, 10, 9]).astype(float)
    return acv.models.HiddenPotts(adj, 2, beta=0.5, n_init=1), adj, x


def potts_log_marginal(rates, beta, adj, x, observed):
    """``log p(x_observed)`` by enumerating every latent configuration."""
    n, k = len(x), len(rates)
    edges = np.argwhere(np.triu(adj))
    logs = []
    for z in itertools.product(range(k), repeat=n):
        z = np.asarray(z)
        prior = beta * np.sum(z[edges[:, 0]] == z[edges[:, 1]])
        lik = np.sum(stats.poisson.logpmf(x[observed], rates[z[observed]]))
        logs.append((prior, lik))
    logs = np.array(logs)
    return special.logsumexp(logs[:, 0] + logs[:, 1]) - special.logsumexp(logs[:, 0])


def test_hidden_potts_buffered_neighbourhood_exact_equals_enumeration():
    model, adj, x = _potts_case()
    params = model.fit(x)
    folds = acv.folds.neighbourhood(adj, radius=0, centres=[0, 4, 6], buffer=1)
    assert [list(s) for s in folds.scored] == [[0], [4], [6]]
    ex = acv.cross_validate(model, x, folds, "exact", params=params, progress=False,
                            restarts=0)
    _, ref_params = refit(acv.make_problem(model, x, params), folds)
    for i in range(len(folds)):
        rates = np.asarray(ref_params.rates)[i]
        kept = np.ones(len(x), bool)
        kept[folds[i]] = False
        with_s = kept.copy()
        with_s[folds.scored[i]] = True
        want = -(potts_log_marginal(rates, 0.5, adj, x, with_s)
                 - potts_log_marginal(rates, 0.5, adj, x, kept))
        np.testing.assert_allclose(ex.fold_loss[i], want, rtol=1e-14)   # measured 3.4e-16
        np.testing.assert_allclose(ex.point_loss[i], [want], rtol=1e-14)
    check_approximations(model, x, folds, ex, params=params)


