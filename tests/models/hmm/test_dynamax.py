"""``acv.models.from_dynamax``: dynamax HMMs cross-validated at dynamax's own fitted
parameters (no refit): the objective equal to dynamax's ``marginal_log_prob + log_prior``,
decoding and ``score`` equal to dynamax's, the IJ within 1 % of exact refits of that
objective or flagged, untrainable parameters held fixed, a stopped EM warned about, and bad
input refused by name."""
import warnings

import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import (ArgumentTypeError, HeldFixedWarning, InexactFitWarning,
                             UnfittedEstimatorError, UnsupportedEstimatorError)
from approxcv.models import constraints as C
from approxcv.problem import make_problem

dhmm = pytest.importorskip("dynamax.hidden_markov_model")
jnp = pytest.importorskip("jax.numpy")
jr = pytest.importorskip("jax.random")

T = 150
START = {"initial_probs": jnp.array([0.5, 0.5]),
         "transition_matrix": jnp.array([[0.9, 0.1], [0.2, 0.8]])}


def _series(seed=0):
    """A sticky 2-state path and its Gaussian, count and symbol emissions."""
    rng = np.random.default_rng(seed)
    z = np.cumsum(rng.random(T) < 0.06) % 2
    gauss = np.c_[np.where(z == 0, -1.0, 1.5), np.where(z == 0, 0.5, -0.5)]
    gauss = gauss + rng.standard_normal((T, 2))
    counts = rng.poisson(np.where(z == 0, 2.0, 8.0))[:, None].astype(float)
    probs = np.where(z[:, None] == 0, [0.7, 0.2, 0.1], [0.1, 0.3, 0.6])
    symbols = (rng.random(T)[:, None] > np.cumsum(probs, 1)).sum(1)[:, None]
    return gauss, counts, symbols


def _cases():
    """``{name: (model, emissions, initialize kwargs)}``, every start given (no draw from
    the prior, whose sampler compiles slowly)."""
    gauss, counts, symbols = _series()
    means = jnp.array([[-0.5, 0.0], [1.0, 0.2]])
    return {
        "diagonal": (dhmm.DiagonalGaussianHMM(2, 2), gauss,
                     dict(emission_means=means, emission_scale_diags=jnp.ones((2, 2)))),
        "full": (dhmm.GaussianHMM(2, 1), gauss[:, :1],
                 dict(emission_means=means[:, :1], emission_covariances=jnp.ones((2, 1, 1)))),
        "spherical": (dhmm.SphericalGaussianHMM(2, 1), gauss[:, :1],
                      dict(emission_means=means[:, :1], emission_scales=jnp.ones(2))),
        "poisson": (dhmm.PoissonHMM(2, 1), counts,
                    dict(emission_rates=jnp.array([[1.0], [5.0]]))),
        "categorical": (dhmm.CategoricalHMM(2, 1, 3), symbols,
                        dict(emission_probs=jnp.array([[[0.5, 0.3, 0.2]], [[0.2, 0.3, 0.5]]]))),
    }


def _fit(model, x, init, num_iters=300):
    params, props = model.initialize(jr.PRNGKey(0), **START, **init)
    params, lps = model.fit_em(params, props, jnp.asarray(x), num_iters=num_iters,
                               verbose=False)
    return params, props, lps


@pytest.fixture(scope="module")
def fitted():
    """Every case fitted by dynamax's EM (300 iterations) and converted."""
    out = {}
    for name, (model, x, init) in _cases().items():
        params, props, _ = _fit(model, x, init)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", InexactFitWarning)    # spherical: Adam M-steps
            acv_model, acv_params = acv.models.from_dynamax(model, params, props)
        out[name] = (model, params, props, x, acv_model, acv_params)
    return out


@pytest.mark.parametrize("name", list(_cases()))
def test_objective_and_decoding_equal_dynamax(fitted, name):
    model, params, _, x, acv_model, acv_params = fitted[name]
    data = acv.models.dynamax_data(x)
    lml = float(model.marginal_log_prob(params, jnp.asarray(x)))
    dynamax_objective = -(lml + float(model.log_prior(params)))
    objective = float(acv_model.objective(acv_params, data, np.ones(T)))
    # dynamax's SphericalGaussianHMM evaluates its Gamma prior in float32 (tfp, Python
    # floats): ~1e-8 of its log prior; every other term agrees to round-off
    assert abs(objective - dynamax_objective) <= 1e-8 * abs(dynamax_objective)
    assert abs(acv_model.score(acv_params, data) - lml) <= 1e-9 * abs(lml)
    np.testing.assert_array_equal(acv_model.predict(acv_params, data),
                                  np.asarray(model.most_likely_states(params, jnp.asarray(x))))
    smoothed = np.asarray(model.smoother(params, jnp.asarray(x)).smoothed_probs)
    np.testing.assert_allclose(acv_model.predict_proba(acv_params, data), smoothed,
                               rtol=0, atol=1e-8)


