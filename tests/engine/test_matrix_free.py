"""Matrix-free (HVP + CG) IJ and NS, and structure-level derivative accumulation, against the
dense computations on problems small enough for both."""
import concurrent.futures as cf

import jax.numpy as jnp
import numpy as np
import pytest

import approxcv as acv
from approxcv import engine
from approxcv.errors import NotPositiveDefiniteError
from tests.conftest import simulate_gaussian_hmm, simulate_poisson_hmm


def test_conjugate_gradient_solves_spd_systems_and_flags_indefinite_ones():
    rng = np.random.default_rng(0)
    d, m = 12, 3
    a = rng.normal(size=(d, d))
    spd = a @ a.T + 0.5 * np.eye(d)
    rhs = rng.normal(size=(m, d))
    sol = engine.conjugate_gradient(lambda v: v @ jnp.asarray(spd), jnp.asarray(rhs), 1e-12, 200)
    np.testing.assert_allclose(np.asarray(sol.x), np.linalg.solve(spd, rhs.T).T, rtol=1e-8,
                               atol=1e-10)
    assert np.all(np.asarray(sol.converged))
    # the smallest curvature seen is an upper bound on lambda_min and a lower bound on lambda_max
    eigs = np.linalg.eigvalsh(spd)
    assert np.all(np.asarray(sol.min_curvature) >= eigs[0] - 1e-9)
    assert np.all(np.asarray(sol.min_curvature) <= eigs[-1] + 1e-9)

    indefinite = spd - (eigs[0] + 1.0) * np.eye(d)
    bad = engine.conjugate_gradient(lambda v: v @ jnp.asarray(indefinite), jnp.asarray(rhs),
                                    1e-12, 200)
    assert not np.any(np.asarray(bad.converged))
    with pytest.raises(NotPositiveDefiniteError, match="curvature"):
        engine.cg_diagnostics(np.zeros(d), np.zeros(d), bad, np.zeros(d), 1e-12, 200)


def test_block_cg_matches_a_dense_solve_in_far_fewer_steps_than_independent_cg():
    """Ill-conditioned SPD matrix (condition 1e6, ten outlying eigenvalues), 20 systems."""
    rng = np.random.default_rng(0)
    d, m = 300, 20
    eigs = np.concatenate([np.logspace(0, 4, d - 10), np.logspace(5, 6, 10)])
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    a = jnp.asarray((q * eigs) @ q.T)
    rhs = rng.normal(size=(m, d))
    rhs[3] = 0.0                                      # a zero right-hand side stays zero
    exact = np.linalg.solve(np.asarray(a), rhs.T).T
    # rtol 1e-8: true residuals bottom out near 3e-11 here (1e-9 sat at the edge on another
    # processor); solution errors measured 4.6e-9 (CG) and 3.8e-10 (block), 1/30 of atol
    block = engine.block_conjugate_gradient(lambda v: v @ a, jnp.asarray(rhs), 1e-8, 20000)
    single = engine.conjugate_gradient(lambda v: v @ a, jnp.asarray(rhs), 1e-8, 20000)
    for sol in (block, single):
        assert np.all(np.asarray(sol.converged))
        np.testing.assert_allclose(np.asarray(sol.x), exact, rtol=1e-6, atol=1e-7)
    assert int(block.num_steps[3]) == 0
    assert int(np.max(block.num_steps)) * 5 < int(np.max(single.num_steps))
    # lambda_min(P'AP) is an upper bound on lambda_min(A)
    assert eigs[0] - 1e-9 <= float(block.min_curvature[0]) <= eigs[-1]


def test_block_cg_finishes_a_straggler_and_reports_true_residuals():
    """A system's residual need not fall monotonically in block CG: system 1 meets its
    tolerance at step 1 (relative residual 7.5e-4), but step 2, which solves system 0, raises
    it to 0.29. With steps left single-vector CG finishes it; without, it is reported
    unconverged; a tolerance below round-off is reported unconverged with the true residual."""
    rng = np.random.default_rng(0)
    q, _ = np.linalg.qr(rng.normal(size=(5, 5)))
    a = (q * np.array([1.0, 5e4, 2.0, 8e5, 1e6])) @ q.T
    rhs = np.array([[0, 1, -0.01, 0, 0], [-3e-3, -0.07, -1e-5, 3e-5, -4]]) @ q.T  # eigenbasis
    rtol = np.array([1e-7, 1.5e-2])

    def solve(tols, max_steps):
        sol = engine.block_conjugate_gradient(lambda v: v @ jnp.asarray(a), jnp.asarray(rhs),
                                              jnp.asarray(tols), max_steps)
        true = np.linalg.norm(rhs - np.asarray(sol.x) @ a, axis=1) / np.linalg.norm(rhs, axis=1)
        return sol, true

    done, true = solve(rtol, 100)      # measured: system 0 at 1e-10, system 1 at 5.7e-4
    assert np.all(np.asarray(done.converged)) and np.all(true <= rtol)
    np.testing.assert_allclose(np.asarray(done.residual_norm), true, rtol=1e-3, atol=1e-11)
    assert int(done.num_steps[0]) == 2 and int(done.num_steps[1]) > 2  # block + CG steps
    cut, true = solve(rtol, 2)         # no step left after the block: reported as it is
    assert np.asarray(cut.converged).tolist() == [True, False] and true[1] > 10 * rtol[1]
    np.testing.assert_allclose(np.asarray(cut.residual_norm), true, rtol=1e-3, atol=1e-11)
    tight, _ = solve([1e-15, 1.5e-2], 100)   # updated residual reaches 1e-15, true one 4e-13
    assert not bool(tight.converged[0]) and float(tight.residual_norm[0]) > 1e-14


