"""The per-fold Newton step: fold by fold through the fit's compiled derivative sweep
(the few-folds path of ``ns``) equals the batched program, and ``ns`` takes that path
without compiling a program of its own."""
import jax.numpy as jnp
import numpy as np
import pytest

import approxcv as acv
from approxcv.engine.fold_newton import newton_params, newton_params_by_sweeps
from approxcv.engine.methods import ns as ns_module
from approxcv.engine.methods.ns import FEW_FOLDS
from tests.conftest import simulate_poisson_hmm


@pytest.fixture(scope="module")
def poisson():
    x = simulate_poisson_hmm(60, seed=1)
    model = acv.models.PoissonHMM(2, n_init=1)
    return model, x, model.fit(x)


def test_fold_by_fold_sweeps_equal_the_batched_program(poisson):
    model, x, params = poisson
    problem = acv.make_problem(model, x, params)
    folds = acv.folds.Folds([[5], [20, 21, 22], [59]], len(x))
    batched = newton_params(problem.fun, problem.u_full, jnp.asarray(folds.padded()),
                            problem.data, problem.n_units, 16)
    swept = newton_params_by_sweeps(problem.fun, problem.u_full, folds.weights(),
                                    problem.data, True)
    names = ("params", "min_eig", "jitter", "reliable", "correction", "rho")
    for name, a, b in zip(names, batched, swept):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, name
        # forward- vs reverse-mode and HVP vs jacfwd: the same derivatives to rounding
        scale = max(float(np.max(np.abs(a))), 1e-3)
        np.testing.assert_allclose(b, a, rtol=1e-7, atol=1e-9 * scale, err_msg=name)
    assert np.any(np.asarray(batched[4]) != 0)           # a real correction, not all zero


def test_ns_on_few_folds_compiles_no_program_with_the_model(poisson, monkeypatch):
    """Up to FEW_FOLDS folds, ns never calls the batched program; more folds do."""
    model, x, params = poisson
    calls = []
    real = ns_module.newton_params
    monkeypatch.setattr(ns_module, "newton_params",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    few = acv.folds.iid(len(x), 0.05, n_folds=FEW_FOLDS, seed=2)
    res = acv.cross_validate(model, x, few, "ns", params=params, progress=False, warn=False)
    assert calls == [] and np.all(np.isfinite(res.fold_loss))
    many = acv.folds.iid(len(x), 0.05, n_folds=FEW_FOLDS + 1, seed=2)
    again = acv.cross_validate(model, x, many, "ns", params=params, progress=False,
                               warn=False)
    assert calls == [1]
    # the first FEW_FOLDS folds of the two runs are the same folds: the same estimates
    np.testing.assert_allclose(again.fold_loss[:FEW_FOLDS], res.fold_loss, rtol=1e-8)