def test_batch_of_sequences_is_a_list(fitted):
    model, params, _, x, acv_model, acv_params = fitted["poisson"]
    batch = np.stack([x[:50], x[50:100], x[100:]])
    data = acv.models.dynamax_data(batch)
    assert isinstance(data, list) and len(data) == 3
    lml = sum(float(model.marginal_log_prob(params, jnp.asarray(s))) for s in batch)
    objective = float(acv_model.objective(acv_params, data, np.ones(3)))
    assert abs(objective + lml + float(model.log_prior(params))) <= 1e-9 * abs(objective)


@pytest.mark.parametrize("name", ["poisson", "diagonal"])
def test_ij_at_dynamax_fit_is_right_or_flagged(fitted, name):
    model, params, props, x, _, _ = fitted[name]
    acv_model, acv_params = acv.models.from_dynamax(model, params, props, emissions=x)
    assert acv_model.fit_result_["stationary"]          # 300 EM steps: converged
    data = acv.models.dynamax_data(x)
    folds = acv.folds.contiguous(T, 0.05, 5, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ij = acv.cross_validate(acv_model, data, folds, "ij", params=acv_params,
                                progress=False, warn=False)
        ex = acv.cross_validate(acv_model, data, folds, "exact", params=acv_params,
                                progress=False)
    err = np.abs(ij.fold_loss - ex.fold_loss) / np.abs(ex.fold_loss)
    assert np.all((err <= 0.01) | ij.unreliable)
    assert np.sum(~ij.unreliable) >= 3


def test_stopped_em_is_warned_with_what_to_call():
    model, x, init = _cases()["poisson"]
    params, props, _ = _fit(model, x, init, num_iters=2)
    with pytest.warns(InexactFitWarning, match="fit_em"):
        acv_model, _ = acv.models.from_dynamax(model, params, props, emissions=x)
    assert not acv_model.fit_result_["stationary"]


def test_untrainable_parameters_are_held_fixed(fitted):
    model, params, props, x, acv_model, acv_params = fitted["poisson"]
    frozen = props._replace(transitions=props.transitions._replace(
        transition_matrix=type(props.transitions.transition_matrix)(trainable=False)))
    with pytest.warns(HeldFixedWarning, match="trainable=False"):
        held_model, held_params = acv.models.from_dynamax(model, params, frozen)
    assert isinstance(held_model.param_constraints().transition_matrix, C.Fixed)
    free = make_problem(acv_model, x, acv_params).u_full.size
    assert make_problem(held_model, x, held_params).u_full.size == free - 2


def test_zero_transition_at_concentration_one_is_held():
    model = dhmm.PoissonHMM(2, 1, transition_matrix_concentration=1.0)
    params, props = model.initialize(
        jr.PRNGKey(0), initial_probs=jnp.array([0.5, 0.5]),
        transition_matrix=jnp.array([[1.0, 0.0], [0.1, 0.9]]),
        emission_rates=jnp.array([[1.0], [5.0]]))
    with pytest.warns(HeldFixedWarning, match=r"transition_matrix\[0, 1\]"):
        acv_model, _ = acv.models.from_dynamax(model, params, props)
    held = acv_model.param_constraints().transition_matrix
    assert isinstance(held, C.PartlyFixedSimplex)
    assert held.free == ((False, False), (True, True))


def test_bad_input_is_refused_by_name(fitted):
    model, params, props, _, _, _ = fitted["poisson"]
    with pytest.raises(UnfittedEstimatorError, match="fit_em"):
        acv.models.from_dynamax(model, None)
    with pytest.raises(UnfittedEstimatorError, match="props"):
        acv.models.from_dynamax(model, props)
    gaussian, gparams = fitted["diagonal"][:2]
    with pytest.raises(ArgumentTypeError, match="PoissonHMM"):
        acv.models.from_dynamax(model, gparams)
    with pytest.raises(UnsupportedEstimatorError, match="emission_dim=2"):
        acv.models.from_dynamax(dhmm.GaussianHMM(2, 2), gparams)
    with pytest.raises(UnsupportedEstimatorError, match="SharedCovarianceGaussianHMM"):
        acv.models.from_dynamax(dhmm.SharedCovarianceGaussianHMM(2, 2), gparams)
    with pytest.raises(UnsupportedEstimatorError):
        acv.models.from_dynamax(object(), params)
