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
    # a budget too small for all tangents at once takes the chunked path, same IJ
    ij = acv.cross_validate(model, x, [[5], [20]], "ij", params=model.fit(x), warn=False,
                            progress=False)
    monkeypatch.setattr(derivatives, "SWEEP_BUDGET", 1)
    small = acv.cross_validate(model, x, [[5], [20]], "ij", params=model.fit(x), warn=False,
                               progress=False)
    np.testing.assert_allclose(small.fold_loss, ij.fold_loss, rtol=1e-10)
