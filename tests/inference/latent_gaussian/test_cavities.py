"""Block cavities (approxcv.inference.latent_gaussian.cavities) at the kernel level: for one point they are
LA-LOO's cavity and its site shift."""
import jax.numpy as jnp
import numpy as np

from approxcv.inference.latent_gaussian import likelihoods as L
from approxcv.inference.latent_gaussian.cavities import block_cavity_lpd
from approxcv.inference.latent_gaussian.estimators import _cavity, _site_shift, la_loo
from approxcv.inference.latent_gaussian.posterior import posteriors_at


def test_one_point_blocks_are_la_loo_with_its_site_shift():
    rng = np.random.default_rng(0)
    n = 20
    X = jnp.asarray(rng.normal(size=(n, 1)))
    y = jnp.asarray(np.round(np.linspace(0, 80, n)))
    theta = jnp.array([np.log(4.0), np.log(0.1), np.log(4.0), 0.0])
    post = posteriors_at(theta[None], X, y, L.Poisson(), "laplace", 0.5)
    one = type(post)(*(a[0] for a in post))
    lpd, bad, shift, _ = block_cavity_lpd(one, theta, X, y, jnp.arange(n)[:, None],
                                       lik=L.Poisson())
    m, v = _cavity(one)
    np.testing.assert_allclose(np.asarray(shift),
                               np.asarray(_site_shift(one, y, L.Poisson(), theta, X, m, v)),
                               rtol=1e-9)
    np.testing.assert_allclose(np.asarray(lpd)[:, 0],
                               np.asarray(la_loo(one, y, L.Poisson(), theta, X)[0]), rtol=1e-9)
    assert not np.asarray(bad).any()
    # a padded slot (index n) changes nothing: the fold {3} padded to width 2
    pad = block_cavity_lpd(one, theta, X, y, jnp.array([[3, n]]), lik=L.Poisson())
    np.testing.assert_allclose(np.asarray(pad[0])[0], [float(lpd[3, 0]), 0.0], rtol=1e-12)
    np.testing.assert_allclose(float(pad[2][0]), float(shift[3]), rtol=1e-12)
