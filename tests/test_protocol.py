"""The table test (docs/design.md, "How to add"): every model class through fit -> IJ -> NS -> exact on a tiny
problem, plus the protocol's invariants; user-registered methods; unreliable folds."""
import warnings

import arviz_stats
import jax
import jax.numpy as jnp
import numpy as np
import pytest

import approxcv as acv
from approxcv import engine
from approxcv.errors import (ArgumentTypeError, InvalidArgumentError, UnreliableFoldWarning)
from approxcv.models import constraints as C
from approxcv.models.base import Model, left_out
from approxcv.optim import batched_minimize
import jax.scipy.stats as jst

from tests.conftest import fit_derivatives, simulate_gaussian_hmm, simulate_poisson_hmm


def _regression(seed, n=40, p=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    return X, X @ np.array([1.0, -0.5, 0.25])[:p] + 0.3


def _arhmm_series(T, seed):
    rng = np.random.default_rng(seed)
    x = np.zeros((T, 2))
    for t in range(1, T):
        x[t] = (0.5 if (t // 15) % 2 else -0.3) * x[t - 1] + rng.normal(size=2) * 0.5
    return x


def _gauss_loglik(p, u):
    return jst.norm.logpdf(u["y"], p["mu"], p["sigma"])


def _case(name):
    """``(model, data, level)`` of one row of the table, tiny and fast."""
    m = acv.models
    if name == "PoissonHMM":
        return m.PoissonHMM(2, n_init=1), simulate_poisson_hmm(60, seed=1), None
    if name == "GaussianHMM":
        return m.GaussianHMM(2, n_init=1), simulate_gaussian_hmm(60, seed=2), None
    if name == "GaussianHMM-AR1":
        return m.GaussianHMM(2, ar_order=1, n_init=1), simulate_gaussian_hmm(60, 1, 3, 0.3), None
    if name == "CategoricalHMM":
        x = np.minimum(simulate_poisson_hmm(150, rates=(0.5, 3.0), seed=4), 2).astype(int)
        return m.CategoricalHMM(2, n_symbols=3, n_init=1), x, None
    if name == "ARHMM":
        return m.ARHMM(2, order=1, n_init=1), _arhmm_series(120, 5), None
    if name == "ARHMM-sequences":
        return (m.ARHMM(1, order=1, n_init=1, covariance="diag"),
                [_arhmm_series(20, s) for s in range(4)], "structure")
    if name == "NeuralARHMM":
        # a 2-dim switching AR(1) series; its time steps are the units
        return m.NeuralARHMM(2, order=1, hidden=2, n_init=1), _arhmm_series(80, 20), None
    if name == "Pointwise":
        # a Gaussian from its log density in JAX (the shapes of tests/engine/test_heldout.py)
        y = np.random.default_rng(3).normal(1.0, 2.0, size=30)
        return (m.Pointwise(_gauss_loglik, init={"mu": 0.0, "sigma": 1.0},
                            constraints={"sigma": "positive"}), {"y": y}, None)
    if name == "TimeVaryingPoisson":
        rng = np.random.default_rng(6)
        t = np.arange(72)
        x = rng.poisson(5 * (1 + 0.5 * np.sin(2 * np.pi * (t % 12) / 12)))
        return (m.TimeVaryingPoisson(slots_per_day=12, days_per_week=2, n_init=1), x, None)
    if name.startswith("LinearChainCRF"):
        rng = np.random.default_rng(9)
        w = rng.normal(size=(3, 3)) * 1.5
        xs = [rng.normal(size=(int(t), 3)) for t in rng.integers(2, 8, size=24)]
        sents = [(x, np.argmax(x @ w + rng.gumbel(size=(len(x), 3)), 1)) for x in xs]
        return (m.LinearChainCRF(3), sents,
                "within" if name.endswith("within") else "structure")
    if name == "HiddenPotts":
        adj = np.zeros((8, 8), dtype=int)
        for s, t in [(0, 1), (1, 2), (2, 3), (3, 0), (2, 4), (4, 5), (5, 6), (6, 7), (7, 4),
                     (1, 5)]:
            adj[s, t] = adj[t, s] = 1
        x = np.random.default_rng(10).poisson([2, 2, 3, 2, 9, 8, 10, 9]).astype(float)
        return m.HiddenPotts(adj, 2, beta=0.5, n_init=1), x, None
    if name == "SCL-PL1":
        # stochastic composite likelihood: the 4-node machine and half-selected PL1 policy
        # of tests/composite (same shapes: the compiled programs are shared)
        import approxcv.composite as scl
        from tests.composite.conftest import THETA4
        bm = scl.BoltzmannMachine(4)
        policy = scl.Policy(scl.pseudo_likelihood(bm, 1), select=0.5)
        return scl.SCLModel(bm, policy, seed=1), bm.sample(THETA4, 150, seed=3), None
    if name.startswith("GP-"):
        # one input, 24 points: a latent sine; probit labels 0/1 (as Logistic takes them)
        rng = np.random.default_rng(11)
        X = rng.normal(size=(24, 1))
        latent = np.sin(2 * X[:, 0])
        if name == "GP-gaussian":
            return m.GP("gaussian"), (X, latent + 0.3 * rng.normal(size=24)), None
        y = (latent + 0.4 * rng.normal(size=24) > 0).astype(float)
        return m.GP("probit", inference=name.rpartition("-")[2]), (X, y), None
    X, y = _regression(7)
    if name == "Ridge":
        return m.Ridge(1.0), (X, y), None
    if name == "Logistic":
        return m.Logistic(1.0), (X, (y > 0.3).astype(float)), None
    if name == "PoissonRegression":
        rng = np.random.default_rng(8)
        return m.PoissonRegression(1.0), (X, rng.poisson(np.exp(0.3 * X[:, 0]))), None
    if name == "ElasticNet":
        return m.ElasticNet(0.5, 0.5), (X, y), None
    raise ValueError(name)


MODELS = ["PoissonHMM", "GaussianHMM", "GaussianHMM-AR1", "CategoricalHMM", "ARHMM",
          "ARHMM-sequences", "NeuralARHMM", "Pointwise", "TimeVaryingPoisson", "Ridge",
          "Logistic", "PoissonRegression", "ElasticNet", "LinearChainCRF",
          "LinearChainCRF-within", "HiddenPotts", "SCL-PL1", "GP-probit-laplace", "GP-probit-ep",
          "GP-gaussian"]
#: models that compute their own methods (``Model.own_estimators``): a GP holds its
#: hyperparameters at the full-data fit and refuses "ij"/"ns", so it has its own table test
#: (test_fit_own_methods_exact_agree)
OWN_METHODS = ("GP-probit-laplace", "GP-probit-ep", "GP-gaussian")


def fit_gradient(problem, name):
    """``dF/du`` at the fit, ``w = 1``: from the IJ's compiled ``(F, g, H, J)`` sweep (the
    fit's polish or the table test's IJ on this row built it) where the model has no
    methods of its own; a GP's from the gradient alone (no sweep was compiled for it)."""
    if name in OWN_METHODS:
        return engine.gradient(problem.fun, problem.u_full, np.ones(problem.n_units),
                               problem.data)
    return fit_derivatives(problem)[1]


@pytest.fixture(scope="module", params=MODELS)
def row(request):
    model, data, level = _case(request.param)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params = model.fit(data, level) if level else model.fit(data)
    return request.param, model, data, level, params


#: rows whose IJ/NS-vs-exact agreement is tested more strictly elsewhere (point and fold
#: errors and NS's parameters on multi-unit folds:
#: tests/models/hmm/test_hmm.py::test_ij_ns_exact_agree_on_small_folds), left out here to
#: keep the suite within its time budget
AGREE_ELSEWHERE = ("PoissonHMM", "GaussianHMM", "GaussianHMM-AR1", "CategoricalHMM")


@pytest.mark.parametrize("row", [m for m in MODELS
                                 if m not in AGREE_ELSEWHERE + OWN_METHODS], indirect=True)
def test_fit_ij_ns_exact_agree(row):
    name, model, data, level, params = row
    n = model.prepare(data, level)[2]
    # interior units: next to the start of a single series the initial distribution is
    # estimated from one time step, and removing it is far from infinitesimal
    folds = acv.folds.Folds([[n // 4], [n // 2], [(3 * n) // 4]], n)
    kw = dict(params=params, level=level, progress=False, warn=False)
    res = {m: acv.cross_validate(model, data, folds, m, **kw, **(
        {"restarts": 0} if m == "exact" else {})) for m in ("ij", "ns", "exact", "auto")}
    assert res["exact"].diagnostics["exact_converged"].all(), name
    for m in ("ij", "ns", "auto"):
        rel = np.abs(res[m].fold_loss - res["exact"].fold_loss) / np.abs(res["exact"].fold_loss)
        # one unit out of tens: NS is within a few per cent of a refit; so is the IJ on
        # every fold it vouches for (CRF labels: the IJ's shift grows as 1/p(label), and
        # its error estimate lists those folds)
        vouched = ~res[m].unreliable
        assert np.all(rel[vouched] < 0.1), (name, m, rel)
        assert m == "ij" or np.all(rel < 0.1), (name, m, rel)
        # auto: every fold it vouches for within its tol (1 %) of the refit, or refitted
        assert m != "auto" or np.all(rel[vouched] <= 0.011), (name, rel)
        assert res[m].params_flat.shape == res["exact"].params_flat.shape, (name, m)
    # every family's results are compared by ArviZ (the HMMs and GPs in tests/models/gp/test_result.py)
    table = arviz_stats.compare({m: r.to_arviz() for m, r in res.items()})
    assert sorted(table.index) == ["auto", "exact", "ij", "ns"], name
    np.testing.assert_allclose(table.loc["exact", "elpd"],
                               -np.sum(np.concatenate(res["exact"].point_loss)), rtol=1e-12)


@pytest.mark.parametrize("row", OWN_METHODS, indirect=True)
def test_fit_own_methods_exact_agree(row):
    """The table test of a model with its own methods (a GP): fit -> every method it
    supports -> exact on a few folds, with the invariants of test_fit_ij_ns_exact_agree;
    the methods it does not support are refused by name."""
    name, model, data, level, params = row
    n = model.prepare(data, level)[2]
    folds = acv.folds.Folds([[n // 4], [n // 2], [(3 * n) // 4]], n)
    kw = dict(params=params, level=level, progress=False, warn=False)
    own = sorted(model.own_estimators(params, model.prepare(data)[0]))
    assert "exact" in own and "auto" in own
    for m in ("ij", "ns"):
        with pytest.raises(acv.errors.UnsupportedMethodError, match=m):
            acv.cross_validate(model, data, folds, m, **kw)
    with pytest.raises(acv.errors.UnsupportedMethodError, match="hyper='ccd'"):
        acv.cross_validate(model, data, folds, "is", **kw)     # one hyperparameter point
    res = {m: acv.cross_validate(model, data, folds, m, **kw)
           for m in own if m != "is"}
    exact = res["exact"]
    assert not exact.unreliable.any(), name
    for m, r in res.items():
        err = np.abs(r.fold_loss - exact.fold_loss)
        # one point out of 24: every estimate it vouches for is within 10 % of the refit,
        # or (a point's loss can be far below 1 nat) within 0.15 nats: q, tq and WAIC vouch
        # for a point within 0.1 nats of the cavity estimate (inference/latent_gaussian/estimators.py CHECK_TOL)
        ok = err <= np.maximum(0.1 * np.abs(exact.fold_loss), 0.15)
        assert np.all(ok[~r.unreliable]), (name, m, err, exact.fold_loss)
        assert r.params_flat.shape == exact.params_flat.shape, (name, m)
        np.testing.assert_array_equal(r.params_flat, exact.params_flat)   # theta held
    # auto: refits what its estimate flags, none left unreliable; every fold within 2 % of
    # its refit (the one-step estimate's recall of folds over tol = 1 % is measured in
    # tests/models/gp/test_flags.py and benchmarks/gp_flags.py; here EP's point of loss
    # 1.7 nats is 1.8 % off and estimated 1.0 %: the one miss, kept visible)
    rel = np.abs(res["auto"].fold_loss - exact.fold_loss) / np.abs(exact.fold_loss)
    assert np.all(rel <= 0.02) and not res["auto"].unreliable.any(), (name, rel)
    assert ("la" in res) != ("ep" in res), name              # the model's inference's own
    table = arviz_stats.compare({m: r.to_arviz() for m, r in res.items()})
    assert sorted(table.index) == sorted(res), name
    np.testing.assert_allclose(table.loc["exact", "elpd"],
                               -np.sum(np.concatenate(exact.point_loss)), rtol=1e-12)


def test_protocol_invariants(row):
    name, model, data, level, params = row
    prepared, level, n = model.prepare(data, level)
    # constraints round-trip
    back = model.constrain(model.unconstrain(params))
    for a, b in zip(jax.tree_util.tree_leaves(back), jax.tree_util.tree_leaves(params)):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-9, atol=1e-12)
    # the model's heldout_loss and objective as the engine calls them (problem.heldout and
    # problem.fun: the model's methods at the unravelled parameters, jitted, one program
    # each instead of dozens of eagerly compiled operations)
    problem = acv.make_problem(model, prepared, params, level=level)
    u, one_out = problem.u_full, problem.heldout
    n_all = problem.n_units          # the data's units, then the model's null padding units
    assert n_all >= n
    # a fold with nothing left out: fold loss 0 and no point losses
    fold, points = one_out(u, jnp.ones(n_all), problem.data)
    assert float(fold) == 0.0 and not np.any(np.asarray(points))
    # padding units are null: leaving them out costs nothing
    if n_all > n:
        fold, points = one_out(u, jnp.asarray(np.arange(n_all) < n, float), problem.data)
        assert float(fold) == 0.0, name
        np.testing.assert_allclose(np.asarray(points), 0.0, atol=1e-12, err_msg=name)
    # every left-out unit gets a finite loss, every kept one none
    w = np.ones(n_all)
    w[[0, n - 1]] = 0.0
    fold, points = one_out(u, jnp.asarray(w), problem.data)
    points = np.asarray(points)
    assert np.all(np.isfinite(points[w == 0])) and np.all(points[w == 1] == 0.0)
    # one unit out: its point loss is the fold loss (the engine relies on it for
    # leave-one-out, engine.batching)
    w[0] = 1.0
    fold, points = one_out(u, jnp.asarray(w), problem.data)
    np.testing.assert_allclose(np.asarray(points)[n - 1], float(fold), rtol=1e-8, err_msg=name)
    # the objective splits, F(u, w_o) = F(u, 1) - L_o(u), exactly where the model says so
    # (the IJ's screened error estimate relies on it): at a point off the fit, both schemes
    if name not in OWN_METHODS:
        v = u + 0.05 * jnp.cos(jnp.arange(u.shape[0]))
        w = np.ones(n_all)
        w[[1, n // 2]] = 0.0
        for scheme in ("A", "B"):
            p = acv.make_problem(model, prepared, params, level=level, scheme=scheme)
            lo = float(p.heldout(v, jnp.asarray(w), p.data)[0])
            gap = float(p.fun(v, jnp.ones(n_all), p.data) - p.fun(v, jnp.asarray(w), p.data))
            assert (abs(gap - lo) <= 1e-10 * max(1.0, abs(lo))) == p.splits, (name, scheme)
    # w = 1 reproduces the fit: the fit is stationary for the weighted objective at unit
    # weights (the fits stop at ||grad|| <= 1e-7 x scale; a refit from there would not move)
    if name != "ElasticNet":            # non-smooth: its refits use a proximal solver
        grad = fit_gradient(problem, name)
        assert float(jnp.linalg.norm(grad)) <= 1e-5 * problem.scale, name
    # hyperparameters are hashable and equal configurations compare equal
    assert hash(model) == hash(_case(name)[0]) and model == _case(name)[0]


def test_params_of_another_model_are_refused():
    x = simulate_poisson_hmm(60, seed=1)
    three = acv.models.PoissonHMM(3, n_init=1).fit(x)
    with pytest.raises(InvalidArgumentError, match="shape"):
        acv.cross_validate(acv.models.PoissonHMM(2), x, [[1]], params=three)
    gauss = acv.models.GaussianHMM(2, n_init=1).fit(np.c_[x, x])
    with pytest.raises(ArgumentTypeError, match="PoissonHMMParams"):
        acv.cross_validate(acv.models.PoissonHMM(2), x, [[1]], params=gauss)
    bad = three._replace(transition_matrix=three.transition_matrix * 1.1)
    with pytest.raises(InvalidArgumentError, match="sum to 1"):
        acv.make_problem(acv.models.PoissonHMM(3), x, bad)



def _entry_points(name, model, data):
    """The public calls of one family that take parameters, besides cross_validate."""
    if name.startswith("LinearChainCRF"):
        return {"predict": lambda p: model.predict(p, [x for x, _ in data])}
    if name == "PoissonHMM":
        n = len(data)
        return {"heldout_loss": lambda p: model.heldout_loss(p, data, np.ones(n)),
                "objective": lambda p: model.objective(p, data, np.ones(n)),
                "predict": lambda p: model.predict(p, data),
                "predict_proba": lambda p: model.predict_proba(p, data),
                "score": lambda p: model.score(p, data),
                "forecast": lambda p: model.forecast(p, data, 2),
                "sample": lambda p: model.sample(p, 5)}
    if name == "HiddenPotts":
        return {"posterior_marginals": lambda p: model.posterior_marginals(p, data),
                "log_marginal_likelihood": lambda p: model.log_marginal_likelihood(p, data)}
    return {"predict_linear": lambda p: model.predict_linear(p, data[0]),
            "predict_mean": lambda p: model.predict_mean(p, data[0])}


@pytest.mark.parametrize("name", ["LinearChainCRF", "PoissonHMM", "Logistic", "HiddenPotts"])
def test_every_entry_point_refuses_the_params_cross_validate_refuses(name):
    """One parameter check (models.base.check_params) behind every public call that takes
    parameters, in every family: NaN parameters gave CRF labels [0, 0, 0] (issue 37,
    case 6); the message is the one cross_validate gives."""
    model, data, level = _case(name)
    template = model.params_template(data, level)
    nan = type(template)(*(np.full(np.shape(leaf), np.nan) for leaf in template))
    with pytest.raises(InvalidArgumentError, match="NaN or inf") as refused:
        acv.cross_validate(model, data, [[0]], params=nan, level=level, progress=False)
    for entry, call in _entry_points(name, model, data).items():
        with pytest.raises(InvalidArgumentError) as got:
            call(nan)
        assert str(got.value) == str(refused.value), (name, entry)
        with pytest.raises(ArgumentTypeError, match=type(template).__name__):
            call(tuple(template))                          # another type, named
        call(template)                                     # valid parameters still run


def test_entry_points_name_the_leaf_of_another_shape_and_pass_traced_params():
    x = simulate_poisson_hmm(30, seed=1)
    model = acv.models.PoissonHMM(2)
    three = acv.models.PoissonHMM(3).params_template(x)
    with pytest.raises(InvalidArgumentError,
                       match=r"`params.initial_probs` has shape \(3,\) but .* needs \(2,\)"):
        model.heldout_loss(three, x, np.ones(30))
    # a user's model gets the same check; traced parameters (the engine's calls) pass
    quad = Quadratic()
    a = jnp.asarray([1.0, 2.0, -1.0, 0.5])
    with pytest.raises(InvalidArgumentError, match=r"`params.leaf 0` has NaN"):
        quad.objective((np.asarray(np.nan),), a, jnp.ones(4))
    grad = jax.grad(lambda u: quad.objective((u,), a, jnp.ones(4)))(jnp.asarray(0.5))
    assert np.isfinite(float(grad))


# ------------------------------------------------ a user's model in one class, exactly solvable
class Quadratic(Model):
    """``F(u, w) = sum_i w_i c_i/2 (u - a_i)^2 + 1/2 u^2`` with ``c_i`` of either sign: a
    fold whose left-out units carry the positive curvature has an indefinite ``H(w_o)``."""

    def __init__(self, curvatures=(4.0, -1.5, -1.0, 1.0)):
        self.curvatures = tuple(curvatures)

    def prepare(self, data, level=None):
        return jnp.asarray(data, dtype=jnp.float64), "within", len(data)

    def objective(self, params, data, weights, scheme="A", level=None):
        c = jnp.asarray(self.curvatures)
        return 0.5 * jnp.sum(weights * c * (params[0] - data) ** 2) + 0.5 * params[0] ** 2

    def heldout_loss(self, params, data, weights, level=None):
        points = jnp.where(left_out(weights), (params[0] - data) ** 2, 0.0)
        return jnp.sum(points), points

    def init_params(self, data, level=None, n=1, seed=0):
        return [(np.asarray(float(i)),) for i in range(n)]

    def param_constraints(self):
        return (C.Real(),)

    def fit(self, data, level=None):
        c, a = np.asarray(self.curvatures), np.asarray(data)
        return (np.asarray((c * a).sum() / (c.sum() + 1.0)),)


def test_indefinite_fold_hessian_is_listed_unreliable_not_passed_off():
    model, a = Quadratic(), np.array([1.0, 2.0, -1.0, 0.5])
    folds = acv.folds.leave_one_out(4)
    with pytest.warns(UnreliableFoldWarning, match="1 of 4 folds"):
        res = acv.cross_validate(model, a, folds, "ns", progress=False)
    # without unit 0 the curvature is -1.5 - 1 + 1 + 1 = -0.5: H(w_o) is indefinite
    assert res.diagnostics["unreliable_folds"].tolist() == [0]
    assert res.summary()["n_unreliable"] == 1 and res.summary()["unreliable_folds"] == [0]
    assert res.unreliable.tolist() == [True, False, False, False]
    # the reliable folds are exact (quadratic objective)
    ex = acv.cross_validate(model, a, folds[1:], "exact", progress=False, restarts=0)
    np.testing.assert_allclose(res.fold_loss[1:], ex.fold_loss, rtol=1e-8)


def test_user_registered_method_runs_through_cross_validate():
    calls = []

    def half_ij(problem, folds, options):
        """A user's method: half of the IJ step (stays on the method interface)."""
        calls.append((problem.n_units, len(folds)))
        params, diagnostics = engine.get_method("ij")[0](problem, folds, options)
        return problem.u_full + 0.5 * (params - problem.u_full), diagnostics

    acv.register_method("half_ij", half_ij)
    model, a = Quadratic((1.0, 2.0, 1.0)), np.array([1.0, 2.0, 3.0])
    folds = acv.folds.leave_one_out(3)
    res = acv.cross_validate(model, a, folds, "half_ij", progress=False)
    ij = acv.cross_validate(model, a, folds, "ij", progress=False)
    assert calls == [(3, 3)] and res.method == "half_ij"
    u_full = float(model.fit(a)[0])
    np.testing.assert_allclose(res.params_flat[:, 0] - u_full,
                               0.5 * (ij.params_flat[:, 0] - u_full), rtol=1e-12)
    with pytest.raises(InvalidArgumentError, match="checkpoint"):
        acv.cross_validate(model, a, folds, "ij", progress=False, checkpoint="x")
    with pytest.raises(ArgumentTypeError, match="unknown option"):
        acv.cross_validate(model, a, folds, "ij", progres=False)


# ---------------------------------------------------------------- exact CV restarts
class DoubleWell(Quadratic):
    """``F(u, w) = (u^2 - 1)^2 + 0.3 u + 2 w_0 (u - 1)^2 + sum_{i>0} w_i 1e-3 (u - a_i)^2``.

    With unit 0 the minimum is near ``u = 1``; without it the global minimum is near
    ``u = -1`` while ``u = 1`` stays a local one: a refit warm-started at the fit lands in
    the worse basin.
    """

    def __init__(self):
        self.curvatures = ()

    def objective(self, params, data, weights, scheme="A", level=None):
        u = params[0]
        return ((u ** 2 - 1) ** 2 + 0.3 * u + 2 * weights[0] * (u - 1) ** 2
                + 1e-3 * jnp.sum(weights[1:] * (u - data[1:]) ** 2))

    def init_params(self, data, level=None, n=1, seed=0):
        return [(np.asarray(v),) for v in np.linspace(-1.5, 1.5, n)]

    def fit(self, data, level=None):
        return (np.asarray(0.93),)   # refined by a warm refit below


def test_exact_restarts_find_the_better_basin_and_flag_the_fold():
    model, a = DoubleWell(), np.array([0.0, 0.5, -0.5, 1.0])
    prob = acv.make_problem(model, a, model.fit(a))
    u1 = batched_minimize(prob.fun, 1.0, 200, 2)(prob.u_full[None], jnp.ones((1, 4)), prob.data)
    params = (np.asarray(u1.u)[0, 0],)
    folds = acv.folds.Folds([[0], [1]], 4)
    warm = acv.cross_validate(model, a, folds, "exact", params=params, progress=False,
                              restarts=0)
    assert warm.params_flat[0, 0] > 0.5          # stuck in the worse basin, unflagged
    with pytest.warns(UnreliableFoldWarning):
        res = acv.cross_validate(model, a, folds, "exact", params=params, progress=False,
                                 restarts=2)
    assert res.params_flat[0, 0] < -0.5          # the better optimum is kept
    assert res.diagnostics["exact_warm_gap"][0] > 0.1
    assert res.diagnostics["unreliable_folds"].tolist() == [0]   # starts disagree
    np.testing.assert_allclose(res.params_flat[1], warm.params_flat[1], atol=1e-8)


def test_exact_restarts_catch_a_warm_refit_in_a_worse_hmm_basin(poisson_local_optimum):
    """PoissonHMM(4) on overdispersed counts has several basins. Warm-started at the fit,
    fold 1's refit stops at a local optimum 2.4 nats above the one a start of the model's
    own initialisation reaches, with a converged, tiny gradient: invisible without restarts.
    The better optimum is kept and, the warm one being clearly worse (more than
    OPTIMUM_GAP_NATS), fold 1 is not flagged; fold 0's starts reach two optima 0.07 nats
    apart whose held-out losses differ by 0.25 nats over 12 units: flagged."""
    from approxcv.engine.exact_optima import OPTIMUM_GAP_NATS
    model, x, params = poisson_local_optimum
    folds = acv.folds.iid(len(x), 0.1, 8, seed=0)[:2]
    kw = dict(params=params, progress=False)
    warm = acv.cross_validate(model, x, folds, "exact", restarts=0, warn=False, **kw)
    assert warm.diagnostics["exact_converged"].all()
    assert len(warm.diagnostics["unreliable_folds"]) == 0            # nothing to see
    with pytest.warns(UnreliableFoldWarning):
        res = acv.cross_validate(model, x, folds, "exact", **kw)    # default: 2 restarts
    d = res.diagnostics
    assert d["exact_restarts"] == 2
    gap = d["exact_warm_gap"]
    assert gap[1] > OPTIMUM_GAP_NATS and 0 < gap[0] < 1.0
    # the better fold optima are kept: fold objectives lower than the warm refits'
    assert np.all(d["exact_objective"] < warm.diagnostics["exact_objective"] - 0.01)
    assert {k: v.tolist() for k, v in d["unreliable_causes"].items()} == {
        "restart_disagreement": [0]}
    assert abs(d["exact_competing_loss"][0] - warm.fold_loss[0]) < 1e-6   # the warm optimum
    assert abs(res.fold_loss[0] - warm.fold_loss[0]) > 0.1


def test_exact_checkpoint_is_bound_to_data_prior_and_scheme(tmp_path, poisson_small):
    """A checkpoint written for other data, another prior or scheme B is refused, naming
    the input; the same inputs resume without refitting; `checkpoint=` with IJ is refused."""
    from approxcv.errors import CheckpointError
    model, x, params = poisson_small
    folds = acv.folds.iid(len(x), 0.05, 2, seed=0)
    path = str(tmp_path / "ck")
    kw = dict(params=params, progress=False, restarts=0, checkpoint=path)
    first = acv.cross_validate(model, x, folds, "exact", **kw)
    again = acv.cross_validate(model, x, folds, "exact", **kw)
    np.testing.assert_array_equal(again.fold_loss, first.fold_loss)
    other = x.copy()
    other[5] += 1
    with pytest.raises(CheckpointError, match="data"):
        acv.cross_validate(model, other, folds, "exact", **kw)
    prior = acv.models.PoissonHMM(2, n_init=2, rate_rate=1.0)
    with pytest.raises(CheckpointError, match="model"):
        acv.cross_validate(prior, x, folds, "exact", **kw)
    with pytest.raises(CheckpointError, match="scheme"):
        acv.cross_validate(model, x, folds, "exact", scheme="B", **kw)


def test_unravel_maps_rows_of_fold_parameters_in_numpy_or_through_a_custom_constraint():
    """``Problem.unravel`` of a NumPy ``(F, D)`` array gives trees whose leaves have a
    leading ``F`` axis: in NumPy for the built-in constraints, through a jitted ``vmap``
    for a user's constraint (whose ``forward`` may handle one row only)."""
    import jax
    from approxcv.problem import _functions

    class Doubling(C.Constraint):
        def forward(self, u):
            assert u.ndim == 1, "one row at a time"
            return jnp.exp2(u)

        def inverse(self, value):
            return jnp.log2(value)

    class Toy:
        def param_constraints(self):
            return (Doubling(), C.Real())

        def constrain(self, tree):
            return C.constrain(self.param_constraints(), tree)

    treedef = jax.tree_util.tree_structure((0, 0))
    rows = np.arange(6.0).reshape(2, 3)
    unravel = _functions(Toy(), "A", "within", treedef, ((2,), (1,)))[2]
    doubled, real = unravel(rows)
    np.testing.assert_allclose(doubled, 2.0 ** rows[:, :2], rtol=1e-15)
    np.testing.assert_array_equal(real, rows[:, 2:])

    x = np.random.default_rng(0).poisson(np.repeat([2.0, 9.0], 30))
    model = acv.models.PoissonHMM(2)
    problem = acv.make_problem(model, x, model.fit(x))
    us = np.stack([np.asarray(problem.u_full), np.asarray(problem.u_full) + 0.1])
    batched = problem.unravel(us)
    assert all(isinstance(leaf, np.ndarray) for leaf in batched)
    for i in range(2):
        one = problem.unravel(jnp.asarray(us[i]))
        for a, b in zip(batched, one):
            np.testing.assert_allclose(a[i], np.asarray(b), rtol=1e-13)


def test_flat_layout_module_names_still_import_and_unpickle():
    """Modules moved into family subpackages keep their old names (imports, pickles)."""
    import pickle

    from approxcv.models.poisson_hmm import PoissonHMMParams
    from approxcv.models.ridge import Ridge
    assert PoissonHMMParams is acv.models.PoissonHMMParams and Ridge is acv.models.Ridge
    params = acv.models.PoissonHMMParams(np.ones(1), np.ones((1, 1)), np.ones(1))
    blob = pickle.dumps(params, protocol=0).replace(      # text: no length prefixes
        b"approxcv.models.hmm.poisson_hmm", b"approxcv.models.poisson_hmm")
    assert b"approxcv.models.poisson_hmm" in blob
    assert type(pickle.loads(blob)) is acv.models.PoissonHMMParams
