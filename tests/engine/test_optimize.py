"""The shared optimiser: BFGS / L-BFGS with a gradient stop, Newton polish, damped Newton."""
import jax.numpy as jnp
import numpy as np
import optimistix as optx
import pytest

from approxcv.optim import minimize, newton_minimize


def _logistic_problem(n=300, d=20, seed=0):
    """L2 logistic loss ``F(u) = sum_i [log(1 + e^{a_i u}) - y_i a_i u] + 0.5 u^T u``."""
    rng = np.random.default_rng(seed)
    a = jnp.asarray(rng.normal(size=(n, d)))
    y = jnp.asarray((rng.random(n) < 0.5).astype(float))

    def fun(u, args):
        z = a @ u
        return jnp.sum(jnp.logaddexp(0.0, z) - y * z) + 0.5 * u @ u
    return fun, d, n


@pytest.mark.parametrize("method", ["bfgs", "lbfgs"])
def test_minimize_reaches_the_newton_solution(method):
    fun, d, n = _logistic_problem()
    ref = newton_minimize(fun, jnp.zeros(d), scale=n)
    assert bool(ref.converged) and float(ref.grad_norm) < 1e-10 * n
    res = minimize(fun, jnp.zeros(d), scale=n, method=method,
                   newton_steps=2 if method == "bfgs" else 0)
    assert bool(res.converged)
    assert float(res.grad_norm) <= 1e-7 * n
    np.testing.assert_allclose(res.u, ref.u, atol=1e-6)


def test_quadratic_stop_saves_the_confirming_pass_only():
    # in Newton's quadratic regime a step with decrement <= 1e-14 leaves one of order 1e-28:
    # stopping after it gives the same optimum, one Hessian sooner
    fun, d, n = _logistic_problem()
    ref = newton_minimize(fun, jnp.zeros(d), scale=n)
    res = newton_minimize(fun, jnp.zeros(d), scale=n, quadratic_stop=1e-14)
    assert bool(res.converged) and float(res.grad_norm) < 1e-10 * n
    assert int(res.num_steps) == int(ref.num_steps) - 1
    np.testing.assert_allclose(res.u, ref.u, rtol=0, atol=1e-11)
    # a loose threshold stops earlier, further from the optimum: the test can fail
    loose = newton_minimize(fun, jnp.zeros(d), scale=n, quadratic_stop=1e-3)
    assert int(loose.num_steps) < int(res.num_steps)


def test_gradient_stop_ends_bfgs_before_the_cauchy_test():
    """With a loose gtol the solver stops on the gradient, well before optimistix's own
    Cauchy test (which plain optx.BFGS needs) and with the gradient under gtol / 10."""
    fun, d, n = _logistic_problem()
    scaled = lambda u, a: fun(u, a) / n  # noqa: E731
    plain = optx.minimise(scaled, optx.BFGS(rtol=1e-10, atol=1e-10), jnp.zeros(d),
                          max_steps=1000, throw=False)
    res = minimize(fun, jnp.zeros(d), scale=n, gtol=1e-3, newton_steps=0)
    assert int(res.num_steps) < int(plain.stats["num_steps"])
    assert float(res.grad_norm) / n <= 1e-4
    assert bool(res.converged)


def test_unconverged_run_is_reported():
    fun, d, n = _logistic_problem()
    res = minimize(fun, jnp.zeros(d), scale=n, max_steps=2, newton_steps=0)
    assert not bool(res.converged)
    assert int(res.num_steps) == 2


def test_forward_difference_hessian_is_the_hessian_to_its_step():
    import jax
    from approxcv.optim.hessian import value_grad_fd_hessian
    fun, d, n = _logistic_problem(n=60, d=5)
    u = jnp.linspace(-0.5, 0.5, d)
    f, g, h = value_grad_fd_hessian(jax.value_and_grad(fun), u, None, 4)
    assert float(f) == pytest.approx(float(fun(u, None)), rel=1e-14)
    np.testing.assert_allclose(g, jax.grad(fun)(u, None), rtol=1e-13)
    exact = jax.hessian(fun)(u, None)
    np.testing.assert_allclose(h, exact, rtol=0, atol=1e-5 * float(jnp.max(jnp.abs(exact))))
    np.testing.assert_array_equal(h, h.T)


@pytest.mark.parametrize("newton", [True, False])
def test_forward_difference_newton_steps_reach_the_same_optimum(newton):
    """hessian="fd" (exact refits in whitened coordinates) ends where the exact Hessian's
    Newton steps end: the same minimiser, a round-off-level gradient."""
    from approxcv.optim import batched_minimize, batched_newton_minimize
    fun, d, n = _logistic_problem()
    obj = lambda u, w, data: fun(u, None)  # noqa: E731
    runs = {}
    for hessian in ("hvp", "fd"):
        solve = (batched_newton_minimize(obj, float(n), 50, "vmap", hessian) if newton else
                 batched_minimize(obj, float(n), 1000, 2, "bfgs", "vmap", hessian))
        runs[hessian] = solve(jnp.zeros((2, d)), jnp.ones((2, 3)), None)
    for res in runs.values():
        assert bool(np.all(res.converged))
        assert float(np.max(res.grad_norm)) < 1e-10 * n
    np.testing.assert_allclose(runs["fd"].u, runs["hvp"].u, rtol=0, atol=1e-10)
