"""Laplace mode search for the non-log-concave Student-t likelihood: the trust-region
Newton reaches the mode a dense optimiser finds, and says so only when it has."""
import jax
import jax.numpy as jnp
import numpy as np
from scipy import optimize

from approxcv.bayes import likelihoods as L
from approxcv.bayes.covariance import kernel_matrix
from approxcv.bayes.laplace import laplace_mode


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
    s = laplace_mode(K, yj, lik, phi, w, jnp.zeros(n))
    assert bool(s.converged)
    assert np.sum(np.asarray(s.W) < 0) >= 2

    Kinv = jnp.linalg.inv(K)

    def neg_psi(f):
        return -(jnp.sum(jax.vmap(lambda yi, fi: lik.log_lik(yi, fi, phi))(yj, f))
                 - 0.5 * f @ Kinv @ f)
    ref = optimize.minimize(jax.jit(neg_psi), np.zeros(n), jac=jax.jit(jax.grad(neg_psi)),
                            method="BFGS", options={"gtol": 1e-9, "maxiter": 5000})
    # the same mode, and ours is at least as high
    np.testing.assert_allclose(np.asarray(s.f), ref.x, atol=1e-4)
    assert -float(neg_psi(s.f)) >= -ref.fun - 1e-8
    # a local maximum: K^-1 + W positive definite
    assert np.linalg.eigvalsh(np.asarray(Kinv) + np.diag(np.asarray(s.W))).min() > 0
