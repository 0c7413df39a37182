"""approxcv.problem: numeric hyperparameters are arguments of the compiled programs."""
import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import ArgumentTypeError
from approxcv.problem import WithNumbers, make_problem
from tests.conftest import backend_compiles, fit_derivatives, simulate_poisson_hmm


def _data(n=12, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, (X @ [1.0, -1.0] + rng.normal(size=n) > 0).astype(float)


def _leave_one_out_by_refits(lam, X, y):
    out = []
    for i in range(len(y)):
        keep = np.arange(len(y)) != i
        p = acv.models.Logistic(lam).fit((X[keep], y[keep]))
        eta = X[i] @ p.coef + p.intercept
        out.append(np.logaddexp(0.0, eta) - y[i] * eta)
    return np.array(out)


def test_a_new_penalty_weight_compiles_nothing_and_gives_its_own_numbers():
    """Two penalty weights: one set of functions, no program compiled for the second, and
    each weight's exact CV equals independent refits at that weight (a value read from
    the wrong model would not)."""
    X, y = _data()
    folds = acv.folds.leave_one_out(len(y))
    results, problems = {}, {}
    for lam in (0.5, 4.0):
        model = acv.models.Logistic(lam)
        params = model.fit((X, y))
        problems[lam] = make_problem(model, (X, y), params)
        with backend_compiles() as compiled:
            results[lam] = acv.cross_validate(model, (X, y), folds, "exact", params=params,
                                              progress=False)
    assert problems[0.5].fun is problems[4.0].fun
    assert problems[0.5].heldout is problems[4.0].heldout
    assert isinstance(problems[4.0].data, WithNumbers)
    assert float(problems[4.0].data.numbers["lam"]) == 4.0
    assert compiled[0] == 0
    for lam, res in results.items():
        np.testing.assert_allclose(res.fold_loss, _leave_one_out_by_refits(lam, X, y),
                                   rtol=1e-8, atol=1e-10)
    assert not np.allclose(results[0.5].fold_loss, results[4.0].fold_loss, rtol=1e-3)


def test_structure_keeps_the_kind_of_weight_and_the_numbers_are_not_optional():
    X, y = _data()
    scalar, per_feature = acv.models.Ridge(1.0), acv.models.Ridge([1.0, 2.0])
    assert scalar.structure_key() == acv.models.Ridge(3.0).structure_key()
    assert scalar.structure_key() != per_feature.structure_key()
    assert scalar != acv.models.Ridge(3.0)            # models still differ by value
    problem = make_problem(per_feature, (X, y), per_feature.fit((X, y)))
    with pytest.raises(ArgumentTypeError, match="problem.data"):
        problem.fun(problem.u_full, np.ones(len(y)), problem.data.data)
    # the elastic net keeps its weights as constants (its refit solver is built for them)
    enet = acv.models.ElasticNet(0.1, 0.1)
    assert not isinstance(make_problem(enet, (X, y), enet.fit((X, y))).data, WithNumbers)


def test_an_hmm_prior_is_an_argument_of_the_fit_and_the_ij():
    """PoissonHMM at a second Gamma-prior rate: its fit (EM, polish) and IJ compile
    nothing, and the shared objective differs by exactly the prior's term
    ``(b_2 - b_1) sum_k lambda_k`` at the same parameters; the second fit is stationary
    under its own prior."""
    x = simulate_poisson_hmm(100)
    folds = acv.folds.iid(len(x), frac=0.1, n_folds=4, seed=0)
    first, second = acv.models.PoissonHMM(2, rate_rate=1e-3), acv.models.PoissonHMM(
        2, rate_rate=0.5)
    acv.cross_validate(first, x, folds, "ij", progress=False, warn=False)
    with backend_compiles() as compiled:
        params = second.fit(x)
        res = acv.cross_validate(second, x, folds, "ij", params=params, progress=False,
                                 warn=False)
    assert compiled[0] == 0 and np.all(np.isfinite(res.fold_loss))
    one, two = make_problem(first, x, params), make_problem(second, x, params)
    ones = np.ones(one.n_units)
    gap = float(two.fun(two.u_full, ones, two.data)) - float(one.fun(one.u_full, ones,
                                                                       one.data))
    assert gap == pytest.approx((0.5 - 1e-3) * float(np.sum(params.rates)), rel=1e-10)
    assert float(np.linalg.norm(fit_derivatives(two)[1])) < 1e-6