def test_cg_per_system_tolerances_and_a_loose_system_does_not_set_the_step_count():
    """One tolerance per system: each meets its own; a loosely solved system (the Newton-step
    diagnostic of the IJ) stops no later than the tight ones and does not prolong the run."""
    rng = np.random.default_rng(2)
    d, m = 200, 6
    eigs = np.logspace(0, 4, d)
    q, _ = np.linalg.qr(rng.normal(size=(d, d)))
    a = jnp.asarray((q * eigs) @ q.T)
    rhs = rng.normal(size=(m, d))
    rtol = np.array([1e-10] * (m - 1) + [1e-2])
    exact = np.linalg.solve(np.asarray(a), rhs.T).T
    for solve in (engine.block_conjugate_gradient, engine.conjugate_gradient):
        sol = solve(lambda v: v @ a, jnp.asarray(rhs), jnp.asarray(rtol), 5000)
        res, steps = np.asarray(sol.residual_norm), np.asarray(sol.num_steps)
        assert np.all(np.asarray(sol.converged)) and np.all(res <= rtol)
        assert steps[-1] < steps[:-1].min()
        np.testing.assert_allclose(np.asarray(sol.x[:-1]), exact[:-1], rtol=1e-6, atol=1e-9)
    loose_alone = engine.block_conjugate_gradient(lambda v: v @ a, jnp.asarray(rhs[-1:]), 1e-2,
                                                  5000)
    assert float(loose_alone.residual_norm[0]) <= 1e-2
    tight_all = engine.block_conjugate_gradient(lambda v: v @ a, jnp.asarray(rhs), 1e-10, 5000)
    mixed = engine.block_conjugate_gradient(lambda v: v @ a, jnp.asarray(rhs), jnp.asarray(rtol),
                                            5000)
    # the loose system no longer sets the block's step count
    assert int(np.max(mixed.num_steps)) == int(np.max(np.asarray(tight_all.num_steps)[:-1]))


def test_block_cg_stops_on_an_indefinite_matrix():
    rng = np.random.default_rng(1)
    d, m = 15, 4
    a = rng.normal(size=(d, d))
    spd = a @ a.T + 0.5 * np.eye(d)
    indefinite = spd - (np.linalg.eigvalsh(spd)[0] + 1.0) * np.eye(d)
    bad = engine.block_conjugate_gradient(lambda v: v @ jnp.asarray(indefinite),
                                          jnp.asarray(rng.normal(size=(m, d))), 1e-12, 200)
    assert not np.any(np.asarray(bad.converged))
    assert float(bad.min_curvature[0]) <= 0
    with pytest.raises(NotPositiveDefiniteError, match="curvature"):
        engine.cg_diagnostics(np.zeros(d), np.zeros(d), bad, np.zeros(d), 1e-12, 200)


@pytest.fixture(scope="module")
def poisson_fit():
    x = simulate_poisson_hmm(150, seed=3)
    model = acv.models.PoissonHMM(2, n_init=2)
    return model, x, model.fit(x)


