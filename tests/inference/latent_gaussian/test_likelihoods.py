"""Likelihoods: bad input raises named errors; tilted moments equal numerical integration."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import integrate, stats

import approxcv as acv
from approxcv.inference.latent_gaussian import likelihoods as L
from approxcv.inference.latent_gaussian.quadrature import tilted_moments
from approxcv.errors import InvalidArgumentError, InvalidDataError

X = np.random.default_rng(0).normal(size=(6, 2))


@pytest.mark.parametrize("likelihood,y,match", [
    ("probit", [1, -1, 0, 1, 1, -1], "labels -1 and \\+1 \\(or 0 and 1\\)"),
    ("logit", [1, 2, 1, 1, -1, -1], "labels -1 and \\+1"),
    ("poisson", [1, 2, -1, 0, 3, 1], "non-negative integer counts"),
    ("poisson", [1, 2.5, 1, 0, 3, 1], "non-negative integer counts"),
    ("gaussian", [0.1, np.nan, 1, 0, 3, 1], "`y` contains 1 NaN"),
    ("loglogistic", [1.0, 2.0, 3.0, 1.0, 2.0, 1.0], "shape \\(n, 2\\)"),
])
def test_bad_targets_raise_named_errors(likelihood, y, match):
    with pytest.raises(InvalidDataError, match=match):
        acv.models.GP(likelihood).fit((X, y))


def test_bad_inputs_raise_named_errors():
    y = np.array([1.0, -1, 1, -1, 1, -1])
    with pytest.raises(InvalidDataError, match="`X` and `y` must have the same length"):
        acv.models.GP("probit").fit((X[:5], y))
    bad = X.copy()
    bad[2, 1] = np.inf
    with pytest.raises(InvalidDataError, match="`X` contains 1 NaN or infinite"):
        acv.models.GP("probit").fit((bad, y))
    with pytest.raises(InvalidArgumentError, match="`inference`"):
        acv.models.GP("probit", inference="vb")
    with pytest.raises(InvalidArgumentError, match="`likelihood`"):
        acv.models.GP("cauchy")
    with pytest.raises(InvalidDataError, match=r"pair `\(X, y\)`"):
        acv.models.GP("probit").fit(X)
    with pytest.raises(InvalidArgumentError, match="level"):
        acv.models.GP("probit").prepare((X, y), "structure")
    # supplied hyperparameter points of another shape: named by cross_validate
    with pytest.raises(InvalidArgumentError, match="theta"):
        acv.cross_validate(acv.models.GP("probit"), (X, y), [[0]], "la",
                           params=acv.models.GPParams(np.zeros((3, 2)), np.zeros(3)))


def test_binary_labels_0_1_equal_labels_minus_1_1():
    y = np.array([1.0, 0, 1, 0, 1, 0])
    np.testing.assert_array_equal(L.Probit().check(y), 2 * y - 1)
    np.testing.assert_array_equal(L.Logit().check(2 * y - 1), 2 * y - 1)
    with pytest.raises(InvalidArgumentError, match="`nu`"):
        L.StudentT(nu=-1.0)


def _reference_log_lik(name, y, f, phi):
    """The log densities written again with SciPy (independent of the JAX code)."""
    if name == "probit":
        return stats.norm.logcdf(y * f)
    if name == "logit":
        return -np.logaddexp(0.0, -y * f)
    if name == "poisson":
        return stats.poisson.logpmf(y, np.exp(f))
    if name == "student_t":
        return stats.t.logpdf(y, 4.0, loc=f, scale=np.exp(phi[0]))
    t, c = y
    r = np.exp(phi[0])    # log-logistic: scale exp(f), shape r (scipy's fisk)
    if c:
        return stats.fisk.logsf(t, r, scale=np.exp(f))
    return stats.fisk.logpdf(t, r, scale=np.exp(f))


CASES = [  # likelihood, y, phi, cavity means and variances
    (L.Probit(), [1.0, -1.0, 1.0], [], [0.3, 2.0, -4.0], [0.5, 3.0, 0.2]),
    (L.Logit(), [1.0, -1.0, 1.0], [], [0.3, 2.0, -4.0], [0.5, 3.0, 0.2]),
    (L.Poisson(), [0.0, 3.0, 12.0], [], [0.1, 1.5, -1.0], [0.4, 2.0, 1.0]),
    (L.StudentT(4.0), [0.0, 2.5, -1.0], [np.log(0.4)], [0.2, 0.0, 1.0], [0.3, 1.0, 2.0]),
    (L.LogLogistic(), [[2.0, 0.0], [0.5, 1.0], [5.0, 0.0]], [np.log(1.7)],
     [0.2, 0.0, 1.0], [0.3, 1.0, 2.0]),
]


@pytest.mark.parametrize("lik,y,phi,mean,var", CASES, ids=lambda c: getattr(c, "name", ""))
def test_tilted_moments_equal_numerical_integration(lik, y, phi, mean, var):
    y_np, phi_np = np.asarray(y), np.asarray(phi, float)
    y, phi = jnp.asarray(y), jnp.asarray(phi, float)
    log_z, m, v = map(np.asarray, jax.jit(tilted_moments, static_argnums=0)(
        lik, y, phi, jnp.asarray(mean),
                                                 jnp.asarray(var)))
    for i in range(len(mean)):
        sd = np.sqrt(var[i])

        def density(f, k):
            return f ** k * stats.norm.pdf(f, mean[i], sd) * np.exp(
                _reference_log_lik(lik.name, y_np[i], f, phi_np))
        lo, hi = mean[i] - 12 * sd - 10, mean[i] + 12 * sd + 10
        z = [integrate.quad(density, lo, hi, args=(k,), epsabs=0, epsrel=1e-12, limit=400)[0]
             for k in range(3)]
        assert log_z[i] == pytest.approx(np.log(z[0]), rel=1e-7, abs=1e-9)
        assert m[i] == pytest.approx(z[1] / z[0], rel=1e-6, abs=1e-8)
        assert v[i] == pytest.approx(z[2] / z[0] - (z[1] / z[0]) ** 2, rel=1e-6, abs=1e-8)


def test_likelihoods_are_hashable_configurations():
    assert L.StudentT(4.0) == L.StudentT(4.0) and hash(L.Probit()) == hash(L.Probit())
    assert acv.models.GP("student_t", nu=3.0).lik == L.StudentT(3.0)
