"""The batched quasi-Newton loop against optimistix, per-start stopping, the Newton polish and
the shared ``(F, g, H, J)`` program."""
import jax.numpy as jnp
from jax import lax
import numpy as np
import optimistix as optx
import pytest

from approxcv import engine
from approxcv.optim import batched_minimize, minimize
from approxcv.optim.newton import newton_polish, polish_rows, value_and_derivatives


def _logistic(n=300, d=20, seed=0):
    """L2 logistic loss ``F(u) = sum_i [log(1 + e^{a_i u}) - y_i a_i u] + 0.5 u^T u``."""
    rng = np.random.default_rng(seed)
    a = jnp.asarray(rng.normal(size=(n, d)))
    y = jnp.asarray((rng.random(n) < 0.5).astype(float))

    def fun(u, args=None):
        z = a @ u
        return jnp.sum(jnp.logaddexp(0.0, z) - y * z) + 0.5 * u @ u
    return fun, d, n


@pytest.mark.parametrize("solver, method", [(optx.BFGS, "bfgs"), (optx.LBFGS, "lbfgs")])
@pytest.mark.parametrize("steps", [1, 2, 5, 12])
def test_iterates_are_optimistix_iterates(solver, method, steps):
    """Step for step the same iterates as optimistix (before round-off decides a line
    search, which a few steps from the start it does not)."""
    fun, d, n = _logistic()
    scaled = lambda u, a: fun(u) / n  # noqa: E731
    ref = optx.minimise(scaled, solver(rtol=1e-10, atol=1e-10), jnp.zeros(d),
                        max_steps=steps, throw=False)
    ours = minimize(fun, jnp.zeros(d), scale=n, max_steps=steps, newton_steps=0,
                    method=method)
    np.testing.assert_allclose(np.asarray(ours.u), np.asarray(ref.value), rtol=1e-10,
                               atol=1e-13)
    assert int(ours.num_steps) == int(ref.stats["num_steps"])


def test_each_start_of_a_batch_stops_on_its_own_test():
    """A batch of starts gives what each start gives alone (steps included)."""
    fun, d, n = _logistic(d=6)
    solve = batched_minimize(lambda u, w, data: fun(u) + 0.0 * jnp.sum(w), float(n), 1000, 2)
    starts = np.stack([np.zeros(d), np.full(d, 3.0), np.linspace(-2, 2, d)])
    batch = solve(starts, np.ones((3, 1)), None)
    for i, u0 in enumerate(starts):
        alone = minimize(fun, jnp.asarray(u0), scale=n)
        assert int(batch.num_steps[i]) == int(alone.num_steps)
        np.testing.assert_allclose(np.asarray(batch.u[i]), np.asarray(alone.u), atol=1e-12)
    assert np.asarray(batch.converged).all() and len(set(np.asarray(batch.num_steps))) > 1


def test_a_stalled_line_search_stops_instead_of_idling_to_max_steps():
    """Next to the minimum Armijo fails on round-off: the loop stops once the trial step is
    below the Cauchy tolerance, long before max_steps, with the same point."""
    fun, d, n = _logistic()
    res = minimize(fun, jnp.zeros(d), scale=n, gtol=1e-16, newton_steps=0, max_steps=5000)
    assert int(res.num_steps) < 500
    ref = minimize(fun, jnp.zeros(d), scale=n, newton_steps=2)
    np.testing.assert_allclose(np.asarray(res.u), np.asarray(ref.u), atol=1e-7)


def test_a_non_finite_start_is_reported_not_chosen():
    fun, d, n = _logistic(d=4)
    solve = batched_minimize(lambda u, w, data: fun(u) + 0.0 * jnp.sum(w), float(n), 100, 0)
    res = solve(np.stack([np.full(4, np.nan), np.zeros(4)]), np.ones((2, 1)), None)
    assert not bool(res.converged[0]) and not np.isfinite(float(res.value[0]))
    assert bool(res.converged[1])


