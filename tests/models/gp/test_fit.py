"""Type-II MAP of ``acv.models.GP`` from several starts (``n_init``)."""
import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import InvalidArgumentError
from approxcv.inference.latent_gaussian.covariance import n_kernel_params


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    return X, np.where(X[:, 0] + 0.5 * rng.normal(size=30) > 0, 1.0, -1.0)


def test_several_starts_keep_the_lowest_objective(data):
    model = acv.models.GP("probit", n_init=3, seed=1)
    params = model.fit(data)
    record = model.fit_result_
    values = np.asarray(record["start_objectives"])
    assert values.shape == (3,) and record["best_start"] == int(np.argmin(values))
    default = np.asarray(model.init_params(data)[0].theta[0])
    starts = model.starts(default, 2)
    # the default start is always tried; the others move the kernel's hyperparameters only
    np.testing.assert_array_equal(starts[0], default)
    assert np.all(np.abs(starts[1:, :n_kernel_params(2)] - default[:n_kernel_params(2)]) > 0)
    np.testing.assert_array_equal(starts[1:, n_kernel_params(2):],
                                  np.broadcast_to(default[n_kernel_params(2):],
                                                  starts[1:, n_kernel_params(2):].shape))
    # the kept fit is that start's own fit, and no worse than the one default start
    alone = acv.models.GP("probit").fit(data, theta0=starts[record["best_start"]])
    np.testing.assert_allclose(params.theta, alone.theta, rtol=1e-10, atol=1e-12)
    one = acv.models.GP("probit")
    one.fit(data)
    assert values.min() <= one.fit_result_["start_objectives"][0]
    assert np.isclose(one.fit_result_["start_objectives"][0], values[0], rtol=1e-10)


def test_n_init_and_seed_are_checked():
    with pytest.raises(InvalidArgumentError, match="n_init"):
        acv.models.GP("probit", n_init=0)
    with pytest.raises(InvalidArgumentError, match="seed"):
        acv.models.GP("probit", seed=-1)
