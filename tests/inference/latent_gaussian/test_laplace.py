"""Laplace mode search for the non-log-concave Student-t likelihood: the trust-region
Newton reaches the mode a dense optimiser finds, and says so only when it has."""
import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize, stats

from approxcv.inference.latent_gaussian import likelihoods as L
from approxcv.inference.latent_gaussian.covariance import kernel_matrix
from approxcv.inference.latent_gaussian.laplace import laplace_mode


def test_student_t_mode_equals_dense_optimiser_and_is_a_local_maximum():
    rng = np.random.default_rng(3)
    n = 25
    X = rng.normal(size=(n, 1))
    y = np.sin(2 * X[:, 0]) + 0.1 * rng.normal(size=n)
    y[[3, 11, 19]] += np.array([4.0, -5.0, 6.0])          # outliers: W_i < 0 there
    lik, phi = L.StudentT(nu=4.0), jnp.array([np.log(0.1)])
    K = kernel_matrix(jnp.array([-2.0, -2.0, 0.0, np.log(0.7)]), jnp.asarray(X))
    K = K + 1e-8 * jnp.eye(n)
    yj, w = jnp.asarray(y), jnp.ones(n)
    s = jax.jit(lambda a0: laplace_mode(K, yj, lik, phi, w, a0))(jnp.zeros(n))
    assert bool(s.converged)
    assert np.sum(np.asarray(s.W) < 0) >= 2

    # the reference: Psi(f) written again with SciPy and maximised by dense BFGS
    Kinv = np.linalg.inv(np.asarray(K))
    t = stats.t(df=4.0, loc=0.0, scale=0.1)

    def neg_psi(f):
        return -(np.sum(t.logpdf(y - f)) - 0.5 * f @ Kinv @ f)

    def neg_grad(f):
        r = y - f
        return -((5.0 * r / (4.0 * 0.01 + r ** 2)) - Kinv @ f)
    ref = optimize.minimize(neg_psi, np.zeros(n), jac=neg_grad, method="BFGS",
                            options={"gtol": 1e-9, "maxiter": 5000})
    # the same mode, and ours is at least as high
    np.testing.assert_allclose(np.asarray(s.f), ref.x, atol=1e-4)
    assert -neg_psi(np.asarray(s.f)) >= -ref.fun - 1e-6 * (1 + abs(ref.fun))
    # a local maximum: K^-1 + W positive definite
    assert np.linalg.eigvalsh(Kinv + np.diag(np.asarray(s.W))).min() > 0
