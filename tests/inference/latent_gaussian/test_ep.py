"""Parallel EP: power EP (fraction ``eta`` of each site) is exact for the Gaussian
likelihood at any ``eta``, and its stopping test is relative to the sites' size."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from approxcv.inference.latent_gaussian import likelihoods as L
from approxcv.inference.latent_gaussian.covariance import kernel_matrix
from approxcv.inference.latent_gaussian.ep import ep_fit


@pytest.mark.parametrize("eta", [1.0, 0.5])
def test_power_ep_is_exact_for_the_gaussian_likelihood(eta):
    rng = np.random.default_rng(0)
    n = 12
    X = rng.normal(size=(n, 2))
    y = np.sin(X[:, 0]) + 0.2 * rng.normal(size=n)
    K = kernel_matrix(jnp.array([-1.0, -1.0, 0.0, 0.0, 0.3]), jnp.asarray(X))
    s2 = 0.3 ** 2
    lik, phi = L.Gaussian(), jnp.array([np.log(0.3)])
    s = jax.jit(lambda: ep_fit(K, jnp.asarray(y), lik, phi, jnp.ones(n), jnp.zeros(n),
                               jnp.zeros(n), eta=eta))()
    assert bool(s.converged)
    Kn = np.asarray(K)
    sigma = Kn - Kn @ np.linalg.solve(Kn + s2 * np.eye(n), Kn)
    np.testing.assert_allclose(np.asarray(s.mu), sigma @ y / s2, atol=1e-7)
    np.testing.assert_allclose(np.asarray(s.var), np.diag(sigma), atol=1e-7)
    np.testing.assert_allclose(np.asarray(s.tau), 1 / s2, rtol=1e-7)   # the exact sites
