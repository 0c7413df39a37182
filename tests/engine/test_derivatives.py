"""Derivatives in chunks of tangents equal the one-sweep derivatives."""
import jax.numpy as jnp
import numpy as np

import approxcv as acv
from approxcv.engine import derivatives
from tests.conftest import simulate_poisson_hmm


def test_chunked_sweep_equals_one_sweep_and_is_used_for_large_data(monkeypatch):
    x = simulate_poisson_hmm(40, seed=3)
    model = acv.models.PoissonHMM(2, n_init=1)
    problem = acv.make_problem(model, x, model.fit(x))
    u, w = jnp.asarray(problem.u_full), jnp.ones(problem.n_units)
    one = derivatives.gradient_hessian_jacobian(problem.fun, u, w, problem.data)
    for chunk in (1, 4):
        got = derivatives.chunked_derivatives(problem.fun, u, w, problem.data, True, chunk)
        for a, b in zip(got, one):
            np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)
    # a budget too small for all tangents at once takes the chunked path: same values
    options = acv.engine.Options(progress=False)
    want = derivatives.full_derivatives(problem, options, True)
    from approxcv.optim import hessian
    monkeypatch.setattr(hessian, "SWEEP_BUDGET", 1)
    calls = []
    monkeypatch.setattr(derivatives, "chunked_derivatives",
                        lambda *a: calls.append(a[-1]) or one)
    derivatives.full_derivatives(problem, options, True)
    assert calls == [1]
    for a, b in zip(want, one):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


def test_newton_polish_sweeps_in_chunks_beyond_the_memory_budget(monkeypatch):
    """The fit's and the refits' Newton polish (``value_and_derivatives``) chunks its
    tangents like the IJ's sweep (on all 14,041 CoNLL sentences a CRF polish could not
    hold all 189 tangents at once)."""
    from approxcv.optim import newton
    x = simulate_poisson_hmm(40, seed=3)
    model = acv.models.PoissonHMM(2, n_init=1)
    problem = acv.make_problem(model, x, model.fit(x))
    u, w = jnp.asarray(problem.u_full), jnp.ones(problem.n_units)
    one = newton.value_and_derivatives(problem.fun, u, w, problem.data, True)
    calls = []
    real = newton.chunked_value_and_derivatives
    from approxcv.optim import hessian
    monkeypatch.setattr(hessian, "SWEEP_BUDGET", 1)
    monkeypatch.setattr(newton, "chunked_value_and_derivatives",
                        lambda *a: calls.append(a[-1]) or real(*a))
    got = newton.value_and_derivatives(problem.fun, u, w, problem.data, True)
    assert calls == [1]
    for a, b in zip(got, one):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-10)


def test_a_sweep_over_the_memory_budget_runs_in_chunks_with_the_same_ij(monkeypatch):
    """The sweep's tangents per pass come from the traced size of the forward pass
    (optim.hessian.sweep_chunk); a budget of a few tangents gives the same IJ."""
    import approxcv as acv
    from approxcv.optim import hessian
    x = np.random.default_rng(2).poisson(np.repeat([2.0, 9.0, 3.0], 50)).astype(float)
    model = acv.models.PoissonHMM(2)
    params = model.fit(x)
    folds = acv.folds.Folds([[10], [70, 71], [140]], 150)
    kw = dict(params=params, progress=False, warn=False, solver="dense")
    whole = acv.cross_validate(model, x, folds, "ij", **kw)
    problem = acv.make_problem(model, x, params)
    ones = np.ones(problem.n_units)
    per = hessian.residual_bytes(problem.fun, problem.u_full, ones, problem.data)
    assert per > 150 * 2 * 8                     # the messages, not just the data
    monkeypatch.setattr(hessian, "SMALL_SWEEP", 0)
    monkeypatch.setattr(hessian, "SWEEP_BYTES", 4 * per)     # 2 tangents a pass
    assert hessian.sweep_chunk(problem.fun, problem.u_full, ones, problem.data,
                               problem.u_full.size) == 2
    chunked = acv.cross_validate(model, x, folds, "ij", **kw)
    np.testing.assert_allclose(chunked.fold_loss, whole.fold_loss, rtol=1e-10)


def test_sweep_shared_among_cores_equals_one_sweep(monkeypatch):
    """Long data on a CPU with several cores: the sweep's tangents are split among threads
    (``optim.newton.parallel_value_and_derivatives``, parts padded to one size); the same
    ``(F, g, H, J)`` as one sweep."""
    from approxcv.optim import newton
    x = simulate_poisson_hmm(40, seed=3)
    model = acv.models.PoissonHMM(2, n_init=1)
    problem = acv.make_problem(model, x, model.fit(x))
    u, w = jnp.asarray(problem.u_full), jnp.ones(problem.n_units)
    for jacobian in (True, False):
        one = newton._compiled_derivatives()(problem.fun, u, w, problem.data, jacobian)
        # D = 5: two parts of 3 tangents, the last with one zero tangent of padding
        got = newton.parallel_value_and_derivatives(problem.fun, u, w, problem.data,
                                                    jacobian, 2)
        for a, b in zip(got, one):
            if b is None:
                assert a is None
            else:
                np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)
    calls = []
    real = newton.parallel_value_and_derivatives
    monkeypatch.setattr(newton, "PARALLEL_SWEEP_MIN_UNITS", 0)
    monkeypatch.setattr(newton, "host_workers", lambda: 2)
    monkeypatch.setattr(newton, "parallel_value_and_derivatives",
                        lambda *a: calls.append(a[-1]) or real(*a))
    newton.value_and_derivatives(problem.fun, u, w, problem.data, True)
    assert calls == [2]
