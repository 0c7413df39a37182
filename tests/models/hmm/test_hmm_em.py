"""EM for HMMs (models/hmm/em.py, optim/em.py): monotone, exact M-steps, and the same
optimum as BFGS on the objective itself."""
import itertools

import numpy as np
import pytest

import approxcv as acv
from approxcv.models.hmm import em as hmm_em
from approxcv.optim import batched_minimize
from approxcv.optim.em import batched_em
from approxcv.problem import flat_params, make_problem


def _sticky_states(T, K, rng):
    z = np.zeros(T, dtype=int)
    for t in range(1, T):
        z[t] = z[t - 1] if rng.random() < 0.9 else rng.integers(K)
    return z


def _data(kind, T=200, seed=0):
    rng = np.random.default_rng(seed)
    z = _sticky_states(T, 2, rng)
    if kind == "gaussian":
        return acv.models.GaussianHMM(2), rng.normal(size=(T, 2)) + 2.5 * z[:, None]
    if kind == "poisson":
        return acv.models.PoissonHMM(2), rng.poisson(np.array([2.0, 9.0])[z])
    probs = np.array([[0.6, 0.3, 0.1], [0.1, 0.2, 0.7]])
    return (acv.models.CategoricalHMM(2, 3),
            np.array([rng.choice(3, p=probs[k]) for k in z]))


def _same_up_to_relabelling(p, q, rtol=1e-5, atol=1e-7):
    """Whether HMM parameters ``p`` and ``q`` agree for some permutation of the states."""
    for perm in itertools.permutations(range(len(p[0]))):
        perm = list(perm)
        moved = [p[0][perm], p[1][perm][:, perm]] + [np.asarray(f)[perm] for f in p[2:]]
        if all(np.allclose(np.asarray(a), np.asarray(b), rtol=rtol, atol=atol)
               for a, b in zip(moved, q)):
            return True
    return False


def _em_solver(model, problem, level="within", scheme="A", closed_form=True):
    parts = hmm_em.em_parts(model, problem.unravel, level, scheme)
    m_step = (hmm_em.closed_form_m_step(model, problem.unravel, level) if closed_form
              else None)
    return batched_em(*parts, float(problem.scale), 1e-13, m_step=m_step)


KINDS = ["gaussian", "poisson", "categorical"]


@pytest.mark.parametrize("kind", KINDS)
def test_em_fixed_point_is_the_map(kind):
    """At the MAP fit, one closed-form EM iteration moves nothing: the M-steps (Dirichlet,
    Gamma, Gaussian with its unit-free prior) maximise the right expected objective."""
    model, x = _data(kind)
    params = model.fit(x)
    problem = make_problem(model, x, params)
    solve = _em_solver(model, problem)
    u = np.asarray(problem.u_full)[None]
    one = solve(u, np.ones((1, problem.n_units)), problem.data, 1)
    np.testing.assert_allclose(np.asarray(one.u)[0], u[0], rtol=0, atol=1e-7)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("closed_form", [True, False])
def test_em_decreases_the_objective_monotonically(kind, closed_form):
    model, x = _data(kind, seed=1)
    seqs, _, n = model.prepare(x)
    start = model.init_params(seqs, n=1, seed=3)[0]
    problem = make_problem(model, seqs, start)
    solve = _em_solver(model, problem, closed_form=closed_form)
    u0 = np.asarray(flat_params(model, start)[0])[None]
    values = [float(solve(u0, np.ones((1, n)), seqs, k).value[0]) for k in range(8)]
    assert np.all(np.diff(values) <= 1e-9 * problem.scale), values
    assert values[-1] < values[0] - 1e-3


@pytest.mark.parametrize("kind", KINDS)
def test_em_fit_matches_the_bfgs_fit(kind):
    model, x = _data(kind, seed=2)
    params = model.fit(x)
    assert model.fit_result_["method"] == "em"
    em_value = model.fit_result_["final_objective"]
    model.fit_em = False                       # the BFGS + Newton path from the same starts
    ref = model.fit(x)
    assert "method" not in model.fit_result_
    np.testing.assert_allclose(em_value, model.fit_result_["final_objective"],
                               rtol=1e-10)
    assert _same_up_to_relabelling([np.asarray(a) for a in params], ref)