def test_shared_derivatives_equal_the_engine_sweep_and_polish_reaches_round_off():
    fun, d, n = _logistic(d=5)
    a = np.random.default_rng(1).normal(size=(n, d))

    def weighted(u, w, data):
        z = data @ u
        return jnp.sum(w * (jnp.logaddexp(0.0, z) - 0.5 * z)) + 0.5 * u @ u
    u, w = np.full(d, 0.1), np.linspace(0.5, 1.5, n)
    value, g, h, j = value_and_derivatives(weighted, u, w, a)
    g2, h2, j2 = engine.gradient_hessian_jacobian(weighted, jnp.asarray(u), jnp.asarray(w),
                                                  jnp.asarray(a), True)
    assert float(value) == pytest.approx(float(weighted(u, w, a)), rel=1e-14)
    for ours, ref in ((g, g2), (h, h2), (j, j2)):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(ref), rtol=1e-12, atol=1e-12)
    assert value_and_derivatives(weighted, u, w, a, with_jacobian=False)[3] is None
    polished, f, gnorm = newton_polish(weighted, u, w, a, num_steps=6)
    assert gnorm < 1e-10 and f <= float(value)
    # many units: new points checked by their gradient first (chord steps in the quadratic
    # regime): the same optimum to round-off
    from approxcv.optim import newton
    old, newton.GRADIENT_CHECK_MIN_UNITS = newton.GRADIENT_CHECK_MIN_UNITS, 1
    try:
        again = newton_polish(weighted, u, w, a, num_steps=6)
    finally:
        newton.GRADIENT_CHECK_MIN_UNITS = old
    np.testing.assert_allclose(again[0], polished, rtol=1e-12, atol=1e-14)
    assert again[2] < 1e-10
    solve = batched_minimize(weighted, float(n), 1000, 0)
    res = solve(np.stack([u, u, -u]), np.stack([w, w, w]), a)
    out = polish_rows(weighted, res, np.stack([w, w, w]), a, float(n))
    assert np.all(out.grad_norm < 1e-9) and np.asarray(out.converged).all()
    np.testing.assert_array_equal(out.u[0], out.u[1])       # a repeated row is copied


def test_rows_in_sequence_give_the_vmapped_result():
    """``rows="map"`` (an HMM's ``batch_rows``: refits of a batch in sequence, on CPU) is
    the same computation as ``vmap`` over the rows, only scheduled differently. (The damped
    Newton refits take the same ``over_rows``; the event model's exact-CV tests run them.)"""
    from approxcv.optim.quasi_newton import over_rows
    rng = np.random.default_rng(3)
    z = rng.standard_normal(120)
    x = rng.poisson(np.exp(0.5 + 0.8 * z)).astype(float)

    def fun(u, w, data):
        """A weighted Poisson regression summed by a recursion over time (``lax.scan``), as
        an HMM's objective is: convex, with its optimum inside."""
        def step(total, row):
            eta = u[0] + u[1] * row[0]
            return total + row[2] * (jnp.exp(eta) - row[1] * eta), None
        total, _ = lax.scan(step, 0.0, jnp.stack([data[0], data[1], w], axis=1))
        return total + 0.5 * jnp.sum(u ** 2)

    data = (jnp.asarray(z), jnp.asarray(x))
    weights = np.ones((3, 120))
    weights[0, :10] = weights[1, 50:70] = weights[2, ::7] = 0.0
    u0s = np.tile([0.1, 0.2], (3, 1))
    scale = 120.0
    out = {}
    for rows in ("vmap", "map"):
        solve = batched_minimize(fun, scale, 500, 2, "bfgs", rows)
        out[rows] = solve(u0s, weights, data)
    assert np.asarray(out["map"].converged).all()
    np.testing.assert_allclose(np.asarray(out["map"].value), np.asarray(out["vmap"].value),
                               rtol=1e-11)
    np.testing.assert_allclose(np.asarray(out["map"].u), np.asarray(out["vmap"].u),
                               rtol=0, atol=1e-6)
    # None arguments pass through; rows are mapped over the others
    f = over_rows(lambda a, b: a.sum() if b is None else a.sum() + b, "map")
    np.testing.assert_allclose(np.asarray(f(jnp.ones((4, 3)), None)), 3.0)


def test_newton_polish_sizes_its_hvp_chunks_by_the_closed_over_data(monkeypatch):
    """The data a refit's objective closes over sets how many Hessian-vector products the
    polish takes at once (sized by the weights alone, a CRF refit on 14,041 sentences took
    128 tangents at once and asked for 30 GB)."""
    from approxcv.optim import quasi_newton
    seen = []
    real = quasi_newton.hessian_by_hvp
    monkeypatch.setattr(quasi_newton, "hessian_by_hvp",
                        lambda *a, chunk=None: seen.append(chunk) or real(*a, chunk=chunk))

    def fun(u, w, data):
        return 0.5 * jnp.sum(w) * jnp.sum((u - jnp.mean(data)) ** 2)

    solve = quasi_newton.batched_minimize(fun, 1.0, 50, 1)
    res = solve(jnp.ones((1, 3)), jnp.ones((1, 4)), jnp.zeros(2 ** 20))
    assert seen == [1] and bool(res.converged[0])
    np.testing.assert_allclose(np.asarray(res.u), 0.0, atol=1e-8)