@pytest.mark.parametrize("method", ["ij", "ns"])
def test_matrix_free_equals_dense_within_a_sequence(poisson_fit, method):
    model, x, params = poisson_fit
    folds = acv.folds.iid(len(x), 0.1, 6, seed=1)
    dense = acv.cross_validate(model, x, folds, method, params=params, solver="dense",
                               progress=False)
    cg = acv.cross_validate(model, x, folds, method, params=params, solver="cg",
                            cg_rtol=1e-12, progress=False)
    np.testing.assert_allclose(cg.params_flat, dense.params_flat, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(cg.fold_loss, dense.fold_loss, rtol=1e-9)
    assert cg.diagnostics["solver"] == "cg" and dense.diagnostics["solver"] == "dense"
    assert cg.diagnostics["hessian_min_eig"] >= dense.diagnostics["hessian_min_eig"] - 1e-9
    np.testing.assert_allclose(cg.diagnostics["newton_step_norm"],
                               dense.diagnostics["newton_step_norm"], rtol=1e-4, atol=1e-12)


@pytest.fixture(scope="module")
def sequences_fit():
    seqs = [simulate_gaussian_hmm(t, R=2, seed=s) for s, t in enumerate([40, 55, 30, 48, 60])]
    model = acv.models.GaussianHMM(2, n_init=2)
    return model, seqs, model.fit(seqs)


@pytest.mark.parametrize("method", ["ij", "ns"])
def test_matrix_free_equals_dense_leave_one_sequence_out(sequences_fit, method):
    model, seqs, params = sequences_fit
    folds = acv.folds.leave_one_out(len(seqs))
    kw = dict(params=params, level="structure", progress=False)
    dense = acv.cross_validate(model, seqs, folds, method, solver="dense", **kw)
    cg = acv.cross_validate(model, seqs, folds, method, solver="cg", cg_rtol=1e-12, **kw)
    np.testing.assert_allclose(cg.params_flat, dense.params_flat, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(cg.fold_loss, dense.fold_loss, rtol=1e-9)
    if method == "ij":  # "auto" picks CG once D exceeds the threshold (the same program)
        auto = acv.cross_validate(model, seqs, folds, method, max_dense_dim=3, cg_rtol=1e-12,
                                  **kw)
        assert auto.diagnostics["solver"] == "cg"
        np.testing.assert_allclose(auto.fold_loss, cg.fold_loss, rtol=1e-9)


def test_structure_accumulation_equals_one_sweep_and_runs_on_executors(sequences_fit):
    model, seqs, params = sequences_fit
    obj = acv.make_problem(model, seqs, params, level="structure")
    n = obj.n_units
    g, h, j = engine.gradient_hessian_jacobian(obj.fun, obj.u_full, jnp.ones(n), obj.data, True)
    # batches of 3: the second is padded with a zero-weight copy; run on two threads
    with cf.ThreadPoolExecutor(2) as executor:
        ga, ha, ja = engine.structure_derivatives(obj.fun, obj.u_full, obj.data, n,
                                                  batch_size=3, chunk=4, executor=executor)
    np.testing.assert_allclose(ga, np.asarray(g), rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(ha, np.asarray(h), rtol=1e-9, atol=1e-8)
    np.testing.assert_allclose(ja, np.asarray(j), rtol=1e-9, atol=1e-8)


def test_large_dimension_defaults_use_lbfgs_refits_that_match_bfgs(sequences_fit):
    model, seqs, params = sequences_fit
    folds = acv.folds.leave_one_out(len(seqs))[:2]
    kw = dict(params=params, level="structure", progress=False)
    bfgs = acv.cross_validate(model, seqs, folds, "exact", **kw)
    lbfgs = acv.cross_validate(model, seqs, folds, "exact", max_dense_dim=3, **kw)
    assert bfgs.diagnostics["exact_solver"] == "bfgs" and bfgs.diagnostics["solver"] == "dense"
    assert lbfgs.diagnostics["exact_solver"] == "lbfgs" and lbfgs.diagnostics["solver"] == "cg"
    assert np.all(lbfgs.diagnostics["exact_converged"])
    np.testing.assert_allclose(lbfgs.fold_loss, bfgs.fold_loss, rtol=1e-6)


def test_chunked_hessian_equals_the_one_sweep_hessian():
    rng = np.random.default_rng(2)
    a = jnp.asarray(rng.normal(size=(7, 5)))

    def fun(u, w, data):
        return jnp.sum(w * jnp.log1p(jnp.exp(data @ u))) + 0.5 * u @ u

    u, w = jnp.asarray(rng.normal(size=5)), jnp.asarray(rng.uniform(size=7))
    np.testing.assert_allclose(np.asarray(engine.derivatives.hessian_by_hvp(fun, u, w, a, chunk=2)),
                               np.asarray(engine.hessian(fun, u, w, a)), rtol=1e-12, atol=1e-12)
    # default chunk from the data size
    np.testing.assert_allclose(np.asarray(engine.derivatives.hessian_by_hvp(fun, u, w, a)),
                               np.asarray(engine.hessian(fun, u, w, a)), rtol=1e-12, atol=1e-12)


def test_tangent_chunk_shrinks_with_the_data():
    chunk = engine.derivatives.tangent_chunk
    assert chunk((np.zeros(7), np.zeros((7, 5)))) == 128
    assert chunk({"x": np.zeros((2 ** 14, 16))}) == 8            # 2^21 / 2^18 entries
    assert chunk([np.zeros(10 ** 7)]) == 1