def test_em_fit_at_structure_level_matches_bfgs():
    rng = np.random.default_rng(4)
    model = acv.models.PoissonHMM(2)
    data = [rng.poisson(np.array([2.0, 9.0])[_sticky_states(T, 2, rng)])
            for T in (60, 90, 75)]
    params = model.fit(data)
    assert model.fit_result_["method"] == "em"
    em_value = model.fit_result_["final_objective"]
    model.fit_em = False
    ref = model.fit(data)
    np.testing.assert_allclose(em_value, model.fit_result_["final_objective"], rtol=1e-10)
    np.testing.assert_allclose(np.asarray(params.rates), np.asarray(ref.rates), rtol=1e-6)


@pytest.mark.parametrize("scheme", ["A", "B"])
def test_weighted_em_reaches_the_weighted_optimum(scheme):
    """The E-step is the gradient of the *weighted* log-normaliser, so EM on a fold's
    objective (schemes A and B) ends where BFGS on that objective does."""
    model, x = _data("poisson", seed=5)
    params = model.fit(x)
    problem = make_problem(model, x, params, scheme=scheme)
    w = np.ones((1, problem.n_units))
    w[0, 40:60] = 0.0
    u0 = np.asarray(problem.u_full)[None]
    em = _em_solver(model, problem, scheme=scheme)(u0, w, problem.data, 500)
    bfgs = batched_minimize(problem.fun, problem.scale, 2000, 2)(u0, w, problem.data)
    assert bool(em.converged[0]) and bool(bfgs.converged[0])
    np.testing.assert_allclose(float(em.value[0]), float(bfgs.value[0]), rtol=1e-9)
    np.testing.assert_allclose(np.asarray(em.u[0]), np.asarray(bfgs.u[0]), atol=1e-4)


def test_em_that_does_not_converge_hands_over_to_bfgs(monkeypatch):
    model, x = _data("gaussian", seed=6)
    monkeypatch.setattr(hmm_em, "EM_MAX_STEPS", 1)
    params = model.fit(x)
    assert model.fit_result_["method"] == "bfgs"       # the BFGS path ran after EM
    assert (model.fit_result_["em_steps"] == 1).all()
    assert bool(model.fit_result_["converged"].all())
    model.fit_em = False
    ref = model.fit(x)
    for a, b in zip(params, ref):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_em_record_marks_unpolished_starts():
    model, x = _data("gaussian", seed=7)
    model.fit(x)
    rec = model.fit_result_
    best = rec["best"]
    assert rec["converged"][best] and rec["converged"].sum() == 1
    assert np.isnan(np.delete(rec["grad_norm"], best)).all()
    assert rec["final_grad_norm"] <= 1e-7 * 200
    assert rec["em_converged"].all() and (rec["num_steps"] > 0).all()
    assert rec["state_occupancy"].sum() == pytest.approx(200, rel=1e-10)


def test_perturbation_restarts_follow_an_em_fit():
    from tests.conftest import simulate_overdispersed_counts
    x = simulate_overdispersed_counts()
    model = acv.models.PoissonHMM(3, n_init=1, seed=2, n_perturb=2)
    model.fit(x)
    rec = model.fit_result_
    assert rec["method"] == "em" and "perturbation" in rec
    assert rec["final_objective"] <= rec["objective"][rec["best"]] + 1e-9 * len(x)
    assert rec["final_grad_norm"] <= 1e-7 * len(x)


def test_an_m_step_gone_non_finite_is_discarded_and_not_converged():
    model, x = _data("poisson", seed=8)
    seqs, _, n = model.prepare(x)
    start = model.init_params(seqs, n=1, seed=0)[0]
    problem = make_problem(model, seqs, start)
    parts = hmm_em.em_parts(model, problem.unravel, "within")
    solve = batched_em(*parts, float(problem.scale), 1e-8,
                       m_step=lambda u, stats, data: u * np.nan)
    u0 = np.asarray(problem.u_full)[None]
    res = solve(u0, np.ones((1, n)), seqs, 50)
    assert not bool(res.converged[0]) and int(res.num_steps[0]) == 1
    np.testing.assert_array_equal(np.asarray(res.u), u0)
    assert np.isfinite(float(res.value[0]))
